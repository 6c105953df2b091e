"""The pytest plugin of the EP author kit: ``--ep-host-provider NAME``, fixtures that build models
and compare the provider's outputs with a reference, and ``--ep-host-conformance``, onnx's node
conformance cases for that provider as test items.

Loaded by the ``pytest11`` entry point ``ep_host``; importing it imports neither onnx nor a
provider, so it costs nothing in test runs that do not use it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

PROVIDER_HELP = "the provider under test (an ep-host provider name, such as cpu)"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ep-host", "ep-host EP author kit")
    group.addoption("--ep-host-provider", metavar="NAME", default=None, help=PROVIDER_HELP)
    group.addoption("--ep-host-conformance", action="store_true", default=False,
                    help="run onnx's node conformance cases on the provider under test: a case "
                         "passes, fails (wrong output, error) or is skipped as declined")
    group.addoption("--ep-host-op", action="append", default=[], metavar="OP",
                    help="with --ep-host-conformance: only the cases of this op (repeatable)")
    group.addoption("--ep-host-jobs", type=int, default=None, metavar="N",
                    help="with --ep-host-conformance: worker processes (default: CPU count)")
    parser.addini("ep_host_provider", PROVIDER_HELP)


def provider_under_test(config: pytest.Config) -> str | None:
    return config.getoption("--ep-host-provider") or config.getini("ep_host_provider") or None


# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def ep_host_provider(request: pytest.FixtureRequest) -> str:
    """The provider under test: ``--ep-host-provider``, else the ``ep_host_provider`` ini value.
    An EP package's tests may override this fixture to name their provider."""
    name = provider_under_test(request.config)
    if name is None:
        raise pytest.UsageError(
            "no provider under test: pass --ep-host-provider NAME, set ep_host_provider in the "
            "pytest configuration, or override the ep_host_provider fixture")
    return name


@pytest.fixture
def one_node_model() -> Callable[..., Any]:
    """``one_node_model(op_type, inputs, outputs=("y",), *, domain="", opset=17, **attrs)``: a
    one-node ``onnx.ModelProto`` (see :func:`ep_host.testing.kit.one_node_model`)."""
    from ep_host.testing.kit import one_node_model as build

    return build


@pytest.fixture
def custom_op_model() -> Callable[..., Any]:
    """``custom_op_model(domain, op_type, inputs, outputs=("y",), *, version=1, **attrs)``: a
    one-node model of a custom-domain op (see :func:`ep_host.testing.kit.custom_op_model`)."""
    from ep_host.testing.kit import custom_op_model as build

    return build


@pytest.fixture
def ep_session(ep_host_provider: str) -> Callable[..., Any]:
    """``ep_session(model, *, also=(), **kwargs)``: an ``ep_host.InferenceSession`` on the
    provider under test, then the providers in ``also``; ``model`` a ModelProto, bytes or path."""
    import ep_host

    def make(model: Any, *, also: Sequence[str] = (), **kwargs: Any) -> Any:
        if hasattr(model, "SerializeToString"):
            model = model.SerializeToString()
        return ep_host.InferenceSession(model, providers=[ep_host_provider, *also], **kwargs)

    return make


@pytest.fixture
def assert_matches_reference(ep_host_provider: str, ep_session: Callable[..., Any]
                             ) -> Callable[..., list[Any]]:
    """``assert_matches_reference(model, feeds=None, *, reference=None, rtol=None, atol=0.0,
    also=())``: run ``model`` on the provider under test alone (with ``also`` after it) and
    compare every output with ``reference(*inputs)`` or, without one, onnx's
    ``ReferenceEvaluator``. Dtypes and shapes must match; values within ``atol + rtol * scale``,
    scale being the output's largest magnitude (``rtol`` by dtype: float32 1e-5, float16 1e-3).
    ``feeds`` default to random values of the declared input types. Returns the outputs."""
    from ep_host.testing.kit import output_mismatch, random_feeds, reference_outputs

    def check(model: Any, feeds: Mapping[str, Any] | None = None, *,
              reference: Callable[..., Any] | None = None, rtol: float | None = None,
              atol: float = 0.0, also: Sequence[str] = ()) -> list[Any]:
        feeds = dict(random_feeds(model) if feeds is None else feeds)
        expected = reference_outputs(model, feeds, reference)
        session = ep_session(model, also=also)
        actual = session.run(None, feeds)
        names = [o.name for o in session.get_outputs()]
        if len(actual) != len(expected):
            pytest.fail(f"provider {ep_host_provider!r}: {len(actual)} outputs, the reference "
                        f"gave {len(expected)}", pytrace=False)
        problems = [output_mismatch(n, e, a, rtol, atol)
                    for n, e, a in zip(names, expected, actual, strict=True)]
        problems = [p for p in problems if p]
        if problems:
            pytest.fail(f"provider {ep_host_provider!r} differs from the reference: "
                        + "; ".join(problems), pytrace=False)
        return actual

    return check


@pytest.fixture
def assert_kernel_contract(ep_host_provider: str) -> Callable[..., None]:
    """``assert_kernel_contract(model, feeds=None, *, also=())``: fail unless the provider's
    kernels keep the contract of shared prepacked constants and workspaces on ``model``: the
    same output bits in a session's first and second runs and in two sessions that share
    prepacked constants, and every offered state adopted by the second session (see
    :func:`ep_host.testing.kit.kernel_contract_problems`)."""
    from ep_host.testing.kit import kernel_contract_problems

    def check(model: Any, feeds: Mapping[str, Any] | None = None, *,
              also: Sequence[str] = ()) -> None:
        problems = kernel_contract_problems(model, [ep_host_provider, *also], feeds)
        if problems:
            pytest.fail(f"provider {ep_host_provider!r} breaks the kernel contract: "
                        + "; ".join(problems), pytrace=False)

    return check


# ---------------------------------------------------------------------------------------------
# Conformance cases as test items
# ---------------------------------------------------------------------------------------------


class ConformanceFailure(Exception):
    """A case whose output was wrong or that raised; its message is the case's reason."""


class ConformanceCase(pytest.Item):
    """One of onnx's node conformance cases on the provider under test. All selected cases run
    together, in isolated worker processes (``ep_host.conformance``), when the first one runs."""

    def __init__(self, *, case: str, provider: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.case, self.provider = case, provider

    def runtest(self) -> None:
        results = _conformance_results(self.session, self.provider)
        result = results[self.case]
        if result.outcome == "declined":
            pytest.skip(f"declined by {self.provider}: {result.reason}")
        if result.outcome != "pass":
            raise ConformanceFailure(f"{result.outcome}: {result.reason}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
                     ) -> str:
        if isinstance(excinfo.value, ConformanceFailure):
            return f"{self.case} on {self.provider}: {excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[str, int | None, str]:
        return "ep-host conformance", None, f"{self.case} [{self.provider}]"


_RESULTS_KEY = pytest.StashKey[dict]()


def _conformance_results(session: pytest.Session, provider: str) -> dict[str, Any]:
    results = session.config.stash.get(_RESULTS_KEY, None)
    if results is None:
        from ep_host import conformance

        names = [i.case for i in session.items if isinstance(i, ConformanceCase)]
        jobs = session.config.getoption("--ep-host-jobs")
        ran = conformance.run_cases(names, [provider], jobs=jobs)
        results = session.config.stash[_RESULTS_KEY] = {r.name: r for r in ran}
    return results


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    if not config.getoption("--ep-host-conformance"):
        return
    provider = provider_under_test(config)
    if provider is None:
        raise pytest.UsageError("--ep-host-conformance needs --ep-host-provider NAME")
    from ep_host import conformance

    names = conformance.select_cases(config.getoption("--ep-host-op"))
    if not names:
        raise pytest.UsageError("--ep-host-op: no conformance case tests "
                                + ", ".join(config.getoption("--ep-host-op")))
    items.extend(ConformanceCase.from_parent(session, name=f"conformance::{name}", case=name,
                                             provider=provider) for name in names)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    results = config.stash.get(_RESULTS_KEY, None)
    if not results:
        return
    counts = Counter(r.outcome for r in results.values())
    provider = provider_under_test(config)
    terminalreporter.write_line(
        f"ep-host conformance on {provider}: {len(results)} cases: "
        + ", ".join(f"{counts.get(o, 0)} {o}" for o in ("pass", "declined", "wrong", "error")))

