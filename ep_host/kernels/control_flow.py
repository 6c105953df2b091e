"""If, Loop and Scan: their bodies are placed and run by the host (``context.subgraphs``), so
body nodes go through the same providers, placement and kernels as the main graph."""

from __future__ import annotations

from typing import Any

from ep_host import Kernel, ModelValidationError, NodeView, ProviderContext, require
from ep_host.kernels.reduce import reduce_sum_square
from ep_host.kernels.registry import kernel


class BodyKernel(Kernel):
    """A kernel that runs compiled bodies; the host hands it outer values as ``scope``."""

    def __init__(self, xp: Any, node: NodeView, context: ProviderContext, **attrs: Any):
        require(context is not None and context.subgraphs is not None,
                "{}: needs the host to compile its bodies", node.op_type, code="fault")
        self.xp = xp
        self.node = node
        self.attrs = attrs
        self.bodies = {name: context.subgraphs.compile(g) for name, g in node.subgraphs.items()}


def _scalar(x: Any) -> Any:
    return None if x is None else x.reshape(()).item() if hasattr(x, "reshape") else x


class IfKernel(BodyKernel):
    def run(self, cond: Any, scope: Any = None) -> list[Any]:
        branch = "then_branch" if bool(_scalar(cond)) else "else_branch"
        return self.bodies[branch].run([], scope)


class LoopKernel(BodyKernel):
    def run(self, trip_count: Any, cond: Any, *carried: Any, scope: Any = None) -> list[Any]:
        xp = self.xp
        body = self.bodies["body"]
        n_carried = len(carried)
        limit = _scalar(trip_count)
        keep_going = True if cond is None else bool(_scalar(cond))
        state = list(carried)
        scans: list[list[Any]] = [[] for _ in range(len(self.node.outputs) - n_carried)]
        i = 0
        while keep_going and (limit is None or i < limit):
            outs = body.run([xp.asarray(i, dtype=xp.int64), xp.asarray(keep_going), *state],
                            scope)
            keep_going = bool(_scalar(outs[0]))
            state = list(outs[1:1 + n_carried])
            for k, value in enumerate(outs[1 + n_carried:]):
                scans[k].append(value)
            i += 1
        results = list(state)
        for k, values in enumerate(scans):
            results.append(_stack(xp, values, self.node.outputs[n_carried + k]))
        return results


def _stack(xp: Any, values: list[Any], view: Any) -> Any:
    if values and isinstance(values[0], list):
        return values  # a sequence-valued scan output stays a list of sequences
    if values:
        return xp.stack([xp.asarray(v) for v in values])
    dtype = view.dtype.numpy if view is not None and view.dtype is not None else xp.float32
    rest = () if view is None or view.shape is None else tuple(
        d if isinstance(d, int) else 0 for d in view.shape[1:])
    return xp.zeros((0, *rest), dtype=dtype)


# values of one Sub and square made at a time by the distances' loop (a chunk of C's rows)
DISTANCE_CHUNK = 1 << 20


def squared_distances_scan(node: NodeView) -> bool:
    """Whether Scan ``node`` is skl2onnx's squared Euclidean distances (its cdist, in
    KNeighbors and KMeans-like exports): one state X handed on unchanged, one scan input C,
    default axes and directions, and a body of Identity(X), Sub(X, c), ReduceSumSquare over
    axis 1 without kept dims and Identity: scan output t is the squared distance of each row
    of X to row t of C."""
    a = node.attributes
    body = node.subgraphs.get("body")
    if (a.get("num_scan_inputs") != 1 or len(node.inputs) != 2 or len(node.outputs) != 2
            or body is None or len(body.inputs) != 2 or len(body.outputs) != 2
            or sorted(n.op_type for n in body.nodes) != [
                "Identity", "Identity", "ReduceSumSquare", "Sub"]
            or any(n.domain != "ai.onnx" for n in body.nodes)
            or any(a.get(k) and any(a[k]) for k in (
                "scan_input_axes", "scan_input_directions", "scan_output_axes",
                "scan_output_directions"))):
        return False
    state, row = body.inputs
    ops = {n.op_type: n for n in body.nodes}
    sub, square = ops["Sub"], ops["ReduceSumSquare"]
    if [v.name if v else None for v in sub.inputs] != [state.name, row.name]:
        return False
    axes = square.attributes.get("axes")
    if len(square.inputs) > 1 and square.inputs[1] is not None:
        axes = square.inputs[1].value if square.inputs[1].is_constant else None
    if (square.inputs[0] is None or square.inputs[0].name != sub.outputs[0].name
            or square.attributes.get("keepdims", 1) != 0 or axes is None
            or [int(v) for v in axes] not in ([1], [-1])):
        return False
    passed = {n.inputs[0].name: n.outputs[0].name for n in body.nodes
              if n.op_type == "Identity" and n.inputs[0] is not None}
    return (passed.get(state.name) == body.outputs[0].name
            and passed.get(square.outputs[0].name) == body.outputs[1].name)


class ScanKernel(BodyKernel):
    def __init__(self, xp: Any, node: NodeView, context: ProviderContext, **attrs: Any):
        super().__init__(xp, node, context, **attrs)
        self.distances = squared_distances_scan(node)

    def _distances(self, x: Any, c: Any) -> list[Any] | None:
        """:func:`squared_distances_scan`'s Scan in one pass per chunk of C's rows, the same
        float steps as the body's kernels per (row of C, row of X): X - c, then the sum of
        squares over the last axis; ``None`` (the body runs) for other ranks or types."""
        xp = self.xp
        if (x.ndim != 2 or c.ndim != 2 or x.shape[1] != c.shape[1] or x.dtype != c.dtype
                or x.dtype not in (xp.float32, xp.float64) or not c.shape[0]):
            return None
        out = xp.empty((c.shape[0], x.shape[0]), dtype=x.dtype)
        step = max(1, DISTANCE_CHUNK // max(x.size, 1))
        last = xp.asarray([-1], dtype=xp.int64)
        for start in range(0, c.shape[0], step):
            diff = x[None, :, :] - c[start:start + step, None, :]
            out[start:start + step] = reduce_sum_square(xp, diff, last, keepdims=0,
                                                        noop_with_empty_axes=0)
        return [x, out]

    def run(self, *inputs: Any, scope: Any = None) -> list[Any]:
        xp = self.xp
        if self.distances:
            found = self._distances(*inputs)
            if found is not None:
                return found
        a = self.attrs
        m = a["num_scan_inputs"]
        n = len(inputs) - m
        state, scan_in = list(inputs[:n]), inputs[n:]
        in_axes = list(a.get("scan_input_axes") or [0] * m)
        in_dirs = list(a.get("scan_input_directions") or [0] * m)
        k = len(self.node.outputs) - n
        out_axes = list(a.get("scan_output_axes") or [0] * k)
        out_dirs = list(a.get("scan_output_directions") or [0] * k)
        moved = []
        for x, axis in zip(scan_in, in_axes, strict=True):
            moved.append(xp.moveaxis(x, axis % x.ndim, 0))
        length = moved[0].shape[0] if moved else 0
        if any(x.shape[0] != length for x in moved):
            raise ModelValidationError(
                f"Scan {self.node.name!r}: its scan inputs have different lengths along their "
                f"scan axes ({', '.join(str(x.shape[0]) for x in moved)}); every scan input "
                "has the same length")
        collected: list[list[Any]] = [[] for _ in range(k)]
        body = self.bodies["body"]
        for t in range(length):
            slices = [x[length - 1 - t] if d else x[t] for x, d in zip(moved, in_dirs, strict=True)]
            outs = body.run([*state, *slices], scope)
            state = list(outs[:n])
            for j, value in enumerate(outs[n:]):
                collected[j].append(value)
        results = list(state)
        for j in range(k):
            values = collected[j][::-1] if out_dirs[j] else collected[j]
            stacked = _stack(xp, values, None)
            results.append(xp.moveaxis(stacked, 0, out_axes[j] % stacked.ndim))
        return results


def _check_scan(node: NodeView, provider: str) -> None:
    require(node.attributes.get("num_scan_inputs") is not None,
            "Scan: attribute 'num_scan_inputs' is required", code="attribute")


class Scan8Kernel(ScanKernel):
    """Scan-8: a leading batch axis on every state and scan input, scanned one batch at a time."""

    def run(self, sequence_lens: Any, *inputs: Any, scope: Any = None) -> list[Any]:
        xp = self.xp
        batch = inputs[0].shape[0]
        per_batch = [ScanKernel.run(self, *(x[b] for x in inputs), scope=scope)
                     for b in range(batch)]
        return [xp.stack([r[k] for r in per_batch]) for k in range(len(per_batch[0]))]


def _check_scan8(node: NodeView, provider: str) -> None:
    _check_scan(node, provider)
    require(node.inputs[0] is None,
            "Scan-8: the {} scans every batch entry to its full length; a sequence_lens "
            "input ({!r}) is not implemented", provider,
            node.inputs[0].name if node.inputs[0] else "",
            code="attribute")
    require(not node.attributes.get("directions") or not any(node.attributes["directions"]),
            "Scan-8: reverse directions are not implemented by the {}", provider, code="attribute")


@kernel("If", 1, 11, 13, 16, 19, 21, 23, 24, 25, dtypes=None, kernel_class=IfKernel,
        subgraphs=True)
def if_(xp, cond, *, then_branch=None, else_branch=None):
    raise NotImplementedError  # IfKernel runs it


@kernel("Loop", 1, 11, 13, 16, 19, 21, 23, 24, 25, dtypes=None, kernel_class=LoopKernel,
        host_inputs=(0, 1), subgraphs=True)
def loop(xp, trip_count, cond, *carried, body=None):
    raise NotImplementedError  # LoopKernel runs it


@kernel("Scan", 9, 11, 16, 19, 21, 23, 24, 25, dtypes=None, kernel_class=ScanKernel,
        check=_check_scan, subgraphs=True)
def scan(xp, *inputs, body=None, num_scan_inputs=None, scan_input_axes=None,
         scan_input_directions=None, scan_output_axes=None, scan_output_directions=None):
    raise NotImplementedError  # ScanKernel runs it


@kernel("Scan", 8, dtypes=None, kernel_class=Scan8Kernel, check=_check_scan8, subgraphs=True)
def scan_8(xp, sequence_lens, *inputs, body=None, num_scan_inputs=None, directions=None):
    raise NotImplementedError  # Scan8Kernel runs it
