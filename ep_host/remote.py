"""Providers in worker processes: one provider loaded in a Ray actor, and the host's proxy of it.

The proxy is registered with the host like any provider and keeps the contract: its
``provider_info``, per-node answers (one round trip per walked graph), kernels created once in
the worker and kept there by id, and partitions. Tensors live in Ray's object store; the
worker's device is a device of its own whose copies are priced from measured figures. A worker
that dies or stops answering is its provider's fault: the provider is marked failed, naming the
hook (and node) it died in, and the host goes on. Ray is imported only here, on first use.
"""

from __future__ import annotations

import atexit
import faulthandler
import importlib
import logging
import os
import pickle
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ep_host import plugin_calls
from ep_host.discovery import OWN_DISTRIBUTIONS
from ep_host.errors import HostError, ProviderLostError, describe_exception
from ep_host.hookspecs import hookimpl
from ep_host.kernel import Kernel
from ep_host.match import KernelMatch, ReasonCode
from ep_host.provider import Device, ProviderContext, ProviderInfo

INSTALL_HINT = "isolated providers run in Ray workers: pip install 'ep-host[ray]'"
WORKER_CPUS = 2  # CPUs a local Ray started for isolation offers (actors ask for none)
POLL_S = 0.02  # how often a wait for a worker looks at its progress
UNISOLATED_DISTRIBUTIONS = OWN_DISTRIBUTIONS  # ep-host's own CPU EP: in process unless named


def worker_timeout(default: float | None) -> float | None:
    """``EP_HOST_WORKER_TIMEOUT``: seconds a plugin call in a worker may go without progress
    before the worker is stopped (``0``: no limit); else ``default`` (the hook time limit)."""
    raw = os.environ.get("EP_HOST_WORKER_TIMEOUT", "").strip()
    try:
        value = float(raw) if raw else None
    except ValueError:
        value = None
    if value is None or value != value:
        return default
    return value if value > 0 else None


def ray_module() -> Any:
    """``ray``, imported now; a :class:`HostError` saying how to install it when it is not."""
    try:
        import ray
    except ImportError as exc:
        raise HostError(f"Ray is not installed; {INSTALL_HINT}") from exc
    return ray


def start_ray() -> Any:
    """Ray, started once per process: a running one is reused; ``RAY_ADDRESS`` joins that
    cluster; else a new local one of this process's own, with few CPUs, no dashboard and quiet
    logs."""
    ray = ray_module()
    if not ray.is_initialized():
        quiet = {"include_dashboard": False, "log_to_driver": False,
                 "logging_level": logging.ERROR, "configure_logging": True}
        if os.environ.get("RAY_ADDRESS"):
            ray.init(**quiet)
        else:
            # a Ray of its own: never a cluster someone else started on this machine
            ray.init(address="local", num_cpus=min(WORKER_CPUS, os.cpu_count() or 1), **quiet)
        _stop_error_printer(ray)
    return ray


def _stop_error_printer(ray: Any) -> None:
    """Stop the thread with which a Ray driver prints the cluster's error messages to stdout
    ("A worker died..."): a worker's death is reported as its provider's fault instead, and
    stdout carries the command's output (JSON). Only the Ray that ep-host started is quieted."""
    try:
        worker = ray._private.worker.global_worker
        worker.threads_stopped.set()  # with log_to_driver off, the error printer alone reads it
        worker.gcs_error_subscriber.close()
        worker.listener_thread.join(5)
        worker.threads_stopped.clear()
    except AttributeError:  # another Ray version: its messages are printed
        return


# ---------------------------------------------------------------------------------------------
# Tensors on a worker's device: refs into Ray's object store
# ---------------------------------------------------------------------------------------------


class RemoteArray:
    """A tensor held in Ray's object store (``ref``), with the shape and dtype the worker
    reported, so that the host checks a step's outputs without moving them."""

    __slots__ = ("ref", "shape", "dtype", "nbytes")

    def __init__(self, ref: Any, shape: tuple[int, ...] | None, dtype: Any):
        self.ref = ref
        self.shape = shape
        self.dtype = dtype
        self.nbytes = 0 if shape is None or dtype is None else (
            int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize)

    @property
    def ndim(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    def __repr__(self) -> str:
        return f"RemoteArray(shape={self.shape}, dtype={self.dtype})"


def _described(value: Any) -> tuple[tuple[int, ...] | None, Any]:
    if isinstance(value, np.ndarray):
        return tuple(value.shape), value.dtype
    return None, None


def _node_id() -> str | None:
    """The Ray node this process runs on (in a worker)."""
    try:
        import ray

        return ray.get_runtime_context().get_node_id()
    except Exception:  # not in a Ray worker
        return None


# ---------------------------------------------------------------------------------------------
# The worker: one provider in its own process
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker loads: provider ``name`` from its entry point, or from ``module``
    (``"package.module"`` or ``"package.module:attribute"``) when given; the host's
    ``sys_path`` (entries the worker lacks are added); files on the host's machine where the
    worker writes the hook call in progress (``marker_path``) and a fatal error's report."""

    name: str
    module: str | None = None
    strict: bool = False
    sys_path: tuple[str, ...] = ()
    marker_path: str | None = None
    fault_path: str | None = None


def _sendable(exc: BaseException) -> BaseException:
    """``exc`` as it can cross to the host: the plugin's own exception when it pickles (its
    traceback left behind), else a ``RuntimeError`` with its description."""
    original = getattr(exc, "original", None)
    if isinstance(original, BaseException):  # PluginBaseException: send what the plugin raised
        exc = original
    exc = exc.with_traceback(None)
    exc.__cause__ = exc.__context__ = None
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(describe_exception(exc))
    return exc


class ProviderWorker:
    """The actor's class: a host of its own with one provider, its kernels by id, and the
    graphs the host sent (by key) so that node names find the same node views."""

    def __init__(self, spec: WorkerSpec):
        from ep_host.discovery import Host, ProviderRecord

        for entry in spec.sys_path:
            if entry not in sys.path:
                sys.path.append(entry)
        if spec.fault_path and os.path.isdir(os.path.dirname(spec.fault_path)):
            self._fault_file = open(spec.fault_path, "w")  # kept open while the actor lives
            faulthandler.enable(file=self._fault_file)
        if spec.marker_path and os.path.exists(spec.marker_path):
            plugin_calls.marker = plugin_calls.HookMarker(spec.marker_path)
        self.spec = spec
        self.host = Host(strict=spec.strict, hook_timeout=None)
        self.graphs: dict[str, dict[str, Any]] = {}
        self.kernels: dict[int, Kernel] = {}
        self.next_kernel = 0
        if spec.module:
            module_name, _, attribute = spec.module.partition(":")
            try:
                with plugin_calls.marked(plugin_calls.marker_head(spec.name, "import")):
                    plugin = importlib.import_module(module_name)
                    if attribute:
                        plugin = getattr(plugin, attribute)
            except BaseException as exc:  # an import may raise anything: the provider's fault
                self.record = ProviderRecord(name=spec.name, entry_point=spec.module,
                                             status="failed",
                                             fault=f"import failed: {describe_exception(exc)}")
                return
            self.host.register(plugin, spec.name)
        else:
            self.host.load_entry_points([spec.name])
        self.record = self.host.records.get(spec.name)

    def describe(self) -> dict[str, Any]:
        """The provider's record as plain values (its device's functions stay here)."""
        record = self.record
        if record is None:
            return {"status": "failed", "fault": f"no provider entry point named "
                    f"{self.spec.name!r} in the worker's environment"}
        info = record.info
        fields = None
        if info is not None:
            fields = {f: getattr(info, f) for f in ("name", "version", "contract_version",
                                                    "available", "reason", "description",
                                                    "aliases", "device_graph_option",
                                                    "partition_launch_us")}
            fields["device"] = (info.device.name, info.device.kind)
        return {"status": record.status, "fault": record.fault, "info": fields,
                "distribution": record.distribution, "version": record.version,
                "entry_point": record.entry_point, "hooks": record.hooks, "pid": os.getpid(),
                "node_id": _node_id()}

    def ping(self, value: Any = None) -> Any:
        return None if value is None else getattr(value, "nbytes", 0)

    def make(self, nbytes: int) -> np.ndarray:
        return np.ones(nbytes, dtype=np.uint8)

    def _graph(self, key: str, model_bytes: bytes | None, model_dir: str | None) -> dict:
        if key not in self.graphs:
            from ep_host.loading import load_model

            model = load_model(model_bytes, infer_shapes=False, base_dir=model_dir)
            self.graphs[key] = {n.name: n for n in model.graph.nodes}
        return self.graphs[key]

    def answers(self, key: str, model_bytes: bytes, names: Sequence[str],
                context: dict[str, Any]) -> Any:
        """The provider's checked answer for each named node, in order (one call per graph)."""
        from ep_host.capability import ask

        try:
            nodes = self._graph(key, model_bytes, context.get("model_dir"))
            ctx = ProviderContext(**context)
            checked: dict[int, Any] = {}
            try:
                return [ask(self.host, self.record, nodes[n], ctx, checked) for n in names]
            finally:
                if plugin_calls.marker is not None:
                    plugin_calls.marker.leave()
        except BaseException as exc:  # strict mode's ProviderError, a model it cannot read
            return _sendable(exc)

    def create_kernel(self, key: str, name: str, context: dict[str, Any]) -> Any:
        try:
            node = self.graphs[key][name]
            kernel = self.host.call(self.spec.name, "ep_host_create_kernel", node=node,
                                    context=ProviderContext(**context))
        except BaseException as exc:
            return _sendable(exc)
        return self._keep(kernel)

    def compile_partition(self, key: str, part: dict[str, Any], context: dict[str, Any]) -> Any:
        from ep_host.subgraph import PartitionView

        try:
            nodes = self.graphs[key]
            members = [nodes[n] for n in part["nodes"]]
            values = members[0].graph.values
            view = PartitionView(part["name"], self.spec.name, members,
                                 *([values[v] for v in part[k]]
                                   for k in ("inputs", "outputs", "constants")))
            kernel = self.host.call(self.spec.name, "ep_host_compile_partition", partition=view,
                                    context=ProviderContext(**context))
        except BaseException as exc:
            return _sendable(exc)
        return self._keep(kernel)

    def _keep(self, kernel: Any) -> Any:
        if not isinstance(kernel, Kernel):
            return TypeError(f"returned {type(kernel).__name__} instead of a Kernel")
        self.next_kernel += 1
        self.kernels[self.next_kernel] = kernel
        return self.next_kernel

    def prepare(self, kid: int, constants: dict[int, Any], subject: str) -> Any:
        import ray

        device = self.record.info.device
        try:
            values = {i: device.upload(ray.get(ref) if isinstance(ref, ray.ObjectRef) else ref)
                      for i, ref in constants.items()}
            with plugin_calls.marked(plugin_calls.marker_head(self.spec.name, "prepare"),
                                     subject):
                self.kernels[kid].prepare(values)
        except BaseException as exc:
            return _sendable(exc)
        return None

    def run(self, kid: int, count: int, node: str, *inputs: Any) -> tuple[Any, ...]:
        """``(status, output 0, ...)``: status lists each output's (shape, dtype) (``None`` for
        an output the kernel omitted), or is the exception the kernel raised."""
        device = self.record.info.device
        marker = plugin_calls.marker
        try:
            args = [None if x is None else device.upload(x) for x in inputs]
            if marker is not None:
                marker.enter(plugin_calls.marker_head(self.spec.name, "run"), node)
            try:
                outs = list(self.kernels[kid].run(*args))
            finally:
                if marker is not None:
                    marker.leave()
            outs = [None if o is None else device.download(o) for o in outs]
            outs = [np.asarray(o) if isinstance(o, np.generic) else o for o in outs]
        except BaseException as exc:
            return (_sendable(exc), *([None] * count))
        status = [None if o is None else _described(o) for o in outs]
        outs = (outs + [None] * count)[:count]
        return (status, *outs)

    def release(self, kids: Sequence[int]) -> None:
        for kid in kids:
            self.kernels.pop(kid, None)


# ---------------------------------------------------------------------------------------------
# The host's side: the proxy registered as the provider
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinkFigures:
    """A worker link as measured: the latency of one call and the bandwidth of the object
    store (what moving a tensor costs), in Device's units."""

    latency_us: float
    gbps: float


_measured: dict[str, LinkFigures] = {}  # per Ray node id: measured once per process


def remember_link(key: str, figures: LinkFigures) -> None:
    """Take ``figures`` as the link to Ray node ``key`` (measured by ``ep_host.cluster``)."""
    _measured[key] = figures


def median_seconds(fn: Any, n: int) -> float:
    """The median wall time of ``n`` calls of ``fn``, in seconds."""
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[n // 2]


def measure_link(ray: Any, actor: Any, key: str, nbytes: int = 8 << 20) -> LinkFigures:
    """Round trips to ``actor``: an empty call (latency) and a tensor of ``nbytes`` each way
    (bandwidth); the median of a few, kept for the rest of the process."""
    if key in _measured:
        return _measured[key]

    payload = np.ones(nbytes, dtype=np.uint8)
    empty = median_seconds(lambda: ray.get(actor.ping.remote()), 7)
    there = median_seconds(lambda: ray.get(actor.ping.remote(ray.put(payload))), 3)
    back = median_seconds(lambda: ray.get(actor.make.remote(nbytes)).sum(), 3)
    moved = max(there + back - 2 * empty, 1e-6)
    figures = LinkFigures(latency_us=empty * 1e6, gbps=2 * nbytes / moved / 1e9)
    _measured[key] = figures
    return figures


class RemoteKernel(Kernel):
    """A kernel that lives in the worker (by id): ``run`` sends refs, returns refs."""

    def __init__(self, proxy: RemoteProvider, kid: int, count: int, subject: str):
        self.proxy, self.kid, self.count, self.subject = proxy, kid, count, subject
        self.method = proxy.actor.run.options(num_returns=count + 1)

    def prepare(self, constants: Mapping[int, Any]) -> None:
        refs = {i: v.ref if isinstance(v, RemoteArray) else v for i, v in constants.items()}
        fault = self.proxy.wait(self.proxy.actor.prepare.remote(self.kid, refs, self.subject),
                                "prepare", self.subject)
        if fault is not None:
            raise fault

    def run(self, *inputs: Any) -> Sequence[Any]:
        proxy = self.proxy
        args = [x.ref if isinstance(x, RemoteArray) else x for x in inputs]
        refs = self.method.remote(self.kid, self.count, self.subject, *args)
        if self.count == 0:
            refs = [refs]
        status = proxy.wait(refs[0], "run", self.subject)
        if isinstance(status, BaseException):
            raise status
        return [None if described is None else RemoteArray(ref, *described)
                for ref, described in zip(refs[1:], status, strict=False)]

    def __del__(self) -> None:
        proxy = self.proxy
        try:
            if proxy.lost is None and proxy.ray.is_initialized():  # else: nothing to release
                proxy.actor.release.remote([self.kid])
        except Exception:  # the worker or Ray going away meanwhile
            return


class RemoteProvider:
    """The host's proxy of one provider in a worker: registered with the host as that
    provider, it answers the hooks by calls to the worker."""

    def __init__(self, ray: Any, actor: Any, name: str, timeout: float | None,
                 marker_path: str | None, fault_path: str | None):
        self.ray, self.actor, self.name = ray, actor, name
        self.timeout = timeout
        self.marker = (plugin_calls.HookMarker(marker_path)
                       if marker_path and os.path.exists(marker_path) else None)
        self.fault_path = fault_path
        self.lost: ProviderLostError | None = None
        self.record: Any = None  # the host's record of this provider, set on registration
        self.graphs: dict[int, tuple[str, Any]] = {}  # id(graph) -> (key, graph) sent
        self.info: ProviderInfo | None = None
        self.call_us = 0.0  # what one call into the worker costs, charged per kernel call

    def connect(self, described: dict[str, Any], label: str | None = None) -> None:
        """Take the worker's description: its provider's info, with a device of the worker's
        own (``label``: of cluster node ``label``'s, ``ray@LABEL``) whose copies and calls are
        priced from the link as measured."""
        fields = dict(described["info"])
        device_name, _ = fields.pop("device")
        link = measure_link(self.ray, self.actor, described.get("node_id") or "local")
        self.call_us = link.latency_us
        if "ep_host_compile_partition" in described["hooks"]:  # a call per partition
            fields["partition_launch_us"] += link.latency_us
        ray = self.ray
        device = Device(name=f"{device_name}@{self.name}-worker" if label is None
                        else f"ray@{label}", kind="worker", node=described.get("node_id") or "",
                        link_gbps=link.gbps, link_latency_us=link.latency_us,
                        to_host=lambda a: ray.get(a.ref),
                        from_host=lambda a: RemoteArray(ray.put(a), *_described(a)),
                        array_type=RemoteArray)
        self.info = ProviderInfo(device=device, **fields)

    # -- waiting for the worker ---------------------------------------------------------------

    def wait(self, ref: Any, hook: str, subject: str = "", calls: int = 1) -> Any:
        """The worker's answer to call ``ref``; when the worker dies, or a plugin call in it
        makes no progress for the time limit (then the worker is killed), the provider is lost:
        :class:`ProviderLostError`. Where the host cannot read the worker's marker (another
        machine), the limit applies to the whole call, times ``calls`` (the plugin calls it
        makes)."""
        if self.lost is not None:
            raise self.lost
        ray = self.ray
        last = self.marker.read() if self.marker is not None else ()
        since = time.monotonic()
        timeout = POLL_S if self.timeout else None
        while True:
            try:
                return ray.get(ref, timeout=timeout)
            except ray.exceptions.GetTimeoutError:
                pass
            except ray.exceptions.RayActorError:
                lost = self._lose(hook, f"its worker process died in "
                                        f"{self._where(hook, subject)}{self._how()}")
                raise lost from None
            now = self.marker.read() if self.marker is not None else ()
            if now != last or now is None:  # progress, or the worker's own code (not plugin's)
                last, since = now, time.monotonic()
            elif time.monotonic() - since > self.timeout * (1 if now else calls):
                where = self._where(hook, subject)
                ray.kill(self.actor, no_restart=True)
                raise self._lose(hook, f"did not answer within {self.timeout:g} s in {where} "
                                       "(EP_HOST_WORKER_TIMEOUT); its worker was stopped")

    def _where(self, hook: str, subject: str) -> str:
        running = self.marker.read() if self.marker is not None else None
        if running is not None and running[1]:
            hook, subject = running[1], running[2] or subject
        what = "partition" if hook == "compile_partition" else "node"
        return f"hook {hook}" + (f" ({what} {subject!r})" if subject else "")

    def _how(self) -> str:
        try:
            with open(self.fault_path or "") as f:
                first = f.readline().strip()
        except OSError:
            return ""
        return f": {first.removeprefix('Fatal Python error: ')}" if first else ""

    def _lose(self, hook: str, what: str) -> ProviderLostError:
        self.lost = ProviderLostError(f"provider {self.name!r}: {what}", self.name, hook)
        if self.record is not None:
            self.record.status, self.record.fault = "failed", what
        return self.lost

    def _graph_key(self, graph: Any) -> tuple[str, bytes | None]:
        """The key the worker knows ``graph`` by, and the model to send when it is new."""
        known = self.graphs.get(id(graph))
        if known is not None and known[1] is graph:
            return known[0], None
        key = f"g{len(self.graphs)}"
        self.graphs[id(graph)] = (key, graph)
        return key, _graph_model(graph).SerializeToString()

    # -- the contract -------------------------------------------------------------------------

    def batch_answers(self, nodes: Sequence[Any], context: ProviderContext) -> list[KernelMatch]:
        """Every answer for ``nodes`` in one call per graph; nodes with control-flow bodies
        are declined here (their bodies run in the host's process)."""
        from ep_host.capability import check_answer

        out: list[KernelMatch | None] = [None] * len(nodes)
        by_graph: dict[int, list[int]] = {}
        for i, node in enumerate(nodes):
            if node.has_subgraphs:
                out[i] = KernelMatch.unsupported(
                    f"{node.op_type}: an isolated provider cannot run control-flow bodies, "
                    "which are placed in the host's process; run it in process for this node",
                    ReasonCode.DEVICE)
            else:
                by_graph.setdefault(id(node.graph), []).append(i)
        plain = _plain_context(context)
        for indices in by_graph.values():
            graph = nodes[indices[0]].graph
            try:
                key, model = self._graph_key(graph)
                ref = self.actor.answers.remote(key, model, [nodes[i].name for i in indices],
                                                plain)
                answers = self.wait(ref, "supports_op", nodes[indices[0]].name,
                                    calls=len(indices))
            except ProviderLostError as lost:
                for i in indices:
                    out[i] = KernelMatch.unsupported(str(lost).split(": ", 1)[1],
                                                     ReasonCode.FAULT)
                continue
            if isinstance(answers, BaseException):
                raise answers
            for i, answer in zip(indices, answers, strict=True):
                out[i] = self._priced(check_answer(answer, nodes[i]))
        return out  # type: ignore[return-value]

    def _priced(self, answer: KernelMatch) -> KernelMatch:
        """A claim with the call into the worker added to its launch (a provider that
        compiles pays it per partition instead: ``partition_launch_us``)."""
        if not answer.is_supported or isinstance(self, CompilingRemoteProvider):
            return answer
        cost = answer.cost
        return replace(answer, cost=cost.with_launch_us(cost.launch_us + self.call_us))

    @hookimpl
    def ep_host_provider_info(self) -> ProviderInfo | None:
        return self.info

    @hookimpl
    def ep_host_supports_op(self, node: Any, context: ProviderContext) -> KernelMatch:
        return self.batch_answers([node], context)[0]

    @hookimpl
    def ep_host_create_kernel(self, node: Any, context: ProviderContext) -> Kernel:
        key, model = self._graph_key(node.graph)
        if model is not None:  # a graph the walk never sent (a caller that skipped it)
            self.wait(self.actor.answers.remote(key, model, [], _plain_context(context)),
                      "create_kernel", node.name)
        kid = self.wait(self.actor.create_kernel.remote(key, node.name,
                                                        _plain_context(context)),
                        "create_kernel", node.name)
        if isinstance(kid, BaseException):
            raise kid
        return RemoteKernel(self, kid, len(node.outputs), node.name)


class CompilingRemoteProvider(RemoteProvider):
    """The proxy of a provider that compiles partitions."""

    @hookimpl
    def ep_host_compile_partition(self, partition: Any, context: ProviderContext) -> Kernel:
        key, model = self._graph_key(partition.nodes[0].graph)
        if model is not None:
            self.wait(self.actor.answers.remote(key, model, [], _plain_context(context)),
                      "compile_partition", partition.name)
        part = {"name": partition.name, "nodes": [n.name for n in partition.nodes],
                **{k: [v.name for v in getattr(partition, k)]
                   for k in ("inputs", "outputs", "constants")}}
        kid = self.wait(self.actor.compile_partition.remote(key, part, _plain_context(context)),
                        "compile_partition", partition.name)
        if isinstance(kid, BaseException):
            raise kid
        return RemoteKernel(self, kid, len(partition.outputs), partition.name)


def _plain_context(context: ProviderContext) -> dict[str, Any]:
    """The context as values that cross to the worker (its subgraph compiler stays here)."""
    return {"provider": context.provider, "options": dict(context.options),
            "opset_imports": dict(context.opset_imports), "model_dir": context.model_dir,
            "intra_op_num_threads": context.intra_op_num_threads}


def _graph_model(graph: Any) -> Any:
    """``graph``'s nodes as one standalone model, node names kept, for the worker to load."""
    from ep_host.subgraph import subgraph_model

    nodes = list(graph.nodes)
    produced = {v.name for n in nodes for v in n.outputs if v is not None}
    read = list(dict.fromkeys(v for n in nodes for v in n.inputs
                              if v is not None and v.name and v.name not in produced))
    inputs = [v for v in read if not v.is_constant]
    constants = [v for v in read if v.is_constant]
    outputs = list(dict.fromkeys(v for n in nodes for v in n.outputs if v is not None and v.name))
    model = subgraph_model(nodes, inputs, outputs, constants, graph.name or "graph")
    for proto, node in zip(model.graph.node, nodes, strict=True):
        if proto.name != node.name:
            proto.name = node.name
    return model


# ---------------------------------------------------------------------------------------------
# Starting workers
# ---------------------------------------------------------------------------------------------


def start_worker(name: str, *, module: str | None = None, strict: bool = False,
                 timeout: float | None = None, node: tuple[str, str] | None = None,
                 registered: str | None = None
                 ) -> tuple[RemoteProvider | None, dict[str, Any]]:
    """A worker loading provider ``name`` (from its entry point, or ``module``) and the host's
    proxy of it, registered as ``registered`` (default ``name``); the proxy is ``None`` when
    the worker could not load it (then the description says why). ``node``: ``(Ray node id,
    label)`` of the cluster node the worker is pinned to (``ep_host.cluster``); its device is
    that node's (``ray@LABEL``), shared by every worker there."""
    ray = start_ray()
    folder = tempfile.mkdtemp(prefix=f"ep-host-{name}-")
    atexit.register(shutil.rmtree, folder, True)
    marker_path = os.path.join(folder, "marker")
    with open(marker_path, "wb") as f:
        f.write(b"\0" * plugin_calls.MARKER_BYTES)
    fault_path = os.path.join(folder, "fault")
    spec = WorkerSpec(name=name, module=module, strict=strict,
                      sys_path=tuple(p for p in sys.path if p),
                      marker_path=marker_path, fault_path=fault_path)
    actor_class = _actor_class(ray)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # on the node asked for, else on this process's own (in a cluster, too)
    target = node[0] if node is not None else ray.get_runtime_context().get_node_id()
    actor = actor_class.options(num_cpus=0, max_restarts=0, name=None,
                                scheduling_strategy=NodeAffinitySchedulingStrategy(
                                    target, soft=False)).remote(spec)
    where = (ray, actor, registered or name, timeout, marker_path, fault_path)
    try:
        described = RemoteProvider(*where).wait(actor.describe.remote(), "import")
    except ProviderLostError as lost:
        return None, {"status": "failed", "fault": str(lost).split(": ", 1)[1]}
    if described["status"] == "failed" or described.get("info") is None:
        ray.kill(actor, no_restart=True)
        return None, described
    kind = (CompilingRemoteProvider if "ep_host_compile_partition" in described["hooks"]
            else RemoteProvider)
    proxy = kind(*where)
    proxy.connect(described, None if node is None else node[1])
    return proxy, described


_actor_classes: dict[int, Any] = {}


def _actor_class(ray: Any) -> Any:
    if id(ray) not in _actor_classes:
        _actor_classes[id(ray)] = ray.remote(ProviderWorker)
    return _actor_classes[id(ray)]
