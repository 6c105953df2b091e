"""Measured node times: each node of a model timed alone on each host provider that claims it
(``ep-host calibrate --model``), kept on disk by provider and node signature (op, attributes,
input and output types and shapes), and read by the capability walk in place of the estimate.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

import numpy as np

from ep_host.cost import Cost
from ep_host.errors import describe_exception
from ep_host.graph import NodeView, ValueView, laid_out
from ep_host.match import KernelMatch
from ep_host.stored import AnswerStore, CacheDirStores

SMALL_CONSTANT = 64  # integer constants up to this size (shapes, axes) go into the signature
RUN_BUDGET_S = 0.2  # timing one node stops after this much time (after at least one run)
MAX_RUNS = 7


def _frozen(value: Any) -> Hashable:
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value if isinstance(value, str | int | float | bytes | None) else repr(value)


def _value_key(value: ValueView | None) -> Hashable:
    if value is None:
        return None
    dtype = value.dtype.name if value.dtype is not None else None
    shape = tuple(value.shape) if value.shape is not None else None
    data = None
    if value.is_constant and value.is_static and value.dtype is not None:
        count = int(np.prod(value.shape, dtype=np.int64))
        numpy_dtype = value.dtype.numpy
        if count <= SMALL_CONSTANT and numpy_dtype is not None and numpy_dtype.kind in "iub":
            data = _frozen(value.value)
    return (value.kind, dtype, shape, value.is_constant, data)


def node_signature(node: NodeView) -> Hashable | None:
    """What a node's time depends on; ``None`` for a node that is not timed alone (subgraphs,
    a value of unknown or symbolic shape)."""
    if node.has_subgraphs:
        return None
    values = [v for v in (*node.inputs, *node.outputs) if v is not None]
    if any(v.kind != "tensor" or not v.is_static or v.dtype is None for v in values):
        return None
    return (node.domain, node.op_type, node.since_version,
            tuple(_value_key(v) for v in node.inputs),
            tuple(_value_key(v) for v in node.outputs),
            tuple(sorted((k, _frozen(v)) for k, v in node.attributes.items())))


STORES = CacheDirStores("node-times")


def store() -> AnswerStore:
    """The measured node times of this machine (under the cache directory)."""
    return STORES.current()


def provider_key(provider: str, version: str) -> tuple[str, str]:
    return (provider, version)


@dataclass(frozen=True)
class NodeTime:
    """One node timed on one provider: ``measured_us`` (best run, the provider's per-partition
    launch taken off), or ``skipped`` saying why it was not timed."""

    node: str
    provider: str
    estimated_us: float
    measured_us: float | None = None
    skipped: str = ""


def sample_inputs(node: NodeView, rng: np.random.Generator) -> list[Any]:
    """Inputs to time ``node`` with: constants as they are, floats random in [-1, 1), integers
    zero (a valid index, axis or count), booleans false."""
    out: list[Any] = []
    for value in node.inputs:
        if value is None:
            out.append(None)
        elif value.is_constant:
            out.append(value.value)
        else:
            dtype = np.dtype(value.dtype.numpy)
            if dtype.kind in "fc":
                out.append((rng.random(value.shape) * 2 - 1).astype(dtype))
            else:
                out.append(np.zeros(value.shape, dtype=dtype))
    return out


def time_kernel(run: Callable[[], Any]) -> float:
    """Seconds of the best of up to ``MAX_RUNS`` runs after a warm-up, within ``RUN_BUDGET_S``."""
    run()
    best, spent = float("inf"), 0.0
    for _ in range(MAX_RUNS):
        t0 = time.perf_counter()
        run()
        took = time.perf_counter() - t0
        best, spent = min(best, took), spent + took
        if spent > RUN_BUDGET_S:
            break
    return best


def measure_node(host: Any, node: NodeView, provider: str, context: Any,
                 launch_us: float, rng: np.random.Generator) -> float:
    """Microseconds ``provider``'s kernel for ``node`` takes alone on one thread, less its
    per-partition launch; raises what building or running the kernel raised. ``node`` as the
    kernel sees it (``graph.laid_out``): a kernel computing in NHWC is timed on NHWC inputs."""
    context = replace(context, intra_op_num_threads=1)
    kernel = host.call(provider, "ep_host_create_kernel", node=node, context=context)
    inputs = sample_inputs(node, rng)
    kernel.prepare({i: v for i, (v, value) in enumerate(zip(inputs, node.inputs, strict=True))
                    if value is not None and value.is_constant})
    seconds = time_kernel(lambda: materialized(kernel.run(*inputs)))
    return max(seconds * 1e6 - launch_us, 0.0)


def materialized(outputs: Any) -> Any:
    """``outputs`` with every strided numpy view made contiguous: a kernel that returns a
    transposed view has not moved its data yet, and whoever reads it next pays for that; the
    node's time includes it."""
    if isinstance(outputs, tuple | list):
        return [np.ascontiguousarray(o) if isinstance(o, np.ndarray) else o for o in outputs]
    return outputs


def measure(host: Any, table: Any, providers: Sequence[str] | None = None,
            on_node: Callable[[NodeTime], None] | None = None) -> list[NodeTime]:
    """Time every node of a capability ``table`` on every host provider in ``providers`` (all
    of the table's by default) that claims it, and store the times. A node already timed on this
    machine is timed again (the store keeps the latest); nodes of one signature (a model's
    repeated layers) are timed once per call."""
    rng = np.random.default_rng(0)
    kept = store()
    results: list[NodeTime] = []
    timed: dict[Hashable, float] = {}
    for provider in providers or table.providers:
        record = host.records[provider]
        if record.status != "available" or record.info is None or not record.info.device.is_host:
            continue
        key = provider_key(provider, record.info.version)
        context = table.contexts[provider]
        launch_us = table.partition_launch_us.get(provider, 0.0)
        for node in table.nodes:
            answer = table.answers[node.name][provider]
            if not answer.is_supported:
                continue
            signature = node_signature(node)
            if signature is None:
                result = NodeTime(node.name, provider, answer.cost.total_us,
                                  skipped="subgraphs or shapes not static")
            elif (key, signature) in timed:
                result = NodeTime(node.name, provider, answer.cost.total_us,
                                  timed[(key, signature)])
            else:
                try:
                    us = measure_node(host, laid_out(node, answer), provider, context,
                                      launch_us, rng)
                except Exception as exc:  # a kernel that cannot run on sample data
                    result = NodeTime(node.name, provider, answer.cost.total_us,
                                      skipped=describe_exception(exc).splitlines()[0][:200])
                else:
                    kept.put((key, signature), {"us": us})
                    timed[(key, signature)] = us
                    result = NodeTime(node.name, provider, answer.cost.total_us, us)
            results.append(result)
            if on_node is not None:
                on_node(result)
    return results


def measured_answer(answer: KernelMatch, us: float) -> KernelMatch:
    """``answer`` with its cost replaced by the measured time (its bytes and flops kept)."""
    cost = answer.cost
    return replace(answer, cost=Cost(compute_us=us, bytes_moved=cost.bytes_moved,
                                     flops=cost.flops))


def apply(host: Any, table: Any, nodes: Iterable[NodeView]) -> int:
    """Replace the estimate of every (node, provider) answer this machine has a measured time
    for; returns how many were replaced. Nothing is read when no time was ever stored, or when
    ``EP_HOST_NODE_TIMES=0`` asks for the providers' estimates alone."""
    if os.environ.get("EP_HOST_NODE_TIMES", "1") == "0":
        return 0
    kept = store()
    if not kept.exists():
        return 0
    keys = {}
    for provider in table.providers:
        record = host.records[provider]
        if record.status == "available" and record.info is not None:
            keys[provider] = provider_key(provider, record.info.version)
    replaced = 0
    for node in nodes:
        row = table.answers.get(node.name)
        if row is None:
            continue
        signature = None
        measured = {}
        for provider, key in keys.items():
            answer = row.get(provider)
            if answer is None or not answer.is_supported:
                continue
            if signature is None:
                signature = node_signature(node)
                if signature is None:
                    break
            found = kept.get((key, signature))
            if found is not None and isinstance(found.get("us"), int | float):
                measured[provider] = measured_answer(answer, float(found["us"]))
        if measured:  # rows may be shared by nodes of equal answers: this node gets its own
            table.answers[node.name] = MappingProxyType({**row, **measured})
            table.revision += 1
            replaced += len(measured)
    return replaced
