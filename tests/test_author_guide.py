"""The EP author's guide as a new author reads it: its pyproject is complete, its samples run,
and it points to the conformance command and the pytest plugin."""

import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

import ep_host
from ep_host.testing.kit import custom_op_model

GUIDE = (Path(__file__).resolve().parent.parent / "docs" / "ep-author-guide.md").read_text()


def blocks(language):
    return re.findall(rf"```{language}\n(.*?)```", GUIDE, re.S)


def test_the_guides_pyproject_is_complete():
    (text,) = [b for b in blocks("toml") if "[build-system]" in b]
    project = tomllib.loads(text)
    assert project["build-system"]["build-backend"] == "setuptools.build_meta"
    assert project["build-system"]["requires"]
    assert {"name", "version", "requires-python"} <= set(project["project"])
    assert "ep-host" in project["project"]["dependencies"]
    assert project["project"]["entry-points"]["ep_host.providers"] == {"mine": "my_ep.provider"}
    assert project["tool"]["pytest"]["ini_options"]["ep_host_provider"] == "mine"


def test_the_guides_dtype_check_declines_an_unknown_type():
    """After a custom op nobody declared, the input's dtype is None: the sample declines."""
    (sample,) = [b for b in blocks("python") if 'x.dtype is not None and x.dtype.name' in b]
    namespace = {}
    exec(sample, namespace)
    model = custom_op_model("com.mine", "Swish", {"x": (np.float32, [2])})
    model.graph.node.add().CopyFrom(helper.make_node("Relu", ["y"], ["z"], name="relu"))
    del model.graph.output[:]
    model.graph.output.add().name = "z"
    relu = ep_host.load_model(model.SerializeToString()).graph.nodes[1]
    assert relu.inputs[0].dtype is None
    with pytest.raises(ep_host.Decline) as declined:
        namespace["ep_host_supports_op"](node=relu, context=None)
    assert declined.value.code == "dtype"
    assert declined.value.reason == "Relu: mine takes float32, got an unknown type"


def test_the_guide_points_to_conformance_and_the_pytest_plugin():
    assert "ep-host conformance --providers mine" in GUIDE
    assert "pytest --ep-host-provider mine --ep-host-conformance" in GUIDE
    for fixture in ("one_node_model", "custom_op_model", "ep_session",
                    "assert_matches_reference"):
        assert f"`{fixture}(" in GUIDE, fixture
