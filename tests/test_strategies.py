"""The strategy registry: one table that choose, the CLI, comparison and the schema doc read;
a strategy added as one module is accepted everywhere, and an unknown name is an error."""

import importlib
import os
import pkgutil
import re
import subprocess
import sys
import textwrap

import pytest
from hostkit import InlineProvider, add_relu_model

from ep_host import Device, strategies
from ep_host.capability import walk
from ep_host.cli import build_parser
from ep_host.errors import PlacementError
from ep_host.loading import load_model
from ep_host.placement import choose

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIM = Device(name="sim:0", kind="sim", link_gbps=1.0, link_latency_us=5.0)


def _table(host):
    for p in (InlineProvider("dev", cost_us=0.5, device=SIM), InlineProvider("cpu", cost_us=1.0)):
        host.register(p, name=p.name)
    table = walk(host, load_model(add_relu_model()), ["dev", "cpu"])
    return table, {"dev": SIM, "cpu": host.records["cpu"].info.device}


def _strategy_choices():
    parser = build_parser()
    place = parser._subparsers._group_actions[0].choices["place"]
    return next(a for a in place._actions if "--strategy" in a.option_strings)


@pytest.fixture
def last_claimant(tmp_path, monkeypatch):
    """A strategy added the way a new one is: one module that registers itself."""
    (tmp_path / "last_claimant_strategy.py").write_text(textwrap.dedent('''
        """Strategy ``last-claimant``: each node on the last provider that claims it."""

        from ep_host.strategies import PlacementRequest, register


        @register("last-claimant", "the last provider in --providers order that claims the node")
        def place(request: PlacementRequest) -> list[str]:
            return [list(claim)[-1] for claim in request.claims]
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("last_claimant_strategy")
    yield "last-claimant"
    strategies.unregister("last-claimant")
    sys.modules.pop("last_claimant_strategy", None)


def test_the_built_in_strategies_in_the_registrys_order():
    assert strategies.names() == ["optimal", "greedy", "priority"]
    assert strategies.DEFAULT == "optimal"
    assert all(s.description for s in strategies.registered())


def test_every_module_of_the_package_registers_a_strategy():
    modules = {m.name for m in pkgutil.iter_modules(strategies.__path__)}
    by_module = {s.place.__module__.rpartition(".")[2] for s in strategies.registered()}
    assert modules == by_module  # no hand-kept list: the package's modules are the strategies


def test_a_strategy_added_as_one_module_is_accepted_everywhere(host, last_claimant):
    table, devices = _table(host)
    placement = choose(table, devices, strategy=last_claimant)
    assert placement.strategy == last_claimant
    assert {n.provider for n in placement.nodes} == {"cpu"}
    action = _strategy_choices()
    assert last_claimant in action.choices
    assert "the last provider in --providers order" in action.help
    optimal = choose(table, devices)
    assert list(optimal.comparison) == ["optimal", "greedy", last_claimant, "priority"]
    assert optimal.comparison[last_claimant] == pytest.approx(placement.total_us)
    assert optimal.total_us <= optimal.comparison[last_claimant] + 1e-6


def test_comparison_holds_every_registered_strategy(host):
    table, devices = _table(host)
    optimal = choose(table, devices)
    assert list(optimal.comparison) == strategies.names()
    for name in strategies.names():
        assert optimal.comparison[name] == pytest.approx(choose(table, devices,
                                                                strategy=name).total_us)
    assert choose(table, devices, strategy="greedy").comparison is None


def test_an_unknown_strategy_is_an_error_naming_the_known_ones(host, capsys):
    with pytest.raises(PlacementError, match="'random'; choose one of optimal, greedy, priority"):
        strategies.get("random")
    table, devices = _table(host)
    with pytest.raises(PlacementError, match="unknown placement strategy 'random'"):
        choose(table, devices, strategy="random")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["place", "m.onnx", "--strategy", "random"])
    assert "invalid choice: 'random'" in capsys.readouterr().err


def test_a_session_with_an_unknown_strategy_is_an_error(host):
    from ep_host.session import InferenceSession

    provider = InlineProvider("a")
    host.register(provider, name="a")
    with pytest.raises(PlacementError, match="unknown placement strategy 'random'"):
        InferenceSession(add_relu_model().SerializeToString(), providers=["a"], host=host,
                         strategy="random")


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="'greedy' is already registered"):
        strategies.register("greedy", "again")(lambda request: [])


def test_a_strategy_may_only_place_a_node_on_one_of_its_claims(host):
    table, devices = _table(host)
    strategies.register("nowhere", "puts every node on a provider nobody uses")(
        lambda request: ["nope"] * len(request.claims))
    try:
        with pytest.raises(PlacementError, match="'nowhere' put node 'add' on 'nope'"):
            choose(table, devices, strategy="nowhere")
    finally:
        strategies.unregister("nowhere")


def test_the_schema_doc_points_at_the_registry():
    with open(os.path.join(ROOT, "docs", "placement-schema.md"), encoding="utf-8") as f:
        doc = f.read()
    assert "a registered strategy" in doc and "`ep-host place --help` lists them" in doc
    example = re.search(r'"comparison": \{[^}]*\}', doc).group(0)
    assert set(re.findall(r'"(\w+)": [\d.]+', example)) <= set(strategies.names())


def test_place_help_lists_the_strategies_without_importing_onnx_or_scipy():
    code = ("import sys\nfrom ep_host.cli import main\n"
            "try:\n    main(['place', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('onnx', 'scipy')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    for strategy in strategies.registered():
        assert f"{strategy.name}:" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "[]"
