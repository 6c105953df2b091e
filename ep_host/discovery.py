"""Finding providers (entry points in ``ep_host.providers``) and calling each one alone.

Each entry point is loaded in its own ``try``: a provider that fails to import, whose hooks do
not match the contract, that needs a newer contract, or whose name two distributions register,
is listed with its fault and every other provider goes on.
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
import traceback
import types
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pluggy

from ep_host import hookspecs, plugin_calls
from ep_host.errors import HostError, PluginBaseException, ProviderError, describe_exception
from ep_host.plugin_calls import is_user_interrupt, marked, marker_head, record_sigint, sigint
from ep_host.provider import CONTRACT_VERSION, ProviderInfo, checked_info, contract_major

ENTRY_POINT_GROUP = "ep_host.providers"
HOOK_NAMES = ("ep_host_provider_info", "ep_host_supports_op", "ep_host_create_kernel",
              "ep_host_compile_partition", "ep_host_infer_types")
DEFAULT_IMPORT_TIMEOUT = 30.0  # seconds importing one entry point may take


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


DEFAULT_HOOK_TIMEOUT = 10.0  # seconds a supports_op call may take (EP_HOST_HOOK_TIMEOUT)


def hook_timeout_from_env() -> float | None:
    """``EP_HOST_HOOK_TIMEOUT`` in seconds (default 10); ``0`` or less: no limit."""
    raw = os.environ.get("EP_HOST_HOOK_TIMEOUT", "").strip()
    try:
        value = float(raw) if raw else DEFAULT_HOOK_TIMEOUT
    except ValueError:
        value = DEFAULT_HOOK_TIMEOUT
    return value if value > 0 else None


def import_timeout_from_env() -> float | None:
    """``EP_HOST_IMPORT_TIMEOUT`` in seconds (default 30); ``0`` or less: no limit."""
    raw = os.environ.get("EP_HOST_IMPORT_TIMEOUT", "").strip()
    try:
        value = float(raw) if raw else DEFAULT_IMPORT_TIMEOUT
    except ValueError:
        value = DEFAULT_IMPORT_TIMEOUT
    return value if value > 0 and value == value else None


class ImportTimeout(Exception):
    """An entry point's import did not finish in time (it goes on in an abandoned thread)."""


class _EntryPointScan:
    """The provider entry points of the installed distributions, scanned once and again only
    when the import path or one of its folders changed (installing or removing a distribution
    changes its folder's modification time): a scan reads every distribution's metadata, some
    milliseconds per session otherwise."""

    def __init__(self) -> None:
        self.key: tuple[Any, ...] | None = None
        self.entry_points: tuple[Any, ...] = ()
        self.records: dict[tuple[str, str, str | None], ProviderRecord] = {}
        self.lock = threading.Lock()

    @staticmethod
    def _key() -> tuple[Any, ...]:
        stamps: list[tuple[int, ...] | None] = []
        for entry in sys.path:  # a new folder in a folder adds one to its links too
            try:
                st = os.stat(entry or ".")
            except OSError:
                stamps.append(None)
            else:
                stamps.append((st.st_ino, st.st_mtime_ns, st.st_nlink, st.st_size))
        return tuple(sys.path), tuple(stamps)

    def scan(self) -> tuple[Any, ...]:
        key = self._key()
        with self.lock:
            if key != self.key:
                import importlib_metadata

                self.entry_points = tuple(
                    importlib_metadata.entry_points(group=ENTRY_POINT_GROUP))
                self.records = {}
                self.key = key
            return self.entry_points

    def record(self, ep: Any) -> ProviderRecord:
        """A new record for the provider of ``ep`` (its distribution's metadata read once)."""
        dist = getattr(ep, "dist", None)
        key = (ep.name, ep.value, None if dist is None else str(getattr(dist, "_path", "")))
        with self.lock:
            found = self.records.get(key)
            if found is None:
                found = self.records[key] = ProviderRecord(
                    name=ep.name,
                    distribution=None if dist is None else dist.metadata["Name"],
                    version=None if dist is None else dist.version,
                    entry_point=ep.value)
        return ProviderRecord(name=found.name, distribution=found.distribution,
                              version=found.version, entry_point=found.entry_point)


_SCAN = _EntryPointScan()


def provider_entry_points() -> tuple[Any, ...]:
    """Every installed entry point of the ``ep_host.providers`` group."""
    return _SCAN.scan()


class _SharedHosts:
    """Hosts that the sessions of one process share, as onnxruntime registers its providers
    once per process: loading and registering the providers again (pluggy reads every name of
    each provider) is most of a small model's session creation.

    A host is shared by the providers asked for, and is found again only while nothing it was
    built from changed: the installed entry points (the same scan), the ``EP_HOST_*``
    variables, each provider module (still the one imported) and each provider's status (one
    that failed since, in a capability walk say, gets a new host that loads it afresh)."""

    def __init__(self) -> None:
        self.hosts: dict[tuple[Any, ...], tuple[Host, tuple[Any, ...]]] = {}
        self.lock = threading.Lock()

    @staticmethod
    def _state(host: Host) -> tuple[Any, ...]:
        return tuple((r.name, r.status, r.plugin) for r in host.records.values())

    @staticmethod
    def _current(host: Host) -> bool:
        for record in host.records.values():
            plugin = record.plugin
            if (isinstance(plugin, types.ModuleType)
                    and sys.modules.get(plugin.__name__) is not plugin):
                return False
        return True

    @staticmethod
    def _settings() -> tuple[tuple[Any, Any], ...]:
        """The ``EP_HOST_*`` variables, read from ``os.environ``'s own dict, names and values as
        it keeps them: ``os.environ.items()`` decodes every variable of the process (most of
        the time of finding a shared host again)."""
        data = getattr(os.environ, "_data", None)
        if not isinstance(data, dict):
            return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("EP_HOST_")))
        prefix = os.environ.encodekey("EP_HOST_")  # type: ignore[attr-defined]
        return tuple(sorted([(k, v) for k, v in data.items() if k.startswith(prefix)]))

    def get(self, names: Sequence[str] | None) -> Host:
        settings = self._settings()
        key = (None if names is None else tuple(names), settings, provider_entry_points())
        with self.lock:
            found = self.hosts.get(key)
        if found is not None and self._state(found[0]) == found[1] and self._current(found[0]):
            return found[0]
        host = Host.discover(names)
        with self.lock:
            if len(self.hosts) >= 16:  # settings that keep changing: the oldest go
                del self.hosts[next(iter(self.hosts))]
            self.hosts[key] = (host, self._state(host))
        return host


_SHARED_HOSTS = _SharedHosts()


def shared_host(names: Sequence[str] | None = None) -> Host:
    """A host with the providers ``names`` loaded (default: all), the one earlier calls of this
    process got while nothing it was built from changed (see :class:`_SharedHosts`)."""
    return _SHARED_HOSTS.get(names)


def load_in_time(ep: Any, seconds: float | None) -> Any:
    """``ep.load()`` on a daemon thread, waited for at most ``seconds``: a module that never
    finishes importing cannot hang the host. Whatever the import raises is raised here. A module
    already imported is only looked up, on this thread."""
    module = sys.modules.get(getattr(ep, "module", None) or "")
    if module is not None and getattr(getattr(module, "__spec__", None), "_initializing",
                                       False) is False:
        return ep.load()
    outcome: list[Any] = []

    def load() -> None:
        try:
            outcome.append((True, ep.load()))
        except BaseException as exc:  # handed to the caller, which judges it
            outcome.append((False, exc))

    thread = threading.Thread(target=load, name=f"ep-host-import-{ep.name}", daemon=True)
    thread.start()
    thread.join(seconds)
    if not outcome:
        raise ImportTimeout(f"import did not finish within {seconds:g} s "
                            "(EP_HOST_IMPORT_TIMEOUT); it may wait for something forever")
    ok, value = outcome[0]
    if not ok:
        if isinstance(value, ValueError) and "main thread" in str(value):
            return ep.load()  # it sets signal handlers, which only the main thread may: no limit
        raise value
    return value


# what pluggy can take as a hook in a module: functions, methods bound or wrapped
_HOOKABLE = (types.FunctionType, types.MethodType, staticmethod, classmethod)


def _plainly_not_a_hook(plugin: Any, name: str) -> bool:
    """Whether ``name`` in a module is a value pluggy would not take as a hook (a class, a
    constant, an imported module or builtin), told from the module's namespace alone."""
    if not isinstance(plugin, types.ModuleType) or name.startswith("__"):
        return False
    return not isinstance(plugin.__dict__.get(name), _HOOKABLE)


class _PluginManager(pluggy.PluginManager):
    """pluggy's manager, skipping without a static look-up the names of a module that cannot
    be hooks (most of a provider module's names: its imports and constants). pluggy looks up
    every name of a plugin with ``inspect.getattr_static`` at each registration, most of a
    small session's start-up; the hooks found are pluggy's own answer."""

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        if _plainly_not_a_hook(plugin, name):
            return None
        return super().parse_hookimpl_opts(plugin, name)

    def parse_hookspec_opts(self, module_or_class: Any, name: str) -> Any:
        if _plainly_not_a_hook(module_or_class, name):
            return None
        return super().parse_hookspec_opts(module_or_class, name)


# ep-host's own CPU EP: loaded in this process unless named for isolation, and asked without
# the hook time limit's watching thread (a thread hand-off per model costs milliseconds on a
# loaded machine; the limit is there for other people's providers)
OWN_DISTRIBUTIONS = ("ep-host-cpu",)


@dataclass
class ProviderRecord:
    """One provider as the host found it: where it came from and whether it works.

    ``status`` is ``"available"``, ``"unavailable"`` (it loaded but says it cannot run here)
    or ``"failed"`` (it could not be loaded or broke the contract); ``fault`` says why.
    """

    name: str
    distribution: str | None = None
    version: str | None = None
    entry_point: str | None = None
    status: str = "failed"
    fault: str = ""
    info: ProviderInfo | None = None
    plugin: Any = None
    hooks: tuple[str, ...] = ()
    callers: dict[str, Callable[..., list[Any]]] = field(default_factory=dict, repr=False)
    # per hook, the start of the marker record naming a call of it (plugin_calls.HookMarker)
    marker_heads: dict[str, bytes] = field(default_factory=dict, repr=False)
    # an isolated provider's proxy (ep_host.remote.RemoteProvider): answers come in batches
    remote: Any = field(default=None, repr=False)
    node: str | None = None  # the cluster node's label, for a provider on another node

    @property
    def available(self) -> bool:
        return self.status == "available"

    @property
    def device(self) -> str | None:
        return None if self.info is None else self.info.device.name

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "entry_point": self.entry_point,
            "device": self.device,
            "status": self.status,
            "fault": self.fault or None,
            "hooks": list(self.hooks),
        }


class Host:
    """A plugin manager of its own, the providers it loaded, and a caller per provider.

    ``Host()`` loads nothing; call :meth:`load_entry_points` (``Host.discover()`` does both) or
    :meth:`register` to add providers. ``strict`` (default: ``EP_HOST_STRICT``) re-raises
    provider faults; ``trace_plugins`` (default: ``EP_HOST_TRACE_PLUGINS``) prints every hook call.
    """

    def __init__(self, *, strict: bool | None = None, trace_plugins: bool | None = None,
                 hook_timeout: float | None = -1.0):
        self.strict = env_flag("EP_HOST_STRICT") if strict is None else strict
        self.import_timeout = import_timeout_from_env()
        # seconds one supports_op call may take (None: no limit; default EP_HOST_HOOK_TIMEOUT)
        self.hook_timeout = hook_timeout_from_env() if hook_timeout == -1.0 else hook_timeout
        record_sigint()  # so that a plugin's KeyboardInterrupt is told from the user's ^C
        self.pm = _PluginManager("ep_host")
        self.pm.add_hookspecs(hookspecs)
        self.records: dict[str, ProviderRecord] = {}
        self.entry_point_names: set[str] = set()  # every provider entry point seen, loaded or not
        self.cluster: list[Any] = []  # the Ray cluster's nodes when joined (ep_host.cluster)
        trace = env_flag("EP_HOST_TRACE_PLUGINS") if trace_plugins is None else trace_plugins
        self.traced = False  # hook calls monitored (EP_HOST_TRACE_PLUGINS): always through pluggy
        if trace:
            self._enable_trace()

    @classmethod
    def discover(cls, names: Sequence[str] | None = None, *, isolate: Any = None,
                 ray_address: str | None = None, **kwargs: Any) -> Host:
        """A host with the providers ``names`` loaded (default: all); ``ray_address``: also
        those on the other nodes of that Ray cluster, as ``NAME@nodeK`` (:meth:`load_cluster`)."""
        host = cls(**kwargs)
        if ray_address:  # joined first: isolated providers' workers start on the cluster too
            from ep_host.cluster import join

            join(ray_address)
        local = None if names is None else [n for n in names if "@" not in n]
        host.load_entry_points(local, isolate=isolate)
        if ray_address:
            host.load_cluster(ray_address, names)
        return host

    def load_cluster(self, address: str, names: Sequence[str] | None = None) -> None:
        """Join the Ray cluster at ``address`` and register the providers of its other nodes,
        each as its own provider ``NAME@nodeK`` in a worker pinned to that node (``names``:
        only those named so; default all). One not available there is listed with its
        reason, and no worker is started for it. ``self.cluster`` keeps the nodes listed."""
        from ep_host import cluster
        from ep_host.remote import remember_link

        self.cluster = cluster.discover(address, names)
        for node in self.cluster:
            if node.link is not None:  # the worker proxies there price copies from it
                remember_link(node.node_id, node.link)
        for node, listed in cluster.wanted_remote(names, self.cluster):
            name = cluster.remote_name(listed["name"], node.label)
            record = ProviderRecord(name=name, distribution=listed.get("distribution"),
                                    version=listed.get("version"),
                                    entry_point=listed.get("entry_point"), node=node.label)
            if listed.get("status") != "available":
                record.status = listed.get("status") or "failed"
                record.fault = f"on {node.label}: {listed.get('fault') or 'not available'}"
                self.records[name] = record
                continue
            self.register_isolated(record, listed["name"], node=(node.node_id, node.label))

    # -- loading ------------------------------------------------------------------------------

    def load_entry_points(self, names: Sequence[str] | None = None, *,
                          isolate: bool | Sequence[str] | None = None) -> None:
        """Load providers from entry points; ``names`` (default: ``EP_HOST_PROVIDERS``) limits
        which, and ``""`` in the variable loads none.

        ``isolate``: load providers in worker processes (Ray actors; ``ep_host.remote``)
        instead of importing them here: ``True`` for every provider but ep-host's own CPU EP,
        or the names of the providers to isolate (an isolated name that is no entry point's is
        a :class:`HostError`)."""
        if names is None and "EP_HOST_PROVIDERS" in os.environ:
            names = [n.strip() for n in os.environ["EP_HOST_PROVIDERS"].split(",") if n.strip()]
        wanted = None if names is None else set(names)
        by_name: dict[str, list[Any]] = {}
        for ep in provider_entry_points():
            self.entry_point_names.add(ep.name)
            if wanted is None or ep.name in wanted:
                by_name.setdefault(ep.name, []).append(ep)
        isolated = self._isolated(isolate, by_name)
        for name, eps in by_name.items():
            if len(eps) > 1:  # which one is meant cannot be known: load neither
                self._add_failed(self._clash_record(name, eps), self._clash(name, eps))
                continue
            if name in isolated:
                self._load_isolated(eps[0])
            else:
                self._load_entry_point(eps[0])

    def _isolated(self, isolate: bool | Sequence[str] | None,
                  by_name: dict[str, list[Any]]) -> set[str]:
        """The entry-point names to load in workers."""
        if not isolate:
            return set()
        if isolate is True:
            from ep_host.remote import UNISOLATED_DISTRIBUTIONS

            return {name for name, eps in by_name.items()
                    if not all(self._dist_name(ep) in UNISOLATED_DISTRIBUTIONS for ep in eps)}
        unknown = [n for n in isolate if n not in self.entry_point_names]
        if unknown:
            known = ", ".join(sorted(self.entry_point_names)) or "none"
            raise HostError(f"--isolate: no provider entry point named {', '.join(unknown)}; "
                            f"installed: {known}")
        return set(isolate)

    def _load_isolated(self, ep: Any) -> None:
        """Provider ``ep`` loaded in a worker process; the host registers its proxy."""
        self.register_isolated(_entry_point_record(ep), ep.name)

    def register_isolated(self, record: ProviderRecord, name: str,
                          module: str | None = None,
                          node: tuple[str, str] | None = None) -> ProviderRecord:
        """Provider ``name`` in a worker process (from its entry point, or ``module``:
        ``"package.module"`` or ``"package.module:attribute"``), registered as ``record``
        (named ``name``, or ``name@LABEL`` for one pinned to cluster node ``node``: (Ray node
        id, label))."""
        from ep_host.remote import start_worker, worker_timeout

        record.name = name if node is None else f"{name}@{node[1]}"
        proxy, described = start_worker(name, module=module, strict=self.strict,
                                        timeout=worker_timeout(self.hook_timeout), node=node,
                                        registered=record.name)
        if proxy is None:
            record.distribution = record.distribution or described.get("distribution")
            record.entry_point = record.entry_point or described.get("entry_point")
            return self._add_failed(record, f"in its worker: {described['fault']}")
        record = self._register(record, proxy)
        proxy.record = record
        record.remote = proxy
        return record

    def _clash_record(self, name: str, eps: list[Any]) -> ProviderRecord:
        dists = sorted({self._dist_name(ep) or "?" for ep in eps})
        return ProviderRecord(name=name, entry_point=", ".join(ep.value for ep in eps),
                              distribution=", ".join(dists))

    def _clash(self, name: str, eps: list[Any]) -> str:
        """Why provider ``name``, registered by several entry points, is not loaded."""
        dists = sorted({self._dist_name(ep) or "?" for ep in eps})
        if len(dists) > 1:
            return (f"provider name {name!r} is registered by {len(dists)} distributions: "
                    f"{' and '.join(dists)}; uninstall one")
        targets = ", ".join(repr(ep.value) for ep in eps)
        return (f"provider name {name!r} is registered {len(eps)} times by distribution "
                f"{dists[0]} (entry points {targets}); it must name one provider once: fix "
                "its entry points")

    def installed_names(self) -> list[str]:
        """Every provider this host knows of: entry points (loaded or not) and registered."""
        return sorted(self.entry_point_names | set(self.records))

    @staticmethod
    def _dist_name(ep: Any) -> str | None:
        dist = getattr(ep, "dist", None)
        return None if dist is None else dist.metadata["Name"]

    def _load_entry_point(self, ep: Any) -> None:
        record = _entry_point_record(ep)
        since = sigint.received
        marker = plugin_calls.marker
        if marker is not None:
            marker.enter(marker_head(ep.name, "import"))
        try:
            plugin = load_in_time(ep, self.import_timeout)
        except ImportTimeout as exc:
            self._add_failed(record, str(exc), exc)
            return
        except BaseException as exc:  # an import may raise anything, SystemExit included
            if is_user_interrupt(exc, since):
                raise
            self._add_failed(record, f"import failed: {describe_exception(exc)}", exc)
            return
        finally:
            if marker is not None:
                marker.leave()
        self._register(record, plugin)

    def register(
        self, plugin: Any, name: str | None = None, distribution: str | None = None
    ) -> ProviderRecord:
        """Register a provider object (a module, class instance or namespace) under ``name``.

        The name defaults to what its ``ep_host_provider_info`` answers."""
        record = ProviderRecord(name=name or "", distribution=distribution, version=None)
        return self._register(record, plugin)

    def _register(self, record: ProviderRecord, plugin: Any) -> ProviderRecord:
        record.plugin = plugin
        since = sigint.received
        try:  # reading the plugin's attributes runs its code (properties, __getattr__)
            with marked(marker_head(record.name, "register")):
                problem = self._check_signatures(plugin)
                if not problem:
                    self.pm.register(plugin, name=record.name or None)
        except BaseException as exc:  # pluggy's validation, a duplicate plugin object, SystemExit
            if is_user_interrupt(exc, since):
                raise
            return self._add_failed(record, f"registration failed: {describe_exception(exc)}", exc)
        if problem:
            return self._add_failed(record, problem)
        if not record.name:
            record.name = self.pm.get_name(plugin)
        record.marker_heads = {h: marker_head(record.name, h.removeprefix("ep_host_"))
                               for h in HOOK_NAMES}
        record.hooks = tuple(
            h for h in HOOK_NAMES
            if any(i.plugin is plugin for i in getattr(self.pm.hook, h).get_hookimpls())
        )
        others = [p for p in self.pm.get_plugins() if p is not plugin]
        record.callers = {
            h: self.pm.subset_hook_caller(h, remove_plugins=others) for h in HOOK_NAMES
        }
        self._describe(record)
        if record.name in self.records and self.records[record.name].plugin is not plugin:
            self.pm.unregister(plugin)
            return self._add_failed(
                record, f"another provider is already registered as {record.name!r}"
            )
        self.records[record.name] = record
        self._refresh_callers()
        return record

    def _refresh_callers(self) -> None:
        # A subset caller removes every *other* plugin known when it was made; rebuild them so
        # providers registered later are excluded too.
        plugins = self.pm.get_plugins()
        for rec in self.records.values():
            if rec.plugin is None or not self.pm.is_registered(rec.plugin):
                continue
            others = [p for p in plugins if p is not rec.plugin and self._is_provider(p)]
            rec.callers = {
                h: self.pm.subset_hook_caller(h, remove_plugins=others) for h in HOOK_NAMES
            }

    def _is_provider(self, plugin: Any) -> bool:
        return any(rec.plugin is plugin for rec in self.records.values())

    def _check_signatures(self, plugin: Any) -> str:
        for attr in dir(plugin):
            if not attr.startswith("ep_host_"):
                continue
            fn = getattr(plugin, attr, None)
            if not callable(fn):
                continue
            if attr not in HOOK_NAMES:
                return f"hook {attr!r} is not in the ep-host contract {CONTRACT_VERSION}"
            spec = inspect.signature(getattr(hookspecs, attr))
            try:
                sig = inspect.signature(fn)
            except (TypeError, ValueError):
                continue
            for pname, param in sig.parameters.items():
                if pname == "self":
                    continue
                if pname not in spec.parameters:
                    allowed = ", ".join(spec.parameters) or "none"
                    return (f"{attr}() takes {pname!r}, which the contract does not pass "
                            f"(parameters: {allowed})")
                if param.default is not inspect.Parameter.empty:
                    return f"{attr}() gives {pname!r} a default value; hook parameters take none"
        return ""

    def _describe(self, record: ProviderRecord) -> None:
        if "ep_host_provider_info" not in record.hooks:
            record.status, record.fault = "failed", "does not implement ep_host_provider_info"
            return
        since = sigint.received
        try:
            with marked(record.marker_heads["ep_host_provider_info"]):
                answers = record.callers["ep_host_provider_info"]()
            info = answers[0] if answers else None
            if type(info) is not ProviderInfo and not issubclass(type(info), ProviderInfo):
                raise TypeError(
                    f"ep_host_provider_info returned {type(info).__name__}, not ProviderInfo"
                )
        except BaseException as exc:  # SystemExit and the like too: the provider's fault
            if is_user_interrupt(exc, since):
                raise
            if self.strict:
                raise ProviderError(f"provider {record.name!r}: {describe_exception(exc)}") from exc
            record.status = "failed"
            record.fault = f"provider_info raised {describe_exception(exc)}"
            return
        try:
            info = checked_info(info)
        except (TypeError, ValueError) as exc:
            if self.strict:
                raise ProviderError(f"provider {record.name!r}: provider_info: {exc}") from exc
            record.status = "failed"
            record.fault = f"provider_info answered something invalid: {exc}"
            return
        record.info = info
        if not record.name:
            record.name = info.name
        try:
            major = contract_major(info.contract_version)
        except ValueError:
            major = -1
        if major != contract_major(CONTRACT_VERSION):
            record.status = "unavailable"
            record.fault = (
                f"built for ep-host contract {info.contract_version}; this host speaks "
                f"{CONTRACT_VERSION}: upgrade ep-host" if major > contract_major(CONTRACT_VERSION)
                else f"built for ep-host contract {info.contract_version}; this host speaks "
                f"{CONTRACT_VERSION}: upgrade the provider"
            )
            return
        if not info.available:
            record.status, record.fault = "unavailable", info.reason
            return
        record.status = "available"

    def _add_failed(
        self, record: ProviderRecord, fault: str, exc: BaseException | None = None
    ) -> ProviderRecord:
        if self.strict and exc is not None:
            raise ProviderError(f"provider {record.name!r}: {fault}") from exc
        if self.strict:
            raise ProviderError(f"provider {record.name!r}: {fault}")
        record.status = "failed"
        record.fault = fault
        if exc is not None and env_flag("EP_HOST_DEBUG"):
            traceback.print_exception(exc, file=sys.stderr)
        self.records[record.name] = record
        return record

    # -- calling -----------------------------------------------------------------------------

    def call(self, provider: str, hook: str, via: Callable[..., list[Any]] | None = None,
             **kwargs: Any) -> Any:
        """Call ``hook`` on one provider alone; returns its answer (or ``None``). ``via``: what
        calls it, got from :meth:`batch_caller` for a batch of calls (default: pluggy).

        A ``BaseException`` that is not an ``Exception`` and not the user's ^C comes out as a
        :class:`PluginBaseException`, so callers that catch ``Exception`` see the fault."""
        since = sigint.received
        record = self.records[provider]
        marker = plugin_calls.marker  # set under the ep-host command's supervising parent
        if marker is not None:
            subject = kwargs.get("node", kwargs.get("partition"))
            marker.enter(record.marker_heads[hook], getattr(subject, "name", ""))
        try:
            answers = (via or record.callers[hook])(**kwargs)
        except Exception:
            raise
        except BaseException as exc:
            if is_user_interrupt(exc, since):
                raise
            raise PluginBaseException(exc) from exc
        finally:
            if marker is not None:
                marker.leave()
        return answers[0] if answers else None

    def batch_caller(self, record: ProviderRecord, hook: str) -> Callable[..., list[Any]]:
        """What calls ``hook`` on ``record``'s provider alone, for a batch of calls made now:
        ``record.callers[hook]``, or, where pluggy would call exactly one plain implementation
        (no wrapper, no monitoring), that implementation directly, with the same arguments and
        the same answer list; pluggy's own dispatch costs more than a short hook."""
        caller = record.callers[hook]
        if self.traced:
            return caller
        impls = caller.get_hookimpls()
        if len(impls) != 1 or impls[0].hookwrapper or getattr(impls[0], "wrapper", False):
            return caller
        function, names = impls[0].function, tuple(impls[0].argnames)
        if names == ("node", "context"):  # supports_op's usual signature: no kwargs dict

            def call_node(node: Any, context: Any) -> list[Any]:
                answer = function(node, context)
                return [] if answer is None else [answer]

            return call_node

        def call(**kwargs: Any) -> list[Any]:
            answer = function(*[kwargs[name] for name in names])
            return [] if answer is None else [answer]

        return call

    def providers(self, order: Iterable[str] | None = None) -> list[ProviderRecord]:
        """Records in the user's ``order`` (names not listed follow, sorted), all statuses."""
        order = list(order or ())
        rank = {n: i for i, n in enumerate(order)}
        return sorted(self.records.values(), key=lambda r: (rank.get(r.name, len(rank)), r.name))

    def _enable_trace(self) -> None:
        def before(hook_name: str, hook_impls: Sequence[Any], kwargs: dict[str, Any]) -> None:
            names = ", ".join(self.pm.get_name(i.plugin) or "?" for i in hook_impls)
            args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
            print(f"[ep-host] {hook_name}({args}) -> {names}", file=sys.stderr)

        def after(
            outcome: Any, hook_name: str, hook_impls: Sequence[Any], kwargs: dict[str, Any]
        ) -> None:
            exc = outcome.exception
            if exc is not None:
                shown = f"raised {describe_exception(exc)}"
            else:
                result = outcome.get_result()
                shown = repr(result[0] if isinstance(result, list) and len(result) == 1 else result)
            names = ", ".join(self.pm.get_name(i.plugin) or "?" for i in hook_impls)
            print(f"[ep-host]   {hook_name} <- {names} answered {shown}", file=sys.stderr)

        self.pm.add_hookcall_monitoring(before, after)
        self.traced = True


def _entry_point_record(ep: Any) -> ProviderRecord:
    """A new record for the provider of entry point ``ep``: its name, distribution, version."""
    return _SCAN.record(ep)
