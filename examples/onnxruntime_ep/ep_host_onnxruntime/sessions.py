"""Kernels that run in onnxruntime: one node as a one-node session (the per-node path and the
fallback of a failed compile), and a partition compiled into one session of its subgraph.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ep_host import Kernel, KernelError, NodeView, PartitionView, ProviderContext, node_model
from ep_host_onnxruntime import runtime


def thread_count(context: ProviderContext) -> int:
    """The provider option ``intra_op_num_threads``, else the session's thread count, else 1."""
    return int(context.options.get("intra_op_num_threads") or context.intra_op_num_threads or 1)


def _compile(model_bytes: bytes, what: str, threads: int) -> Any:
    try:
        return runtime.session(model_bytes, threads=threads, optimize=True)
    except Exception as error:  # onnxruntime's own exception types
        raise KernelError(f"onnxruntime {runtime.version()} could not compile {what}: "
                          f"{runtime.trimmed(error)}") from error


class NodeSessionKernel(Kernel):
    """One node in a one-node onnxruntime session. Constant inputs are the session's
    initializers; ``run`` feeds the others by name and returns every output (``None`` for an
    omitted optional one). onnxruntime's ``run`` is safe to call from several threads."""

    def __init__(self, node: NodeView, context: ProviderContext):
        self.name = node.name or node.op_type
        self.session = _compile(node_model(node).SerializeToString(),
                                f"node {self.name!r} ({node.qualified_op})", thread_count(context))
        seen: set[str] = set()
        self.feeds: list[tuple[str, int]] = []
        for index, value in enumerate(node.inputs):
            if value is not None and not value.is_constant and value.name not in seen:
                seen.add(value.name)
                self.feeds.append((value.name, index))
        self.output_names = [v.name for v in node.outputs if v is not None]
        self.output_slots = [v is not None for v in node.outputs]

    def run(self, *inputs: Any) -> Sequence[Any]:
        computed = iter(self.session.run(
            self.output_names, {name: inputs[index] for name, index in self.feeds}))
        return [next(computed) if present else None for present in self.output_slots]

    def __repr__(self) -> str:
        return f"NodeSessionKernel({self.name})"


class PartitionSessionKernel(Kernel):
    """A partition compiled into one onnxruntime session (graph optimizations on, so it fuses
    across the group's nodes). ``run`` takes ``partition.inputs`` in order and returns
    ``partition.outputs`` in order."""

    def __init__(self, partition: PartitionView, context: ProviderContext):
        self.name = partition.name
        members = ", ".join(n.name or n.op_type for n in partition.nodes[:8])
        more = f" and {len(partition.nodes) - 8} more" if len(partition.nodes) > 8 else ""
        self.session = _compile(partition.to_model().SerializeToString(),
                                f"partition {partition.name!r} ({members}{more})",
                                thread_count(context))
        self.input_names = [v.name for v in partition.inputs]
        self.output_names = [v.name for v in partition.outputs]

    def run(self, *inputs: Any) -> Sequence[Any]:
        return self.session.run(self.output_names, dict(zip(self.input_names, inputs,
                                                            strict=True)))

    def __repr__(self) -> str:
        return f"PartitionSessionKernel({self.name}, {len(self.output_names)} outputs)"
