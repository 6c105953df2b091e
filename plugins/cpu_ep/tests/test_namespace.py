"""The CPU EP's namespace takes shortcuts past numpy's Python wrappers (``sum``, ``max``,
``argmax``, ``take``, ``expand_dims``, ``flip``...) for ndarrays: each gives exactly numpy's
answer (values, dtype, shape, errors), and anything the shortcut does not take goes to numpy."""

import numpy as np
import pytest
from ep_host_cpu.xp import numpy_xp as xp

RNG = np.random.default_rng(7)
ARRAYS = {
    "float32": RNG.standard_normal((3, 4, 5)).astype(np.float32),
    "int32": RNG.integers(-50, 50, (3, 4, 5)).astype(np.int32),
    "uint8": RNG.integers(0, 255, (3, 4, 5)).astype(np.uint8),
    "bool": RNG.integers(0, 2, (3, 4, 5)).astype(bool),
    "float16 with nan": np.where(RNG.random((3, 4, 5)) < 0.1, np.nan,
                                 RNG.standard_normal((3, 4, 5))).astype(np.float16),
}
AXES = [None, 0, 1, -1, (0, 2), ()]


def same(a, b):
    assert type(a) is type(b)
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kind", sorted(ARRAYS))
@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "amax", "amin"])
def test_reductions_give_numpys_answer(kind, name):
    x = ARRAYS[kind]
    for axis in AXES:
        for keepdims in (False, True):
            same(getattr(xp, name)(x, axis=axis, keepdims=keepdims),
                 getattr(np, name)(x, axis=axis, keepdims=keepdims))
    if name in ("sum", "prod"):
        same(xp.sum(x, axis=1, dtype=np.float64), np.sum(x, axis=1, dtype=np.float64))
    same(getattr(xp, name)(x, 1), getattr(np, name)(x, 1))  # the axis by position
    out = np.empty(getattr(np, name)(x, axis=0).shape, getattr(np, name)(x, axis=0).dtype)
    assert getattr(xp, name)(x, axis=0, out=out) is out
    same(out, getattr(np, name)(x, axis=0))


def test_reductions_pass_what_the_shortcut_does_not_take_to_numpy():
    x = ARRAYS["float32"]
    same(xp.max(x, axis=1, initial=10.0), np.max(x, axis=1, initial=10.0))
    same(xp.sum(x, axis=0, where=x > 0), np.sum(x, axis=0, where=x > 0))
    same(xp.sum([1, 2, 3]), np.sum([1, 2, 3]))  # a list
    same(xp.prod(np.float32(3)), np.prod(np.float32(3)))  # a numpy scalar
    masked = np.ma.masked_array([1.0, 5.0, 2.0], mask=[False, True, False])
    assert xp.max(masked) == 2.0  # a subclass keeps its own method
    with pytest.raises(ValueError, match="zero-size array"):
        xp.max(np.zeros((0, 3), np.float32))
    with pytest.raises(np.exceptions.AxisError):
        xp.sum(x, axis=3)


@pytest.mark.parametrize("kind", sorted(ARRAYS))
def test_index_and_scan_functions_give_numpys_answer(kind):
    x = ARRAYS[kind]
    for axis in (None, 0, 1, -1):
        same(xp.argmax(x, axis=axis), np.argmax(x, axis=axis))
        same(xp.argmin(x, axis), np.argmin(x, axis))
        same(xp.cumsum(x, axis=axis), np.cumsum(x, axis=axis))  # int32 widens as numpy's
        same(xp.cumprod(x, axis), np.cumprod(x, axis))
        same(xp.take(x, [2, 0, 1], axis=axis), np.take(x, [2, 0, 1], axis=axis))
    same(xp.argmax(x, axis=2, keepdims=True), np.argmax(x, axis=2, keepdims=True))
    for kind_of_sort in (None, "stable"):
        same(xp.argsort(x, axis=1, kind=kind_of_sort), np.argsort(x, axis=1, kind=kind_of_sort))
    same(xp.argsort(x), np.argsort(x))
    same(xp.argsort(x, axis=None), np.argsort(x, axis=None))
    same(xp.squeeze(x[:, :1], axis=1), np.squeeze(x[:, :1], axis=1))
    same(xp.take(x, 7), np.take(x, 7))
    with pytest.raises(IndexError):
        xp.take(x, [9], axis=1)


def test_expand_dims_and_flip_give_numpys_answer_and_views():
    x = ARRAYS["float32"]
    for axis in range(-4, 4):
        y = xp.expand_dims(x, axis)
        same(y, np.expand_dims(x, axis))
        assert np.shares_memory(y, x)
    same(xp.expand_dims(x, (0, 2)), np.expand_dims(x, (0, 2)))  # a tuple: numpy's own
    for axis in (4, -5):
        with pytest.raises(np.exceptions.AxisError):
            xp.expand_dims(x, axis)
    for axis in (None, 0, 1, 2, -1, -3, (0, 2)):
        y = xp.flip(x, axis)
        same(y, np.flip(x, axis))
        assert np.shares_memory(y, x)
    with pytest.raises(np.exceptions.AxisError):
        xp.flip(x, 3)
    same(xp.flip([1, 2, 3], 0), np.flip([1, 2, 3], 0))
