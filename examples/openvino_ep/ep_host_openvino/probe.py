"""Whether OpenVINO computes a node, asked of OpenVINO itself: the node alone as an ONNX model is
read by its ONNX frontend, checked with ``query_model``, compiled and run once on a sample input.
Verdicts are cached per op signature, in memory and on disk per OpenVINO version, so a walk over a
large graph probes each kind of node once per machine; a reason therefore names inputs and outputs
by position, never by a node's value names.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ep_host import CacheDirStores, NodeView, ValueView, node_model
from ep_host_openvino.runtime import (
    DEVICE,
    compile_model,
    core,
    read_model,
    reason_code,
    trimmed_message,
    version,
)

# Constants whose values are part of the signature: small integer tensors (a Reshape's shape,
# Slice's starts), which OpenVINO's frontend folds into the graph it builds.
SMALL_CONSTANT = 64

# OpenVINO's CPU plugin stores these element types narrower than ONNX does: it computes float64
# as float32 and keeps 64-bit integers in 32 bits (2**40 + 1 comes back as 1).
NARROWED = {
    "float64": "computes float64 in float32 (digits past the 7th and values past 3.4e38 are lost)",
    "uint64": "keeps uint64 in 32 bits (values past 2**32 come back truncated)",
    "int64": "keeps int64 in 32 bits (values past 2**31 come back truncated)",
}

# Where an int64 holds a size or an index, it is bounded by a tensor's size and survives the
# narrowing: these input positions of these ops, and these ops' int64 outputs.
INDEX_INPUTS = {
    "Gather": (1,), "GatherElements": (1,), "GatherND": (1,), "Reshape": (1,), "Expand": (1,),
    "Tile": (1,), "ConstantOfShape": (0,), "TopK": (1,), "Unsqueeze": (1,), "Squeeze": (1,),
    "OneHot": (1,), "ReduceMean": (1,), "ReduceMax": (1,), "ReduceMin": (1,), "ReduceSum": (1,),
}
# Arithmetic that overflows small integers: OpenVINO saturates (int8 100 + 100 = 127) where ONNX
# Runtime and numpy wrap (-56), so the OpenVINO EP leaves it to others.
WRAPPING_ARITHMETIC = {"Add", "Sub", "Mul", "Neg", "Sum", "CumSum", "ReduceSum", "ReduceProd",
                       "ReduceSumSquare", "MatMul", "Gemm", "Pow"}
SMALL_INTEGERS = {"int8", "uint8", "int16", "uint16"}
INDEX_OUTPUTS = {"Shape": (0,), "Size": (0,), "ArgMax": (0,), "ArgMin": (0,), "NonZero": (0,),
                 "TopK": (1,)}


# Graph plumbing that ``query_model`` need not list.
_NOT_PLACED = {"Constant", "Parameter", "Result"}


@dataclass(frozen=True)
class Verdict:
    """OpenVINO's answer for one op signature: ``reason`` empty when it computed the node."""

    reason: str = ""
    code: str = "op"

    @property
    def supported(self) -> bool:
        return not self.reason


def _attribute_key(value: Any) -> Hashable:
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, list | tuple):
        return tuple(_attribute_key(v) for v in value)
    if isinstance(value, bytes | str | int | float | bool) or value is None:
        return value
    return repr(value)


def _value_key(value: ValueView | None, with_constant: bool) -> Hashable:
    if value is None:
        return None
    dtype = value.dtype.name if value.dtype is not None else None
    rank = value.rank
    key: tuple[Any, ...] = (value.kind, dtype, rank)
    if with_constant and value.is_constant:
        small = (value.dtype is not None and not value.dtype.is_float and value.shape is not None
                 and all(isinstance(d, int) for d in value.shape)
                 and math.prod(value.shape) <= SMALL_CONSTANT)
        key += ("constant", value.value.tobytes() if small else None)
    return key


def signature(node: NodeView, opset: int | None) -> Hashable:
    """What OpenVINO's verdict depends on: the op and its version, input dtypes, ranks and
    constness (with the values of small integer constants), output dtypes and ranks, attributes."""
    return (
        node.domain, node.op_type, node.since_version, opset,
        tuple(_value_key(v, True) for v in node.inputs),
        tuple(_value_key(v, False) for v in node.outputs),
        tuple(sorted((k, _attribute_key(v)) for k, v in node.attributes.items())),
    )


def precheck(node: NodeView) -> Verdict | None:
    """A decline this EP gives before asking OpenVINO: bodies, non-tensor values, element types
    numpy cannot hold, and values OpenVINO's CPU plugin would narrow. ``None`` to go on."""
    op = node.qualified_op
    if node.subgraphs:
        return Verdict(f"{op}: has subgraphs ({', '.join(node.subgraphs)}); the OpenVINO EP does "
                       "not hand control-flow bodies to OpenVINO", "op")
    index_inputs = INDEX_INPUTS.get(node.op_type, ()) if node.domain == "ai.onnx" else ()
    index_outputs = INDEX_OUTPUTS.get(node.op_type, ()) if node.domain == "ai.onnx" else ()
    roles = [(v, f"input {i}", i in index_inputs) for i, v in enumerate(node.inputs)]
    roles += [(v, f"output {i}", i in index_outputs) for i, v in enumerate(node.outputs)]
    for value, role, is_index in roles:
        if value is None or (role.startswith("output") and value.kind == "unknown"):
            continue  # an output left untyped (Dropout's mask): OpenVINO types it
        if value.kind != "tensor":
            return Verdict(f"{op}: {role} is a {value.kind}; the OpenVINO EP takes "
                           "tensors only", "dtype")
        if value.dtype is None:
            return Verdict(f"{op}: the type of {role} is unknown; declare it "
                           "(value_info) so the OpenVINO EP can probe the node", "dtype")
        if value.dtype.numpy is None or value.dtype.name == "string":
            return Verdict(f"{op}: {role} is {value.dtype.name}; the OpenVINO EP "
                           "takes numeric and bool tensors only", "dtype")
        if value.rank is None:
            return Verdict(f"{op}: the rank of {role} is unknown; the OpenVINO EP "
                           "needs ranked tensors to probe the node", "shape")
        narrowed = NARROWED.get(value.dtype.name)
        if narrowed and not value.is_constant and not (is_index and value.dtype.name == "int64"):
            return Verdict(f"{op}: {role} is {value.dtype.name} and OpenVINO's CPU "
                           f"plugin {narrowed}; leave the node to another provider", "dtype")
    if node.domain == "ai.onnx" and node.op_type in WRAPPING_ARITHMETIC:
        small = [v.dtype.name for v in node.outputs
                 if v is not None and v.dtype is not None and v.dtype.name in SMALL_INTEGERS]
        if small:
            return Verdict(f"{op}: OpenVINO saturates {small[0]} arithmetic on overflow where "
                           "ONNX Runtime wraps; leave the node to another provider", "dtype")
    return None


def sample_inputs(model: Any) -> list[np.ndarray]:
    """One input per graph input of the ONNX ``model``: small normal floats, integer zeros,
    ``False``; symbolic dimensions as 1."""
    from onnx import helper

    rng = np.random.default_rng(0)
    feeds = []
    for graph_input in model.graph.input:
        tensor_type = graph_input.type.tensor_type
        dtype = helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor_type.shape.dim]
        if np.issubdtype(dtype, np.floating):
            feeds.append((rng.standard_normal(shape) * 0.5).astype(dtype))
        else:
            feeds.append(np.zeros(shape, dtype))
    return feeds


def _values_are_safe_to_invent(node: NodeView) -> bool:
    """Whether a sample run may invent the node's inputs: not when a non-constant input is a
    shape or an index (OpenVINO does not check a Reshape's shape against its input at run time;
    an invented one corrupted its memory in testing)."""
    positions = INDEX_INPUTS.get(node.op_type, ()) if node.domain == "ai.onnx" else ()
    return not any(i in positions and v is not None and not v.is_constant
                   for i, v in enumerate(node.inputs))


def probe(node: NodeView) -> Verdict:
    """Ask OpenVINO whether it computes ``node``: read, query, compile, run once on a sample input
    where that is safe, and check that its outputs have the declared element types."""
    op = node.qualified_op
    early = precheck(node)
    if early is not None:
        return early
    model = node_model(node)
    try:
        ov_model = read_model(model.SerializeToString())
        placed = core().query_model(ov_model, DEVICE)
        missing = [op_.get_friendly_name() for op_ in ov_model.get_ordered_ops()
                   if op_.get_type_name() not in _NOT_PLACED
                   and op_.get_friendly_name() not in placed]
        if missing:
            return Verdict(f"{op}: OpenVINO's {DEVICE} plugin does not support "
                           f"{', '.join(missing[:3])} (query_model)", "op")
        compiled = compile_model(ov_model, 1)
        declared = [v for v in node.outputs if v is not None]
        returned = [out.get_element_type().to_dtype() for out in compiled.outputs]
        if _values_are_safe_to_invent(node):
            results = compiled(sample_inputs(model))
            returned = [np.asarray(results[k]).dtype for k in range(len(declared))]
    except Exception as error:  # OpenVINO raises RuntimeError and its own types alike
        message = trimmed_message(error)
        return Verdict(f"{op}: OpenVINO: {message}", reason_code(message))
    for k, (value, got) in enumerate(zip(declared, returned, strict=False)):
        if value.dtype is not None and got != value.dtype.numpy:
            return Verdict(f"{op}: OpenVINO returns {got} for output {k}, declared "
                           f"{value.dtype.name}", "dtype")
    return Verdict()


PROBE_VERSION = 1  # bump when what a probe asks changes: verdicts stored before are not read


class VerdictCache:
    """Verdicts by op signature, cleared when it reaches ``limit`` entries, and kept on disk
    (per OpenVINO version) for the next process."""

    def __init__(self, limit: int = 4096):
        self.limit = limit
        self.verdicts: dict[Hashable, Verdict] = {}
        self.stores = CacheDirStores("openvino-verdicts", version(), PROBE_VERSION)

    def verdict(self, node: NodeView, opset: int | None) -> Verdict:
        key = signature(node, opset)
        found = self.verdicts.get(key)
        if found is None:
            store = self.stores.current()
            stored = store.get(key)
            if stored is not None:
                found = Verdict(str(stored.get("reason", "")), str(stored.get("code", "")))
            else:
                found = probe(node)
                store.put(key, {"reason": found.reason, "code": found.code})
            if len(self.verdicts) >= self.limit:
                self.verdicts.clear()
            self.verdicts[key] = found
        return found
