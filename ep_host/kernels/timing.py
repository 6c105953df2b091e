"""Timing helpers for the figures an EP measures about its machine: the best of a few runs, and
measured figures cached as JSON so that each machine is measured once.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ep_host import element_count


def best_seconds(fn, repeat: int) -> float:
    """The fastest of ``repeat`` calls of ``fn``, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def cached_figures(path: Path, cls: type[Any], measure: Callable[[], Any]) -> Any:
    """A dataclass of measured figures read from the JSON at ``path`` (``source`` set to the
    path), or ``measure()`` stored there for next time (atomically; an unwritable cache only
    costs a measurement next time). The CPU profile and the CUDA device figures use it."""
    try:
        data = json.loads(path.read_text())
        return cls(**{**data, "source": str(path)})
    except (OSError, ValueError, TypeError):
        pass
    figures = measure()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({k: v for k, v in asdict(figures).items() if k != "source"}))
        os.replace(tmp, path)
    except OSError:
        pass
    return figures


@dataclass(frozen=True)
class ConvCase:
    """A convolution an EP times to learn its speed on one ``conv_kind``: input ``x_shape``,
    weight ``w_shape``, ``group``, ``stride`` and same-size padding, float32."""

    kind: str
    x_shape: tuple[int, ...]
    w_shape: tuple[int, ...]
    group: int = 1
    stride: int = 1

    @property
    def out_shape(self) -> tuple[int, ...]:
        window = self.w_shape[2:]
        spatial = tuple((d + 2 * (k // 2) - k) // self.stride + 1
                        for d, k in zip(self.x_shape[2:], window, strict=True))
        return (self.x_shape[0], self.w_shape[0]) + spatial

    @property
    def flops(self) -> int:
        return 2 * element_count(self.out_shape) * element_count(self.w_shape[1:])

    def weight(self) -> Any:
        """The case's weight: fixed random float32 values in [-0.5, 0.5)."""
        import numpy as np

        return np.random.default_rng(0).random(self.w_shape, dtype=np.float32) - 0.5

    def model_bytes(self) -> bytes:
        """The case as a one-node ONNX model (opset 17) with ``weight()`` as an initializer."""
        from onnx import TensorProto, helper, numpy_helper

        window = list(self.w_shape[2:])
        weight = self.weight()
        node = helper.make_node(
            "Conv", ["x", "w"], ["y"], kernel_shape=window, group=self.group,
            strides=[self.stride] * len(window), pads=[k // 2 for k in window] * 2)
        graph = helper.make_graph(
            [node], f"conv_{self.kind}",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(self.x_shape))],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(self.out_shape))],
            initializer=[numpy_helper.from_array(weight, "w")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        return model.SerializeToString()


# Shapes of the convolutions CNNs spend their time in (ResNet, SqueezeNet, MobileNet, first
# layers), at a quarter of ResNet-50's sizes so that timing all of them stays well under a
# second; an EP's speed on a kind is the geometric mean over that kind's cases.
CONV_CASES = (
    ConvCase("dense", (1, 64, 28, 28), (64, 64, 3, 3)),
    ConvCase("dense", (1, 128, 14, 14), (128, 128, 3, 3)),
    ConvCase("dense", (1, 256, 7, 7), (256, 256, 3, 3)),
    ConvCase("dense", (1, 3, 112, 112), (64, 3, 7, 7), stride=2),
    ConvCase("pointwise", (1, 64, 28, 28), (256, 64, 1, 1)),
    ConvCase("pointwise", (1, 512, 7, 7), (128, 512, 1, 1)),
    ConvCase("grouped", (1, 144, 28, 28), (144, 1, 3, 3), group=144),
    ConvCase("grouped", (1, 480, 14, 14), (480, 1, 5, 5), group=480),
)


def conv_speeds(time_case: Callable[[ConvCase], float]) -> dict[str, float]:
    """GFLOP/s per conv kind: the geometric mean over ``CONV_CASES`` of each case's flops over
    ``time_case(case)`` (the EP's best time for it, in seconds)."""
    import math

    logs: dict[str, list[float]] = {}
    for case in CONV_CASES:
        seconds = max(time_case(case), 1e-9)
        logs.setdefault(case.kind, []).append(math.log(case.flops / seconds / 1e9))
    return {kind: math.exp(sum(v) / len(v)) for kind, v in logs.items()}


@dataclass(frozen=True)
class ConvSpeeds:
    """The GFLOP/s an EP measured per ``conv_kind`` (0: not measured), for a profile dataclass
    to derive from beside its ``peak_gflops``; ``measured(time_case)`` gives the fields' values."""

    dense_conv_gflops: float = field(default=0.0, kw_only=True)
    pointwise_conv_gflops: float = field(default=0.0, kw_only=True)
    grouped_conv_gflops: float = field(default=0.0, kw_only=True)

    def conv_gflops(self, kind: str | None) -> float:
        """The GFLOP/s to price a convolution of ``kind`` at; ``peak_gflops`` for other ops and
        kinds not measured."""
        speed = getattr(self, f"{kind}_conv_gflops", 0.0) if kind else 0.0
        return speed or self.peak_gflops  # type: ignore[attr-defined]

    @staticmethod
    def measured(time_case: Callable[[ConvCase], float]) -> dict[str, float]:
        """``conv_speeds(time_case)`` as this class's field values."""
        return {f"{kind}_conv_gflops": v for kind, v in conv_speeds(time_case).items()}
