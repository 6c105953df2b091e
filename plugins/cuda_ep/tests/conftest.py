"""Fixtures for the CUDA EP's tests; the helpers they use live in cudakit.py."""

import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path_factory):
    for var in ("EP_HOST_PROVIDERS", "EP_HOST_STRICT", "EP_HOST_TRACE_PLUGINS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("EP_HOST_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture
def rng():
    return np.random.default_rng(0)
