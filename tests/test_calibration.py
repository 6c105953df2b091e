"""Calibration: measured kernel times fit per op family, stored in the cache directory, and the
CPU EP's estimates follow the stored profile."""

import json

import pytest
from hostkit import make_model
from onnx import TensorProto, helper

from ep_host import calibrate, calibration
from ep_host.calibrate import Case, Sample, compose, fit
from ep_host.calibration import Factors
from ep_host.capability import walk
from ep_host.cli import main
from ep_host.discovery import Host
from ep_host.loading import load_model


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EP_HOST_CACHE_DIR", str(tmp_path))
    calibration.reload()
    yield tmp_path
    calibration.reload()


def add_matmul_model():
    return make_model(
        [helper.make_node("Add", ["x", "x"], ["s"], name="add"),
         helper.make_node("MatMul", ["s", "x"], ["y"], name="matmul")],
        [("x", TensorProto.FLOAT, [64, 64])], [("y", TensorProto.FLOAT, [64, 64])])


def cpu_estimates():
    host = Host.discover(["cpu"])
    table = walk(host, load_model(add_matmul_model()), ["cpu"])
    return {n: table.answers[n]["cpu"].cost.total_us for n in ("add", "matmul")}


def test_a_stored_profile_scales_the_cpu_eps_estimates_per_family(cache):
    raw = cpu_estimates()
    (cache / calibration.FILE_NAME).write_text(json.dumps({
        "schema": calibration.SCHEMA,
        "providers": {"cpu": {"families": {"elementwise": {"overhead_us": 10.0, "scale": 2.0,
                                                           "cases": 2}}}}}))
    calibration.reload()
    calibrated = cpu_estimates()
    assert calibrated["add"] == pytest.approx(10.0 + 2.0 * raw["add"])
    assert calibrated["matmul"] == pytest.approx(raw["matmul"])  # matmul was not calibrated


def test_calibrate_writes_the_profile_and_changes_estimates(cache):
    raw = cpu_estimates()
    cases = [Case("elementwise", f"Add[{n}]",
                  lambda n=n: calibrate.single_op_model("Add", [(n,), (n,)]))
             for n in (16, 65_536)]
    seen = []
    profile = calibrate.calibrate(["cpu"], cases, repeats=3,
                                  on_case=lambda p, c, r: seen.append((p, c)))
    assert seen == [("cpu", "Add[16]"), ("cpu", "Add[65536]")]
    stored = json.loads((cache / calibration.FILE_NAME).read_text())
    assert stored == profile and stored["schema"] == calibration.SCHEMA
    family = stored["providers"]["cpu"]["families"]["elementwise"]
    assert family["cases"] == 2 and family["scale"] > 0 and family["overhead_us"] >= 0
    assert [s["case"] for s in stored["providers"]["cpu"]["samples"]] == ["Add[16]", "Add[65536]"]
    expected = Factors(family["overhead_us"], family["scale"]).apply(raw["add"])
    assert cpu_estimates()["add"] == pytest.approx(expected)


def test_a_provider_that_declines_a_case_skips_it(cache):
    case = Case("elementwise", "Add[string]", lambda: _string_add())
    profile = calibrate.calibrate(["cpu"], [case], repeats=1)
    entry = profile["providers"]["cpu"]
    assert "elementwise" not in entry["families"]
    assert "got string" in entry["skipped"]["Add[string]"]


def _string_add():
    model = calibrate.single_op_model("Add", [(4,), (4,)])
    for v in (*model.graph.input, *model.graph.output):
        v.type.tensor_type.elem_type = TensorProto.STRING
    return model


def test_fit_recovers_overhead_and_scale():
    samples = [Sample("p", "f", str(e), e, 5.0 + 0.5 * e) for e in (1.0, 10.0, 1000.0)]
    f = fit(samples)
    assert f.overhead_us == pytest.approx(5.0) and f.scale == pytest.approx(0.5)
    # a negative overhead is not a cost: fall back to a pure scale
    f = fit([Sample("p", "f", "a", 10.0, 1.0), Sample("p", "f", "b", 100.0, 100.0)])
    assert f.overhead_us == 0.0 and f.scale > 0


def test_a_compiling_providers_fit_is_a_pure_scale_on_its_larger_cases():
    # its launch is priced per partition: a per-node overhead would charge it again per node
    samples = [Sample("p", "f", str(e), e, 4.0 + 2.0 * e, partition=True)
               for e in (1.0, 50.0, 200.0)]
    f = fit(samples)
    assert f.overhead_us == 0.0
    assert f.scale == pytest.approx(((4 + 100) / 50 * (4 + 400) / 200) ** 0.5)
    # with only small cases, all of them count
    f = fit([Sample("p", "f", "a", 2.0, 4.0, partition=True)])
    assert (f.overhead_us, f.scale) == (0.0, pytest.approx(2.0))


def test_a_one_node_partition_is_measured_as_a_partition_and_a_node_as_a_node(cache):
    ort_ep = pytest.importorskip("ep_host_onnxruntime.provider")
    host = Host.discover()
    host.register(ort_ep, name="onnxruntime") if "onnxruntime" not in host.records else None
    case = Case("elementwise", "Relu", lambda: calibrate.single_op_model("Relu", [(4096,)]))
    compiled = calibrate.measure_case(case, "onnxruntime", repeats=3, host=host)
    plain = calibrate.measure_case(case, "cpu", repeats=3, host=host)
    assert compiled.partition and compiled.estimated_us > 0
    assert not plain.partition and plain.measured_us > 0


def test_recalibrating_composes_instead_of_compounding():
    old = Factors(3.0, 2.0)
    new = Factors(1.0, 0.5)  # fitted on estimates that already had `old` applied
    raw = 40.0
    assert compose(new, old).apply(raw) == pytest.approx(new.apply(old.apply(raw)))


def test_calibrate_command_rejects_an_unknown_provider(cache, capsys):
    assert main(["calibrate", "--providers", "nosuch"]) == 1
    assert "'nosuch' is not available" in capsys.readouterr().err
