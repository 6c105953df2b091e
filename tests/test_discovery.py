"""Finding providers through entry points, each one isolated from the others' faults."""

import pytest
from hostkit import InlineProvider, add_relu_model, write_distribution

from ep_host import capability, hookimpl
from ep_host.discovery import Host
from ep_host.errors import ProviderError
from ep_host.loading import load_model

GOOD = """
from ep_host import Cost, KernelMatch, ProviderInfo, hookimpl

@hookimpl
def ep_host_provider_info():
    return ProviderInfo(name="{name}", version="1.0")

@hookimpl
def ep_host_supports_op(node, context):
    return KernelMatch.supported(Cost(compute_us=1.0))
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on sys.path where tests install fake distributions."""
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_real_providers_are_found_through_entry_points():
    host = Host.discover()
    cpu = host.records["cpu"]
    assert cpu.status == "available"
    assert cpu.distribution == "ep-host-cpu" and cpu.entry_point == "ep_host_cpu.provider"
    assert set(cpu.hooks) == {"ep_host_provider_info", "ep_host_supports_op",
                              "ep_host_create_kernel"}
    assert host.records["cuda"].distribution == "ep-host-cuda"


def test_a_provider_that_fails_to_import_is_listed_with_its_fault(site):
    write_distribution(site, "broken-ep", {"broken": "broken_ep_mod"},
                       {"broken_ep_mod": "raise RuntimeError('missing libfoo.so')"})
    write_distribution(site, "fine-ep", {"fine": "fine_ep_mod"},
                       {"fine_ep_mod": GOOD.format(name="fine")})
    host = Host.discover(["broken", "fine", "cpu"])
    broken = host.records["broken"]
    assert broken.status == "failed"
    assert "import failed: RuntimeError: missing libfoo.so" in broken.fault
    assert broken.distribution == "broken-ep"
    assert host.records["fine"].available and host.records["cpu"].available


def test_a_signature_that_does_not_match_the_spec_is_a_fault(site):
    bad = """
    from ep_host import ProviderInfo, hookimpl

    @hookimpl
    def ep_host_provider_info():
        return ProviderInfo(name="sig")

    @hookimpl
    def ep_host_supports_op(node, ctx):
        return None
    """
    write_distribution(site, "sig-ep", {"sig": "sig_ep_mod"}, {"sig_ep_mod": bad})
    host = Host.discover(["sig"])
    assert host.records["sig"].status == "failed"
    assert "'ctx'" in host.records["sig"].fault and "context" in host.records["sig"].fault


def test_a_hook_parameter_with_a_default_is_a_fault(host):
    class Defaults:
        @hookimpl
        def ep_host_provider_info(self):
            return None

        @hookimpl
        def ep_host_supports_op(self, node, context=None):
            return None

    record = host.register(Defaults(), name="defaults")
    assert record.status == "failed" and "default" in record.fault


def test_a_newer_contract_major_version_is_unavailable_not_crashed(host):
    record = host.register(InlineProvider("future", contract_version="2.0"), name="future")
    assert record.status == "unavailable"
    assert "contract 2.0" in record.fault and "upgrade ep-host" in record.fault


def test_a_name_two_distributions_register_names_both(site):
    source = GOOD.format(name="twin")
    write_distribution(site, "dup-one", {"twin": "twin_one"}, {"twin_one": source})
    write_distribution(site, "dup-two", {"twin": "twin_two"}, {"twin_two": source})
    host = Host.discover(["twin", "cpu"])
    twin = host.records["twin"]
    assert twin.status == "failed"
    assert "dup-one" in twin.fault and "dup-two" in twin.fault
    assert host.records["cpu"].available


def test_provider_info_that_raises_or_returns_garbage_is_a_fault(host):
    class Raises(InlineProvider):
        @hookimpl
        def ep_host_provider_info(self):
            raise OSError("device lost")

    class Garbage(InlineProvider):
        @hookimpl
        def ep_host_provider_info(self):
            return "I am a provider"

    assert "OSError: device lost" in host.register(Raises("r"), name="r").fault
    assert "returned str" in host.register(Garbage("g"), name="g").fault


def test_env_providers_limits_which_entry_points_load(monkeypatch):
    monkeypatch.setenv("EP_HOST_PROVIDERS", "cpu")
    assert set(Host.discover().records) == {"cpu"}
    monkeypatch.setenv("EP_HOST_PROVIDERS", "")
    assert Host.discover().records == {}


def test_strict_mode_reraises_provider_faults(site, monkeypatch):
    write_distribution(site, "broken-ep", {"broken": "broken_ep_mod2"},
                       {"broken_ep_mod2": "raise RuntimeError('boom')"})
    monkeypatch.setenv("EP_HOST_STRICT", "1")
    with pytest.raises(ProviderError, match="boom"):
        Host.discover(["broken"])


def test_trace_plugins_prints_each_hook_call(capsys, monkeypatch):
    monkeypatch.setenv("EP_HOST_TRACE_PLUGINS", "1")
    host = Host()
    host.register(InlineProvider("mine"), name="mine")
    capability.walk(host, load_model(add_relu_model()), ["mine"])
    err = capsys.readouterr().err
    assert "ep_host_provider_info" in err
    assert "ep_host_supports_op(node=NodeView('add'" in err and "-> mine" in err
    assert "answered KernelMatch(is_supported=True" in err


def test_each_provider_is_called_alone_and_wrappers_still_apply(host):
    a, b = InlineProvider("a"), InlineProvider("b", cost_us=2.0)
    host.register(a, name="a")
    host.register(b, name="b")
    seen = []

    class Wrapper:
        @hookimpl(wrapper=True)
        def ep_host_supports_op(self, node):
            answer = yield
            seen.append((node.name, answer[0].cost.total_us))
            return answer

    host.pm.register(Wrapper())
    table = capability.walk(host, load_model(add_relu_model()), ["a", "b"])
    assert table.answers["add"]["a"].cost.total_us == 1.0
    assert table.answers["add"]["b"].cost.total_us == 2.0
    assert sorted(seen) == [("add", 1.0), ("add", 2.0), ("relu", 1.0), ("relu", 2.0)]
    assert a.asked == ["add", "relu"] and b.asked == ["add", "relu"]


def test_a_module_provider_hooks_by_any_name_pluggy_takes(host):
    """The host's manager skips a module's plainly unhookable names (classes, constants,
    imports) without pluggy's static look-up; hooks under other names (``specname``), wrapped
    in staticmethod, or bound methods stored in the module are still found."""
    import types

    from ep_host import Cost, KernelMatch, ProviderInfo

    class Source:
        @hookimpl(specname="ep_host_supports_op")
        def supports(self, node, context):
            return KernelMatch.supported(Cost(compute_us=2.0))

    module = types.ModuleType("a_module_provider")
    exec(  # a plain function with the marker, read from the module's namespace
        "from ep_host import ProviderInfo, hookimpl\n"
        "@hookimpl\n"
        "def ep_host_provider_info():\n"
        "    return ProviderInfo(name='modular', version='1.0')\n", module.__dict__)
    module.answer = Source().supports  # a bound method under another name
    module.ProviderInfo, module.LIMIT = ProviderInfo, 3  # a class and a constant: not hooks
    record = host.register(module, name="modular")
    assert record.status == "available", record.fault
    table = capability.walk(host, load_model(add_relu_model()), ["modular"])
    assert all(row["modular"].cost.compute_us == 2.0 for row in table.answers.values())


def test_sessions_share_a_host_until_what_it_was_built_from_changes(site, monkeypatch):
    from ep_host.discovery import shared_host

    first = shared_host(["cpu"])
    assert shared_host(["cpu"]) is first
    assert shared_host(None) is not first  # other providers asked for: another host
    monkeypatch.setenv("EP_HOST_STRICT", "1")  # a setting the host reads: a new host
    strict = shared_host(["cpu"])
    assert strict is not first and strict.strict
    monkeypatch.delenv("EP_HOST_STRICT")
    assert shared_host(["cpu"]) is first
    # a provider that failed since (a capability walk found it stuck) is loaded afresh
    first.records["cpu"].status = "failed"
    again = shared_host(["cpu"])
    assert again is not first and again.records["cpu"].available
    # a distribution installed since changes the entry points: they are scanned and loaded
    write_distribution(site, "late-ep", {"late": "late_ep"}, {"late_ep": GOOD.format(name="late")})
    assert "late" in shared_host(None).records


def test_sessions_without_workers_share_their_host():
    from ep_host import InferenceSession

    model = add_relu_model()
    one = InferenceSession(model.SerializeToString(), providers=["cpu"])
    two = InferenceSession(model.SerializeToString(), providers=["cpu"])
    assert one._host is two._host
