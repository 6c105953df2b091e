"""The nine CNNs shipped in the onnx wheel: placed whole, and computed right on the CPU EP."""

import numpy as np
import onnx
import pytest

from ep_host import InferenceSession
from ep_host.testing.models import (
    LIGHT_MODELS,
    dummy_inputs,
    light_expected_output,
    light_model_path,
    random_inputs,
    with_random_weights,
)


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_every_node_is_placed_and_the_shipped_output_is_reproduced(name):
    path = light_model_path(name)
    written = InferenceSession(path, providers=["cpu"], optimizations=())
    model = onnx.load(path)
    assert len(written.placement.nodes) == len(model.graph.node)
    optimized = InferenceSession(path, providers=["cpu"])
    for session in (written, optimized):
        assert {n.provider for n in session.placement.nodes} == {"cpu"}
        (out,) = session.run(None, dummy_inputs(model))
        np.testing.assert_allclose(out, light_expected_output(name), rtol=1e-3, atol=1e-7)


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_random_weight_copies_match_onnxruntime(name):
    import onnxruntime

    model = with_random_weights(onnx.load(light_model_path(name)))
    feeds = random_inputs(model)
    ours = InferenceSession(model.SerializeToString(), providers=["cpu"]).run(None, feeds)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    reference = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                             providers=["CPUExecutionProvider"])
    theirs = reference.run(None, feeds)
    # the output, plus the logits before the softmax where the model ends in one
    assert len(ours) == len(theirs) == len(model.graph.output)
    for a, b in zip(ours, theirs, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)
