"""Running out of memory while creating or running a session is a ResourceLimitError that
names the stage, the model and its size; under an address-space limit a stage that would not
fit is refused before it starts; a provider that runs out is not blamed for a fault."""

import re
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from hostkit import InlineProvider, add_relu_model
from onnx import TensorProto, helper, numpy_helper

from ep_host import FunctionKernel, InferenceSession, ResourceLimitError, hookimpl

STAGES = ("loading", "shape inference", "optimization", "the capability walk", "placement",
          "building the plan", "a run")


class OutOfMemory(InlineProvider):
    """Raises MemoryError in the hook named by ``where``."""

    def __init__(self, *args, where, **kwargs):
        super().__init__(*args, **kwargs)
        self.where = where

    @hookimpl
    def ep_host_supports_op(self, node, context):
        if self.where == "supports_op":
            raise MemoryError
        return super().ep_host_supports_op(node, context)

    @hookimpl
    def ep_host_create_kernel(self, node, context):
        if self.where == "create_kernel":
            raise MemoryError
        if self.where == "run" and node.name == "relu":
            def exhausted(x):
                raise MemoryError
            return FunctionKernel(exhausted)
        return super().ep_host_create_kernel(node, context)


@pytest.mark.parametrize(("where", "stage"), [("supports_op", "the capability walk"),
                                              ("create_kernel", "building the plan")])
def test_a_provider_running_out_of_memory_names_the_stage(host, where, stage):
    host.register(OutOfMemory("cpu", where=where), name="cpu")
    with pytest.raises(ResourceLimitError,
                       match=rf"<model bytes>: ran out of memory during {stage} of the model "
                             r"\(2 nodes\)"):
        InferenceSession(add_relu_model().SerializeToString(), providers=["cpu"], host=host)


def test_a_kernel_running_out_of_memory_names_the_run_and_the_node(host, tensors):
    host.register(OutOfMemory("cpu", where="run"), name="cpu")
    session = InferenceSession(add_relu_model().SerializeToString(), providers=["cpu"], host=host)
    with pytest.raises(ResourceLimitError,
                       match=r"node 'relu' \(Relu\) on provider 'cpu' ran out of memory "
                             r"during a run of the model"):
        session.run(None, {"x": tensors.x, "y": tensors.y})


def chain(n):
    nodes = [helper.make_node("Add" if i % 2 == 0 else "Relu",
                              [f"v{i}", "one"] if i % 2 == 0 else [f"v{i}"], [f"v{i + 1}"])
             for i in range(n)]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info(f"v{n}", TensorProto.FLOAT, [1])],
        initializer=[numpy_helper.from_array(np.ones(1, np.float32), "one")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


UNDER_A_LIMIT = textwrap.dedent("""
    import resource, sys
    import numpy as np
    from ep_host import InferenceSession, ResourceLimitError
    from ep_host.discovery import Host
    host = Host.discover(["cpu"])
    # a first session loads every library lazily (dlopen cannot fail cleanly under a limit)
    InferenceSession(sys.argv[3],
                     providers=["cpu"], host=host).run(None, {"v0": np.zeros(1, np.float32)})
    with open("/proc/self/status") as f:
        size = next(int(line.split()[1]) for line in f if line.startswith("VmSize:")) * 1024
    limit = size + int(sys.argv[2]) * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        session = InferenceSession(sys.argv[1], providers=["cpu"], host=host)
        session.run(None, {"v0": np.zeros(1, np.float32)})
    except ResourceLimitError as exc:
        print("ResourceLimitError:", exc)
    else:
        print("no error")
""")


@pytest.fixture(scope="module")
def chains(tmp_path_factory):
    folder = tmp_path_factory.mktemp("oom")
    onnx.save(chain(60_000), str(folder / "chain.onnx"))
    onnx.save(chain(2), str(folder / "small.onnx"))
    return str(folder / "chain.onnx"), str(folder / "small.onnx")


@pytest.mark.parametrize("headroom_mb", [30, 100, 160])
def test_a_model_too_big_for_the_address_space_is_a_resource_limit_error(chains, headroom_mb):
    big_chain, small = chains
    done = subprocess.run([sys.executable, "-c", UNDER_A_LIMIT, big_chain, str(headroom_mb),
                           small],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    out = done.stdout.strip()
    # refused before the stage (the limit leaves too little for it) or when it ran out
    assert re.match(rf"ResourceLimitError: {re.escape(big_chain)}: (would run|ran) out of "
                    "memory during ", out), out
    stage = out.split("during ", 1)[1].split(" of the model")[0]
    assert stage in STAGES, out
    if stage not in ("loading", "a run"):
        assert "(60000 nodes)" in out
