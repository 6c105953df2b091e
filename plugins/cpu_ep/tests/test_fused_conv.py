"""com.microsoft::FusedConv: a Conv, then its activation applied to the Conv's own output."""

import numpy as np
import pytest
from cpukit import make_model, run_ep_host
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)
X = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
W = (RNG.standard_normal((4, 3, 3, 3)) * 0.5).astype(np.float32)
B = RNG.standard_normal(4).astype(np.float32)


def conv_reference():
    padded = np.pad(X, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, 4, 6, 6))
    for i in range(6):
        for j in range(6):
            out[0, :, i, j] = np.tensordot(W, padded[0, :, i:i + 3, j:j + 3], 3)
    return out + B.reshape(4, 1, 1)


ACTIVATIONS = {
    "Relu": ([], lambda y: np.maximum(y, 0)),
    "LeakyRelu": ([0.2], lambda y: np.where(y < 0, 0.2 * y, y)),
    "Sigmoid": ([], lambda y: 1 / (1 + np.exp(-y))),
    "Tanh": ([], np.tanh),
    "Clip": ([-0.5, 0.5], lambda y: np.clip(y, -0.5, 0.5)),
}


def fused_model(activation, params, with_weights_as_inputs=False):
    node = helper.make_node("FusedConv", ["x", "w", "b"], ["y"], domain="com.microsoft",
                            activation=activation, pads=[1, 1, 1, 1], group=1,
                            **({"activation_params": params} if params else {}))
    inputs = [("x", F, [1, 3, 6, 6])]
    inits = [numpy_helper.from_array(W, "w"), numpy_helper.from_array(B, "b")]
    if with_weights_as_inputs:
        inputs += [("w", F, [4, 3, 3, 3]), ("b", F, [4])]
        inits = []
    return make_model([node], inputs, [("y", F, [1, 4, 6, 6])], initializers=inits,
                      domains=[("com.microsoft", 1)])


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("constant_weights", [True, False])
def test_fused_conv_equals_conv_then_activation(activation, constant_weights):
    params, fn = ACTIVATIONS[activation]
    model = fused_model(activation, params, with_weights_as_inputs=not constant_weights)
    feeds = {"x": X} if constant_weights else {"x": X, "w": W, "b": B}
    (y,) = run_ep_host(model, feeds)
    np.testing.assert_allclose(y, fn(conv_reference()), rtol=1e-5, atol=1e-5)


def test_an_unknown_activation_is_declined_with_its_name():
    import ep_host

    model = fused_model("Softplus", [])
    with pytest.raises(ep_host.PlacementError, match="FusedConv: CPU EP applies activation"):
        ep_host.InferenceSession(model.SerializeToString(), ["cpu"])
