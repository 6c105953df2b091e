"""The contract itself: every hook is tested by name, documented, and behaves as documented."""

import inspect
import re
from pathlib import Path

import numpy as np
import pytest
from hostkit import InlineProvider, add_relu_model

from ep_host import (
    CONTRACT_VERSION,
    InferenceSession,
    Kernel,
    KernelMatch,
    ProviderInfo,
    hookimpl,
    hookspecs,
)
from ep_host.capability import walk
from ep_host.loading import load_model

ROOT = Path(__file__).resolve().parent.parent
SPECS = [name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
         if name.startswith("ep_host_")]


def test_the_contract_has_the_five_hooks():
    assert sorted(SPECS) == ["ep_host_compile_partition", "ep_host_create_kernel",
                             "ep_host_infer_types", "ep_host_provider_info",
                             "ep_host_supports_op"]


def test_every_hookspec_has_a_test_named_after_it():
    sources = "\n".join(p.read_text() for p in (ROOT / "tests").glob("test_*.py"))
    for name in SPECS:
        assert re.search(rf"def test_{name}\b", sources), f"no test named test_{name}"


def test_every_hookspec_has_a_section_in_the_author_guide():
    guide = (ROOT / "docs" / "ep-author-guide.md").read_text()
    for name in SPECS:
        assert f"### {name}" in guide, f"docs/ep-author-guide.md has no section for {name}"


def test_every_hookspec_documents_its_parameters_return_and_faults():
    for name in SPECS:
        fn = getattr(hookspecs, name)
        doc = inspect.getdoc(fn)
        for param in inspect.signature(fn).parameters:
            assert f":param {param}:" in doc, f"{name} does not document {param}"
        assert ":return:" in doc and "Raising" in doc and "Example::" in doc


def test_ep_host_provider_info(host):
    record = host.register(InlineProvider("mine", version="2.1"), name="mine")
    assert isinstance(record.info, ProviderInfo)
    assert (record.info.name, record.info.version, record.status) == ("mine", "2.1", "available")
    assert record.info.contract_version == CONTRACT_VERSION


def test_ep_host_supports_op(host):
    provider = InlineProvider("mine", ops=("Relu",))
    host.register(provider, name="mine")
    table = walk(host, load_model(add_relu_model()), ["mine"])
    assert provider.asked == ["add", "relu"]
    assert isinstance(table.answers["relu"]["mine"], KernelMatch)
    assert table.answers["relu"]["mine"].is_supported
    assert table.answers["add"]["mine"].reason == "Add: mine only runs Relu"


def test_ep_host_create_kernel(host, tensors):
    provider = InlineProvider("mine")
    host.register(provider, name="mine")
    session = InferenceSession(add_relu_model().SerializeToString(), providers=["mine"], host=host)
    assert provider.created == ["add", "relu"]
    assert all(isinstance(s.kernel, Kernel) for s in session._steps)
    (out,) = session.run(None, {"x": tensors.x, "y": tensors.y})
    np.testing.assert_array_equal(out, np.maximum(tensors.x + tensors.y, 0))


def test_ep_host_compile_partition(host, tensors):
    """A provider with the hook gets its connected nodes as one PartitionView and runs them as
    one kernel; ``supports_op`` still answers per node."""
    from ep_host import FunctionKernel, PartitionView, hookimpl

    class Compiling(InlineProvider):
        def __init__(self, name):
            super().__init__(name)
            self.partitions = []

        @hookimpl
        def ep_host_compile_partition(self, partition, context):
            self.partitions.append(partition)
            return FunctionKernel(lambda x, y: np.maximum(x + y, 0))

    provider = Compiling("mine")
    host.register(provider, name="mine")
    session = InferenceSession(add_relu_model().SerializeToString(), providers=["mine"], host=host)
    (partition,) = provider.partitions
    assert isinstance(partition, PartitionView) and partition.provider == "mine"
    assert [n.name for n in partition.nodes] == ["add", "relu"]
    assert provider.asked == ["add", "relu"] and provider.created == []
    (out,) = session.run(None, {"x": tensors.x, "y": tensors.y})
    np.testing.assert_array_equal(out, np.maximum(tensors.x + tensors.y, 0))


def _custom_then_neg_model(neg_name="neg"):
    """x -> com.mine::Double -> d -> Neg -> y: onnx cannot type ``d`` or ``y``."""
    from onnx import TensorProto, ValueInfoProto, helper

    graph = helper.make_graph(
        [helper.make_node("Double", ["x"], ["d"], name="double", domain="com.mine"),
         helper.make_node("Neg", ["d"], ["y"], name=neg_name)],
        "custom", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "n"])],
        [ValueInfoProto(name="y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.mine", 1)])
    model.ir_version = 8
    return model.SerializeToString()


class Declaring(InlineProvider):
    """Runs com.mine::Double and Neg, declines any input of unknown type, and declares Double's
    output with ``declare``."""

    FUNCS = {**InlineProvider.FUNCS, "Double": lambda x: 2 * x}

    def __init__(self, name, declare):
        super().__init__(name, ops=("Double", "Neg"))
        self.declare = declare
        self.declared_for = []

    @hookimpl
    def ep_host_supports_op(self, node, context):
        if any(v is not None and v.dtype is None for v in node.inputs):
            return KernelMatch.unsupported(f"{node.name}: input type unknown", code="dtype")
        return super().ep_host_supports_op(node, context)

    @hookimpl
    def ep_host_infer_types(self, node, context):
        self.declared_for.append(node.name)
        return self.declare(node)


def test_ep_host_infer_types(host):
    """The declared type reaches the node downstream through shape inference: Neg is claimed."""
    provider = Declaring("mine", lambda node: [(node.inputs[0].dtype, node.inputs[0].shape)])
    host.register(provider, name="mine")
    session = InferenceSession(_custom_then_neg_model(), providers=["mine"], host=host)
    assert provider.declared_for == ["double"]
    neg = session.placement.table.answer("neg", "mine")
    assert neg.is_supported, neg.reason
    (y,) = session.get_outputs()
    assert (y.type, y.shape) == ("tensor(float)", [2, "n"])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], -2 * x)


def test_ep_host_infer_types_fault_is_a_warning_naming_provider_and_node(host):
    provider = Declaring("mine", lambda node: [("float99", None)])
    host.register(provider, name="mine")
    from ep_host.declared_types import declare_output_types
    from ep_host.errors import PlacementError, ProviderError

    model = declare_output_types(host, load_model(_custom_then_neg_model()), ["mine"])
    assert any("provider 'mine' failed to declare the output types of node 'double' "
               "(com.mine::Double): ValueError: output 0: unknown dtype 'float99'" in w
               for w in model.warnings), model.warnings
    with pytest.raises(PlacementError, match="neg: input type unknown"):
        InferenceSession(_custom_then_neg_model(), providers=["mine"], host=host)
    strict = type(host)(strict=True)
    strict.register(Declaring("mine", lambda node: [(None, None), ("float32", ())]), name="mine")
    with pytest.raises(ProviderError, match="expected a list of 1 .dtype, shape. pairs"):
        declare_output_types(strict, load_model(_custom_then_neg_model()), ["mine"])
