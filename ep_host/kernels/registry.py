"""The kernel registry: ``(domain, op_type, since_version) -> KernelSpec``, filled by a decorator.

A kernel is a plain function ``fn(xp, *inputs, **attributes)``: inputs positional in schema
order, attributes keyword-only under their ONNX names (the host fills schema defaults). An EP
binds ``xp`` (numpy, CuPy, ...) when it creates the kernel.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any

import onnx

from ep_host import Decline, FunctionKernel, Kernel, NodeView, Workspace, deny, require

DEFAULT_DOMAIN = "ai.onnx"

FLOATS = frozenset({"float16", "float32", "float64"})
SIGNED = frozenset({"int8", "int16", "int32", "int64"})
UNSIGNED = frozenset({"uint8", "uint16", "uint32", "uint64"})
INTS = SIGNED | UNSIGNED
NUMERIC = FLOATS | INTS
ALL = NUMERIC | {"bool"}
ALL_WITH_STRING = ALL | {"string"}
BF16 = frozenset({"bfloat16"})
FLOATS_BF16 = FLOATS | BF16
NUMERIC_BF16 = NUMERIC | BF16
# types numpy lacks, stored as ml_dtypes arrays (2- and 4-bit ones one element per byte)
EXOTIC = frozenset({"bfloat16", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz",
                    "float8e8m0", "float4e2m1", "int4", "uint4", "int2", "uint2"})
MOVABLE = ALL_WITH_STRING | {"complex64", "complex128"} | EXOTIC  # what data movement copies


@dataclass(frozen=True)
class KernelSpec:
    """How to build and price one op version.

    ``dtypes``: element types accepted for the inputs sharing the first input's type constraint
    (``None``: no check). ``host_inputs``: input indices whose values must be on the host.
    ``check(node, provider)``: declines (via ``require``/``deny``) what the kernel does not
    implement; ``provider`` is the asking EP's name as its declines read it.
    ``flops(node)``/``bytes(node)``: the work for the roofline; ``None`` uses the defaults.
    ``bind(node)``: extra keyword arguments computed once from the node (output count...).
    ``prepare(xp, constants, **kwargs)``: called once with the node's constant inputs (input
    index -> array on the EP's device) and the keyword arguments the kernel gets; returns extra
    keyword arguments for every run (prepacked weights, say), or ``{}``; under the name
    :data:`RELEASES`, the indices of the constants it needs no more (see ``Kernel.released``).
    ``inplace``: input indices whose buffer the kernel may write its first output into when the
    host hands it over (the value is dead after this node and has the output's dtype and static
    shape); the function then gets ``out=`` that array and returns it filled, as numpy's ufuncs
    do.
    ``direct``: the function is exactly ``xp.<direct>(*inputs)`` (with no attributes), so the
    kernel calls that function itself, one Python call less per run. ``direct_when(node)``: the
    same for some nodes only, the name of that function for them, else ``None`` (a Sum of two
    inputs of one type is ``xp.add``).
    ``family``: the op family whose calibrated factors a provider prices the kernel with
    ("conv", "matmul", "elementwise", ...), or ``None`` (never calibrated).
    ``workspace(xp, inputs, **kwargs)``: the :class:`ep_host.Workspace` the kernel needs for
    inputs of these ``(dtype, shape)`` (see ``Kernel.workspace``; ``kwargs`` as the kernel gets
    them, prepared constants included), or ``None``; the function then gets ``workspace=``.
    """

    domain: str
    op_type: str
    since_version: int
    fn: Callable[..., Any]
    dtypes: frozenset[str] | None = NUMERIC
    host_inputs: tuple[int, ...] = ()
    check: Callable[[NodeView, str], None] | None = None
    flops: Callable[[NodeView], float] | None = None
    bytes: Callable[[NodeView], int] | None = None
    bind: Callable[[NodeView], Mapping[str, Any]] | None = None
    attributes: tuple[str, ...] = field(default=())
    required: tuple[str, ...] = field(default=())
    kernel_class: type[Kernel] | None = None
    containers: bool = False
    prepare: Callable[..., Mapping[str, Any]] | None = None
    inplace: tuple[int, ...] = ()
    direct: str | None = None
    direct_when: Callable[[NodeView], str | None] | None = None
    family: str | None = None
    workspace: Callable[..., Workspace | None] | None = None

    def make(self, xp: Any, node: NodeView, context: Any = None) -> Kernel:
        attrs = node.attributes
        kwargs = {name: attrs[name] for name in self.attributes if name in attrs}
        if self.bind is not None:
            kwargs.update(self.bind(node))
        if self.kernel_class is not None:
            return self.kernel_class(xp, node, context, **kwargs)
        direct = self.direct_when(node) if self.direct_when is not None else None
        if self.prepare is None:  # nothing per node: nodes with equal attributes share one
            key = _sharing_key(kwargs)
            if key is not None:
                # the entry holds ``xp`` itself, so its id names it while the entry lives
                key = (self, id(xp), len(node.outputs), direct, key)
                try:
                    held = _SHARED.get(key)
                except TypeError:  # a spec that cannot be hashed: not shared
                    return RegistryKernel(self, xp, kwargs, len(node.outputs), direct)
                if held is None:
                    held = _SHARED[key] = (xp, RegistryKernel(self, xp, kwargs,
                                                              len(node.outputs), direct))
                return held[1]
        return RegistryKernel(self, xp, kwargs, len(node.outputs), direct)


_SHARED: dict[tuple[Any, ...], tuple[Any, RegistryKernel]] = {}
# the name under which a ``prepare`` returns the constant inputs its kernel no longer reads
RELEASES = "releases"
_PLAIN = (int, float, str, bool, type(None))


def _sharing_key(kwargs: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """``kwargs`` as a key that tells apart every pair of values a kernel could treat apart
    (``-0.0`` and ``0.0``, ``1`` and ``True``: type and repr), or ``None`` when a value is not
    plain (an array, a graph): its kernel is not shared."""
    if any(type(v) is not tuple and type(v) not in _PLAIN for v in kwargs.values()):
        return None  # before reading long tuples (a tree ensemble's nodes) element by element
    key = []
    for name, value in kwargs.items():
        if type(value) is tuple:
            if not all(type(v) in _PLAIN for v in value):
                return None
        elif type(value) not in _PLAIN:
            return None
        key.append((name, type(value), repr(value)))
    return tuple(key)


# The ops whose functions here call no BLAS at all (numpy's ufuncs, reductions and indexing,
# the tree walks, a provider's compiled ML loops): their kernels say ``uses_blas = False``, and
# a plan of them alone runs on one thread whatever the pool holds, at any batch (a
# scikit-learn tree export's open batch: setting and restoring the pool took 3-4 us of its
# 10 us run).
BLAS_FREE_OPS = frozenset({
    *(("ai.onnx.ml", op) for op in (
        "TreeEnsembleRegressor", "TreeEnsembleClassifier", "TreeEnsemble", "ZipMap",
        "ArrayFeatureExtractor", "Normalizer", "Scaler", "Binarizer", "Imputer", "LabelEncoder",
        "OneHotEncoder", "CategoryMapper", "FeatureVectorizer", "DictVectorizer")),
    *((DEFAULT_DOMAIN, op) for op in (
        "Cast", "CastLike", "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Concat",
        "Slice", "Gather", "GatherElements", "Transpose", "Split", "Expand", "Tile", "Pad",
        "Shape", "Size", "ConstantOfShape", "Range", "OneHot", "Dropout", "ArgMax", "ArgMin",
        "TopK", "Softmax", "LogSoftmax", "Add", "Sub", "Mul", "Div", "Mod", "Pow", "Neg", "Abs",
        "Sign", "Reciprocal", "Floor", "Ceil", "Round", "Clip", "Max", "Min", "Sum", "Mean",
        "Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "Softplus", "Tanh", "Erf", "Exp", "Log",
        "Sqrt", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Equal", "Not", "And", "Or",
        "Xor", "IsNaN", "IsInf", "Where", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
        "ReduceProd", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum",
        "ReduceLogSumExp")),
})


class RegistryKernel(FunctionKernel):
    """A registry function bound to ``xp`` and the node's attributes.

    ``call`` computes the one output directly (no tuple), for the host's fast path; ``run``
    wraps it. A function returning a tuple has several outputs. numpy scalars become 0-d arrays.
    """

    def __init__(self, spec: KernelSpec, xp: Any, kwargs: dict[str, Any], n_outputs: int,
                 direct: str | None = None):
        self.spec = spec
        self.xp = xp
        self.kwargs = kwargs
        self.direct = direct or spec.direct  # the xp function it is, where it is one
        super().__init__(spec.fn, n_outputs=n_outputs,
                         name=f"{spec.op_type}-{spec.since_version}")
        self.inplace = spec.inplace
        self.uses_blas = (spec.domain, spec.op_type) not in BLAS_FREE_OPS
        self._bind()

    def _bind(self) -> None:
        fn, xp, kwargs = self.spec.fn, self.xp, self.kwargs
        generic = xp.generic if hasattr(xp, "generic") else ()
        if self.direct is not None and not kwargs:
            call = getattr(xp, self.direct)
        else:  # an in-place kernel also takes out=, a dead input the host hands over
            call = partial(fn, xp, **kwargs)

        def run(*inputs: Any, **given: Any) -> Any:
            # A tuple is several outputs; anything else (an array, a list = a sequence, None =
            # an empty optional) is the one output. ``given``: the host's workspace=.
            out = call(*inputs, **given)
            if type(out) is tuple:
                return out
            return (xp.asarray(out) if isinstance(out, generic) else out,)

        self.fn = run
        self.call = call if self.n_outputs == 1 else None

    def prepare(self, constants: Mapping[int, Any]) -> None:
        if self.spec.prepare is not None and constants:
            extra = dict(self.spec.prepare(self.xp, constants, **self.kwargs))
            self._released = tuple(extra.pop(RELEASES, ()))
            if extra:
                # the key is worked out when a session sharing prepacked states asks for it
                self._packing = (self.kwargs, tuple(sorted(constants)), tuple(extra))
                self.kwargs = {**self.kwargs, **extra}
                self._bind()

    _released: tuple[int, ...] = ()

    def released(self) -> tuple[int, ...]:
        return self._released

    # (the keyword arguments ``prepare`` was given, the constants' indices, the names it made)
    _packing: tuple[dict[str, Any], tuple[int, ...], tuple[str, ...]] | None = None

    def _packing_key(self, kwargs: Mapping[str, Any]) -> str | None:
        """What the prepared state depends on besides the constants: the namespace, the op
        version and every keyword argument ``kwargs`` (attributes), or ``None`` when an
        argument is not a plain value (then nothing is shared)."""
        attrs = _sharing_key(kwargs)
        if attrs is None:
            return None
        spec = self.spec
        shown = ";".join(f"{name}={kind.__name__}:{text}" for name, kind, text in attrs)
        return (f"{getattr(self.xp, '__name__', type(self.xp).__name__)}/{spec.domain}/"
                f"{spec.op_type}-{spec.since_version}/{shown}")

    def prepacked(self) -> Mapping[str, tuple[tuple[int, ...], Any]]:
        """The keyword arguments ``prepare`` built (packed weights), under a key naming the op
        version, the namespace and the attributes."""
        if self._packing is None:
            return {}
        given, indices, names = self._packing
        key = self._packing_key(given)
        if key is None:
            return {}
        return {key: (indices, {name: self.kwargs[name] for name in names})}

    def adopt_prepacked(self, key: str, state: Any) -> None:
        if self._packing is None or key != self._packing_key(self._packing[0]):
            raise KeyError(f"{self.name}: no prepacked state under {key!r}")
        self.kwargs = {**self.kwargs, **state}
        self._bind()

    def run(self, *inputs: Any, **given: Any) -> Any:
        return self.fn(*inputs, **given)

    def workspace(self, inputs: Any) -> Workspace | None:
        if self.spec.workspace is None:
            return None
        return self.spec.workspace(self.xp, inputs, **self.kwargs)


def _keyword_attributes(fn: Callable[..., Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    names, required = [], []
    for p in inspect.signature(fn).parameters.values():
        # out=: a donated buffer; workspace=: the host's scratch memory; neither an attribute
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in ("out", "workspace"):
            names.append(p.name)
            if p.default is inspect.Parameter.empty:
                required.append(p.name)
    return tuple(names), tuple(required)


class Registry:
    """All kernels of one EP, keyed exactly by ``(domain, op_type, since_version)``."""

    def __init__(self) -> None:
        self.specs: dict[tuple[str, str, int], KernelSpec] = {}
        # (domain, op_type) -> sorted since_versions, rebuilt when ``specs`` changes size
        self._versions: dict[tuple[str, str], list[int]] = {}
        self._versions_of = -1

    def add(self, spec: KernelSpec) -> None:
        key = (spec.domain, spec.op_type, spec.since_version)
        if key in self.specs:
            raise ValueError(f"kernel {key} registered twice")
        self.specs[key] = spec

    def kernel(
        self,
        op_type: str,
        *versions: int,
        domain: str = DEFAULT_DOMAIN,
        dtypes: Iterable[str] | None = NUMERIC,
        host_inputs: Iterable[int] = (),
        check: Callable[[NodeView, str], None] | None = None,
        flops: Callable[[NodeView], float] | None = None,
        bytes: Callable[[NodeView], int] | None = None,  # noqa: A002 (the cost's own word)
        bind: Callable[[NodeView], Mapping[str, Any]] | None = None,
        kernel_class: type[Kernel] | None = None,
        containers: bool = False,
        subgraphs: bool = False,
        prepare: Callable[..., Mapping[str, Any]] | None = None,
        inplace: Iterable[int] = (),
        direct: str | None = None,
        family: str | None = None,
        workspace: Callable[..., Workspace | None] | None = None,
        direct_when: Callable[[NodeView], str | None] | None = None,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register ``fn`` for ``op_type`` at each listed ``since_version``; stackable.

        ``containers``: the kernel takes sequence and optional values, not only tensors.
        ``subgraphs``: a ``kernel_class`` that runs bodies (it gets the hook's context).
        ``family``: the op family it is priced with (see :class:`KernelSpec`)."""
        if not versions:
            raise ValueError(f"{op_type}: list the since_versions this kernel implements")

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            attributes, required = _keyword_attributes(fn)
            for v in versions:
                self.add(KernelSpec(
                    domain, op_type, v, fn,
                    dtypes=None if dtypes is None else frozenset(dtypes),
                    host_inputs=tuple(host_inputs), check=check, flops=flops, bytes=bytes,
                    bind=bind, attributes=attributes, required=required,
                    kernel_class=kernel_class, containers=containers or subgraphs,
                    prepare=prepare, inplace=tuple(inplace), direct=direct, family=family,
                    workspace=workspace, direct_when=direct_when,
                ))
            return fn

        return decorate

    def versions(self, domain: str, op_type: str) -> list[int]:
        if self._versions_of != len(self.specs):  # every decline asks: index once, not per node
            index: dict[tuple[str, str], list[int]] = {}
            for d, o, v in self.specs:
                index.setdefault((d, o), []).append(v)
            for found in index.values():
                found.sort()
            self._versions, self._versions_of = index, len(self.specs)
        return list(self._versions.get((domain, op_type), ()))

    def lookup(self, node: NodeView, provider: str = "this EP") -> KernelSpec:
        """The spec for ``node``, or a :class:`Decline` that says exactly what is missing."""
        spec = self.specs.get((node.domain, node.op_type, node.since_version))
        if spec is not None:  # the common case; only a miss needs the versions for its reason
            return spec
        op = node.qualified_op
        versions = self.versions(node.domain, node.op_type)
        if not versions:
            deny("{}: {} has no kernel for this op", op, provider, code="op")
        if node.since_version is None:  # com.microsoft...: the newest kernel <= the opset
            known = [v for v in versions if node.opset is not None and v <= node.opset]
            require(known, "{}: no ONNX schema for opset {} of domain {}; {} has since_version {}",
                    op, node.opset, node.domain, provider, ", ".join(map(str, versions)),
                    code="opset")
            return self.specs[(node.domain, node.op_type, known[-1])]
        spec = self.specs.get((node.domain, node.op_type, node.since_version))
        if spec is None:
            deny("{}: opset {} resolves to since_version {}; {} has {}", op, node.opset,
                 node.since_version, provider, ", ".join(map(str, versions)), code="opset")
        return spec


@cache
def _primary_inputs(domain: str, op_type: str, since_version: int) -> tuple[bool, ...] | None:
    """Which schema inputs share the first input's type constraint (``None``: no schema)."""
    try:
        schema = onnx.defs.get_schema(
            op_type, since_version, "" if domain == DEFAULT_DOMAIN else domain
        )
    except onnx.defs.SchemaError:
        return None
    if not schema.inputs:
        return ()
    first = schema.inputs[0].type_str
    return tuple(p.type_str == first for p in schema.inputs)


def check_node(spec: KernelSpec, node: NodeView, provider: str = "this EP") -> None:
    """Decline what ``spec`` cannot compute: missing attributes, unsupported dtypes, its check.
    ``provider`` is the EP's name as its declines read it ("Conv: <provider> takes ...")."""
    attrs = node.attributes  # read even when nothing is required: an unreadable one declines
    for name in spec.required:
        require(name in attrs, "{}: attribute {!r} is required but missing", node.op_type, name,
                code="attribute")
    if not spec.containers:
        for value in node.inputs:
            if value is not None and value.kind in ("sequence", "optional", "map"):
                deny("{}: {} takes tensors here, got a {} for input {!r}", node.op_type,
                     provider, value.kind, value.name, code="dtype")
    dtypes = spec.dtypes
    if dtypes is not None:
        primary = _primary_inputs(spec.domain, spec.op_type, spec.since_version)
        last = len(primary) - 1 if primary else -1
        for i, value in enumerate(node.inputs):
            if value is None:
                continue
            dt = value.dtype
            if dt is None or dt.name in dtypes:
                continue
            if last >= 0 and not primary[i if i < last else last]:
                continue
            deny("{}: {} takes {} input, got {} for input {!r}", node.op_type, provider,
                 "/".join(sorted(dtypes)), dt.name, value.name, code="dtype")
    if spec.check is not None:
        spec.check(node, provider)

REGISTRY = Registry()
kernel = REGISTRY.kernel

__all__ = ["Decline", "KernelSpec", "REGISTRY", "Registry", "check_node", "kernel"]
