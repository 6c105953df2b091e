"""Fixtures for the host's tests; the helpers they use live in hostkit.py."""

from __future__ import annotations

import signal
from types import SimpleNamespace

import numpy as np
import pytest

from ep_host.discovery import Host

# A shell's background job starts with SIGINT ignored, and Python then installs no
# KeyboardInterrupt handler. The tests that send a real SIGINT need the usual one, here and in the
# commands they start (a child inherits an ignored signal, but not a Python handler).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path_factory):
    for var in ("EP_HOST_PROVIDERS", "EP_HOST_STRICT", "EP_HOST_TRACE_PLUGINS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("EP_HOST_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture
def host():
    """A host with no entry points loaded; register inline providers on it."""
    return Host(strict=False)


@pytest.fixture
def tensors():
    rng = np.random.default_rng(0)
    return SimpleNamespace(
        x=rng.standard_normal((2, 3)).astype(np.float32),
        y=rng.standard_normal((2, 3)).astype(np.float32),
    )
