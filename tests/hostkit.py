"""Helpers for the host's tests: tiny models built with onnx.helper, inline providers,
fake installed distributions."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from ep_host import Cost, FunctionKernel, KernelMatch, ProviderInfo, hookimpl


def make_model(nodes, inputs, outputs, *, opset=17, initializers=(), domains=(), value_info=()):
    graph = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        initializer=list(initializers), value_info=list(value_info),
    )
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in domains]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return model


def conv_relu_model() -> bytes:
    """Conv then Relu, float32 [1, 1, 2, 2] -> [1, 2, 2, 2]: the optimizer fuses them, so a
    session runs another model than the one it loaded."""
    w = np.ones((2, 1, 1, 1), np.float32)
    return make_model([helper.make_node("Conv", ["x", "w"], ["c"]),
                       helper.make_node("Relu", ["c"], ["y"])],
                      [("x", TensorProto.FLOAT, [1, 1, 2, 2])],
                      [("y", TensorProto.FLOAT, [1, 2, 2, 2])],
                      initializers=[numpy_helper.from_array(w, "w")]).SerializeToString()


def add_relu_model():
    """x, y -> Add -> Relu -> out, float32 [2, 3]."""
    return make_model(
        [helper.make_node("Add", ["x", "y"], ["s"], name="add"),
         helper.make_node("Relu", ["s"], ["out"], name="relu")],
        [("x", TensorProto.FLOAT, [2, 3]), ("y", TensorProto.FLOAT, [2, 3])],
        [("out", TensorProto.FLOAT, [2, 3])],
    )


def random_dag(rng, n_nodes, shape):
    """A model of ``n_nodes`` Add/Relu nodes over earlier values (``rng``: ``random.Random``),
    float32 tensors of ``shape``; values nobody reads (and a fifth of the others) are outputs."""
    values, nodes = ["x", "y"], []
    for i in range(n_nodes):
        if rng.random() < 0.5:
            a, b = rng.choice(values), rng.choice(values)
            nodes.append(helper.make_node("Add", [a, b], [f"v{i}"], name=f"n{i}"))
        else:
            nodes.append(helper.make_node("Relu", [rng.choice(values)], [f"v{i}"], name=f"n{i}"))
        values.append(f"v{i}")
    consumed = {x for n in nodes for x in n.input}
    outs = [v for v in values[2:] if v not in consumed or rng.random() < 0.2]
    return make_model(nodes, [("x", TensorProto.FLOAT, shape), ("y", TensorProto.FLOAT, shape)],
                      [(o, TensorProto.FLOAT, shape) for o in outs])


def random_costs(rng, names, providers, high):
    """Per provider, the nodes it claims (each with 0.8 chance, every node by someone) and a
    cost in [1, ``high``) us each."""
    costs = [{} for _ in range(providers)]
    for name in names:
        claim = [rng.random() < 0.8 for _ in range(providers)]
        if not any(claim):
            claim[rng.randrange(providers)] = True
        for k, c in enumerate(claim):
            if c:
                costs[k][name] = round(rng.uniform(1.0, high), 3)
    return costs


class InlineProvider:
    """A provider object for tests: claims ``ops`` at ``cost_us`` each, computing with numpy."""

    FUNCS = {"Add": np.add, "Relu": lambda x: np.maximum(x, 0), "Mul": np.multiply,
             "Neg": np.negative, "Sub": np.subtract}

    def __init__(self, name, ops=("Add", "Relu"), cost_us=1.0, device=None, **info):
        self.name = name
        self.ops = set(ops)
        self.cost_us = cost_us
        self.device = device
        self.info = info
        self.created = []
        self.asked = []

    @hookimpl
    def ep_host_provider_info(self):
        kwargs = dict(self.info)
        if self.device is not None:
            kwargs["device"] = self.device
        return ProviderInfo(name=self.name, **kwargs)

    @hookimpl
    def ep_host_supports_op(self, node, context):
        self.asked.append(node.name)
        if node.op_type not in self.ops:
            return KernelMatch.unsupported(f"{node.op_type}: {self.name} only runs "
                                           f"{', '.join(sorted(self.ops))}", code="op")
        return KernelMatch.supported(Cost(compute_us=self.cost_us))

    @hookimpl
    def ep_host_create_kernel(self, node, context):
        self.created.append(node.name)
        return FunctionKernel(self.FUNCS[node.op_type])


def write_distribution(
    root: Path, dist: str, entry_points: dict[str, str], modules: dict[str, str]
):
    """A fake installed distribution: ``<dist>-1.0.dist-info`` plus its modules, under ``root``."""
    info = root / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    lines = ["[ep_host.providers]"] + [f"{k} = {v}" for k, v in entry_points.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    for name, source in modules.items():
        (root / f"{name}.py").write_text(textwrap.dedent(source))
    return info

