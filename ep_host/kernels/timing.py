"""Timing helpers for the figures an EP measures about its machine: the best of a few runs, and
measured figures cached as JSON so that each machine is measured once.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any


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
