"""Each meaning of the old ``--provider`` has its own option: ``--providers A,B`` is the set to
use everywhere (onnxruntime's sense), ``--only-provider NAME`` filters what ``explain`` and ``why``
show; ``--provider`` itself fails naming the new option."""

import json
import os

import pytest

from ep_host import calibration
from ep_host.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CNN = os.path.join(ROOT, "examples", "cnn.onnx")


@pytest.mark.parametrize("argv, new_option", [
    (["explain", CNN, "--provider", "cpu"], "--only-provider NAME"),
    (["why", CNN, "conv1/Conv", "--provider", "cpu"], "--only-provider NAME"),
    (["place", CNN, "--provider", "cpu"], "--providers A,B"),
    (["run", CNN, "--random-inputs", "--provider", "cpu"], "--providers A,B"),
    (["report", CNN, "-o", "r.html", "--provider", "cpu"], "--providers A,B"),
    (["conformance", "--op", "Abs", "--provider", "cpu"], "--providers NAME"),
    (["calibrate", "--provider", "cpu"], "--providers A,B"),
    (["explain", CNN, "--provider"], "--only-provider NAME"),
])
def test_the_old_provider_option_fails_naming_the_new_one(argv, new_option, tmp_path,
                                                          monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--provider is gone" in err and new_option in err
    assert not list(tmp_path.iterdir())


def test_only_provider_filters_explain_while_the_set_stays(capsys):
    # both providers are used (the example EP claims the Relus); only cpu's answers are shown
    assert main(["explain", CNN, "--providers", "cpu,example", "--only-provider", "cpu",
                 "--no-optimize", "--op", "Relu"]) == 0
    assert providers_listed(capsys.readouterr().out) == ["*cpu", "*cpu"]
    assert main(["explain", CNN, "--providers", "cpu,example", "--no-optimize", "--op",
                 "Relu"]) == 0
    assert providers_listed(capsys.readouterr().out) == ["*cpu", "example", "*cpu", "example"]


def providers_listed(out):
    """The provider column of the table (the summary below it lists every provider whatever
    the filter)."""
    table = out.split("Summary per provider")[0].splitlines()[2:]
    return [line[18:].split()[0] for line in table if line.strip()]


def test_only_provider_filters_why(capsys):
    assert main(["why", CNN, "conv1/Relu", "--providers", "cpu,example", "--no-optimize",
                 "--only-provider", "example", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [v["provider"] for v in data["verdicts"]] == ["example"]


def test_only_provider_names_a_provider_in_use(capsys):
    assert main(["explain", CNN, "--providers", "cpu", "--only-provider", "example"]) == 1
    assert "--only-provider 'example' is not in use" in capsys.readouterr().err


def test_calibrate_takes_the_providers_to_calibrate(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EP_HOST_CACHE_DIR", str(tmp_path))
    calibration.reload()
    try:
        assert main(["calibrate", "--providers", "cpu,nosuch"]) == 1
    finally:
        calibration.reload()
    assert "'nosuch' is not available" in capsys.readouterr().err


def test_conformance_runs_the_cases_on_the_providers_given(capsys):
    assert main(["conformance", "--providers", "example", "--case", "^test_relu$", "--jobs", "1",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["provider"] == "example" and data["summary"]["outcomes"]["pass"] == 1
