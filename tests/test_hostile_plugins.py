"""Hostile plugin code cannot take the host down: BaseExceptions, hangs and deaths in hooks,
views and answers changed behind the host's back, name clashes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest
from hostkit import InlineProvider, add_relu_model, write_distribution

from ep_host import (
    Cost,
    InferenceSession,
    Kernel,
    KernelMatch,
    ProviderInfo,
    ValueView,
    hookimpl,
)
from ep_host.discovery import Host
from ep_host.errors import KernelError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Custom(BaseException):
    """A BaseException subclass of a plugin's own."""


BASE_EXCEPTIONS = {
    "SystemExit": (lambda: SystemExit(3), "SystemExit: 3"),
    "KeyboardInterrupt": (lambda: KeyboardInterrupt(), "KeyboardInterrupt"),
    "GeneratorExit": (lambda: GeneratorExit("closing"), "GeneratorExit: closing"),
    "custom": (lambda: Custom("mine"), "Custom: mine"),
}


@pytest.fixture(params=sorted(BASE_EXCEPTIONS))
def thrown(request):
    """(a factory of the BaseException a plugin raises, how the host describes it)"""
    return BASE_EXCEPTIONS[request.param]


def _feed(tensors):
    return {"x": tensors.x, "y": tensors.y}


def _expected(tensors):
    return np.maximum(tensors.x + tensors.y, 0)


# -- class 1: BaseException from plugin code --------------------------------------------------


def test_a_base_exception_in_provider_info_fails_that_provider(host, thrown):
    make, described = thrown

    class Info(InlineProvider):
        @hookimpl
        def ep_host_provider_info(self):
            raise make()

    record = host.register(Info("bad"), "bad")
    assert record.status == "failed"
    assert record.fault == f"provider_info raised {described}"
    assert host.register(InlineProvider("cpu"), "cpu").status == "available"


@pytest.mark.parametrize("hook_timeout", [None, 5.0], ids=["main-thread", "watched-thread"])
def test_a_base_exception_in_supports_op_is_that_providers_decline(thrown, hook_timeout,
                                                                   tensors):
    make, described = thrown

    class Supports(InlineProvider):
        @hookimpl
        def ep_host_supports_op(self, node, context):
            raise make()

    host = Host(strict=False, hook_timeout=hook_timeout)
    host.register(Supports("bad", cost_us=0.01), "bad")
    host.register(InlineProvider("cpu"), "cpu")
    session = InferenceSession(add_relu_model(), providers=["bad", "cpu"], host=host)
    answer = session.placement.table.answers["add"]["bad"]
    assert answer.code == "fault"
    assert answer.reason == f"provider raised {described}"
    assert {n.provider for n in session.placement.nodes} == {"cpu"}
    np.testing.assert_allclose(session.run(None, _feed(tensors))[0], _expected(tensors))


def test_a_base_exception_in_create_kernel_falls_back_naming_it(host, thrown, tensors):
    make, described = thrown

    class Create(InlineProvider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            raise make()

    host.register(Create("bad", cost_us=0.01), "bad")
    host.register(InlineProvider("cpu", cost_us=5.0), "cpu")
    session = InferenceSession(add_relu_model(), providers=["bad", "cpu"], host=host,
                               strategy="greedy")
    assert any("provider 'bad' failed to create a kernel for node 'add'" in w
               and described in w for w in session.model.warnings)
    np.testing.assert_allclose(session.run(None, _feed(tensors))[0], _expected(tensors))


def test_a_base_exception_in_the_only_create_kernel_is_a_kernel_error(host, thrown):
    make, described = thrown

    class Create(InlineProvider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            raise make()

    host.register(Create("bad"), "bad")
    with pytest.raises(KernelError, match=f"provider 'bad' failed to create a kernel for node "
                                          f"'add'.*{described}"):
        InferenceSession(add_relu_model(), providers=["bad"], host=host)


class Raises(Kernel):
    def __init__(self, make, where):
        self.make, self.where = make, where

    def prepare(self, constants):
        if self.where == "prepare":
            raise self.make()

    def run(self, *inputs):
        raise self.make()


@pytest.mark.parametrize("where", ["prepare", "run"])
def test_a_base_exception_in_a_kernel_is_a_kernel_error_naming_node_and_provider(
        host, thrown, where, tensors):
    make, described = thrown

    class Kernels(InlineProvider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            if node.op_type == "Relu":
                return Raises(make, where)
            return super().ep_host_create_kernel(node, context)

    host.register(Kernels("bad"), "bad")
    with pytest.raises(KernelError, match=f"(?s)(?=.*'relu')(?=.*'bad').*{described}"):
        session = InferenceSession(add_relu_model(), providers=["bad"], host=host)
        session.run(None, _feed(tensors))
    # the session (when it was made) and the host stay usable
    host.register(InlineProvider("cpu"), "cpu")
    session = InferenceSession(add_relu_model(), providers=["cpu"], host=host)
    np.testing.assert_allclose(session.run(None, _feed(tensors))[0], _expected(tensors))


def test_a_base_exception_in_compile_partition_falls_back_node_by_node(host, thrown, tensors):
    make, described = thrown

    class Compiles(InlineProvider):
        @hookimpl
        def ep_host_compile_partition(self, partition, context):
            raise make()

    host.register(Compiles("bad"), "bad")
    session = InferenceSession(add_relu_model(), providers=["bad"], host=host)
    assert any("provider 'bad' failed to compile partition" in w and described in w
               for w in session.model.warnings)
    np.testing.assert_allclose(session.run(None, _feed(tensors))[0], _expected(tensors))


def test_a_base_exception_in_a_device_copy_is_a_kernel_error(host, thrown, tensors):
    from ep_host import Device

    make, described = thrown

    def to_host(array):
        raise make()

    device = Device(name="sim:0", kind="sim", link_gbps=10.0, link_latency_us=5.0,
                    to_host=to_host)
    host.register(InlineProvider("dev", ops=("Add",), cost_us=0.01, device=device), "dev")
    host.register(InlineProvider("cpu", ops=("Relu",)), "cpu")
    session = InferenceSession(add_relu_model(), providers=["dev", "cpu"], host=host)
    with pytest.raises(KernelError, match=f"copying a tensor from sim:0 to cpu failed: "
                                          f"{described}"):
        session.run(None, _feed(tensors))


def test_a_base_exception_while_importing_an_entry_point_fails_that_provider(
        tmp_path, monkeypatch, thrown):
    make, described = thrown
    source = {
        "SystemExit": "raise SystemExit(3)",
        "KeyboardInterrupt": "raise KeyboardInterrupt",
        "GeneratorExit": "raise GeneratorExit('closing')",
        "Custom: mine": "class Custom(BaseException): pass\nraise Custom('mine')",
    }
    key = described if described == "Custom: mine" else described.split(":")[0]
    write_distribution(tmp_path, "ep-exits", {"exits": "exits_mod"},
                       {"exits_mod": source[key] + "\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    host = Host.discover(["exits", "cpu"], strict=False)
    assert host.records["exits"].status == "failed"
    assert host.records["exits"].fault == f"import failed: {described}"
    assert host.records["cpu"].status == "available"


def test_a_real_sigint_during_a_plugin_call_stops_the_session():
    """The user's ^C (a SIGINT that actually arrives) is not swallowed as a provider fault."""

    class Interrupted(InlineProvider):
        sent = False

        @hookimpl
        def ep_host_supports_op(self, node, context):
            # one ^C, to the main thread as a terminal's reaches it: with a hook timeout the call
            # runs on a worker thread, and a signal raised there reached the main thread only
            # when it next ran Python code, sometimes after the check below
            if not self.sent:
                self.sent = True
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            return super().ep_host_supports_op(node, context)

    for timeout in (None, 5.0):
        host = Host(strict=False, hook_timeout=timeout)
        host.register(Interrupted("cpu"), "cpu")
        with pytest.raises(KeyboardInterrupt):
            InferenceSession(add_relu_model(), providers=["cpu"], host=host)

    class Raises(InlineProvider):
        @hookimpl
        def ep_host_supports_op(self, node, context):
            raise KeyboardInterrupt

    # after the user's ^C, a KeyboardInterrupt that a plugin raises is still its own fault
    host = Host(strict=False, hook_timeout=None)
    host.register(Raises("bad"), "bad")
    host.register(InlineProvider("cpu"), "cpu")
    session = InferenceSession(add_relu_model(), providers=["bad", "cpu"], host=host)
    assert session.placement.table.answers["add"]["bad"].reason == (
        "provider raised KeyboardInterrupt")


PLUGIN_TEMPLATE = """
import ctypes, os, signal, sys
from ep_host import Cost, FunctionKernel, KernelMatch, ProviderInfo, hookimpl

def recurse(n):  # through C (map), so that the C stack overflows
    return list(map(recurse, [n + 1]))

def compute(*inputs):
    {run}
    return inputs[0]

@hookimpl
def ep_host_provider_info():
    return ProviderInfo(name="{name}")

@hookimpl
def ep_host_supports_op(node, context):
    {supports}
    return KernelMatch.supported(Cost(compute_us=0.001))

@hookimpl
def ep_host_create_kernel(node, context):
    {create}
    return FunctionKernel(compute)
"""


def hostile_site(tmp_path, name, supports="pass", create="pass", run="pass"):
    """A folder holding one installed provider distribution ``ep-<name>``, which claims every
    node at almost no cost (so it is chosen) and runs ``supports``, ``create`` and ``run``."""
    source = PLUGIN_TEMPLATE.format(name=name, supports=supports, create=create, run=run)
    write_distribution(tmp_path, f"ep-{name}", {name: f"{name}_mod"}, {f"{name}_mod": source})
    return tmp_path


def ep_host_command(site, *args, env=None, timeout=120):
    """Run the ``ep-host`` command with ``site`` on the path; the real providers as installed."""
    paths = [str(site), ROOT, *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    full = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
    full.pop("EP_HOST_PROVIDERS", None)
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "ep_host", *args], capture_output=True,
                          text=True, env=full, timeout=timeout)


MODEL = os.path.join(ROOT, "examples", "cnn.onnx")


def test_the_cli_survives_system_exit_in_supports_op(tmp_path):
    site = hostile_site(tmp_path, "quitter", supports="raise SystemExit(0)")
    result = ep_host_command(site, "explain", MODEL, "--providers", "quitter,cpu", "--json")
    assert result.returncode == 0, result.stderr
    assert '"reason": "provider raised SystemExit: 0"' in result.stdout


def test_the_users_interrupt_stops_the_cli_with_a_short_message(tmp_path):
    site = hostile_site(tmp_path, "sigint", supports="os.kill(os.getpid(), signal.SIGINT)")
    result = ep_host_command(site, "explain", MODEL, "--providers", "sigint,cpu")
    assert result.returncode == 130
    assert result.stderr.strip().splitlines()[-1] == "ep-host: interrupted"
    assert "Traceback" not in result.stderr


# -- class 2: plugin code that never returns or kills the process -------------------------------


SLEEPS_ON_IMPORT = "import threading\nthreading.Event().wait(60)\n"


def test_an_import_that_never_finishes_is_listed_as_failed(tmp_path, monkeypatch):
    write_distribution(tmp_path, "ep-sleepy", {"sleepy": "sleepy_mod"},
                       {"sleepy_mod": SLEEPS_ON_IMPORT})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("EP_HOST_IMPORT_TIMEOUT", "0.3")
    host = Host.discover(["sleepy", "cpu"], strict=False)
    assert host.records["sleepy"].status == "failed"
    assert host.records["sleepy"].fault.startswith(
        "import did not finish within 0.3 s (EP_HOST_IMPORT_TIMEOUT)")
    assert host.records["cpu"].status == "available"


def test_the_import_time_limit_comes_from_the_environment(monkeypatch):
    from ep_host.discovery import import_timeout_from_env

    monkeypatch.delenv("EP_HOST_IMPORT_TIMEOUT", raising=False)
    assert import_timeout_from_env() == 30.0
    for raw, expected in (("2.5", 2.5), ("0", None), ("-1", None), ("soon", 30.0),
                          ("nan", None)):
        monkeypatch.setenv("EP_HOST_IMPORT_TIMEOUT", raw)
        assert import_timeout_from_env() == expected, raw


def test_every_command_works_beside_a_provider_whose_import_hangs(tmp_path):
    write_distribution(tmp_path, "ep-sleepy", {"sleepy": "sleepy_mod"},
                       {"sleepy_mod": SLEEPS_ON_IMPORT})
    env = {"EP_HOST_IMPORT_TIMEOUT": "5"}
    listed = ep_host_command(tmp_path, "providers", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    by_name = {p["name"]: p for p in json.loads(listed.stdout)}
    assert by_name["sleepy"]["status"] == "failed"
    assert "import did not finish within 5 s" in by_name["sleepy"]["fault"]
    assert by_name["cpu"]["status"] == "available"
    explained = ep_host_command(tmp_path, "place", MODEL, "--providers", "sleepy,cpu", env=env)
    assert explained.returncode == 0, explained.stderr


DEATH_LINE = re.compile(r"ep-host: provider 'killer' died in hook (\w+) \(node '([^']+)'\): (.+)")


def death(result):
    """(hook, node, how) from the supervising parent's last stderr line."""
    match = DEATH_LINE.fullmatch(result.stderr.strip().splitlines()[-1])
    assert match, result.stderr[-2000:]
    return match.groups()


def test_os_exit_in_supports_op_names_the_provider_and_hook(tmp_path):
    site = hostile_site(tmp_path, "killer", supports="os._exit(3)")
    result = ep_host_command(site, "explain", MODEL, "--providers", "killer,cpu")
    hook, node, how = death(result)
    assert (hook, how) == ("supports_op", "exit status 3")
    assert result.returncode == 3


def test_os_exit_zero_in_a_hook_is_still_a_failure(tmp_path):
    site = hostile_site(tmp_path, "killer", create="os._exit(0)")
    result = ep_host_command(site, "run", tiny_model(tmp_path), "--random-inputs",
                             "--providers", "killer,cpu")
    assert death(result) == ("create_kernel", "add", "exit status 0")
    assert result.returncode == 1


def test_a_segfault_in_create_kernel_names_the_provider_and_hook(tmp_path):
    site = hostile_site(tmp_path, "killer", create="ctypes.string_at(0)")
    result = ep_host_command(site, "run", tiny_model(tmp_path), "--random-inputs",
                             "--providers", "killer,cpu")
    assert death(result) == ("create_kernel", "add", "SIGSEGV (Segmentation fault)")
    assert result.returncode == 128 + signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in result.stderr  # faulthandler's stack
    assert "killer_mod.py" in result.stderr


def test_os_exit_in_a_kernel_run_names_the_provider_and_node(tmp_path):
    site = hostile_site(tmp_path, "killer", run="os._exit(5)")
    result = ep_host_command(site, "run", tiny_model(tmp_path), "--random-inputs",
                             "--providers", "killer,cpu")
    assert death(result) == ("run", "add", "exit status 5")
    assert result.returncode == 5


def test_deep_recursion_in_supports_op_names_the_provider_and_hook(tmp_path):
    site = hostile_site(tmp_path, "killer",
                        supports="sys.setrecursionlimit(10**8); recurse(0)")
    result = ep_host_command(site, "explain", MODEL, "--providers", "killer,cpu")
    hook, node, how = death(result)
    assert hook == "supports_op"
    assert how.startswith("SIGSEGV")
    assert result.returncode == 128 + signal.SIGSEGV


def test_a_normal_failure_is_passed_through_without_a_death_notice(tmp_path):
    result = ep_host_command(tmp_path, "explain", str(tmp_path / "missing.onnx"))
    assert result.returncode == 1
    assert result.stderr.startswith("ep-host: error:")
    assert "died" not in result.stderr


def test_the_parent_reports_only_deaths_nobody_asked_for():
    from ep_host.supervisor import verdict

    killed = signal.SIGKILL  # a wait status for "killed by signal n" is n
    assert verdict(0, None, []) == 0
    assert verdict(2 << 8, None, []) == 2
    assert verdict(signal.SIGTERM, ("p", "supports_op", "n"), [signal.SIGTERM]) == 143
    assert verdict(killed, None, []) == 128 + killed
    assert verdict(1 << 8, ("p", "run", "n"), []) == 1


def tiny_model(tmp_path):
    """add_relu_model saved to a file; its nodes are 'add' and 'relu'."""
    import onnx

    path = tmp_path / "tiny.onnx"
    onnx.save(add_relu_model(), str(path))
    return str(path)


# -- class 5: views and values handed to plugins -----------------------------------------------


def test_node_views_cannot_be_changed(host, tensors):
    """A provider that rewrites the node it is asked about changes nothing for the others."""
    attempts = []

    class Rewrites(InlineProvider):
        @hookimpl
        def ep_host_supports_op(self, node, context):
            for attempt in (lambda: setattr(node, "op_type", "Relu"),
                            lambda: setattr(node, "_attributes", {}),
                            lambda: delattr(node, "name"),
                            lambda: node.attributes.__setitem__("alpha", 2.0),
                            lambda: node.inputs.append(None),
                            lambda: setattr(node.inputs[0], "shape", (1,)),
                            lambda: setattr(node.inputs[0], "_tensor", None),
                            lambda: node.graph.values.__setitem__("x", None),
                            lambda: setattr(node.graph, "nodes", ())):
                try:
                    attempt()
                except (AttributeError, TypeError):
                    attempts.append("refused")
                else:
                    attempts.append("allowed")
            return KernelMatch.unsupported("only looking", code="op")

    host.register(Rewrites("vandal"), "vandal")
    host.register(InlineProvider("cpu"), "cpu")
    session = InferenceSession(add_relu_model(), providers=["vandal", "cpu"], host=host)
    assert attempts and set(attempts) == {"refused"}
    assert [n.op_type for n in session.placement.table.nodes] == ["Add", "Relu"]
    np.testing.assert_allclose(session.run(None, _feed(tensors))[0], _expected(tensors))


def test_views_say_they_are_read_only(host):
    from ep_host import load_model

    model = load_model(add_relu_model())
    node = model.graph.nodes[0]
    with pytest.raises(AttributeError, match="NodeView is read-only: 'op_type'"):
        node.op_type = "Relu"
    with pytest.raises(AttributeError, match="ValueView is read-only: 'dtype'"):
        node.inputs[0].dtype = None
    with pytest.raises(AttributeError, match="GraphView is read-only: 'name'"):
        model.graph.name = "other"
    assert type(node).__name__ == "NodeView" and isinstance(node.inputs[0], ValueView)


class Sneaky(KernelMatch):
    """Reports one cost when checked and another later."""

    __slots__ = ()


def _claims(answer_for):
    class Claims(InlineProvider):
        @hookimpl
        def ep_host_supports_op(self, node, context):
            return answer_for(node)

    return Claims


@pytest.mark.parametrize("answer, reason", [
    (lambda node: Sneaky(True, cost=Cost(compute_us=0.001)),
     "provider returned a Sneaky, a subclass of KernelMatch; only KernelMatch itself"),
    (lambda node: KernelMatch.supported(Cost(compute_us=0.001), host_inputs=(5,)),
     "host_inputs (5,), which must be input indices of the node's op (ints in range(0, 2))"),
    (lambda node: KernelMatch.supported(Cost(compute_us=0.001), host_inputs=(-1,)),
     "host_inputs (-1,), which must be input indices"),
    (lambda node: KernelMatch.supported(Cost(compute_us=0.001), host_inputs=(0, 0)),
     "host_inputs (0, 0), which lists an input twice"),
    (lambda node: KernelMatch(True, cost=Cost(), host_inputs=("0",)),
     "host_inputs ('0',), which must be input indices"),
    (lambda node: KernelMatch(True, cost=Cost(), output_layouts=(3,)),
     "output_layouts (3,), which must be a tuple of str or None"),
], ids=["subclass", "out-of-range", "negative", "duplicate", "not-int", "layout"])
def test_only_exact_valid_answers_are_trusted(host, answer, reason):
    host.register(_claims(answer)("bad", ops=("Add",)), "bad")
    host.register(InlineProvider("cpu", cost_us=5.0), "cpu")
    session = InferenceSession(add_relu_model(), providers=["bad", "cpu"], host=host)
    got = session.placement.table.answers["add"]["bad"]
    assert got.code == "fault"
    assert reason in got.reason
    assert {n.name: n.provider for n in session.placement.nodes}["add"] == "cpu"


def test_a_cost_subclass_is_not_trusted(host):
    class Cheap(Cost):
        __slots__ = ()

        @property
        def total_us(self):
            return 0.0

    host.register(_claims(lambda node: KernelMatch(True, cost=Cheap(compute_us=1e9)))("bad"),
                  "bad")
    host.register(InlineProvider("cpu"), "cpu")
    session = InferenceSession(add_relu_model(), providers=["bad", "cpu"], host=host)
    got = session.placement.table.answers["add"]["bad"]
    assert got.reason == ("provider claimed the node with cost Cheap, not a Cost (subclasses "
                          "are not accepted)")


def test_an_answer_changed_after_it_was_checked_changes_nothing(host):
    """Frozen values can still be forced (object.__setattr__); the host keeps its own copy."""
    given = []

    def answer(node):
        match = KernelMatch.supported(Cost(compute_us=7.0), host_inputs=())
        given.append(match)
        return match

    host.register(_claims(answer)("sly"), "sly")
    session = InferenceSession(add_relu_model(), providers=["sly"], host=host)
    for match in given:  # after the walk: make every answer look free
        object.__setattr__(match.cost, "compute_us", 0.0)
        object.__setattr__(match, "host_inputs", (0,))
    kept = session.placement.table.answers["add"]["sly"]
    assert kept.cost.compute_us == 7.0 and kept.host_inputs == ()
    assert all(kept is not g for g in given)


def test_a_reused_answer_is_copied_once_and_still_checked(host):
    shared = KernelMatch.supported(Cost(compute_us=2.0))

    class Reuses(InlineProvider):
        @hookimpl
        def ep_host_supports_op(self, node, context):
            return shared

    host.register(Reuses("same"), "same")
    session = InferenceSession(add_relu_model(), providers=["same"], host=host)
    add, relu = (session.placement.table.answers[n]["same"] for n in ("add", "relu"))
    assert add is relu and add is not shared and add == shared


@pytest.mark.parametrize("figures, reason", [
    ({"link_gbps": 0.0, "link_latency_us": 5.0}, "Device.link_gbps of device 'sim:0' (kind "
     "'sim') must be a finite number > 0"),
    ({"link_gbps": -1.0, "link_latency_us": 5.0}, "Device.link_gbps of device 'sim:0' (kind "
     "'sim') must be a finite number > 0"),
    ({"link_gbps": float("nan"), "link_latency_us": 5.0}, "Device.link_gbps"),
    ({"link_gbps": float("inf"), "link_latency_us": 5.0}, "Device.link_gbps"),
    ({"link_gbps": 10.0, "link_latency_us": -5.0}, "Device.link_latency_us of device 'sim:0' "
     "(kind 'sim') must be a finite number >= 0, got -5.0"),
    ({"link_gbps": 10.0, "link_latency_us": float("nan")}, "Device.link_latency_us"),
    ({"link_gbps": "fast", "link_latency_us": 5.0}, "Device.link_gbps of device 'sim:0' "
     "(kind 'sim') is a str, not a number"),
], ids=["zero", "negative", "nan", "inf", "negative-latency", "nan-latency", "str"])
def test_device_link_figures_must_be_sane(host, figures, reason):
    from ep_host import Device

    device = Device(name="sim:0", kind="sim", **figures)
    record = host.register(InlineProvider("dev", device=device), "dev")
    assert record.status == "failed"
    assert record.fault.startswith("provider_info answered something invalid: ")
    assert reason in record.fault
    host.register(InlineProvider("cpu"), "cpu")
    session = InferenceSession(add_relu_model(), providers=["dev", "cpu"], host=host)
    assert {n.provider for n in session.placement.nodes} == {"cpu"}


def test_provider_info_and_device_subclasses_are_not_trusted(host):
    from ep_host import Device

    class Info(ProviderInfo):
        __slots__ = ()

    class Dev(Device):
        __slots__ = ()

    class GivesInfo(InlineProvider):
        def __init__(self, name, info):
            super().__init__(name)
            self.answer = info

        @hookimpl
        def ep_host_provider_info(self):
            return self.answer

    first = host.register(GivesInfo("a", Info(name="a")), "a")
    assert "returned Info, not ProviderInfo (subclasses are not accepted)" in first.fault
    second = host.register(GivesInfo("b", ProviderInfo(name="b", device=Dev())), "b")
    assert "ProviderInfo.device is a Dev, not a Device (subclasses" in second.fault


# -- class 11 (part): name clashes and unknown providers -----------------------------------------


GOOD_PROVIDER = """
from ep_host import ProviderInfo, hookimpl

@hookimpl
def ep_host_provider_info():
    return ProviderInfo(name="dup")
"""


def _duplicated_in_one_distribution(root, first="dup_a", second="dup_b"):
    info = write_distribution(root, "ep-dup", {"dup": first},
                              {"dup_a": GOOD_PROVIDER, "dup_b": GOOD_PROVIDER})
    (info / "entry_points.txt").write_text(
        f"[ep_host.providers]\ndup = {first}\ndup = {second}\n")


@pytest.mark.parametrize("second", ["dup_b", "dup_a"], ids=["two-targets", "same-target"])
def test_one_distribution_registering_a_name_twice_is_flagged(tmp_path, monkeypatch, second):
    _duplicated_in_one_distribution(tmp_path, second=second)
    monkeypatch.syspath_prepend(str(tmp_path))
    host = Host.discover(["dup", "cpu"], strict=False)
    record = host.records["dup"]
    assert record.status == "failed"
    assert record.fault == (
        f"provider name 'dup' is registered 2 times by distribution ep-dup (entry points "
        f"'dup_a', '{second}'); it must name one provider once: fix its entry points")
    assert record.distribution == "ep-dup"
    assert host.records["cpu"].status == "available"


def test_two_distributions_registering_one_name_are_still_flagged(tmp_path, monkeypatch):
    write_distribution(tmp_path, "ep-one", {"dup": "dup_a"}, {"dup_a": GOOD_PROVIDER})
    write_distribution(tmp_path, "ep-two", {"dup": "dup_b"}, {"dup_b": GOOD_PROVIDER})
    monkeypatch.syspath_prepend(str(tmp_path))
    host = Host.discover(["dup"], strict=False)
    assert host.records["dup"].fault == (
        "provider name 'dup' is registered by 2 distributions: ep-one and ep-two; uninstall one")


def test_the_cli_shows_a_name_clash_in_one_distribution(tmp_path):
    _duplicated_in_one_distribution(tmp_path)
    result = ep_host_command(tmp_path, "providers", "--json")
    assert result.returncode == 0, result.stderr
    by_name = {p["name"]: p for p in json.loads(result.stdout)}
    assert by_name["dup"]["status"] == "failed"
    assert "registered 2 times by distribution ep-dup" in by_name["dup"]["fault"]


def test_an_unknown_provider_is_named_with_every_installed_one(tmp_path):
    """``--providers`` loads only what it names; the error still lists every entry point."""
    site = hostile_site(tmp_path, "extra")
    result = ep_host_command(site, "explain", MODEL, "--providers", "nosuch,cpu")
    assert result.returncode == 1
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("ep-host: error: unknown provider(s) nosuch; installed: ")
    installed = line.split("installed: ", 1)[1].split(", ")
    assert {"cpu", "extra"} <= set(installed)
    assert installed == sorted(installed) and "nosuch" not in installed
    assert "Traceback" not in result.stderr


def test_installed_names_include_providers_not_loaded(tmp_path, monkeypatch):
    write_distribution(tmp_path, "ep-unloaded", {"unloaded": "unloaded_mod"},
                       {"unloaded_mod": "raise SystemExit('never imported')\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    host = Host.discover(["cpu"], strict=False)
    assert "unloaded" not in host.records
    assert {"cpu", "unloaded"} <= set(host.installed_names())


@pytest.mark.parametrize("hook_timeout", ["0", "60"], ids=["main-thread", "watched-thread"])
def test_a_sigint_sent_to_the_command_stops_it_while_a_plugin_sleeps(tmp_path, hook_timeout):
    """SIGINT sent to the ep-host process (not from a terminal) is forwarded to the child
    that does the work: it stops with the short message and 130, like a ^C."""
    import time

    site = hostile_site(tmp_path, "sleeper", supports=(
        "import pathlib, time; pathlib.Path(__file__).with_name('asked').touch(); "
        "time.sleep(60)"))
    paths = [str(site), ROOT, *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p),
               EP_HOST_HOOK_TIMEOUT=hook_timeout)
    process = subprocess.Popen(
        [sys.executable, "-m", "ep_host", "explain", MODEL, "--providers", "sleeper,cpu"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 90
        while not _asked(site) and time.monotonic() < deadline:
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert err.strip().splitlines()[-1] == "ep-host: interrupted"
    assert "Traceback" not in err


def _asked(site):
    return (site / "asked").exists()


def test_a_provider_whose_import_sets_a_signal_handler_still_loads(tmp_path, monkeypatch):
    """Imports run on a watched thread; one that needs the main thread is imported there."""
    source = ("import signal\nsignal.signal(signal.SIGUSR1, signal.SIG_IGN)\n"
              + GOOD_PROVIDER.replace('"dup"', '"signals"'))
    write_distribution(tmp_path, "ep-signals", {"signals": "signals_mod"},
                       {"signals_mod": source})
    monkeypatch.syspath_prepend(str(tmp_path))
    host = Host.discover(["signals"], strict=False)
    assert host.records["signals"].status == "available", host.records["signals"].fault
