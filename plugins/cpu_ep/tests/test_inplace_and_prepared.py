"""Kernels that write into a donated buffer (``out=``) give the same result as without it, never
change the result's type, allocate when the buffer does not fit, and never write into an input
that was not donated; kernels with prepared constants (BatchNormalization, MatMul, Gemm) give the
same result as with the constants fed at run time."""

from __future__ import annotations

import numpy as np
import pytest
from ep_host_cpu.xp import numpy_xp as xp

from ep_host.kernels import elementwise, math, normalization

UNARY = [
    ("relu", {}), ("sigmoid", {}), ("tanh", {}), ("exp", {}), ("sqrt", {}),
    ("leaky_relu", {"alpha": 0.1}), ("leaky_relu", {"alpha": 3.0}),
]


def values(rng, dtype, shape=(3, 5)):
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    x[0, :3] = [0.0, -0.0, np.nan]
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize(("name", "attrs"), UNARY)
def test_unary_into_its_donated_input(rng, name, attrs, dtype):
    fn = getattr(elementwise, name)
    x = values(rng, dtype)
    if name == "sqrt":
        x = np.abs(x)
    before = x.copy()
    with np.errstate(invalid="ignore", over="ignore"):
        want = fn(xp, x, **attrs)
        np.testing.assert_array_equal(x, before)  # no out: the input is untouched
        donated = x.copy()
        got = fn(xp, donated, **attrs, out=donated)
    assert got.dtype == want.dtype == dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if dtype != np.float16:  # float16 widens to float32 and rounds: a new array
        assert got is donated


@pytest.mark.parametrize(("name", "attrs"), UNARY[:3])
def test_unary_allocates_when_the_buffer_does_not_fit(rng, name, attrs):
    fn = getattr(elementwise, name)
    x = values(rng, np.float32)
    wrong = np.zeros((2, 2), np.float32)
    got = fn(xp, x, **attrs, out=wrong)
    assert got is not wrong
    np.testing.assert_array_equal(wrong, 0)
    np.testing.assert_array_equal(got, fn(xp, x, **attrs))


def test_div_into_either_input_and_broadcasting(rng):
    a = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal((4, 3)).astype(np.float32) + 3
    want = a / b
    for donate in (0, 1):
        ins = [a.copy(), b.copy()]
        got = elementwise.div(xp, *ins, out=ins[donate])
        assert got is ins[donate]
        np.testing.assert_array_equal(got, want)
    row = b[:1].copy()  # a (1, 3) buffer cannot hold the (4, 3) result
    got = elementwise.div(xp, a, row, out=row)
    assert got is not row and got.shape == (4, 3)
    np.testing.assert_array_equal(row, b[:1])
    ints = elementwise.div(xp, np.array([7, -7]), np.array([2, 2]), out=np.zeros(2, np.int64))
    np.testing.assert_array_equal(ints, [3, -3])  # the integer path truncates toward zero


def test_clip_into_its_input(rng):
    x = values(rng, np.float32)
    lo, hi = np.float32(-1.0), np.float32(2.0)
    for bounds in ((lo, hi), (lo, None), (None, hi)):
        want = elementwise.clip(xp, x, *bounds)
        donated = x.copy()
        got = elementwise.clip(xp, donated, *bounds, out=donated)
        assert got is donated
        np.testing.assert_array_equal(got, want)
    vector = np.array([-1.0, 0.0, 1.0, 2.0, 3.0], np.float32)  # not a scalar bound: allocate
    donated = x.copy()
    got = elementwise.clip(xp, donated, vector, out=donated)
    np.testing.assert_array_equal(donated, x)
    np.testing.assert_array_equal(got, np.maximum(x, vector))


def batch_norm_inputs(rng, dtype=np.float32, c=4):
    x = rng.standard_normal((2, c, 3, 3)).astype(dtype)
    scale, b, mean = (rng.standard_normal(c).astype(np.float32) for _ in range(3))
    var = rng.random(c).astype(np.float32) + 0.5
    return x, scale, b, mean, var


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_batch_norm_prepared_equals_fed_and_the_formula(rng, dtype):
    x, scale, b, mean, var = batch_norm_inputs(rng, dtype)
    if dtype == np.float64:
        scale, b, mean, var = (v.astype(np.float64) for v in (scale, b, mean, var))
    shape = (1, -1, 1, 1)
    want = ((x.astype(np.float64) - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + 1e-5)
            * scale.reshape(shape) + b.reshape(shape))
    extra = normalization._prepare_batch_norm(xp, {1: scale, 2: b, 3: mean, 4: var},
                                              epsilon=1e-5)
    fed = normalization.batch_norm_9(xp, x, scale, b, mean, var, epsilon=1e-5)
    prepared = normalization.batch_norm_9(xp, x, scale, b, mean, var, epsilon=1e-5, **extra)
    assert fed.dtype == prepared.dtype == dtype
    np.testing.assert_array_equal(fed, prepared)
    tol = 2e-3 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(prepared.astype(np.float64), want, rtol=tol, atol=tol)
    donated = x.copy()
    got = normalization.batch_norm_9(xp, donated, scale, b, mean, var, epsilon=1e-5,
                                     out=donated, **extra)
    np.testing.assert_array_equal(got, prepared)
    assert (got is donated) == (dtype != np.float16)  # float16 widens into a new array


def test_batch_norm_without_all_constants_prepares_nothing(rng):
    x, scale, b, mean, var = batch_norm_inputs(rng)
    assert normalization._prepare_batch_norm(xp, {1: scale, 2: b}, epsilon=1e-5) == {}


@pytest.mark.parametrize("a_shape", [(5, 6), (2, 5, 6), (2, 3, 5, 6), (6,), (2, 0, 6)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64])
def test_matmul_prepared_equals_fed(rng, a_shape, dtype):
    a = (rng.standard_normal(a_shape) * 3).astype(dtype)
    b = (rng.standard_normal((6, 4)) * 3).astype(dtype)
    fed = math.matmul(xp, a, b)
    prepared = math.matmul(xp, a, b, **math._prepare_matmul(xp, {1: b}))
    assert prepared.dtype == fed.dtype == dtype and prepared.shape == fed.shape
    np.testing.assert_allclose(prepared.astype(np.float64), fed.astype(np.float64),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("c_shape", [None, (4,), (1, 4), (3, 1), (3, 4)])
@pytest.mark.parametrize(("trans_a", "trans_b"), [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_prepared_equals_fed(rng, c_shape, trans_a, trans_b):
    a = rng.standard_normal((5, 3) if trans_a else (3, 5)).astype(np.float32)
    b = rng.standard_normal((4, 5) if trans_b else (5, 4)).astype(np.float32)
    c = None if c_shape is None else rng.standard_normal(c_shape).astype(np.float32)
    attrs = {"alpha": 0.5, "beta": 2.0, "transA": trans_a, "transB": trans_b}
    fed = math.gemm(xp, a, b, c, **attrs)
    constants = {1: b} if c is None else {1: b, 2: c}
    prepared = math.gemm(xp, a, b, c, **attrs, **math._prepare_gemm(xp, constants, **attrs))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = 0.5 * ((a64.T if trans_a else a64) @ (b64.T if trans_b else b64))
    if c is not None:
        want = want + 2.0 * c
    np.testing.assert_allclose(prepared, fed, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(prepared, want, rtol=1e-5, atol=1e-5)


def test_softmax_and_layer_norm_leave_their_input_alone(rng):
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    before = x.copy()
    y = normalization.softmax(xp, x, axis=-1)
    np.testing.assert_allclose(y.sum(axis=-1), 1, rtol=1e-6)
    z = normalization.log_softmax(xp, x, axis=-1)
    np.testing.assert_allclose(np.exp(z), y, rtol=1e-6)
    scale = rng.standard_normal(8).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    out, mean, inv_std = normalization.layer_norm(xp, x, scale, bias, axis=-1, epsilon=1e-5,
                                                  stash_type=1)
    x64 = x.astype(np.float64)
    m = x64.mean(-1, keepdims=True)
    want = (x64 - m) / np.sqrt(((x64 - m) ** 2).mean(-1, keepdims=True) + 1e-5) * scale + bias
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(x, before)
