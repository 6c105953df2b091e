"""Providers that compile: each maximal connected group of nodes placed on them becomes one
kernel and one step, groups never make the graph cyclic, and a failed compile falls back."""

import io

import numpy as np
import pytest
from hostkit import InlineProvider, make_model
from onnx import TensorProto, helper

from ep_host import InferenceSession, Kernel, KernelError, hookimpl
from ep_host.tracing import Tracer

F = TensorProto.FLOAT


class GroupKernel(Kernel):
    """Runs a partition's nodes one after another with numpy."""

    def __init__(self, partition, funcs):
        self.partition = partition
        self.funcs = funcs

    def run(self, *inputs):
        p = self.partition
        env = dict(zip((v.name for v in p.inputs), inputs, strict=True))
        env.update((c.name, c.value) for c in p.constants)
        for node in p.nodes:
            env[node.outputs[0].name] = self.funcs[node.op_type](
                *(env[v.name] for v in node.inputs))
        return tuple(env[v.name] for v in p.outputs)


class Compiler(InlineProvider):
    def __init__(self, name="comp", ops=("Add", "Mul", "Relu"), fail=False, **kwargs):
        super().__init__(name, ops=ops, cost_us=0.1, **kwargs)
        self.partitions = []
        self.fail = fail

    @hookimpl
    def ep_host_compile_partition(self, partition, context):
        self.partitions.append(partition)
        if self.fail:
            raise RuntimeError("compiler says no: layout not supported")
        return GroupKernel(partition, self.FUNCS)


def session(host, model, compiler, **kwargs):
    host.register(compiler, name=compiler.name)
    host.register(InlineProvider("cpu", ops=("Add", "Mul", "Relu", "Neg", "Sub"), cost_us=5.0),
                  name="cpu")
    return InferenceSession(model.SerializeToString(), providers=[compiler.name, "cpu"], host=host,
                            strategy="greedy", optimizations=(), **kwargs)


def chain():
    return make_model([helper.make_node("Add", ["x", "x"], ["a"], name="add"),
                       helper.make_node("Relu", ["a"], ["r"], name="relu"),
                       helper.make_node("Mul", ["r", "a"], ["y"], name="mul")],
                      [("x", F, [4])], [("y", F, [4])])


def test_connected_nodes_on_a_compiling_provider_run_as_one_step(host):
    compiler = Compiler()
    s = session(host, chain(), compiler)
    (part,) = compiler.partitions
    assert [n.name for n in part.nodes] == ["add", "relu", "mul"]
    assert [v.name for v in part.inputs] == ["x"] and [v.name for v in part.outputs] == ["y"]
    assert [(st.kind, st.name) for st in s._steps] == [("partition", "comp partition 1")]
    x = np.array([-1.0, 0.5, 2.0, -3.0], np.float32)
    (y,) = s.run(None, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(2 * x, 0) * (2 * x))


def test_a_path_that_leaves_a_group_and_comes_back_splits_it(host):
    """add -> neg (cpu) -> mul, and add -> mul: one group of add and mul would need neg's result
    inside it and give neg its input from it; the host makes two partitions."""
    model = make_model([helper.make_node("Add", ["x", "x"], ["a"], name="add"),
                        helper.make_node("Neg", ["a"], ["b"], name="neg"),
                        helper.make_node("Mul", ["a", "b"], ["y"], name="mul")],
                       [("x", F, [3])], [("y", F, [3])])
    compiler = Compiler()
    s = session(host, model, compiler)
    assert [[n.name for n in p.nodes] for p in compiler.partitions] == [["add"], ["mul"]]
    assert [v.name for v in compiler.partitions[0].outputs] == ["a"]
    assert [st.kind for st in s._steps] == ["partition", "node", "partition"]
    x = np.array([1.0, -2.0, 3.0], np.float32)
    (y,) = s.run(None, {"x": x})
    np.testing.assert_array_equal(y, (2 * x) * -(2 * x))


def test_a_value_read_outside_is_an_output_and_inner_values_are_not(host):
    model = make_model([helper.make_node("Add", ["x", "x"], ["a"], name="add"),
                        helper.make_node("Relu", ["a"], ["r"], name="relu"),
                        helper.make_node("Neg", ["r"], ["n"], name="neg"),
                        helper.make_node("Mul", ["a", "x"], ["m"], name="mul")],
                       [("x", F, [2])], [("n", F, [2]), ("m", F, [2])])
    compiler = Compiler()
    s = session(host, model, compiler)
    (part,) = compiler.partitions
    assert [n.name for n in part.nodes] == ["add", "relu", "mul"]
    assert sorted(v.name for v in part.outputs) == ["m", "r"]
    x = np.array([-1.0, 2.0], np.float32)
    n, m = s.run(None, {"x": x})
    np.testing.assert_array_equal(n, -np.maximum(2 * x, 0))
    np.testing.assert_array_equal(m, 2 * x * x)


def test_a_failed_compile_warns_and_runs_the_nodes_one_by_one(host):
    compiler = Compiler(fail=True)
    s = session(host, chain(), compiler)
    (warning,) = [w for w in s.model.warnings if "compile" in w]
    assert "'comp'" in warning and "add, relu, mul" in warning
    assert "compiler says no: layout not supported" in warning
    assert [st.kind for st in s._steps] == ["node", "node", "node"]
    assert {st.provider for st in s._steps} == {"comp"}
    x = np.array([-1.0, 0.5, 2.0, -3.0], np.float32)
    (y,) = s.run(None, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(2 * x, 0) * (2 * x))


def test_a_failed_compile_raises_when_strict():
    from ep_host.discovery import Host

    with pytest.raises(KernelError, match="failed to compile partition 'comp partition 1' "
                                          r"\(nodes add, relu, mul\).*compiler says no"):
        session(Host(strict=True), chain(), Compiler(fail=True))


def test_a_traced_run_has_one_span_per_partition_listing_its_nodes(host):
    tracer = Tracer()
    s = session(host, chain(), Compiler(), trace=tracer)
    s.run(None, {"x": np.ones(4, np.float32)})
    (span,) = [e for e in tracer.events if e["cat"] == "node"]
    assert span["name"] == "comp partition 1"
    assert span["args"]["nodes"] == "add, relu, mul" and span["args"]["provider"] == "comp"
    placed = {n.name: n.cost_us for n in s.placement.nodes}
    assert span["args"]["estimated_us"] == pytest.approx(sum(placed.values()))


def test_a_partition_compiled_by_onnxruntime_from_its_model_gives_the_same_outputs(host):
    """The partition's standalone model, compiled by a real runtime, is the group."""
    import onnxruntime

    class OrtKernel(Kernel):
        def __init__(self, partition):
            self.names = [v.name for v in partition.inputs]
            self.session = onnxruntime.InferenceSession(
                partition.to_model().SerializeToString(), providers=["CPUExecutionProvider"])

        def run(self, *inputs):
            return self.session.run(None, dict(zip(self.names, inputs, strict=True)))

    class OrtCompiler(Compiler):
        @hookimpl
        def ep_host_compile_partition(self, partition, context):
            self.partitions.append(partition)
            return OrtKernel(partition)

    model = make_model([helper.make_node("Add", ["x", "w"], ["a"], name="add"),
                        helper.make_node("Neg", ["a"], ["b"], name="neg"),
                        helper.make_node("Relu", ["b"], ["r"], name="relu"),
                        helper.make_node("Mul", ["r", "a"], ["y"], name="mul")],
                       [("x", F, [2, 3])], [("y", F, [2, 3])],
                       initializers=[helper.make_tensor("w", F, [3], [1.0, -2.0, 0.5])])
    compiler = OrtCompiler()
    s = session(host, model, compiler)
    assert [[n.name for n in p.nodes] for p in compiler.partitions] == [["add"], ["relu", "mul"]]
    assert [v.name for v in compiler.partitions[0].constants] == ["w"]
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    (y,) = s.run(None, {"x": x})
    a = x + np.array([1.0, -2.0, 0.5], np.float32)
    np.testing.assert_allclose(y, np.maximum(-a, 0) * a, rtol=1e-6)


def test_place_json_and_the_report_show_compiled_partitions(host, tmp_path):
    """The placement lists the groups each compiling provider gets, with members and times."""
    from ep_host.capability import walk
    from ep_host.loading import load_model
    from ep_host.placement import choose
    from ep_host.report import Output, render_placement
    from ep_host.report_html import write_report

    model = make_model([helper.make_node("Add", ["x", "x"], ["a"], name="add"),
                        helper.make_node("Neg", ["a"], ["b"], name="neg"),
                        helper.make_node("Mul", ["a", "b"], ["y"], name="mul")],
                       [("x", F, [3])], [("y", F, [3])])
    host.register(Compiler(partition_launch_us=7.0), name="comp")
    host.register(InlineProvider("cpu", ops=("Neg",), cost_us=5.0), name="cpu")
    loaded = load_model(model)
    placement = choose(walk(host, loaded, ["comp", "cpu"]), {}, strategy="greedy")
    data = placement.to_dict()
    assert data["compiled_partitions"] == [
        {"provider": "comp", "nodes": ["add"], "cost_us": 0.1, "launch_us": 7.0},
        {"provider": "comp", "nodes": ["mul"], "cost_us": 0.1, "launch_us": 7.0}]
    # add is fed from outside (a full launch); mul from add (same provider) and neg (another):
    # half a launch. The cycle split that makes mul a partition of its own is not priced.
    assert data["totals"]["partition_launch_us"] == pytest.approx(7.0 + 3.5)
    stream = io.StringIO()
    render_placement(Output(stream, rich=False), placement)
    text = stream.getvalue()
    assert "2 compiled partition(s)" in text and "0.10 us + 7.00 us launch" in text
    assert "partition launches 10.50 us" in text
    report = tmp_path / "r.html"
    write_report(str(report), placement.table, placement, "m")
    assert '"compiled":[[0,["add"],0.1,7.0],[0,["mul"],0.1,7.0]]' in report.read_text()


def test_kernels_and_partitions_learn_the_sessions_thread_count(host):
    seen = []

    class Counting(Compiler):
        @hookimpl
        def ep_host_compile_partition(self, partition, context):
            seen.append(context.intra_op_num_threads)
            return GroupKernel(partition, self.FUNCS)

    session(host, chain(), Counting(), intra_op_num_threads=3)
    assert seen == [3]
