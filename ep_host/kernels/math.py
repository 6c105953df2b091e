"""Matrix products and linear algebra: MatMul (numpy.matmul semantics), Gemm
(alpha * A' B' + beta * C), Einsum and Det. float16 and bfloat16 accumulate in float32 and round
once.
"""

from __future__ import annotations

from ep_host import element_count, require
from ep_host.kernels.helpers import upcast
from ep_host.kernels.registry import BF16, FLOATS, NUMERIC, RELEASES, kernel

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


def _matmul_flops(node):
    a, y = node.inputs[0], node.outputs[0]
    return 2 * element_count(y.shape if y is not None else None) * _dim(a.shape, -1)


def _check_matmul(node, provider):
    for value in node.inputs:
        if value is not None and value.shape is not None:
            require(len(value.shape) >= 1, "MatMul: {} takes operands of rank >= 1, got a "
                    "scalar for {!r}", provider, value.name, code="shape")


def _stated_shape(node):
    a = node.inputs[0]
    shape = a.shape if a is not None else None
    return shape if shape is not None and all(isinstance(d, int) for d in shape) else None


def _matmul_rows(node):
    """``{"rows": A's row count}`` (the product of all its dims but the last) where the model
    states it, else ``{}``: what decides whether a constant B is packed."""
    shape = _stated_shape(node)
    return {} if shape is None else {"rows": element_count(shape[:-1])}


def _gemm_rows(node):
    """As :func:`_matmul_rows`, for Gemm's M (A's second dim with transA)."""
    shape = _stated_shape(node)
    if shape is None or len(shape) != 2:
        return {}
    return {"rows": shape[1] if node.attributes.get("transA") else shape[0]}


# A product the model states has fewer rows than this keeps numpy's path and B unpacked: one row
# reads B once either way (measured one thread, 40 weights in turn, numpy's GEMV against oneMKL's
# packed B: 768 x 768 198 against 236 us, 768 x 3072 713 against 739; from two rows the packed
# copy is ahead, 442 against 354 us, 2,210 against 1,063), and with a one-row Gemm through
# oneMKL, a CNN run from 8 threads at once, and compiled kernels in use, one thread's results
# differed from a lone run's in the last bit now and then (tests/test_threads.py; never with
# numpy's path), which was not found out.
PACKED_MIN_ROWS = 2


def _packing(xp, b, rows):
    """The provider's packed copy of a constant B (:func:`provider_packing`), or ``None`` where
    the model states fewer than :data:`PACKED_MIN_ROWS` rows of A."""
    return provider_packing(xp, b) if rows is None or rows >= PACKED_MIN_ROWS else None


def _prepare_matmul(xp, constants, rows=None, **_):
    b = constants.get(1)
    if b is None or b.ndim != 2:
        return {}
    b = xp.ascontiguousarray(upcast(xp, b))
    blas = _packing(xp, b, rows)
    if blas is None:
        return {"packed_b": b}
    return {"packed_b": shape_only(xp, b), "blas_b": blas, RELEASES: (1,)}


def provider_packing(xp, matrix):
    """The provider's packed copy of a constant GEMM right operand (``xp.packed_gemm.pack``:
    the CPU EP's oneMKL), made now, or ``None`` where it has none. Every product then goes
    through the copy, so the kernel reads neither ``matrix`` nor the constant it came from again
    and releases that input (``Kernel.released``): the host may free the weight's memory."""
    packing = getattr(xp, "packed_gemm", None)
    return None if packing is None else packing.pack(matrix)


def shape_only(xp, matrix):
    """What a kernel keeps of a matrix it packed, for its shape checks: a stand-in of its dtype
    and shape that holds no memory, all NaN, so that a read by mistake cannot pass unseen."""
    return xp.broadcast_to(xp.asarray(xp.nan, dtype=matrix.dtype), matrix.shape)


def times_packed(xp, a, blas_b, op="MatMul"):
    """``a @ B`` for a 2-D ``a`` through ``blas_b``, the provider's packed B (see
    :func:`provider_packing`), in B's type: every product, whatever its rows (B is released)."""
    k, n = blas_b.shape
    if a.shape[-1] != k:
        raise ValueError(f"{op}: A's last dimension {a.shape[-1]} must equal B's first {k}")
    if a.shape[0] == 0:
        return xp.zeros((0, n), blas_b.dtype)
    return blas_b.times_left(xp.ascontiguousarray(a, dtype=blas_b.dtype))


@kernel("MatMul", 1, dtypes=FLOATS, check=_check_matmul, flops=_matmul_flops,
        prepare=_prepare_matmul, bind=_matmul_rows, family="matmul")
@kernel("MatMul", 9, dtypes=FLOATS | MATMUL_INTS, check=_check_matmul, flops=_matmul_flops,
        prepare=_prepare_matmul, bind=_matmul_rows, family="matmul")
@kernel("MatMul", 13, dtypes=FLOATS | MATMUL_INTS | BF16, check=_check_matmul,
        flops=_matmul_flops, prepare=_prepare_matmul, bind=_matmul_rows, family="matmul")
def matmul(xp, a, b, *, packed_b=None, blas_b=None, rows=None):
    """``packed_b``: a constant 2-D B, widened and made contiguous once; an (..., K) A then
    runs as one (rows, K) x (K, N) GEMM. ``blas_b``: the provider's packed copy of B (see
    :func:`provider_packing`), which then takes every product (``packed_b`` and ``b`` are
    stand-ins: only their shapes are read)."""
    if packed_b is not None and (a.ndim >= 2 or blas_b is not None):
        k, n = packed_b.shape
        if a.shape[-1] != k:
            raise ValueError(f"MatMul: A's last dimension {a.shape[-1]} must equal B's first {k}")
        lead = tuple(a.shape[:-1])
        flat = upcast(xp, a).reshape(element_count(lead), k)
        y = xp.matmul(flat, packed_b) if blas_b is None else times_packed(xp, flat, blas_b)
        return y.reshape(lead + (n,)).astype(a.dtype, copy=False)
    return xp.matmul(upcast(xp, a), upcast(xp, b)).astype(a.dtype, copy=False)


def _gemm_flops(node):
    a = node.inputs[0]
    trans_a = node.attributes.get("transA", 0)
    y = node.outputs[0]
    k = _dim(a.shape, 0 if trans_a else -1)
    return 2 * element_count(y.shape if y is not None else None) * k


def _check_gemm(node, provider):
    attrs = node.attributes
    a, b = node.inputs[0], node.inputs[1]
    for name, value in (("A", a), ("B", b)):
        require(value.shape is None or len(value.shape) == 2,
                "Gemm: {} takes a 2-D {}, got shape {}", provider, name, value.shape, code="shape")
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
                "Gemm: {} computes integer Gemm only with whole alpha and beta (exact integer "
                "arithmetic), got alpha={} beta={}; use float inputs", provider, alpha, beta,
                code="attribute")


def _prepare_gemm(xp, constants, *, beta, transB, rows=None, **_):
    """A constant B as the (K, N) operand and a constant C times beta, both widened once. B
    stays in its stored layout (for transB a transposed view, which BLAS reads without a copy):
    a transposed copy changed OpenBLAS's summation order, and with it the last bit of some
    outputs, for a (1, 4096) x (4096, 1000) product."""
    extra = {}
    b = constants.get(1)
    if b is not None and b.ndim == 2:
        b = upcast(xp, b)
        b = b.T if transB else b
        blas = _packing(xp, b, rows)
        if blas is None:
            extra["packed_b"] = b
        else:  # every product through the packed copy: B is released
            extra.update(packed_b=shape_only(xp, b), blas_b=blas)
            extra[RELEASES] = (1,)
    c = constants.get(2)
    if c is not None:
        c = upcast(xp, c)
        if c.dtype.kind in "iu":
            beta = int(beta)
        extra["packed_c"] = c * beta if beta != 1 else c
    return extra


def _gemm(xp, a, b, c, alpha, beta, trans_a, trans_b, packed_b=None, packed_c=None,
          blas_b=None):
    dtype = a.dtype
    a = upcast(xp, a)
    if packed_b is None:
        b = upcast(xp, b)
        packed_b = b.T if trans_b else b
    if dtype.kind in "iu":
        alpha, beta = int(alpha), int(beta)
    a = a.T if trans_a else a
    y = xp.matmul(a, packed_b) if blas_b is None else times_packed(xp, a, blas_b, "Gemm")
    if alpha != 1:
        y *= alpha
    if packed_c is not None:
        y += packed_c
    elif c is not None:
        c = upcast(xp, c)
        y += c * beta if beta != 1 else c
    return y.astype(dtype, copy=False)


@kernel("Gemm", 1, 6, dtypes=FLOATS, check=_check_gemm, flops=_gemm_flops,
        prepare=_prepare_gemm, bind=_gemm_rows, family="matmul")
def gemm_1(xp, a, b, c, *, alpha, beta, broadcast, transA, transB, packed_b=None,
           packed_c=None, blas_b=None, rows=None):
    if not broadcast:
        m = a.shape[1] if transA else a.shape[0]
        n = b.shape[0] if transB else b.shape[1]
        if tuple(c.shape) != (m, n):
            raise ValueError(f"Gemm with broadcast=0 needs C of shape ({m}, {n}), got {c.shape}")
    return _gemm(xp, a, b, c, alpha, beta, transA, transB, packed_b, packed_c, blas_b)


@kernel("Gemm", 7, dtypes=FLOATS, check=_check_gemm, flops=_gemm_flops, prepare=_prepare_gemm,
        bind=_gemm_rows, family="matmul")
@kernel("Gemm", 9, 11, dtypes=FLOATS | MATMUL_INTS, check=_check_gemm, flops=_gemm_flops,
        prepare=_prepare_gemm, bind=_gemm_rows, family="matmul")
@kernel("Gemm", 13, dtypes=FLOATS | MATMUL_INTS | BF16, check=_check_gemm, flops=_gemm_flops,
        prepare=_prepare_gemm, bind=_gemm_rows, family="matmul")
def gemm(xp, a, b, c=None, *, alpha, beta, transA, transB, packed_b=None, packed_c=None,
         blas_b=None, rows=None):
    """``packed_b``/``packed_c``: a constant B as the (K, N) operand and a constant C times
    beta, prepared once; ``blas_b``: the provider's packed copy of B (:func:`provider_packing`)."""
    return _gemm(xp, a, b, c, alpha, beta, transA, transB, packed_b, packed_c, blas_b)


# ---------------------------------------------------------------------------------------------
# Einsum and Det
# ---------------------------------------------------------------------------------------------


def _einsum_terms(equation):
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    return lhs.split(","), (rhs if arrow else None)


def check_einsum(node, provider):
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
        if value is not None:
            total *= element_count(value.shape)
    return max(total, 1)


@kernel("Einsum", 28, dtypes=NUMERIC | BF16, check=check_einsum, flops=_einsum_flops,
        family="matmul")
@kernel("Einsum", 12, dtypes=NUMERIC, check=check_einsum, flops=_einsum_flops, family="matmul")
def einsum(xp, *inputs, equation):
    """Without "->" the output takes the indices that occur once, in ASCII order (upper case
    first), after any ellipsis dimensions; integers wrap. Two float operands go through one
    batched matmul where the equation allows (numpy's einsum does not use BLAS for batched
    contractions: attention's 'bhid,bhjd->bhij' was ten times slower)."""
    operands = [upcast(xp, x) for x in inputs]
    compact = equation.replace(" ", "")
    out = None
    if len(operands) == 2 and all(x.dtype.kind == "f" for x in operands):
        out = _einsum_matmul(xp, compact, *operands)
    if out is None:
        out = xp.einsum(compact, *operands)
    return xp.asarray(out).astype(inputs[0].dtype, copy=False)


def _einsum_matmul(xp, equation, a, b):
    """``einsum(equation, a, b)`` as one batched matmul, or ``None`` where the equation has an
    ellipsis, no output part, an index repeated within a term, or operands of two dtypes."""
    if "..." in equation or "->" not in equation or a.dtype != b.dtype:
        return None
    inputs, out = equation.split("->")
    terms = inputs.split(",")
    if len(terms) != 2:
        return None
    left, right = terms
    if any(len(set(t)) != len(t) for t in (left, right, out)) or len(left) != a.ndim or (
            len(right) != b.ndim) or not set(out) <= set(left) | set(right):
        return None
    size: dict[str, int] = {}
    for term, x in ((left, a), (right, b)):
        for c, d in zip(term, x.shape, strict=True):
            if size.setdefault(c, d) != d:
                return None  # a broadcast dim of 1 against another: numpy's einsum decides
    # indices in one operand only and not in the output are summed there first
    a_only = [c for c in left if c not in right and c not in out]
    b_only = [c for c in right if c not in left and c not in out]
    if a_only:
        a = a.sum(axis=tuple(left.index(c) for c in a_only))
        left = "".join(c for c in left if c not in a_only)
    if b_only:
        b = b.sum(axis=tuple(right.index(c) for c in b_only))
        right = "".join(c for c in right if c not in b_only)
    batch = [c for c in out if c in left and c in right]
    contracted = [c for c in left if c in right and c not in out]
    keep_a = [c for c in left if c in out and c not in right]
    keep_b = [c for c in right if c in out and c not in left]

    def count(indices):
        n = 1
        for c in indices:
            n *= size[c]
        return n

    a3 = a.transpose([left.index(c) for c in batch + keep_a + contracted]).reshape(
        count(batch), count(keep_a), count(contracted))
    b3 = b.transpose([right.index(c) for c in batch + contracted + keep_b]).reshape(
        count(batch), count(contracted), count(keep_b))
    product = xp.matmul(a3, b3).reshape([size[c] for c in batch + keep_a + keep_b])
    order = batch + keep_a + keep_b
    result = product.transpose([order.index(c) for c in out])
    return result if result.flags.c_contiguous else result.copy()  # 0-d stays 0-d


def _check_det(node, provider):
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
