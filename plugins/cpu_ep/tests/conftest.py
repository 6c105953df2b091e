"""Fixtures for the CPU EP's tests; the helpers they use live in cpukit.py."""

import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _isolated_cache(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("EP_HOST_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture
def rng():
    return np.random.default_rng(0)
