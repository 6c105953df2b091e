"""Fixtures for the host's tests; the helpers they use live in hostkit.py."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ep_host.discovery import Host


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
