"""Which shapes onnx's shape inference may get wrong, so that a kernel is not held to them: the
outputs of pools with ``ceil_mode``, of Squeeze with empty axes, of ops whose input values set
their sizes, and everything computed from those."""

from __future__ import annotations

from collections.abc import Iterable

from ep_host.graph import NodeView

POOLS_WITH_CEIL_MODE = frozenset({"MaxPool", "AveragePool", "LpPool"})


def shapes_inference_gets_wrong(nodes: Iterable[NodeView]) -> tuple[set[str], set[str]]:
    """Values whose static shape onnx's shape inference may get wrong, as (wrong dims, wrong
    rank): a kernel is held only to the rank of the first and not at all to the shape of the
    second. Dims: outputs of a pool with ``ceil_mode=1`` (inference counts a last window that
    starts in the padding; onnxruntime, like the kernels, drops it). Rank: a Squeeze with an
    empty ``axes`` (inference squeezes nothing; onnxruntime squeezes every 1). Every value
    computed from one of them follows it. Dims too: outputs whose size the data sets
    (``sized_by_data``), where a static shape can only come from the model's declaration, which
    onnxruntime too takes as a hint. ``nodes`` in topological order."""
    dims: set[str] = set()
    rank: set[str] = set()
    for node in nodes:
        read = {v.name for v in node.inputs if v is not None}
        outputs = [v.name for v in node.outputs if v is not None]
        if (read & rank) or _empty_squeeze(node) or _rank_set_by_data(node):
            rank.update(outputs)
        elif (read & dims) or (node.op_type in POOLS_WITH_CEIL_MODE and node.domain == "ai.onnx"
                               and node.attributes.get("ceil_mode")) or sized_by_data(node):
            dims.update(outputs)
    return dims, rank


# Inputs whose values (not shapes) set an op's output sizes; ALL_INPUTS: any input may.
ALL_INPUTS = None
SIZE_INPUTS: dict[str, tuple[int, ...] | None] = {
    "TopK": (1,), "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Range": (0, 1, 2),
    "ConstantOfShape": (0,), "Slice": (1, 2, 3, 4), "Pad": (1,), "OneHot": (1,),
    "Resize": (1, 2, 3), "Upsample": (1,), "CenterCropPad": (1,), "Split": (1,),
    "NonZero": ALL_INPUTS, "Unique": ALL_INPUTS, "Compress": ALL_INPUTS,
    "NonMaxSuppression": ALL_INPUTS, "Loop": ALL_INPUTS, "If": ALL_INPUTS,
    "StringSplit": ALL_INPUTS, "RegexFullMatch": ALL_INPUTS,
}
RANK_INPUTS = {"Squeeze": (1,), "Unsqueeze": (1,)}


def sized_by_data(node: NodeView) -> bool:
    """Whether the values of ``node``'s inputs (not only their shapes) set its output sizes: an
    op of ``SIZE_INPUTS`` whose size input is not a constant."""
    if node.domain != "ai.onnx" or node.op_type not in SIZE_INPUTS:
        return False
    positions = SIZE_INPUTS[node.op_type]
    if positions is ALL_INPUTS:
        return True
    return any(p < len(node.inputs) and node.inputs[p] is not None
               and not node.inputs[p].is_constant for p in positions)


def _rank_set_by_data(node: NodeView) -> bool:
    if node.domain != "ai.onnx" or node.op_type not in RANK_INPUTS:
        return False
    return any(p < len(node.inputs) and node.inputs[p] is not None
               and not node.inputs[p].is_constant for p in RANK_INPUTS[node.op_type])


def _empty_squeeze(node: NodeView) -> bool:
    if node.op_type != "Squeeze" or node.domain != "ai.onnx":
        return False
    if node.attributes.get("axes") is not None:
        return len(node.attributes["axes"]) == 0
    axes = node.inputs[1] if len(node.inputs) > 1 else None
    return axes is not None and axes.is_constant and axes.value is not None and (
        axes.value.size == 0)
