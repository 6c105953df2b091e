"""The EP author kit without pytest: one-node and custom-op models, random feeds, a provider's
outputs compared with onnx's reference evaluator or a numpy function, the layout conversions a
session holds (for a provider computing in NHWC), and the checks of its kernels' prepacked
constants and workspaces."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

# The tolerance relative to an output's scale (its largest magnitude), by dtype.
RTOL = {"float16": 1e-3, "bfloat16": 1e-2, "float32": 1e-5, "float64": 1e-9}
DEFAULT_RTOL = 1e-5


def _value_info(name: str, spec: Any) -> onnx.ValueInfoProto:
    if isinstance(spec, np.ndarray):
        return helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(spec.dtype), spec.shape)
    dtype, shape = spec
    elem = dtype if isinstance(dtype, int) else helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return helper.make_tensor_value_info(name, elem, shape)


def one_node_model(
    op_type: str,
    inputs: Mapping[str, Any],
    outputs: Sequence[str] | Mapping[str, Any] = ("y",),
    *,
    domain: str = "",
    opset: int = 17,
    domain_version: int = 1,
    initializers: Sequence[str] = (),
    name: str = "node",
    **attrs: Any,
) -> onnx.ModelProto:
    """A model of one node ``op_type`` named ``name``.

    ``inputs``: node input name -> a sample array (its dtype and shape are declared), a
    ``(dtype, shape)`` pair, or ``None`` for an omitted optional input; in the node's input order.
    Names in ``initializers`` become initializers holding their array. ``outputs``: names, whose
    types onnx's shape inference fills where it knows the op (a custom op's stay undeclared), or
    name -> ``(dtype, shape)`` to declare them. ``domain`` other than ``""`` is imported at
    ``domain_version``; ``attrs`` are the node's attributes.
    """
    node_inputs = [n if spec is not None else "" for n, spec in inputs.items()]
    graph_inputs, inits = [], []
    for n, spec in inputs.items():
        if spec is None:
            continue
        if n in initializers:
            if not isinstance(spec, np.ndarray):
                raise TypeError(f"initializer {n!r} needs an array, got {type(spec).__name__}")
            inits.append(numpy_helper.from_array(spec, n))
        else:
            graph_inputs.append(_value_info(n, spec))
    if isinstance(outputs, Mapping):
        out_names = list(outputs)
        graph_outputs = [_value_info(n, spec) for n, spec in outputs.items()]
    else:
        out_names = list(outputs)
        graph_outputs = [onnx.ValueInfoProto(name=n) for n in out_names]
    node = helper.make_node(op_type, node_inputs, out_names, name=name, domain=domain, **attrs)
    graph = helper.make_graph([node], f"one_{op_type}", graph_inputs, graph_outputs,
                              initializer=inits)
    opsets = [helper.make_opsetid("", opset)]
    if domain not in ("", "ai.onnx"):
        opsets.append(helper.make_opsetid(domain, domain_version))
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = min(model.ir_version, 10)
    if not isinstance(outputs, Mapping):
        inferred = onnx.shape_inference.infer_shapes(model)
        for out, typed in zip(model.graph.output, inferred.graph.output, strict=True):
            if typed.type.WhichOneof("value"):
                out.CopyFrom(typed)
    return model


def custom_op_model(
    domain: str,
    op_type: str,
    inputs: Mapping[str, Any],
    outputs: Sequence[str] | Mapping[str, Any] = ("y",),
    *,
    version: int = 1,
    opset: int = 17,
    name: str = "node",
    **attrs: Any,
) -> onnx.ModelProto:
    """A model of one custom-domain node: ``domain`` imported at ``version``; the outputs'
    types undeclared unless ``outputs`` maps names to ``(dtype, shape)``."""
    if domain in ("", "ai.onnx"):
        raise ValueError(f"custom_op_model: {domain!r} is the standard domain; use one_node_model")
    return one_node_model(op_type, inputs, outputs, domain=domain, opset=opset,
                          domain_version=version, name=name, **attrs)


def random_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """A value for each graph input that is not an initializer: standard normal floats, integers
    in [-3, 3], random booleans; symbolic dims are 1."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim)
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if dtype == np.bool_:
            feeds[vi.name] = rng.random(shape) < 0.5
        elif np.issubdtype(dtype, np.integer):
            low = 0 if np.issubdtype(dtype, np.unsignedinteger) else -3
            feeds[vi.name] = rng.integers(low, 4, shape).astype(dtype)
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def reference_outputs(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    reference: Callable[..., Any] | None = None,
) -> list[np.ndarray]:
    """The expected outputs: ``reference(*inputs)`` (graph input order) when given, else onnx's
    ``ReferenceEvaluator``, which knows only onnx's own domains."""
    if reference is not None:
        names = [vi.name for vi in model.graph.input if vi.name in feeds]
        result = reference(*(feeds[n] for n in names))
        return list(result) if isinstance(result, tuple | list) else [result]
    custom = sorted({n.domain for n in model.graph.node}
                    - {"", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training"})
    if custom:
        raise ValueError(
            f"onnx's reference evaluator cannot run domain(s) {', '.join(custom)}: give "
            "reference=, a numpy function of the inputs that returns the expected outputs")
    from onnx.reference import ReferenceEvaluator

    return list(ReferenceEvaluator(model).run(None, dict(feeds)))


def output_mismatch(name: str, expected: Any, actual: Any, rtol: float | None,
                    atol: float) -> str:
    """Why ``actual`` is not ``expected`` within ``atol + rtol * scale`` (scale: the largest
    finite magnitude of ``expected``), or ``""``. Dtype and shape must match exactly; integers,
    booleans and strings exactly; NaN and infinities where the expected ones are."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    if actual.dtype != expected.dtype:
        return f"output {name!r}: dtype {actual.dtype}, expected {expected.dtype}"
    if actual.shape != expected.shape:
        return f"output {name!r}: shape {actual.shape}, expected {expected.shape}"
    if expected.dtype.kind not in "fc" and expected.dtype.name != "bfloat16":
        differ = int(np.sum(actual != expected))
        return f"output {name!r}: {differ} of {expected.size} values differ" if differ else ""
    rtol = RTOL.get(expected.dtype.name, DEFAULT_RTOL) if rtol is None else rtol
    e, a = expected.astype(np.float64), actual.astype(np.float64)
    finite = np.isfinite(e)
    scale = float(np.max(np.abs(e[finite]))) if finite.any() else 0.0
    bound = atol + rtol * scale
    infinite = np.isinf(e)
    if not (np.array_equal(np.isnan(a), np.isnan(e))
            and np.array_equal(a[infinite], e[infinite]) and np.isfinite(a[finite]).all()):
        return (f"output {name!r}: NaN or infinity where the expected output has none, "
                "or the reverse")
    with np.errstate(invalid="ignore"):
        diff = np.where(finite, np.abs(a - e), 0.0)
    diff = np.where(np.isnan(diff), np.inf, diff)
    if diff.size and float(diff.max()) > bound:
        at = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape))
        return (f"output {name!r}: max abs difference {float(diff.max()):.3g} at {at} "
                f"(got {a[at]:.6g}, expected {e[at]:.6g}) exceeds {bound:.3g} = atol {atol:g} + "
                f"rtol {rtol:g} x scale {scale:.3g}")
    return ""


def layout_conversions(session: Any) -> list[tuple[str, str]]:
    """The layout conversions a session's placement holds, as ``(tensor, "NCHW->NHWC")`` in
    node order: for a provider that computes in a layout of its own, the proof that its kernels
    ran in it (each graph input and output converted at the boundary) and were fed correctly."""
    return [(t.tensor, t.layouts) for t in session.placement.transfers if t.converts]


def same_bits(expected: Any, actual: Any) -> bool:
    """Whether two outputs are equal bit for bit: dtype, shape and bytes (-0.0 is not 0.0, NaN
    payloads count); sequences item by item; strings and objects by value."""
    if isinstance(expected, list | tuple) or isinstance(actual, list | tuple):
        return (isinstance(expected, list | tuple) and isinstance(actual, list | tuple)
                and len(expected) == len(actual)
                and all(same_bits(e, a) for e, a in zip(expected, actual, strict=True)))
    expected, actual = np.asarray(expected), np.asarray(actual)
    if expected.dtype != actual.dtype or expected.shape != actual.shape:
        return False
    if expected.dtype.hasobject:
        return bool(np.array_equal(expected, actual))
    return np.ascontiguousarray(expected).tobytes() == np.ascontiguousarray(actual).tobytes()


def kernel_contract_problems(model: Any, providers: Sequence[str],
                             feeds: Mapping[str, Any] | None = None,
                             **session_args: Any) -> list[str]:
    """What in ``providers``' kernels breaks the contract of prepacked constants and workspaces
    on ``model``, as sentences (``[]``: nothing). Every output must be the same bits in a
    session's first run, in its second run (per-run workspaces then hold the first run's data),
    and in two sessions with ``share_prepacked=True``, the second adopting what the first
    offered; and each state the first offered must be adopted by the second."""
    from ep_host import InferenceSession

    data = model.SerializeToString() if hasattr(model, "SerializeToString") else model
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load_from_string(data)
    feeds = dict(random_feeds(proto) if feeds is None else feeds)
    alone = InferenceSession(data, providers=list(providers), **session_args)
    names = [o.name for o in alone.get_outputs()]
    want = alone.run(None, feeds)
    first = InferenceSession(data, providers=list(providers), share_prepacked=True,
                             **session_args)
    second = InferenceSession(data, providers=list(providers), share_prepacked=True,
                              **session_args)
    problems = []
    for label, got in (
            ("the second run of a session (its workspaces hold the first run's data)",
             alone.run(None, feeds)),
            ("a session sharing prepacked constants", first.run(None, feeds)),
            ("a second session adopting them", second.run(None, feeds)),
            ("the first sharing session, after the second ran", first.run(None, feeds))):
        for name, w, g in zip(names, want, got, strict=True):
            if not same_bits(w, g):
                problems.append(f"output {name!r} of {label} differs from a session's first "
                                "run without sharing")
    adopted = {(u.node, u.key) for u in second.prepacked if u.adopted}
    for use in first.prepacked:
        if (use.node, use.key) not in adopted:
            problems.append(f"node {use.node!r} on {use.provider!r}: the state offered under "
                            f"packing key {use.key!r} was not adopted by a second session of "
                            "the same model (does the key name something that differs between "
                            "sessions?)")
    return problems
