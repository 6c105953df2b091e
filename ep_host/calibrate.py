"""Measuring calibration (``ep-host calibrate``): single-op models per op family run through
:class:`~ep_host.session.InferenceSession` with a tracer on each provider; the fitted factors
are stored by ``ep_host.calibration``, which cost models read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ep_host import node_times
from ep_host.calibration import (
    Factors,
    family_factors,
    load_profile,
    machine_load,
    measured_under,
    profile_path,
    provider_calibration,
    save_profile,
)
from ep_host.capability import walk
from ep_host.errors import HostError
from ep_host.loading import load_model
from ep_host.node_times import NodeTime
from ep_host.optimize import optimize
from ep_host.session import InferenceSession
from ep_host.testing.models import random_inputs
from ep_host.tracing import Tracer


@dataclass(frozen=True)
class Case:
    """One single-op model: ``op`` on float32 inputs of ``shapes`` (constants ride along)."""

    family: str
    name: str
    build: Callable[[], Any]


def single_op_model(op: str, shapes: Sequence[Sequence[int]],
                    out_shape: Sequence[int] | None = None, consts: dict[str, Any] | None = None,
                    opset: int = 17, **attrs: Any) -> onnx.ModelProto:
    """A model of one ``op`` node on float32 inputs of ``shapes`` and the constants ``consts``,
    writing ``y``."""
    names = [f"x{i}" for i in range(len(shapes))]
    inits = []
    for cname, value in (consts or {}).items():
        inits.append(numpy_helper.from_array(np.asarray(value), cname))
        names.append(cname)
    node = helper.make_node(op, names, ["y"], name=op.lower(), **attrs)
    graph = helper.make_graph(
        [node], op.lower(),
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s))
         for n, s in zip(names, shapes, strict=False)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def default_cases() -> list[Case]:
    """Small and large cases per family: the small ones show per-call overhead, the large ones
    throughput."""
    cases = []

    def add(family: str, name: str, build: Callable[[], Any]) -> None:
        cases.append(Case(family, name, build))

    for n in (64, 16_384, 1_048_576):
        add("elementwise", f"Add[{n}]", lambda n=n: single_op_model("Add", [(n,), (n,)]))
        add("elementwise", f"Relu[{n}]", lambda n=n: single_op_model("Relu", [(n,)]))
        add("transcendental", f"Sigmoid[{n}]", lambda n=n: single_op_model("Sigmoid", [(n,)]))
        add("transcendental", f"Tanh[{n}]", lambda n=n: single_op_model("Tanh", [(n,)]))
    for m, k, n in ((8, 8, 8), (64, 256, 64), (256, 512, 256), (512, 1024, 512)):
        add("matmul", f"MatMul[{m}x{k}x{n}]",
            lambda m=m, k=k, n=n: single_op_model("MatMul", [(m, k), (k, n)]))
    for c, hw, k in ((3, 8, 4), (16, 28, 16), (64, 56, 64)):
        add("conv", f"Conv[{c}->{k},{hw}x{hw},3x3]",
            lambda c=c, hw=hw, k=k: single_op_model("Conv", [(1, c, hw, hw), (k, c, 3, 3)],
                                               pads=[1, 1, 1, 1]))
        add("pool", f"MaxPool[{c},{hw}x{hw},2x2]",
            lambda c=c, hw=hw: single_op_model("MaxPool", [(1, c, hw, hw)], kernel_shape=[2, 2],
                                          strides=[2, 2]))
        add("pool", f"AveragePool[{c},{hw}x{hw},3x3]",
            lambda c=c, hw=hw: single_op_model("AveragePool", [(1, c, hw, hw)],
                                          kernel_shape=[3, 3], strides=[1, 1]))
    for rows, cols in ((4, 16), (128, 256), (1024, 1024)):
        add("normalization", f"Softmax[{rows}x{cols}]",
            lambda r=rows, c=cols: single_op_model("Softmax", [(r, c)], axis=-1))
        add("reduce", f"ReduceMean[{rows}x{cols}]",
            lambda r=rows, c=cols: single_op_model("ReduceMean", [(r, c)], axes=[-1]))
        add("data_movement", f"Transpose[{rows}x{cols}]",
            lambda r=rows, c=cols: single_op_model("Transpose", [(r, c)], perm=[1, 0]))
        add("data_movement", f"Concat[2x{rows}x{cols}]",
            lambda r=rows, c=cols: single_op_model("Concat", [(r, c), (r, c)], axis=0))
    return cases


@dataclass
class Sample:
    provider: str
    family: str
    case: str
    estimated_us: float  # the provider's estimate when measured
    measured_us: float  # the best kernel time over the repeats (timeit's rule: least noise)
    # run as a one-node partition of a compiling provider, its launch taken off measured_us
    partition: bool = False
    op: str = ""  # the case's op, qualified as NodeView.qualified_op writes it

    def to_dict(self) -> dict[str, Any]:
        return {"provider": self.provider, "family": self.family, "case": self.case,
                "op": self.op, "estimated_us": self.estimated_us,
                "measured_us": self.measured_us}


def measure_case(case: Case, provider: str, repeats: int = 15, host: Any = None) -> Sample | str:
    """Time ``case`` on ``provider`` alone; a string says why it could not (a decline)."""
    model = case.build()
    tracer = Tracer()
    try:
        session = InferenceSession(model.SerializeToString(), providers=[provider], host=host,
                                   trace=tracer)
    except HostError as exc:
        return str(exc).splitlines()[-1].strip()
    feeds = {k: v.astype(np.float32) for k, v in random_inputs(model).items()}
    session.run(None, feeds)  # warm-up: allocations, first-call work
    start = len(tracer.events)
    for _ in range(repeats):
        session.run(None, feeds)
    spans = [e for e in tracer.events[start:] if e["cat"] in ("node", "partition")]
    if not spans:
        return "no node ran"
    # a provider that compiles partitions ran the one node as a partition: its launch is priced
    # per partition (ProviderInfo.partition_launch_us), not by the node's factors
    launch_us = session.placement.table.partition_launch_us.get(provider, 0.0)
    node = model.graph.node[0]
    op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
    return Sample(provider, case.family, case.name, float(spans[0]["args"]["estimated_us"]),
                  max(min(e["dur"] for e in spans) - launch_us, 0.0), partition=launch_us > 0,
                  op=op)


def fit(samples: Iterable[Sample]) -> Factors:
    """``measured = overhead + scale * estimated`` by least squares on relative error, with
    ``overhead >= 0`` and ``scale > 0``."""
    samples = list(samples)
    if samples and all(s.partition for s in samples):
        return fit_scale(samples)
    pts = [(s.estimated_us, s.measured_us) for s in samples if s.measured_us > 0]
    if not pts:
        return Factors(0.0, 1.0)
    e = np.array([p[0] for p in pts])
    m = np.array([p[1] for p in pts])
    if len(pts) >= 2 and np.ptp(e) > 0:
        a, k = np.linalg.lstsq(np.stack([1 / m, e / m], axis=1), np.ones_like(m), rcond=None)[0]
        if a >= 0 and k > 0:
            return Factors(float(a), float(k))
    positive = e > 0
    if positive.any():  # a pure scale: the geometric mean of measured / estimated
        k = float(np.exp(np.mean(np.log(m[positive] / e[positive]))))
        return Factors(0.0, k)
    return Factors(float(np.median(m)), 1.0)


def fit_scale(samples: Sequence[Sample], large_us: float = 20.0) -> Factors:
    """A pure scale (geometric mean of measured / estimated) for a provider whose per-call cost
    is its partition launch, already priced once per partition: a per-node overhead would
    charge it again on every node. Cases estimated under ``large_us``, where what is left of
    the call's cost dominates, count only when there is no larger one."""
    pts = [(s.estimated_us, s.measured_us) for s in samples
           if s.estimated_us > 0 and s.measured_us > 0]
    large = [p for p in pts if p[0] >= large_us] or pts
    if not large:
        return Factors(0.0, 1.0)
    return Factors(0.0, float(np.exp(np.mean([np.log(m / e) for e, m in large]))))


def compose(new: Factors, old: Factors | None) -> Factors:
    """Factors against the uncalibrated estimate when ``new`` was fitted on ``old``'s output."""
    if old is None:
        return new
    return Factors(new.overhead_us + new.scale * old.overhead_us, new.scale * old.scale)


def calibrate(
    providers: Sequence[str],
    cases: Sequence[Case] | None = None,
    *,
    repeats: int = 15,
    on_case: Callable[[str, str, Sample | str], None] | None = None,
    path: Path | None = None,
    host: Any = None,
) -> dict[str, Any]:
    """Measure every case on every provider, fit each family, and store the profile.

    Providers that decline a case skip it; a family with no measured case keeps its old
    factors. Besides the families, each provider's entry holds the family each measured op
    was fitted in and the factors fitted over all its cases (the host applies them to a
    provider that does not apply calibration itself: ``ProviderInfo.applies_calibration``),
    when it was measured, and the machine's load before and after (``measured_under``).
    Returns the stored profile.
    """
    from ep_host.session import discover_host

    cases = default_cases() if cases is None else list(cases)
    path = path or profile_path()
    profile = load_profile(path)
    host = host if host is not None else discover_host(list(providers))
    for provider in providers:
        info = host.records[provider].info if provider in host.records else None
        host_applied = info is not None and not info.applies_calibration
        old = _applied_factors(provider, host_applied)  # what its estimates include right now
        before = machine_load()
        samples: list[Sample] = []
        skipped: dict[str, str] = {}
        for case in cases:
            result = measure_case(case, provider, repeats, host)
            if isinstance(result, Sample):
                samples.append(result)
            else:
                skipped[case.name] = result
            if on_case is not None:
                on_case(provider, case.name, result)
        entry = profile["providers"].setdefault(provider, {"families": {}})
        uncalibrated = [_uncalibrate(s, old(s)) for s in samples]
        for family in sorted({s.family for s in samples}):
            mine = [s for s in uncalibrated if s.family == family]
            f = fit(mine)
            entry["families"][family] = {"overhead_us": f.overhead_us, "scale": f.scale,
                                         "cases": len(mine)}
        op_families = entry.setdefault("op_families", {})
        op_families.update({s.op: s.family for s in samples if s.op})
        if uncalibrated:
            f = fit(uncalibrated)
            entry["overall"] = {"overhead_us": f.overhead_us, "scale": f.scale,
                                "cases": len(uncalibrated)}
        entry["samples"] = [s.to_dict() for s in uncalibrated]
        entry["skipped"] = skipped
        entry["measured_at"] = datetime.now(UTC).isoformat(timespec="seconds")
        entry["load"] = measured_under(before, machine_load())
    save_profile(profile, path)
    return profile


def _applied_factors(provider: str, host_applied: bool) -> Callable[[Sample], Factors | None]:
    """The factors a sample's estimate already includes: the family's, which the provider
    applies itself, or those the host applies for the sample's op."""
    if not host_applied:
        families = family_factors(provider)
        return lambda s: families.get(s.family)
    stored = provider_calibration(provider)
    return lambda s: None if stored is None else stored.for_op(s.op)


def _uncalibrate(sample: Sample, old: Factors | None) -> Sample:
    """``sample`` with the estimate the provider gave before any calibration."""
    if old is None or old.scale <= 0:
        return sample
    raw = max(0.0, (sample.estimated_us - old.overhead_us) / old.scale)
    return replace(sample, estimated_us=raw)


def node_table(model_path: str, providers: Sequence[str], *, host: Any) -> Any:
    """The capability table of the model as a session sees it (loaded and optimized), with the
    providers' own estimates (no stored node times)."""
    return walk(host, optimize(load_model(model_path)), list(providers), measured=False)


def calibrate_model(
    model_path: str,
    providers: Sequence[str],
    *,
    host: Any,
    on_node: Callable[[NodeTime], None] | None = None,
    table: Any = None,
) -> list[NodeTime]:
    """Time every node of the model (as a session sees it: loaded and optimized) alone on each
    of ``providers`` that claims it, and store the times, which later sessions on this machine
    use in place of the providers' estimates (``ep_host.node_times``). ``table``: its
    ``node_table`` when the caller has it already."""
    if table is None:
        table = node_table(model_path, providers, host=host)
    return node_times.measure(host, table, on_node=on_node)
