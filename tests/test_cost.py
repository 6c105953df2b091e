import math

import pytest

from ep_host import Cost, structural_input_bytes


def test_total_is_roofline_plus_transfer_and_launch():
    cost = Cost(compute_us=5.0, memory_us=3.0, transfer_us=2.0, launch_us=1.0)
    assert cost.total_us == 5.0 + 2.0 + 1.0
    assert Cost(compute_us=1.0, memory_us=4.0).total_us == 4.0


def test_zero_costs_nothing():
    assert Cost.ZERO.total_us == 0.0
    assert Cost.ZERO.bytes_moved == 0


def test_builders_return_new_costs_and_leave_the_original():
    base = Cost(compute_us=2.0)
    launched = base.with_launch_us(3.0)
    moved = launched.with_bytes_moved(100)
    assert (launched.launch_us, launched.total_us) == (3.0, 5.0)
    assert moved.bytes_moved == 100 and moved.launch_us == 3.0
    assert base.launch_us == 0.0 and base.bytes_moved == 0


def test_cost_is_immutable():
    with pytest.raises(AttributeError):
        Cost().compute_us = 1.0


def test_roofline_builder():
    cost = Cost.roofline(flops=2e9, bytes_moved=10**9, peak_gflops=100.0, bandwidth_gbps=10.0,
                         launch_us=1.5)
    assert cost.compute_us == pytest.approx(2e4)
    assert cost.memory_us == pytest.approx(1e5)
    assert cost.total_us == pytest.approx(1e5 + 1.5)


def test_costs_add_fieldwise():
    total = Cost(1, 2, 3, 4, 5) + Cost(1, 1, 1, 1, 1)
    assert (total.compute_us, total.memory_us, total.transfer_us, total.launch_us,
            total.bytes_moved) == (2, 3, 4, 5, 6)


@pytest.mark.parametrize("field", ["compute_us", "memory_us", "transfer_us", "launch_us"])
@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_negative_or_non_finite_times_are_rejected(field, bad):
    with pytest.raises(ValueError, match=field):
        Cost(**{field: bad})


def test_negative_bytes_are_rejected():
    with pytest.raises(ValueError, match="bytes_moved"):
        Cost(bytes_moved=-1)


def test_structural_bytes_use_storage_size():
    assert structural_input_bytes([(2, 3), (4,)], ["float32", "int64"]) == 24 + 32
    assert structural_input_bytes([(10,)], ["float16"]) == 20
    assert structural_input_bytes([(3,)], ["bool"]) == 3


def test_sub_byte_types_pack_two_per_byte_rounding_up():
    assert structural_input_bytes([(5,)], ["int4"]) == 3
    assert structural_input_bytes([(4,)], ["uint4"]) == 2
    assert structural_input_bytes([(7,)], ["float4e2m1"]) == 4


def test_symbolic_dims_count_as_one_and_unknowns_as_zero():
    assert structural_input_bytes([("batch", 4)], ["float32"]) == 16
    assert structural_input_bytes([None, (2,)], ["float32", None]) == 0


def test_shapes_and_dtypes_must_pair():
    with pytest.raises(ValueError):
        structural_input_bytes([(1,)], [])


def test_scaling_for_calibration_keeps_every_field_it_does_not_correct():
    """Calibration scales compute, memory and launch and adds an overhead; a field it does not
    know (transfer time, bytes, flops, or one added later) passes through unchanged."""
    import dataclasses

    cost = Cost(compute_us=10.0, memory_us=4.0, transfer_us=3.0, launch_us=2.0,
                bytes_moved=640, flops=1e6)
    scaled = cost.scaled(1.5, overhead_us=0.5)
    assert (scaled.compute_us, scaled.memory_us, scaled.launch_us) == (15.0, 6.0, 3.5)
    untouched = {f.name for f in dataclasses.fields(Cost)} - {"compute_us", "memory_us",
                                                                "launch_us"}
    assert "transfer_us" in untouched
    for name in untouched:
        assert getattr(scaled, name) == getattr(cost, name)
