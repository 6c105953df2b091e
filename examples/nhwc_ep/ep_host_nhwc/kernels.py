"""The NHWC kernels, in numpy: every activation is ``[N, H, W, C]``; weights arrive in the
model's layout and are repacked once in ``prepare``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ep_host import Kernel


class Window:
    """A 2-D window's geometry from a node's attributes: kernel, strides, dilations, pads."""

    def __init__(self, attributes: Mapping[str, Any], kernel: Sequence[int], spatial: Sequence):
        self.kernel = tuple(int(k) for k in kernel)
        self.strides = tuple(attributes.get("strides") or (1, 1))
        self.dilations = tuple(attributes.get("dilations") or (1, 1))
        pads = attributes.get("pads") or (0, 0, 0, 0)
        auto_pad = attributes.get("auto_pad", "NOTSET")
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            pads = [0, 0, 0, 0]
            for axis, size in enumerate(spatial):
                total = max(0, (-(-size // self.strides[axis]) - 1) * self.strides[axis]
                            + self.extent(axis) - size)
                small, large = total // 2, total - total // 2
                begin, end = (small, large) if auto_pad == "SAME_UPPER" else (large, small)
                pads[axis], pads[axis + 2] = begin, end
        elif auto_pad == "VALID":
            pads = (0, 0, 0, 0)
        self.pads = tuple(int(p) for p in pads)

    def extent(self, axis: int) -> int:
        return (self.kernel[axis] - 1) * self.dilations[axis] + 1

    def windows(self, x: np.ndarray, fill: float) -> np.ndarray:
        """``x`` ``[N, H, W, C]`` padded with ``fill``, as ``[N, OH, OW, C, KH, KW]`` windows."""
        top, left, bottom, right = self.pads
        if any(self.pads):
            x = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=fill)
        view = sliding_window_view(x, (self.extent(0), self.extent(1)), axis=(1, 2))
        (sh, sw), (dh, dw) = self.strides, self.dilations
        return view[:, ::sh, ::sw, :, ::dh, ::dw]


class ConvNHWC(Kernel):
    """Conv: ``X`` ``[N, H, W, C]``, ``W`` ``[M, C/group, KH, KW]`` (the model's layout),
    optional bias ``[M]``; output ``[N, OH, OW, M]``."""

    def __init__(self, attributes: Mapping[str, Any], kernel: Sequence[int],
                 spatial: Sequence[int]):
        self.window = Window(attributes, kernel, spatial)
        self.group = int(attributes.get("group", 1))
        self.packed: np.ndarray | None = None

    def prepare(self, constants: Mapping[int, Any]) -> None:
        if 1 in constants:
            self.packed = self.pack(constants[1])

    def pack(self, weight: np.ndarray) -> np.ndarray:
        """``[group, C/group, KH, KW, M/group]``: what ``tensordot`` contracts per group."""
        m, c, kh, kw = weight.shape
        grouped = weight.reshape(self.group, m // self.group, c, kh, kw)
        return np.ascontiguousarray(grouped.transpose(0, 2, 3, 4, 1))

    def run(self, x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> tuple:
        packed = self.packed if self.packed is not None else self.pack(weight)
        windows = self.window.windows(x, 0.0)
        per_group = x.shape[3] // self.group
        outs = [np.tensordot(windows[:, :, :, g * per_group:(g + 1) * per_group], packed[g],
                             axes=([3, 4, 5], [0, 1, 2])) for g in range(self.group)]
        out = outs[0] if self.group == 1 else np.concatenate(outs, axis=3)
        if bias is not None:
            out += bias
        return (np.ascontiguousarray(out, dtype=x.dtype),)


class MaxPoolNHWC(Kernel):
    def __init__(self, attributes: Mapping[str, Any], spatial: Sequence[int]):
        self.window = Window(attributes, attributes["kernel_shape"], spatial)

    def run(self, x: np.ndarray) -> tuple:
        return (self.window.windows(x, -np.inf).max(axis=(4, 5)),)


class AveragePoolNHWC(Kernel):
    def __init__(self, attributes: Mapping[str, Any], spatial: Sequence[int]):
        self.window = Window(attributes, attributes["kernel_shape"], spatial)
        self.count_pads = bool(attributes.get("count_include_pad", 0))

    def run(self, x: np.ndarray) -> tuple:
        total = self.window.windows(x, 0.0).sum(axis=(4, 5))
        if self.count_pads or not any(self.window.pads):
            count = self.window.kernel[0] * self.window.kernel[1]
        else:
            ones = np.ones((1, *x.shape[1:3], 1), dtype=x.dtype)
            count = self.window.windows(ones, 0.0).sum(axis=(4, 5))
        return ((total / count).astype(x.dtype, copy=False),)


class GlobalAveragePoolNHWC(Kernel):
    def run(self, x: np.ndarray) -> tuple:
        return (x.mean(axis=(1, 2), keepdims=True),)


class ReluNHWC(Kernel):
    def run(self, x: np.ndarray) -> tuple:
        return (np.maximum(x, 0),)


class SumNHWC(Kernel):
    """Add and Sum: every input 4-D, so broadcasting holds axis by axis in NHWC too."""

    def run(self, *inputs: np.ndarray) -> tuple:
        out = inputs[0]
        for x in inputs[1:]:
            out = out + x
        return (np.asarray(out),)


class ConcatNHWC(Kernel):
    def __init__(self, axis: int):
        self.axis = axis  # already the NHWC axis

    def run(self, *inputs: np.ndarray) -> tuple:
        return (np.concatenate(inputs, axis=self.axis),)
