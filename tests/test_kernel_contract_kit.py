"""The author kit's check of prepacked constants and workspaces
(``kit.kernel_contract_problems``, the ``assert_kernel_contract`` fixture): the CPU EP keeps the
contract; a kernel that relies on a zeroed workspace, one whose packing key is too broad, and
one whose key differs between sessions are each named."""

from __future__ import annotations

import numpy as np
from hostkit import InlineProvider, make_model
from onnx import TensorProto, helper, numpy_helper
from test_pytest_plugin import run_pytest

from ep_host import Kernel, Workspace, hookimpl
from ep_host.testing.kit import kernel_contract_problems, same_bits


def cnn_model():
    """Conv (Winograd and im2col), Gemm with transB and MatMul: what the CPU EP packs."""
    rng = np.random.default_rng(0)
    weights = {
        "w1": rng.standard_normal((32, 3, 3, 3)).astype(np.float32),
        "w2": rng.standard_normal((32, 32, 3, 3)).astype(np.float32),
        "shape": np.array([1, -1], np.int64),
        "g": rng.standard_normal((10, 32 * 8 * 8)).astype(np.float32),
        "c": rng.standard_normal(10).astype(np.float32),
        "m": rng.standard_normal((10, 4)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Conv", ["a", "w2"], ["b"], pads=[1, 1, 1, 1]),
        helper.make_node("Reshape", ["b", "shape"], ["f"]),
        helper.make_node("Gemm", ["f", "g", "c"], ["h"], transB=1, beta=0.5),
        helper.make_node("MatMul", ["h", "m"], ["y"]),
    ]
    return make_model(nodes, [("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                      [("y", TensorProto.FLOAT, [1, 4])],
                      initializers=[numpy_helper.from_array(a, n) for n, a in weights.items()])


def test_the_cpu_ep_keeps_the_contract():
    assert kernel_contract_problems(cnn_model(), ["cpu"]) == []


class Product(Kernel):
    """y = x @ B' with B' = B.T when ``transB`` else B, packed in ``prepare``."""

    def __init__(self, trans_b, key, scratch):
        self.trans_b = trans_b
        self.key = key
        self.scratch = scratch

    def prepare(self, constants):
        b = constants[1]
        self.packed = np.ascontiguousarray(b.T if self.trans_b else b)

    def prepacked(self):
        return {self.key(self): ((1,), self.packed)}

    def adopt_prepacked(self, key, state):
        self.packed = state

    def workspace(self, inputs):
        return Workspace(4096) if self.scratch else None

    def run(self, x, b, workspace=None):
        y = x @ self.packed
        if workspace is not None and self.scratch == "assumes zeros":
            acc = workspace[:y.nbytes].view(y.dtype).reshape(y.shape)
            out = acc + y  # the bug: the workspace is not zero on the second run
            acc[...] = y  # and this run leaves y there (the first run's memory may hold a NaN,
            return (out,)  # which a sum alone would carry into every run alike)
        return (y,)


class ProductProvider(InlineProvider):
    def __init__(self, key, scratch=None):
        super().__init__("mine", ops=("Gemm",))
        self.key = key
        self.scratch = scratch

    @hookimpl
    def ep_host_create_kernel(self, node, context):
        return Product(bool(node.attributes["transB"]), self.key, self.scratch)


def gemm_pair():
    """The same square B read twice, once transposed: only a key naming transB tells them."""
    b = np.arange(9, dtype=np.float32).reshape(3, 3)
    nodes = [helper.make_node("Gemm", ["x", "b"], ["h"], transB=0, name="plain"),
             helper.make_node("Gemm", ["h", "b"], ["y"], transB=1, name="transposed")]
    return make_model(nodes, [("x", TensorProto.FLOAT, [2, 3])], [("y", TensorProto.FLOAT, [2, 3])],
                      initializers=[numpy_helper.from_array(b, "b")])


def problems_of(host, provider):
    host.register(provider, "mine")
    return kernel_contract_problems(gemm_pair(), ["mine"], host=host)


def test_a_good_kernel_has_no_problem(host):
    assert problems_of(host, ProductProvider(lambda k: f"b/trans={k.trans_b}", "clean")) == []


def test_a_kernel_relying_on_a_zeroed_workspace_is_named(host):
    problems = problems_of(host, ProductProvider(lambda k: f"b/trans={k.trans_b}",
                                                 "assumes zeros"))
    assert problems[0] == ("output 'y' of the second run of a session (its workspaces hold the "
                           "first run's data) differs from a session's first run without sharing")


def test_a_packing_key_that_leaves_out_an_attribute_is_named(host):
    problems = problems_of(host, ProductProvider(lambda k: "b"))
    assert "output 'y' of a session sharing prepacked constants differs from a session's " \
           "first run without sharing" in problems


def test_a_key_that_differs_between_sessions_is_named(host):
    problems = problems_of(host, ProductProvider(lambda k: f"b/trans={k.trans_b}/{id(k)}"))
    assert len(problems) == 2 and all("was not adopted by a second session" in p
                                      for p in problems)
    assert problems[0].startswith("node 'plain' on 'mine': the state offered under packing key")


def test_same_bits_tells_negative_zero_and_dtypes_apart():
    assert same_bits(np.array([0.0, np.nan]), np.array([0.0, np.nan]))
    assert not same_bits(np.array([0.0]), np.array([-0.0]))
    assert not same_bits(np.array([1], np.int32), np.array([1], np.int64))
    assert same_bits([np.array([1])], [np.array([1])]) and not same_bits([np.array([1])], [])


FIXTURE_TESTS = '''
import numpy as np


def test_relu_keeps_the_contract(one_node_model, assert_kernel_contract):
    assert_kernel_contract(one_node_model("Relu", {"x": (np.float32, [2, 3])}))
'''


def test_the_fixture_on_the_provider_under_test(tmp_path):
    (tmp_path / "test_mine.py").write_text(FIXTURE_TESTS)
    done = run_pytest(tmp_path, "--ep-host-provider", "example", "test_mine.py")
    assert "PASSED test_mine.py::test_relu_keeps_the_contract" in done.stdout, done.stdout


def guide_sample(marker):
    import re
    from pathlib import Path

    guide = (Path(__file__).resolve().parent.parent / "docs" / "ep-author-guide.md").read_text()
    (sample,) = [b for b in re.findall(r"```python\n(.*?)```", guide, re.S) if marker in b]
    namespace = {}
    exec(sample, namespace)
    return namespace


def test_the_guides_packed_matmul_shares_between_sessions(host):
    from ep_host import InferenceSession

    packed_matmul = guide_sample("class PackedMatMul")["PackedMatMul"]

    class Guide(InlineProvider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            return packed_matmul()

    host.register(Guide("mine", ops=("MatMul",)), "mine")
    b = np.arange(12, dtype=np.float32).reshape(3, 4)
    model = make_model([helper.make_node("MatMul", ["x", "b"], ["y"], name="mm")],
                       [("x", TensorProto.FLOAT, [2, 3])], [("y", TensorProto.FLOAT, [2, 4])],
                       initializers=[numpy_helper.from_array(b, "b")]).SerializeToString()
    first = InferenceSession(model, providers=["mine"], host=host, share_prepacked=True)
    second = InferenceSession(model, providers=["mine"], host=host, share_prepacked=True)
    assert [u.adopted for u in first.prepacked + second.prepacked] == [False, True]
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(second.run(None, {"x": x})[0], x @ b)
    assert kernel_contract_problems(model, ["mine"], host=host) == []


def test_the_guides_im2col_asks_for_its_columns():
    im2col = guide_sample("class Im2col")["Im2col"]()
    f32 = np.dtype(np.float32)
    assert im2col.workspace([(f32, (1, 3, 8, 8)), (f32, (4, 3, 3, 3))]) == Workspace(
        9 * 192 * 4, "run")
    assert im2col.workspace([(f32, ("N", 3, 8, 8)), (f32, (4, 3, 3, 3))]) is None
