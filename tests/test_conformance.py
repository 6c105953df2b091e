"""onnx's node conformance cases on the CPU EP: every case passes, or is declined for the
reason written down in conformance_expected.json. Nothing is wrong, nothing errors."""

import json
from pathlib import Path

import pytest

from ep_host import conformance

EXPECTED = json.loads((Path(__file__).parent / "conformance_expected.json").read_text())


@pytest.fixture(scope="module")
def results():
    names = conformance.select_cases()
    return {r.name: r for r in conformance.run_cases(names, ["cpu"], timeout=120)}


def test_every_case_ran(results):
    assert len(results) == len(conformance.all_cases()) == 1884


def test_no_case_is_wrong_or_errors(results):
    bad = {n: f"{r.outcome}: {r.reason}" for n, r in results.items()
           if r.outcome in ("wrong", "error")}
    assert bad == {}


def test_every_non_pass_is_declined_for_its_written_down_reason(results):
    for name, result in results.items():
        if name in EXPECTED:
            assert result.outcome == "declined", f"{name} now {result.outcome}: update the list"
            assert EXPECTED[name]["reason"] in result.reason, (name, result.reason)
        else:
            assert result.outcome == "pass", (name, result.outcome, result.reason)


def test_at_least_1870_pass(results):
    assert sum(r.outcome == "pass" for r in results.values()) >= 1870
