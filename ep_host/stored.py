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

from ep_host.calibration import cache_dir


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

    def current(self) -> AnswerStore:
        folder = cache_dir()
        found = self.stores.get(folder)
        if found is None:
            found = self.stores[folder] = AnswerStore(folder / self.name)
        return found
