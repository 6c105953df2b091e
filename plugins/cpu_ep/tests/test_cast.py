"""Cast and CastLike: numeric types, bfloat16, float 8 (saturating or not), float8e8m0 round
modes, 2- and 4-bit types, float4e2m1 and strings."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import onnx
import pytest
from cpukit import (
    assert_matches_onnxruntime,
    cpu_answer,
    make_model,
    run_ep_host,
    run_onnxruntime,
)
from onnx import TensorProto, helper

import ep_host
from ep_host.kernels import REGISTRY

T = TensorProto


def cast_model(x, to, *, opset, out_type=None, **attrs):
    node = helper.make_node("Cast", ["x"], ["y"], to=to, **attrs)
    return make_model([node], [("x", helper.np_dtype_to_tensor_dtype(x.dtype), list(x.shape))],
                      [("y", out_type or to, list(x.shape))], opset=opset)


def cast_like_model(x, like, *, opset, **attrs):
    node = helper.make_node("CastLike", ["x", "like"], ["y"], **attrs)
    types = [helper.np_dtype_to_tensor_dtype(a.dtype) for a in (x, like)]
    return make_model([node], [("x", types[0], list(x.shape)), ("like", types[1], [1])],
                      [("y", types[1], list(x.shape))], opset=opset)


def cast(x, to, *, opset=25, **attrs):
    (out,) = run_ep_host(cast_model(x, to, opset=opset, **attrs), {"x": x})
    return out


def floats(out):
    return out.astype(np.float32).tolist()


def test_every_version_in_onnx_is_registered():
    for op in ("Cast", "CastLike"):
        expected = sorted({s.since_version for s in onnx.defs.get_all_schemas_with_history()
                           if s.name == op and s.domain == ""})
        assert REGISTRY.versions("ai.onnx", op) == expected, op


# ---------------------------------------------------------------------------------------------
# Numeric types against onnxruntime
# ---------------------------------------------------------------------------------------------

NUMERIC = [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int32, np.int64, np.uint64,
           np.bool_]


@pytest.mark.parametrize("source", NUMERIC)
@pytest.mark.parametrize("opset", [6, 13, 19])
def test_numeric_casts_match_onnxruntime(source, opset):
    x = np.array([0, 1, 3, 7, 100, 126], np.float32).astype(source)
    if np.dtype(source).kind in "fi":
        x[1] = -x[1] if np.dtype(source).kind == "i" else -2.75
    for target in NUMERIC:
        to = helper.np_dtype_to_tensor_dtype(np.dtype(target))
        assert_matches_onnxruntime(cast_model(x, to, opset=opset), {"x": x})


def test_integers_wrap_and_floats_truncate():
    x = np.array([200, -129, 65535], np.int32)
    assert cast(x, T.INT8).tolist() == [-56, 127, -1]
    f = np.array([2.9, -2.9, 0.5], np.float32)
    assert cast(f, T.INT32).tolist() == [2, -2, 0]
    assert cast(np.array([np.nan, 0.0, -0.0, 0.1], np.float32), T.BOOL).tolist() == [
        True, False, False, True]


def test_version_1_names_the_target():
    x = np.array([1.5, -2.5], np.float32)
    (out,) = run_ep_host(cast_model(x, "INT32", opset=1, out_type=T.INT32), {"x": x})
    assert out.dtype == np.int32 and out.tolist() == [1, -2]


# ---------------------------------------------------------------------------------------------
# bfloat16, float 8, float8e8m0, float4e2m1, 2- and 4-bit integers
# ---------------------------------------------------------------------------------------------


def test_bfloat16_rounds_once_from_any_source():
    # exactly representable in float32 or float64, just above a bfloat16 midpoint: rounding
    # through float32 would land on the midpoint and round down to the even neighbour
    big = 401 * 2**30 + 1
    assert floats(cast(np.array([big], np.int64), T.BFLOAT16)) == [402 * 2**30]
    assert floats(cast(np.array([1 + 2**-8 + 2**-30]), T.BFLOAT16)) == [1 + 2**-7]
    assert floats(cast(np.array([1 + 2**-8], np.float32), T.BFLOAT16)) == [1.0]  # tie: even
    back = cast(np.array([1.5, -3.0], ml_dtypes.bfloat16), T.FLOAT)
    assert back.dtype == np.float32 and back.tolist() == [1.5, -3.0]


SPECIALS = np.array([1e6, -1e6, np.inf, -np.inf, np.nan, -0.0, 0.3], np.float32)
FLOAT8 = {  # type: (max, saturated +-inf in Cast 19..23, not saturated: overflow, inf)
    T.FLOAT8E4M3FN: (448.0, 448.0, math.nan, math.nan),
    T.FLOAT8E4M3FNUZ: (240.0, math.nan, math.nan, math.nan),
    T.FLOAT8E5M2: (57344.0, 57344.0, math.inf, math.inf),
    T.FLOAT8E5M2FNUZ: (57344.0, math.nan, math.nan, math.nan),
}


@pytest.mark.parametrize("to", sorted(FLOAT8))
def test_float8_follows_the_saturation_tables(to):
    top, inf_19, overflow, inf = FLOAT8[to]
    nan = math.nan
    out = floats(cast(SPECIALS, to, opset=24))  # saturating: +-inf becomes +-max everywhere
    np.testing.assert_array_equal(out[:5], [top, -top, top, -top, nan])
    assert out[5] == 0 and abs(out[6] - 0.3) < 0.02
    out = floats(cast(SPECIALS, to, opset=19))  # before 24 FNUZ types turn inf into NaN
    np.testing.assert_array_equal(out[2:4], [inf_19, -inf_19])
    out = floats(cast(SPECIALS, to, opset=19, saturate=0))
    np.testing.assert_array_equal(out[:5], [overflow, -overflow, inf, -inf, nan])
    fnuz = "FNUZ" in T.DataType.Name(to)
    assert math.copysign(1, out[5]) == (1 if fnuz else -1)  # FNUZ types have no -0


def test_float8_rounds_to_nearest_even_below_the_maximum():
    x = np.array([464.0, 463.9, 17.0, 19.0], np.float32)  # 464: the midpoint above 448
    assert floats(cast(x, T.FLOAT8E4M3FN, saturate=0)) == [448.0, 448.0, 16.0, 20.0]


@pytest.mark.parametrize(("mode", "expected"), [
    ("up", [2.0**-127, 0.25, 2.0, 4.0, 2.0**127, 2.0**-127]),
    ("down", [2.0**-127, 0.125, 1.0, 2.0, 2.0**127, 2.0**-127]),
    ("nearest", [2.0**-127, 0.25, 2.0, 2.0, 2.0**127, 2.0**-127]),  # ties (1.5) round up
])
def test_float8e8m0_round_modes_saturating(mode, expected):
    x = np.array([0.0, 0.2, 1.5, 2.9, np.inf, 1e-45], np.float32)
    out = cast(x, T.FLOAT8E8M0, round_mode=mode)
    assert out.dtype == ml_dtypes.float8_e8m0fnu and floats(out) == expected


def test_float8e8m0_without_saturation():
    x = np.array([0.0, np.inf, 3e38, 1e-40, 0.75, np.nan], np.float32)
    out = floats(cast(x, T.FLOAT8E8M0, saturate=0, round_mode="nearest"))
    np.testing.assert_array_equal(out, [np.nan, np.nan, np.nan, np.nan, 1.0, np.nan])


def test_small_integers_and_float4():
    x = np.array([-9, -8, 7, 8, 17, 300], np.int32)
    assert cast(x, T.INT4).astype(np.int8).tolist() == [7, -8, 7, -8, 1, -4]  # wrap
    assert cast(x, T.UINT4).astype(np.uint8).tolist() == [7, 8, 7, 8, 1, 12]
    assert cast(np.array([-3, 2, 5], np.int64), T.INT2).astype(np.int8).tolist() == [1, -2, 1]
    f = np.array([2.7, -2.7, 0.4, 5.0, 1e6, -np.inf, 0.25, 0.75], np.float32)
    assert cast(f[:4], T.INT4).astype(np.int8).tolist() == [2, -2, 0, 5]  # truncation
    assert floats(cast(f, T.FLOAT4E2M1)) == [3.0, -3.0, 0.5, 4.0, 6.0, -6.0, 0.0, 1.0]
    y = np.array([-8, 7], ml_dtypes.int4)
    assert cast(y, T.FLOAT).tolist() == [-8.0, 7.0] and cast(y, T.UINT8).tolist() == [248, 7]


def test_float8_to_float8_goes_through_the_value():
    x = np.array([1.0, 57344.0, -0.0], ml_dtypes.float8_e5m2)
    assert floats(cast(x, T.FLOAT8E4M3FN)) == [1.0, 448.0, -0.0]


# ---------------------------------------------------------------------------------------------
# Strings
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("x", [
    np.array([3.14159265, 1e-5, 1e20, np.nan, np.inf, -np.inf, 0.1, 100, -0.0, 123456789],
             np.float32),
    np.array([np.pi, 1 / 3, -2.5e-300], np.float64),
    np.array([0, -5, 2**40, -(2**63)], np.int64),
    np.array([255, 0], np.uint8),
    np.array([True, False]),
])
def test_numbers_to_strings_match_onnxruntime(x):
    model = cast_model(x, T.STRING, opset=13)
    (out,) = run_ep_host(model, {"x": x})
    assert out.dtype == object and out.tolist() == run_onnxruntime(model, {"x": x})[0].tolist()


def test_float_text_is_plain_with_eight_digits():
    out = cast(np.array([314.15625, 1 / 3, 2e-7, np.inf, -np.inf, np.nan], np.float32), T.STRING)
    assert out.tolist() == ["314.15625", "0.33333334", "2e-07", "INF", "-INF", "NaN"]


@pytest.mark.parametrize("to", [
    T.FLOAT, T.DOUBLE,
    # "1E8" overflows float16 to inf, as onnxruntime's cast does
    pytest.param(T.FLOAT16, marks=pytest.mark.filterwarnings(
        "ignore:overflow encountered in cast:RuntimeWarning")),
    T.INT32, T.INT64, T.UINT8, T.BOOL])
def test_strings_to_numbers_match_onnxruntime(to):
    words = ["3", "-7", "12", "0"] if to in (T.INT32, T.INT64, T.UINT8) else [
        "3.14", "1e-5", "1E8", "+INF", "inf", "-INF", "NaN", "-2.5", "0"]
    if to == T.BOOL:
        words = ["1", "0", "2.5", "-3"]
    x = np.array(words, dtype=object)
    assert_matches_onnxruntime(cast_model(x, to, opset=13), {"x": x})


def test_strings_round_once_and_integers_wrap():
    x = np.array(["1.00390625000000001", "1.00390625", "-1.0039062500000001"], dtype=object)
    assert floats(cast(x, T.BFLOAT16)) == [1.0078125, 1.0, -1.0078125]
    y = np.array(["300", "-1", "18446744073709551615", "2.7"], dtype=object)
    assert cast(y, T.UINT8).tolist() == [44, 255, 255, 2]
    assert cast(y[:3], T.UINT64).tolist() == [300, 2**64 - 1, 2**64 - 1]


def test_unparsable_text_fails_at_run_time():
    x = np.array(["abc"], dtype=object)
    with pytest.raises(ep_host.KernelError, match="abc"):
        cast(x, T.FLOAT)


# ---------------------------------------------------------------------------------------------
# CastLike
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("x", "like"), [
    (np.array([1.7, -2.2, 300.0], np.float32), np.zeros(1, np.int32)),
    (np.array([3, -4], np.int64), np.zeros(1, np.float16)),
    (np.array([0.0, 2.5], np.float64), np.zeros(1, np.bool_)),
    (np.array(["1.5", "-2"], dtype=object), np.zeros(1, np.float32)),
])
def test_cast_like_matches_onnxruntime(x, like):
    assert_matches_onnxruntime(cast_like_model(x, like, opset=15), {"x": x, "like": like})


def test_cast_like_to_string():
    x, like = np.array([1.5, -2.0], np.float32), np.array(["a"], dtype=object)
    (out,) = run_ep_host(cast_like_model(x, like, opset=15), {"x": x, "like": like})
    assert out.tolist() == ["1.5", "-2"]


def test_cast_like_honours_saturate_and_round_mode():
    x = np.array([1000.0, 3.0], np.float32)
    like = np.zeros(1, ml_dtypes.float8_e4m3fn)
    (out,) = run_ep_host(cast_like_model(x, like, opset=19, saturate=0), {"x": x, "like": like})
    assert out.dtype == ml_dtypes.float8_e4m3fn and np.isnan(floats(out)[0])
    like = np.zeros(1, ml_dtypes.float8_e8m0fnu)
    (out,) = run_ep_host(cast_like_model(x, like, opset=25, round_mode="down"),
                         {"x": x, "like": like})
    assert floats(out) == [512.0, 2.0]


# ---------------------------------------------------------------------------------------------
# Declines
# ---------------------------------------------------------------------------------------------


def test_cast_declines_targets_its_version_lacks():
    x = np.ones(2, np.float32)
    answer = cpu_answer(cast_model(x, T.FLOAT8E4M3FN, opset=13))
    assert not answer.is_supported and answer.code == "dtype"
    assert answer.reason.startswith("Cast-13: CPU EP casts to")
    assert "(float8e4m3fn)" in answer.reason
    answer = cpu_answer(cast_model(x, T.STRING, opset=6))  # strings arrive in version 9
    assert not answer.is_supported and "(string)" in answer.reason


def test_cast_declines_sources_its_version_lacks():
    x = np.ones(2, ml_dtypes.int4)
    answer = cpu_answer(cast_model(x, T.FLOAT, opset=19))
    assert not answer.is_supported and answer.code == "dtype" and "got int4" in answer.reason


def test_cast_declines_an_unknown_round_mode():
    x = np.ones(2, np.float32)
    answer = cpu_answer(cast_model(x, T.FLOAT8E8M0, opset=24, round_mode="sideways"))
    assert not answer.is_supported and answer.code == "attribute"
    assert "'sideways'" in answer.reason


def test_cast_like_declines_a_target_its_version_lacks():
    x, like = np.ones(2, np.float32), np.zeros(1, ml_dtypes.float8_e5m2)
    answer = cpu_answer(cast_like_model(x, like, opset=15))
    assert not answer.is_supported and answer.code == "dtype"
    assert answer.reason.startswith("CastLike-15: CPU EP casts to") and "like" in answer.reason
