"""Calibration factors: how a provider's estimates compare with its real kernel times here.

Per provider and op family, ``measured_us = overhead_us + scale * estimated_us``, stored as JSON
under the user cache directory (``EP_HOST_CACHE_DIR`` overrides it). Cost models read it with
:func:`family_factors`; ``ep_host.calibrate`` measures and writes it (``ep-host calibrate``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA = "ep-host/calibration/v1"
FILE_NAME = "calibration.json"

def cache_dir() -> Path:
    override = os.environ.get("EP_HOST_CACHE_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("ep-host"))


def profile_path() -> Path:
    return cache_dir() / FILE_NAME


@dataclass(frozen=True)
class Factors:
    """``calibrated_us = overhead_us + scale * estimated_us`` for one provider and op family."""

    overhead_us: float
    scale: float

    def apply(self, estimated_us: float) -> float:
        return self.overhead_us + self.scale * estimated_us


def load_profile(path: Path | None = None) -> dict[str, Any]:
    """The stored profile, or an empty one when there is none or it cannot be read."""
    try:
        data = json.loads((path or profile_path()).read_text())
        if data.get("schema") == SCHEMA:
            return data
    except (OSError, ValueError, AttributeError):
        pass
    return {"schema": SCHEMA, "providers": {}}


@cache
def family_factors(provider: str) -> dict[str, Factors]:
    """The calibrated factors of ``provider`` by op family (empty when never calibrated).

    Read once per process; :func:`reload` forgets what was read.
    """
    families = load_profile().get("providers", {}).get(provider, {}).get("families", {})
    return {f: Factors(float(v["overhead_us"]), float(v["scale"])) for f, v in families.items()}


def reload() -> None:
    family_factors.cache_clear()


def save_profile(profile: dict[str, Any], path: Path | None = None) -> None:
    """Store ``profile`` (written whole, then renamed over the old one) and forget what
    :func:`family_factors` had read."""
    path = path or profile_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(profile, indent=2) + "\n")
    os.replace(tmp, path)
    reload()
