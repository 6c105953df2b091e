"""Sequences (Python lists of arrays) and optionals (a value or ``None``)."""

from __future__ import annotations

from typing import Any

from ep_host import NodeView, require
from ep_host.kernels.control_flow import BodyKernel
from ep_host.kernels.registry import kernel

NO_FLOPS = {"flops": lambda node: 0, "bytes": lambda node: 0}


def _position(position: Any, length: int, *, inserting: bool = False) -> int:
    p = int(position.reshape(()).item())
    limit = length if inserting else length - 1
    if not -length <= p <= limit:
        raise IndexError(f"position {p} out of range for a sequence of {length}")
    return p + length if p < 0 else p


@kernel("SequenceEmpty", 11, dtypes=None, containers=True, **NO_FLOPS)
def sequence_empty(xp, *, dtype=1):
    return []


@kernel("SequenceConstruct", 11, dtypes=None, containers=True, **NO_FLOPS)
def sequence_construct(xp, *tensors):
    return list(tensors)


@kernel("SequenceInsert", 11, dtypes=None, containers=True, host_inputs=(2,), **NO_FLOPS)
def sequence_insert(xp, seq, tensor, position=None):
    out = list(seq)
    out.insert(len(out) if position is None else _position(position, len(out), inserting=True),
               tensor)
    return out


@kernel("SequenceAt", 11, dtypes=None, containers=True, host_inputs=(1,), **NO_FLOPS)
def sequence_at(xp, seq, position):
    return seq[_position(position, len(seq))]


@kernel("SequenceErase", 11, dtypes=None, containers=True, host_inputs=(1,), **NO_FLOPS)
def sequence_erase(xp, seq, position=None):
    out = list(seq)
    del out[-1 if position is None else _position(position, len(out))]
    return out


@kernel("SequenceLength", 11, dtypes=None, containers=True, **NO_FLOPS)
def sequence_length(xp, seq):
    return xp.asarray(len(seq), dtype=xp.int64)


@kernel("ConcatFromSequence", 11, dtypes=None, containers=True)
def concat_from_sequence(xp, seq, *, axis, new_axis=0):
    if new_axis:
        return xp.stack(seq, axis=axis)
    return xp.concatenate(seq, axis=axis)


def _split_sizes(split: Any, length: int) -> list[int]:
    if split.ndim == 0:
        size = int(split.item())
        sizes = [size] * (length // size)
        return sizes + ([length % size] if length % size else [])
    return [int(s) for s in split.tolist()]


@kernel("SplitToSequence", 11, 24, dtypes=None, containers=True, host_inputs=(1,))
def split_to_sequence(xp, x, split=None, *, axis=0, keepdims=1):
    axis = axis % x.ndim
    length = x.shape[axis]
    if split is None:
        parts = [xp.take(x, xp.asarray([i]), axis=axis) for i in range(length)]
        return [xp.squeeze(p, axis=axis) for p in parts] if not keepdims else parts
    sizes = _split_sizes(split, length)
    if sum(sizes) != length:
        raise ValueError(f"split sizes {sizes} do not add up to {length}")
    out, start = [], 0
    for size in sizes:
        index = [slice(None)] * x.ndim
        index[axis] = slice(start, start + size)
        out.append(x[tuple(index)])
        start += size
    return out


# ---------------------------------------------------------------------------------------------
# Optionals
# ---------------------------------------------------------------------------------------------


def _check_optional(node: NodeView, provider: str) -> None:
    require(node.inputs and node.inputs[0] is not None or "type" in node.attributes,
            "Optional: needs an input or a 'type' attribute", code="attribute")


@kernel("Optional", 15, 28, dtypes=None, containers=True, check=_check_optional, **NO_FLOPS)
def optional(xp, x=None, *, type=None):
    return x


@kernel("OptionalHasElement", 15, 18, 28, dtypes=None, containers=True, **NO_FLOPS)
def optional_has_element(xp, x=None):
    return xp.asarray(x is not None)


@kernel("OptionalGetElement", 15, 18, 28, dtypes=None, containers=True, **NO_FLOPS)
def optional_get_element(xp, x):
    if x is None:
        raise ValueError("OptionalGetElement on an empty optional")
    return x


# ---------------------------------------------------------------------------------------------
# SequenceMap: a body run per element
# ---------------------------------------------------------------------------------------------


class SequenceMapKernel(BodyKernel):
    def run(self, seq: Any, *extra: Any, scope: Any = None) -> list[Any]:
        body = self.bodies["body"]
        n_out = len(self.node.outputs)
        results: list[list[Any]] = [[] for _ in range(n_out)]
        for i in range(len(seq)):
            args = [seq[i]] + [e[i] if isinstance(e, list) else e for e in extra]
            for k, value in enumerate(body.run(args, scope)):
                results[k].append(value)
        return tuple(results)


@kernel("SequenceMap", 17, dtypes=None, kernel_class=SequenceMapKernel, subgraphs=True)
def sequence_map(xp, seq, *extra, body=None):
    raise NotImplementedError  # SequenceMapKernel runs it

