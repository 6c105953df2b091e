"""Random generators: RandomUniform, RandomNormal, their -Like forms, Bernoulli, Multinomial.

Their values are the generator's, which no two runtimes share ("may not produce the same values
in different implementations, even if a seed is specified", says Bernoulli's specification), so
a conformance check that compares values exactly would call any answer wrong. They are
therefore claimed only when ``EP_HOST_CPU_RANDOM=1``; each kernel then keeps one numpy
generator, seeded from ``seed`` when given, that advances from run to run.
"""

from __future__ import annotations

import os

import ep_host
from ep_host import require
from ep_host.kernels.registry import FLOATS, kernel

OPT_IN = "EP_HOST_CPU_RANDOM"
REAL = FLOATS | {"bfloat16"}
BERNOULLI_OUT = REAL | {"uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32",
                        "int64", "bool"}


def _check_random(out_types, default_from_input):
    def check(node, provider):
        require(os.environ.get(OPT_IN) == "1",
                "{}: {} claims random generators only when {}=1: their values cannot match "
                "another runtime's generator (onnx's expected outputs are numpy draws that no "
                "kernel can reproduce), so by default it declines", node.op_type, provider, OPT_IN,
                code="op")
        code = node.attributes.get("dtype")
        if code is None and default_from_input:
            x = node.inputs[0]
            name = x.dtype.name if x is not None and x.dtype is not None else None
        else:
            name = ep_host.dtype(code if code is not None else 1).name
        require(name is None or name in out_types, "{}: {} writes {} output, got {}",
                node.op_type, provider, "/".join(sorted(out_types)), name, code="dtype")

    return check


def _generator(node):
    seed = node.attributes.get("seed")
    return {"state": {"seed": None if seed is None else int(seed)}}


def _rng(xp, state=None):
    rng = state.get("rng")
    if rng is None:
        rng = state["rng"] = xp.random.default_rng(state["seed"])
    return rng


def _out_type(dtype_code, like=None):
    if dtype_code is None:
        return like
    return ep_host.dtype(dtype_code).numpy


@kernel("RandomUniform", 1, 22, dtypes=None, check=_check_random(REAL, False), bind=_generator)
def random_uniform(xp, *, shape, dtype, high, low, state=None):
    values = _rng(xp, state).random(tuple(shape))
    return (values * (high - low) + low).astype(_out_type(dtype))


@kernel("RandomNormal", 1, 22, dtypes=None, check=_check_random(REAL, False), bind=_generator)
def random_normal(xp, *, shape, dtype, mean, scale, state=None):
    values = _rng(xp, state).standard_normal(tuple(shape))
    return (values * scale + mean).astype(_out_type(dtype))


@kernel("RandomUniformLike", 1, 22, dtypes=None, check=_check_random(REAL, True),
        bind=_generator)
def random_uniform_like(xp, x, *, high, low, dtype=None, state=None):
    values = _rng(xp, state).random(x.shape)
    return (values * (high - low) + low).astype(_out_type(dtype, x.dtype))


@kernel("RandomNormalLike", 1, 22, dtypes=None, check=_check_random(REAL, True),
        bind=_generator)
def random_normal_like(xp, x, *, mean, scale, dtype=None, state=None):
    values = _rng(xp, state).standard_normal(x.shape)
    return (values * scale + mean).astype(_out_type(dtype, x.dtype))


@kernel("Bernoulli", 22, dtypes=REAL, check=_check_random(BERNOULLI_OUT, True), bind=_generator)
@kernel("Bernoulli", 15, dtypes=FLOATS, check=_check_random(BERNOULLI_OUT, True),
        bind=_generator)
def bernoulli(xp, p, *, dtype=None, state=None):
    draws = _rng(xp, state).random(p.shape) < p.astype(xp.float64)
    return draws.astype(_out_type(dtype, p.dtype))


def _check_multinomial(node, provider):
    _check_random(frozenset({"int32", "int64"}), False)(node, provider)
    x = node.inputs[0]
    require(x is None or x.shape is None or len(x.shape) == 2,
            "Multinomial: the input must be [batch_size, class_size], got shape {}",
            None if x is None else x.shape, code="shape")


@kernel("Multinomial", 22, dtypes=REAL, check=_check_multinomial, bind=_generator)
@kernel("Multinomial", 7, dtypes=FLOATS, check=_check_multinomial, bind=_generator)
def multinomial(xp, x, *, dtype, sample_size, state=None):
    """Each row's values are unnormalized log-probabilities; samples invert the row's CDF."""
    logits = x.astype(xp.float64)
    weights = xp.exp(logits - logits.max(axis=1, keepdims=True))
    cdf = xp.cumsum(weights, axis=1)
    cdf = cdf / cdf[:, -1:]
    u = _rng(xp, state).random((x.shape[0], sample_size))
    picks = (u[:, :, None] >= cdf[:, None, :]).sum(axis=2)
    return xp.minimum(picks, x.shape[1] - 1).astype(_out_type(dtype))
