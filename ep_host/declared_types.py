"""Output types providers declare for custom ops (``ep_host_infer_types``), written into the
model so that shape inference carries them to the nodes downstream."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx

from ep_host.capability import provider_context
from ep_host.discovery import Host
from ep_host.dtypes import DType, dtype
from ep_host.errors import HostError, ProviderError, describe_exception
from ep_host.graph import NodeView
from ep_host.loading import Model

HOOK = "ep_host_infer_types"
STANDARD_DOMAINS = frozenset({"ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training"})
MAX_ROUNDS = 8  # a chain of custom ops is declared one link per round


def _untyped_custom_nodes(model: Model, done: set[str]) -> list[NodeView]:
    return [n for n in model.graph.nodes
            if n.domain not in STANDARD_DOMAINS and n.name not in done
            and any(o is not None and o.dtype is None for o in n.outputs)]


def checked_declaration(answer: Any, node: NodeView) -> list[tuple[DType, Any]]:
    """The answer as ``(DType, shape)`` per output; ``ValueError`` saying what is wrong."""
    if not isinstance(answer, list | tuple) or len(answer) != len(node.outputs):
        raise ValueError(f"expected a list of {len(node.outputs)} (dtype, shape) pairs, one per "
                         f"output, got {type(answer).__name__}"
                         + (f" of {len(answer)}" if isinstance(answer, list | tuple) else ""))
    declared = []
    for i, pair in enumerate(answer):
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise ValueError(f"output {i}: expected a (dtype, shape) pair, got {pair!r}")
        dt, shape = pair
        try:
            dt = dtype(dt)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"output {i}: unknown dtype {dt!r}") from exc
        if shape is not None:
            if not isinstance(shape, list | tuple) or not all(
                    d is None or isinstance(d, str) or (isinstance(d, int) and d >= 0)
                    for d in shape):
                raise ValueError(f"output {i}: shape must be a tuple of ints >= 0, strings and "
                                 f"None, or None, got {shape!r}")
            shape = tuple(shape)
        declared.append((dt, shape))
    return declared


def declare_output_types(host: Host, model: Model, providers: Sequence[str]) -> Model:
    """``model`` with the output types that ``providers`` declare for custom-domain nodes whose
    outputs shape inference left untyped, inference run again from them; ``model`` itself when
    no such node exists or no provider declares anything."""
    asked = [host.records[p] for p in providers
             if host.records[p].available and HOOK in host.records[p].hooks]
    if not asked:
        return model
    done: set[str] = set()
    for _ in range(MAX_ROUNDS):
        nodes = _untyped_custom_nodes(model, done)
        if not nodes:
            break
        declared: dict[str, tuple[DType, Any]] = {}
        warnings: list[str] = []
        for node in nodes:
            done.add(node.name)
            for record in asked:
                context = provider_context(model, record, {})
                try:
                    answer = host.call(record.name, HOOK, node=node, context=context)
                    if answer is None:
                        continue
                    pairs = checked_declaration(answer, node)
                except HostError:
                    raise
                except Exception as exc:
                    message = (f"{model.label}: provider {record.name!r} failed to declare the "
                               f"output types of node {node.name!r} ({node.qualified_op}): "
                               f"{describe_exception(exc)}")
                    if host.strict:
                        raise ProviderError(message) from exc
                    warnings.append(message)
                    continue
                for out, pair in zip(node.outputs, pairs, strict=True):
                    if out is not None and out.dtype is None:
                        declared[out.name] = pair
                break
        if not declared:
            model.warnings.extend(warnings)
            break
        model = _with_types(model, declared, warnings)
    return model


def _with_types(model: Model, declared: dict[str, tuple[DType, Any]],
                warnings: list[str]) -> Model:
    proto = onnx.ModelProto()
    proto.CopyFrom(model.proto)
    graph = proto.graph
    for out in graph.output:
        if out.name in declared and not out.type.WhichOneof("value"):
            dt, shape = declared.pop(out.name)
            out.CopyFrom(onnx.helper.make_tensor_value_info(out.name, dt.code, shape))
    graph.value_info.extend(onnx.helper.make_tensor_value_info(name, dt.code, shape)
                            for name, (dt, shape) in declared.items())
    typed = Model(proto, path=model.path, base_dir=model.base_dir, held=model.held)
    typed.label = model.label
    typed.warnings[:0] = [*model.warnings, *warnings]
    return typed
