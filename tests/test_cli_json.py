"""``--json`` prints JSON to stdout in every command, ``-o/--output FILE`` writes the same JSON to
FILE, and the old ``--json FILE`` form fails naming the new one."""

import json
import os

import onnx
import pytest
from hostkit import make_model
from onnx import TensorProto, helper

from ep_host import calibration
from ep_host.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CNN = os.path.join(ROOT, "examples", "cnn.onnx")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EP_HOST_CACHE_DIR", str(tmp_path / "cache"))
    calibration.reload()
    yield tmp_path / "cache"
    calibration.reload()


@pytest.fixture
def relu_model(tmp_path):
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                       [("x", TensorProto.FLOAT, [8])], [("y", TensorProto.FLOAT, [8])])
    path = tmp_path / "relu.onnx"
    onnx.save(model, path)
    return str(path)


COMMANDS = {
    "providers": ["providers"],
    "explain": ["explain", CNN, "--providers", "cpu"],
    "place": ["place", CNN, "--providers", "cpu"],
    "why": ["why", CNN, "conv1/Conv", "--providers", "cpu"],
    "calibrate --model": ["calibrate", "--model", "{relu}", "--providers", "cpu", "--repeats", "1"],
    "conformance": ["conformance", "--providers", "cpu", "--case", "^test_relu$", "--jobs", "1"],
}


@pytest.mark.parametrize("command", COMMANDS)
def test_json_prints_to_stdout_and_output_writes_the_same(command, tmp_path, relu_model, cache,
                                                          capsys):
    argv = [a.format(relu=relu_model) for a in COMMANDS[command]]
    out = tmp_path / "out.json"
    assert main([*argv, "--json", "-o", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)  # nothing but the JSON on stdout
    assert printed and json.loads(out.read_text()) == printed


@pytest.mark.parametrize("command", ["place", "conformance", "providers"])
def test_output_alone_writes_the_json_and_keeps_the_text(command, tmp_path, relu_model, cache,
                                                         capsys):
    argv = [a.format(relu=relu_model) for a in COMMANDS[command]]
    out = tmp_path / "out.json"
    assert main([*argv, "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.strip() and not text.lstrip().startswith(("{", "["))
    assert json.loads(out.read_text())


@pytest.mark.parametrize("argv, new_form", [
    (["place", CNN, "--json", "placement.json"], "-o placement.json"),
    (["place", "--json", "placement.json", CNN], "-o placement.json"),
    (["conformance", "--op", "Relu", "--json", "conformance.json"], "-o conformance.json"),
    (["place", CNN, "--json=out.json"], "-o out.json"),
    (["place", CNN, "--json", "-"], "drop the '-'"),
])
def test_the_old_json_file_form_fails_naming_the_new_one(argv, new_form, tmp_path, monkeypatch,
                                                        capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--json takes no file" in err and new_form in err
    assert not list(tmp_path.iterdir())  # nothing written, nothing read as the model
