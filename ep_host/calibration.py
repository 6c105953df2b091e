"""Calibration factors: how a provider's estimates compare with its real kernel times here.

Per provider and op family, ``measured_us = overhead_us + scale * estimated_us``, stored as JSON
under the user's cache directory (``EP_HOST_CACHE_DIR`` overrides it) with the load the machine
was under. A provider that says so (``ProviderInfo.applies_calibration``) reads
:func:`family_factors` in its cost model; the host applies :func:`provider_calibration` to every
other one. ``ep_host.calibrate`` measures and writes it (``ep-host calibrate``).
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
# Above this load per CPU from other processes, measured times are skewed (they share the CPUs).
BUSY_LOAD_PER_CPU = 0.5

def cache_dir() -> Path:
    """ep-host's cache folder: ``EP_HOST_CACHE_DIR``, else platformdirs' user cache folder.
    Worked out once per value of the variables it reads, read from ``os.environ``'s own dict
    (stores and profiles ask on every session creation: ``os.environ.get`` of five variables
    and the path took 4.6 us, platformdirs some 10 more)."""
    settings = _cache_settings()
    found = _CACHE_DIRS.get(settings)
    if found is None:
        override = os.environ.get(CACHE_DIR_VARIABLE)
        found = Path(override) if override else _platform_cache_dir()
        if len(_CACHE_DIRS) >= 16:  # settings that keep changing: start afresh
            _CACHE_DIRS.clear()
        _CACHE_DIRS[settings] = found
    return found


CACHE_DIR_VARIABLE = "EP_HOST_CACHE_DIR"
PLATFORM_CACHE_VARIABLES = ("XDG_CACHE_HOME", "HOME", "LOCALAPPDATA", "USERPROFILE")
"""The variables platformdirs derives the user's cache folder from (Linux, macOS, Windows)."""
CACHE_VARIABLES = (CACHE_DIR_VARIABLE, *PLATFORM_CACHE_VARIABLES)
try:  # as ``os.environ`` keys its own dict (bytes on POSIX)
    _CACHE_KEYS: tuple[Any, ...] | None = tuple(
        os.environ.encodekey(name) for name in CACHE_VARIABLES)  # type: ignore[attr-defined]
except AttributeError:
    _CACHE_KEYS = None
_CACHE_DIRS: dict[tuple[Any, ...], Path] = {}


def _cache_settings() -> tuple[Any, ...]:
    """The values of :data:`CACHE_VARIABLES` now, as ``os.environ`` keeps them where it keeps
    them in a dict of its own."""
    data = getattr(os.environ, "_data", None)
    if type(data) is dict and _CACHE_KEYS is not None:
        return tuple(map(data.get, _CACHE_KEYS))
    return tuple(map(os.environ.get, CACHE_VARIABLES))


def _platform_cache_dir() -> Path:
    """platformdirs' cache folder for ep-host (from the variables it reads now)."""
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


@dataclass(frozen=True)
class ProviderCalibration:
    """What the host applies to a provider that does not apply calibration itself: the factors
    of the family calibration measured an op in (``op_families``: qualified op -> family), and
    for every other op (a custom op...) the factors fitted over all its cases (``overall``)."""

    families: dict[str, Factors]
    op_families: dict[str, str]
    overall: Factors | None

    def for_op(self, qualified_op: str) -> Factors | None:
        family = self.op_families.get(qualified_op)
        if family is not None and family in self.families:
            return self.families[family]
        return self.overall


@cache
def provider_calibration(provider: str) -> ProviderCalibration | None:
    """``provider``'s stored calibration as the host applies it; ``None`` when never
    calibrated. Read once per process; :func:`reload` forgets what was read."""
    entry = load_profile().get("providers", {}).get(provider)
    if not entry:
        return None
    families = family_factors(provider)
    overall = entry.get("overall")
    return ProviderCalibration(
        families=families,
        op_families={str(op): str(f) for op, f in entry.get("op_families", {}).items()},
        overall=None if not overall else Factors(float(overall["overhead_us"]),
                                                 float(overall["scale"])))


def reload() -> None:
    family_factors.cache_clear()
    provider_calibration.cache_clear()


def machine_load() -> dict[str, Any] | None:
    """The load averages (1, 5, 15 minutes) and the CPU count now; ``None`` where the system
    has no load average."""
    try:
        one, five, fifteen = os.getloadavg()
    except (OSError, AttributeError):
        return None
    return {"load": [round(one, 2), round(five, 2), round(fifteen, 2)],
            "cpus": os.cpu_count() or 1}


def measured_under(before: dict[str, Any] | None, after: dict[str, Any] | None,
                   own_processes: int = 1) -> dict[str, Any] | None:
    """The load a calibration ran under, from :func:`machine_load` before and after it:
    ``others_per_cpu`` is the 1-minute load of other processes per CPU (the load before, or
    the load after less the ``own_processes`` that measured), ``busy`` when it is above
    ``BUSY_LOAD_PER_CPU``."""
    if before is None or after is None:
        return None
    cpus = max(before["cpus"], 1)
    others = max(before["load"][0], after["load"][0] - own_processes, 0.0)
    per_cpu = round(others / cpus, 2)
    return {"cpus": cpus, "load_before": before["load"], "load_after": after["load"],
            "others_per_cpu": per_cpu, "busy": per_cpu > BUSY_LOAD_PER_CPU}


def load_summary(provider: str) -> dict[str, Any] | None:
    """When ``provider`` was calibrated and under what load (``measured_under``'s record, or
    ``None`` where not recorded), or ``None`` when it never was."""
    entry = load_profile().get("providers", {}).get(provider)
    if not entry or not entry.get("families"):
        return None
    return {"measured_at": entry.get("measured_at"), "load": entry.get("load")}


def save_profile(profile: dict[str, Any], path: Path | None = None) -> None:
    """Store ``profile`` (written whole, then renamed over the old one) and forget what
    :func:`family_factors` had read."""
    path = path or profile_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(profile, indent=2) + "\n")
    os.replace(tmp, path)
    reload()
