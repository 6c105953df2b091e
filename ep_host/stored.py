"""Answers a provider worked out once (a runtime's verdict on an op signature, say), kept on disk
by key so the next process reads them instead of asking again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from ep_host.calibration import PLATFORM_CACHE_VARIABLES


def key_digest(key: Hashable) -> str:
    """A stable name for ``key`` across processes: a digest of its ``repr`` (tuples of strings,
    numbers, bytes and ``None`` print the same in every process)."""
    return hashlib.sha256(repr(key).encode()).hexdigest()[:32]


class AnswerStore:
    """JSON records by key in one append-only file (``path``; one line per record).

    Reading is lazy (the first ``get``), lines that do not parse are ignored, and a file past
    ``limit`` records is started afresh; writing appends one short line, so processes sharing the
    file lose nothing worse than a record to ask again. Nothing here is trusted as code: records
    are plain JSON objects. An unwritable cache costs only the asking.
    """

    def __init__(self, path: Path | str, limit: int = 100_000):
        self.path = Path(path)
        self._fspath = os.fspath(self.path)
        self.limit = limit
        self.lock = threading.Lock()
        self._records: dict[str, dict[str, Any]] | None = None

    def _load(self) -> dict[str, dict[str, Any]]:
        records: dict[str, dict[str, Any]] = {}
        try:
            with open(self.path, encoding="utf-8") as f:
                for line in f:
                    try:
                        digest, record = json.loads(line)
                    except (ValueError, TypeError):
                        continue
                    if isinstance(digest, str) and isinstance(record, dict):
                        records[digest] = record
        except OSError:
            return records
        if len(records) > self.limit:
            try:
                os.replace(self.path, self.path.with_suffix(".old"))
            except OSError:
                pass
            return {}
        return records

    def exists(self) -> bool:
        """Whether the file is there (a session asks on every creation: ``Path.exists`` took
        7 us of a call, this 2)."""
        return os.path.exists(self._fspath)

    def get(self, key: Hashable) -> dict[str, Any] | None:
        with self.lock:
            if self._records is None:
                self._records = self._load()
            return self._records.get(key_digest(key))

    def put(self, key: Hashable, record: dict[str, Any]) -> None:
        digest = key_digest(key)
        line = json.dumps([digest, record], separators=(",", ":")) + "\n"
        with self.lock:
            if self._records is None:
                self._records = self._load()
            self._records[digest] = record
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(line)
            except OSError:
                pass



class CacheDirStores:
    """The ``AnswerStore`` named ``parts`` (joined by "-", each cut to letters, digits and dots:
    a runtime version reads like ``2026.4.1-22982-releases/2026/4``) in the cache directory as it
    is at each call (``EP_HOST_CACHE_DIR`` may change), one store per directory."""

    def __init__(self, *parts: object):
        self.name = "-".join(re.sub(r"[^A-Za-z0-9.]+", "_", str(p)) for p in parts) + ".jsonl"
        self.stores: dict[Path, AnswerStore] = {}
        # by the variables the cache directory is worked out from, as ``os.environ`` keeps them
        self._by_settings: dict[tuple[Any, ...], AnswerStore] = {}

    def current(self) -> AnswerStore:
        settings = _cache_settings()
        found = self._by_settings.get(settings)
        if found is None:
            from ep_host.calibration import cache_dir

            folder = cache_dir()
            found = self.stores.get(folder)
            if found is None:
                found = self.stores[folder] = AnswerStore(folder / self.name)
            if len(self._by_settings) >= 16:  # settings that keep changing: start afresh
                self._by_settings.clear()
            self._by_settings[settings] = found
        return found


# the variables ``ep_host.calibration.cache_dir`` reads (its override, then platformdirs')
CACHE_VARIABLES = ("EP_HOST_CACHE_DIR", *PLATFORM_CACHE_VARIABLES)
try:  # as ``os.environ`` keys its own dict (bytes on POSIX)
    _CACHE_KEYS: tuple[Any, ...] | None = tuple(
        os.environ.encodekey(name) for name in CACHE_VARIABLES)  # type: ignore[attr-defined]
except AttributeError:
    _CACHE_KEYS = None


def _cache_settings() -> tuple[Any, ...]:
    """The values of :data:`CACHE_VARIABLES` now, read from ``os.environ``'s own dict where it
    has one (``os.environ.get`` of five variables took 4 us, the cache directory's path more)."""
    data = getattr(os.environ, "_data", None)
    if type(data) is dict and _CACHE_KEYS is not None:
        return tuple(map(data.get, _CACHE_KEYS))
    return tuple(map(os.environ.get, CACHE_VARIABLES))
