"""Matrix products and linear algebra: MatMul (numpy.matmul semantics), Gemm
(alpha * A' B' + beta * C), Einsum and Det. float16 and bfloat16 accumulate in float32 and round
once.
"""

from __future__ import annotations

from ep_host import require
from ep_host_cpu.kernels.elementwise import BF16, upcast
from ep_host_cpu.registry import FLOATS, NUMERIC, kernel

MATMUL_INTS = frozenset({"int32", "int64", "uint32", "uint64"})


def _dim(shape, i):
    if shape is None or not shape:
        return 1
    d = shape[i]
    return d if isinstance(d, int) and d >= 0 else 1


def _static(shape, i):
    if shape is None or len(shape) != 2:
        return None
    return shape[i] if isinstance(shape[i], int) else None


def _elements(shape):
    n = 1
    for d in shape or ():
        n *= d if isinstance(d, int) and d >= 0 else 1
    return n


def _matmul_flops(node):
    a, y = node.inputs[0], node.outputs[0]
    return 2 * _elements(y.shape if y is not None else None) * _dim(a.shape, -1)


def _check_matmul(node):
    for value in node.inputs:
        if value is not None and value.shape is not None:
            require(len(value.shape) >= 1, "MatMul: CPU EP takes operands of rank >= 1, got a "
                    "scalar for {!r}", value.name, code="shape")


@kernel("MatMul", 1, dtypes=FLOATS, check=_check_matmul, flops=_matmul_flops)
@kernel("MatMul", 9, dtypes=FLOATS | MATMUL_INTS, check=_check_matmul, flops=_matmul_flops)
@kernel("MatMul", 13, dtypes=FLOATS | MATMUL_INTS | BF16, check=_check_matmul,
        flops=_matmul_flops)
def matmul(xp, a, b):
    return xp.matmul(upcast(xp, a), upcast(xp, b)).astype(a.dtype, copy=False)


def _gemm_flops(node):
    a = node.inputs[0]
    trans_a = node.attributes.get("transA", 0)
    y = node.outputs[0]
    return 2 * _elements(y.shape if y is not None else None) * _dim(a.shape, 0 if trans_a else -1)


def _check_gemm(node):
    attrs = node.attributes
    a, b = node.inputs[0], node.inputs[1]
    for name, value in (("A", a), ("B", b)):
        require(value.shape is None or len(value.shape) == 2,
                "Gemm: CPU EP takes a 2-D {}, got shape {}", name, value.shape, code="shape")
    c = node.inputs[2] if len(node.inputs) > 2 else None
    require(c is None or c.shape is None or len(c.shape) <= 2,
            "Gemm: C must be unidirectionally broadcastable to (M, N), got shape {}",
            None if c is None else c.shape, code="shape")
    if node.since_version < 7 and not attrs["broadcast"] and c is not None:
        m = _static(a.shape, 1 if attrs["transA"] else 0)
        n = _static(b.shape, 0 if attrs["transB"] else 1)
        if None not in (m, n) and c.shape is not None and all(
                isinstance(d, int) for d in c.shape):
            require(tuple(c.shape) == (m, n), "Gemm-{}: with broadcast=0, C must have shape "
                    "(M, N) = ({}, {}), got {}; set broadcast=1", node.since_version, m, n,
                    c.shape, code="shape")
    if a.dtype is not None and not a.dtype.is_float:
        alpha, beta = attrs["alpha"], attrs["beta"]
        require(float(alpha).is_integer() and float(beta).is_integer(),
                "Gemm: CPU EP computes integer Gemm only with whole alpha and beta (exact integer "
                "arithmetic), got alpha={} beta={}; use float inputs", alpha, beta,
                code="attribute")


def _gemm(xp, a, b, c, alpha, beta, trans_a, trans_b):
    dtype = a.dtype
    a, b = upcast(xp, a), upcast(xp, b)
    c = None if c is None else upcast(xp, c)
    if dtype.kind in "iu":
        alpha, beta = int(alpha), int(beta)
    y = xp.matmul(a.T if trans_a else a, b.T if trans_b else b)
    if alpha != 1:
        y *= alpha
    if c is not None:
        y += c * beta if beta != 1 else c
    return y.astype(dtype, copy=False)


@kernel("Gemm", 1, 6, dtypes=FLOATS, check=_check_gemm, flops=_gemm_flops)
def gemm_1(xp, a, b, c, *, alpha, beta, broadcast, transA, transB):
    if not broadcast:
        m = a.shape[1] if transA else a.shape[0]
        n = b.shape[0] if transB else b.shape[1]
        if tuple(c.shape) != (m, n):
            raise ValueError(f"Gemm with broadcast=0 needs C of shape ({m}, {n}), got {c.shape}")
    return _gemm(xp, a, b, c, alpha, beta, transA, transB)


@kernel("Gemm", 7, dtypes=FLOATS, check=_check_gemm, flops=_gemm_flops)
@kernel("Gemm", 9, 11, dtypes=FLOATS | MATMUL_INTS, check=_check_gemm, flops=_gemm_flops)
@kernel("Gemm", 13, dtypes=FLOATS | MATMUL_INTS | BF16, check=_check_gemm, flops=_gemm_flops)
def gemm(xp, a, b, c=None, *, alpha, beta, transA, transB):
    return _gemm(xp, a, b, c, alpha, beta, transA, transB)


# ---------------------------------------------------------------------------------------------
# Einsum and Det
# ---------------------------------------------------------------------------------------------


def _einsum_terms(equation):
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    return lhs.split(","), (rhs if arrow else None)


def check_einsum(node):
    equation = node.attributes["equation"]
    terms, _ = _einsum_terms(equation)
    n = sum(1 for v in node.inputs if v is not None)
    require(len(terms) == n, "Einsum: equation {!r} names {} operands, the node has {}",
            equation, len(terms), n, code="attribute")
    letters = set(equation) - set(" ,.->")
    require(all(c.isascii() and c.isalpha() for c in letters), "Einsum: equation {!r} may use "
            "only letters, ',', '->', '...' and spaces", equation, code="attribute")


def _einsum_flops(node):
    total = 1
    for value in node.inputs:
        for d in (value.shape or ()) if value is not None else ():
            total *= d if isinstance(d, int) and d > 0 else 1
    return max(total, 1)


@kernel("Einsum", 28, dtypes=NUMERIC | BF16, check=check_einsum, flops=_einsum_flops)
@kernel("Einsum", 12, dtypes=NUMERIC, check=check_einsum, flops=_einsum_flops)
def einsum(xp, *inputs, equation):
    """Without "->" the output takes the indices that occur once, in ASCII order (upper case
    first), after any ellipsis dimensions; integers wrap."""
    out = xp.einsum(equation.replace(" ", ""), *(upcast(xp, x) for x in inputs))
    return xp.asarray(out).astype(inputs[0].dtype, copy=False)


def _check_det(node):
    x = node.inputs[0]
    if x.shape is not None:
        require(len(x.shape) >= 2, "Det: input must have shape [*, M, M], got {}", x.shape,
                code="shape")
        m, n = x.shape[-2:]
        require(not (isinstance(m, int) and isinstance(n, int)) or m == n,
                "Det: the inner matrices must be square, got shape {}", x.shape, code="shape")


@kernel("Det", 22, dtypes=FLOATS | BF16, check=_check_det)
@kernel("Det", 11, dtypes=FLOATS, check=_check_det)
def det(xp, x):
    return xp.asarray(xp.linalg.det(upcast(xp, x))).astype(x.dtype, copy=False)
