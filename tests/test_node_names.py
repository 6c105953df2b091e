"""Node names as written in the model resolve wherever a node is named after graph
optimizations: pins, ``why``, ``explain --node``, ``Placement.by_node`` and the JSON."""

import json
import os
import re

import numpy as np
import pytest

from ep_host import InferenceSession
from ep_host.cli import main
from ep_host.errors import UnknownNodeError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CNN = os.path.join(ROOT, "examples", "cnn.onnx")  # conv1/Conv + conv1/Relu fuse into one node
FUSED = "conv1/Conv::FusedConv"


@pytest.fixture(scope="module")
def session():
    return InferenceSession(CNN, providers=["cpu"])


def test_by_node_finds_a_fused_node_by_each_name_it_was_written_as(session):
    by_node = session.placement.by_node
    assert FUSED in by_node and "conv1/Conv" not in [n.name for n in session.placement.nodes]
    assert by_node["conv1/Conv"] is by_node[FUSED]
    assert by_node["conv1/Relu"] is by_node[FUSED]
    assert by_node.get("conv1/Conv").provider == "cpu"
    assert "conv1/Relu" in by_node and "nothing" not in by_node


def test_an_unknown_name_is_a_key_error_listing_close_matches(session):
    with pytest.raises(KeyError) as caught:
        session.placement.by_node["conv1"]
    assert isinstance(caught.value, UnknownNodeError)
    message = str(caught.value)
    assert "no node named 'conv1'" in message and "'conv1/Conv'" in message
    assert "'conv1/MaxPool'" in message


def test_the_json_lists_the_names_each_placed_node_stands_for(session):
    nodes = {n["name"]: n for n in session.placement.to_dict()["nodes"]}
    assert nodes[FUSED]["source_nodes"] == ["conv1/Conv", "conv1/Relu"]
    assert nodes["conv1/MaxPool"]["source_nodes"] == ["conv1/MaxPool"]
    written = [s for n in nodes.values() for s in n["source_nodes"]]
    assert sorted(written) == sorted(["conv1/Conv", "conv1/Relu", "conv1/MaxPool", "conv2/Conv",
                                      "conv2/Relu", "conv2/MaxPool", "flatten/Flatten",
                                      "fc/Gemm", "softmax/Softmax"])


def test_pin_takes_the_name_as_written(capsys):
    assert main(["place", CNN, "--providers", "cpu,onnxruntime", "--pin", "conv1/Conv=onnxruntime",
                 "--pin", "conv2/Relu=cpu", "--json"]) == 0
    nodes = {n["name"]: n for n in json.loads(capsys.readouterr().out)["nodes"]}
    assert nodes[FUSED]["provider"] == "onnxruntime" and nodes[FUSED]["pinned"]
    assert nodes["conv2/Conv::FusedConv"]["provider"] == "cpu"
    assert nodes["conv2/Conv::FusedConv"]["pinned"]


def test_pins_of_two_names_of_one_node_to_different_providers_are_refused(capsys):
    assert main(["place", CNN, "--providers", "cpu,onnxruntime", "--pin", "conv1/Conv=cpu",
                 "--pin", "conv1/Relu=onnxruntime"]) == 1
    err = capsys.readouterr().err
    assert "name one node, 'conv1/Conv::FusedConv'" in err


def test_a_pin_naming_nothing_lists_close_matches(capsys):
    assert main(["place", CNN, "--providers", "cpu", "--pin", "conv1/Cnov=cpu"]) == 1
    err = capsys.readouterr().err
    assert "--pin conv1/Cnov=cpu" in err and "close matches" in err and "'conv1/Conv'" in err


def test_why_and_explain_node_resolve_and_list_close_matches(capsys):
    assert main(["why", CNN, "conv1/Relu", "--providers", "cpu"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{FUSED} (com.microsoft::FusedConv) runs on cpu")
    assert main(["explain", CNN, "--providers", "cpu", "--node", "conv1/Conv"]) == 0
    assert FUSED in capsys.readouterr().out
    assert main(["why", CNN, "conv", "--providers", "cpu"]) == 1
    err = capsys.readouterr().err
    assert "no node named 'conv'" in err and "'conv1/MaxPool'" in err


def test_the_readme_python_example_runs_on_the_shipped_model():
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    block = re.search(r"From Python.*?```python\n(.*?)```", readme, re.S).group(1)
    assert "by_node[" in block
    array = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    scope = {"array": array}
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        for line in block.splitlines():
            if line.strip():
                exec(line.split("  #")[0], scope)
    finally:
        os.chdir(cwd)
    placement = scope["session"].placement
    assert placement.by_node["conv1/Conv"].name == FUSED
    assert placement.answers_for("conv1/Conv")["cuda"] is placement.table.answers[FUSED]["cuda"]
