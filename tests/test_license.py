"""The project's license: one MIT LICENSE file, declared by every distribution's pyproject."""

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECTS = sorted(
    [ROOT / "pyproject.toml"]
    + list((ROOT / "plugins").glob("*/pyproject.toml"))
    + list((ROOT / "examples").glob("*/pyproject.toml"))
)


def test_license_file_is_mit_with_the_authors_named():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License")
    assert "Copyright (c) 2026 the ep-host authors" in text
    assert "Permission is hereby granted, free of charge" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS"' in text


def test_every_distribution_is_found():
    names = {tomllib.loads(p.read_text())["project"]["name"] for p in PYPROJECTS}
    assert {"ep-host", "ep-host-cpu", "ep-host-cuda", "ep-host-example"} <= names


@pytest.mark.parametrize("pyproject", PYPROJECTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_pyproject_declares_mit(pyproject):
    project = tomllib.loads(pyproject.read_text())["project"]
    assert project["license"] == {"text": "MIT"}
