"""The ``ep-host`` command: providers, explain, place, run.

Only argparse runs before a subcommand is chosen, so ``--help`` stays fast: onnx, numpy-heavy
modules and plugins load inside the subcommand that needs them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

from ep_host import strategies
from ep_host.cli_providers import add_ray_arg, cmd_providers

EPILOG = """\
environment:
  EP_HOST_PROVIDERS=a,b     load only these provider entry points ("" loads none)
  EP_HOST_STRICT=1          re-raise provider faults instead of reporting them as declines
  EP_HOST_TRACE_PLUGINS=1   print every hook call, its provider, arguments and answer
  EP_HOST_CACHE_DIR=DIR     where measured machine profiles are cached
  EP_HOST_IMPORT_TIMEOUT=S  seconds a provider's import may take (default 30; 0: no limit)
  EP_HOST_SUPERVISE=0       run without the parent that names a provider that kills the process

examples:
  ep-host providers
  ep-host explain model.onnx --op Conv
  ep-host place model.onnx --strategy priority --providers cuda,cpu --json placement.json
  ep-host run model.onnx --random-inputs --compare-onnxruntime
  ep-host report model.onnx -o report.html
  ep-host why model.onnx conv1 --provider cuda
  ep-host conformance --provider cpu --op Conv --json conformance.json
"""


SUBCOMMAND_EXAMPLES = {
    "providers": ["ep-host providers", "ep-host providers --json"],
    "explain": ["ep-host explain model.onnx",
                "ep-host explain model.onnx --op Conv --provider cuda",
                "ep-host explain model.onnx --all --json"],
    "place": ["ep-host place model.onnx",
              "ep-host place model.onnx --strategy priority --providers cuda,cpu",
              "ep-host place model.onnx --pin conv1=cpu --json placement.json"],
    "why": ["ep-host why model.onnx conv1", "ep-host why model.onnx conv1 --provider cuda"],
    "run": ["ep-host run model.onnx --random-inputs --compare-onnxruntime",
            "ep-host run model.onnx --input x=x.npy --output-dir outputs",
            "ep-host run model.onnx --random-inputs --repeat 50 --per-op --trace trace.json"],
    "report": ["ep-host report model.onnx -o report.html",
               "ep-host report model.onnx --providers cuda,cpu -o report.html"],
    "calibrate": ["ep-host calibrate", "ep-host calibrate --provider cpu --repeats 30",
                  "ep-host calibrate --model model.onnx"],
    "conformance": ["ep-host conformance --provider cpu --op Conv",
                    "ep-host conformance --provider cuda --case 'test_relu.*' --quiet",
                    "ep-host conformance --provider cpu --json conformance.json"],
}
"""Each subcommand's ``--help`` ends with these command lines (each one parses)."""


def _add_examples(sub: Any) -> None:
    """An "examples:" epilog on each subcommand's help page; its description still wrapped."""
    for name, lines in SUBCOMMAND_EXAMPLES.items():
        p = sub.choices[name]
        p.formatter_class = argparse.RawDescriptionHelpFormatter
        if p.description:
            p.description = textwrap.fill(p.description, width=79)
        p.epilog = "examples:\n" + "\n".join(f"  {line}" for line in lines)


def _csv(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def output_file(text: str) -> str:
    """An argument naming a file to write: its folder must exist and it must not be a folder.
    ``-`` (stdout) passes."""
    if text == "-":
        return text
    folder = os.path.dirname(os.path.abspath(text))
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; name a file to write")
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: its folder {folder!r} {what}")
    return text


def output_folder(text: str) -> str:
    """An argument naming a folder to write into (made when missing): it must not be a file."""
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} exists and is not a folder")
    return text


def _strategy_help() -> str:
    """Every registered placement strategy with its description, and the default."""
    listed = "; ".join(f"{s.name}: {s.description}" for s in strategies.registered())
    return f"{listed}. Default: {strategies.DEFAULT}"


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("--providers", type=_csv, metavar="A,B",
                   help="providers to use, in priority order (default: every installed one)")
    p.add_argument("--exclude", type=_csv, default=[], metavar="A,B",
                   help="providers not to use")
    p.add_argument("--strategy", default=strategies.DEFAULT, choices=strategies.names(),
                   help=_strategy_help())
    p.add_argument("--pin", action="append", default=[], metavar="NODE=PROVIDER",
                   help="force a node onto a provider (repeatable)")
    p.add_argument("--isolate", nargs="?", const=True, type=_csv, metavar="A,B", help="run "
                   "providers in worker processes (needs ep-host[ray]): all but the CPU EP, or "
                   "those named (--isolate=A,B); one that dies or hangs fails alone")
    add_ray_arg(p)
    p.add_argument("--no-optimize", action="store_true",
                   help="place the model as written, without graph optimizations")
    p.add_argument("--disable-optimization", action="append", default=[], metavar="PASS",
                   help="skip one graph optimization (repeatable): constant_lifting, "
                   "constant_folding, conv_bn_folding, channel_affine_folding, "
                   "conv_activation_fusion, gelu_fusion, layer_norm_fusion, matmul_add_fusion")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ep-host",
        description="Where does each node of an ONNX model run, why, and how fast? "
        "A plugin host for ONNX execution providers.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("providers", help="list installed providers, their devices and faults",
                       description="List every provider entry point: name, distribution, "
                       "version, device, and whether it is available (or why not).")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_ray_arg(p)
    p.set_defaults(func=cmd_providers)

    p = sub.add_parser("explain", help="every provider's answer for every node",
                       description="For each node: the chosen provider and every provider's "
                       "estimated cost or decline reason.")
    _add_model_args(p)
    p.add_argument("--node", help="only this node")
    p.add_argument("--op", help="only nodes of this op type (e.g. Conv, com.example::Foo)")
    p.add_argument("--provider", help="only this provider's answers")
    p.add_argument("--all", action="store_true", dest="every",
                   help="every provider's answer for every node, one row each (by default a "
                   "provider that declines every node is one line above the table, a repeated "
                   "decline is shown once with a count, and function bodies nobody claims are "
                   "not listed)")
    p.add_argument("--json", action="store_true",
                   help="print the placement JSON (schema ep-host/placement/v1)")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("place", help="place a model: nodes and estimated time per provider",
                       description="Place every node and print per-provider totals, "
                       "partitions and device copies.")
    _add_model_args(p)
    p.add_argument("--json", metavar="FILE", type=output_file,
                   help="also write the placement as JSON to FILE ('-' for stdout)")
    p.set_defaults(func=cmd_place)

    p = sub.add_parser("why", help="why a node runs where it does, and why not elsewhere",
                       description="Each provider's verdict for one node: declined (reason), "
                       "chosen (cost), or claimed but lost: by how much, from its own cost "
                       "and from the device copies it would force (named).")
    _add_model_args(p)
    p.add_argument("node", help="the node's name")
    p.add_argument("--provider", help="only this provider's verdict")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=cmd_why)

    p = sub.add_parser("report", help="write the placement as one self-contained HTML page",
                       description="Write an offline HTML report: the placed graph (runs of "
                       "one provider as boxes, device copies as edges with their bytes), every "
                       "provider's answer for every node (filterable) and the totals.")
    _add_model_args(p)
    p.add_argument("-o", "--output", required=True, metavar="FILE", type=output_file,
                   help="the .html file to write")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("run", help="run a model and print its outputs",
                       description="Place and run a model once.")
    _add_model_args(p)
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE",
                   help="an input from a .npy file or a TensorProto .pb file (repeatable)")
    p.add_argument("--random-inputs", action="store_true",
                   help="random values for inputs not given (symbolic dims are 1)")
    p.add_argument("--dummy-inputs", action="store_true",
                   help="arange(N)/N in each float input's shape, as onnx's backend runner does")
    p.add_argument("--seed", type=int, default=0, help="seed for --random-inputs (default 0)")
    p.add_argument("--compare-onnxruntime", action="store_true",
                   help="also run onnxruntime's CPU provider and compare every output")
    p.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance (default 1e-4)")
    p.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance (default 1e-5)")
    p.add_argument("--output-dir", metavar="DIR", type=output_folder,
                   help="save each output as DIR/NAME.npy")
    p.add_argument("--trace", metavar="FILE", type=output_file,
                   help="write Chrome trace events (open in Perfetto) for the run(s) to FILE")
    p.add_argument("--device-graphs", "--cuda-graph", dest="device_graphs", action="store_true",
                   help="record each partition on a device that can capture (a CUDA graph on "
                   "the CUDA EP) once and replay it; prints which partitions were recorded")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="BLAS threads during runs (0: numpy's default; default: 1 on machines "
                   "with at most 4 CPUs)")
    p.add_argument("--trace-bodies", action="store_true",
                   help="full trace verbosity: also a span per node run inside control-flow "
                   "bodies (every Loop iteration, If branch, Scan step)")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run N times after one warm-up run and print latency statistics")
    p.add_argument("--per-op", action="store_true",
                   help="with --repeat: time totals per op type and provider")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("conformance", help="run onnx's node conformance cases on a provider",
                       description="Run the node test cases shipped in the onnx package, each "
                       "isolated in a worker process. Every case ends as pass, declined (with "
                       "the provider's reason), wrong (an output differs) or error.")
    p.add_argument("--provider", help="provider to test (default: the first available "
                   "provider on the host device, by name: the CPU EP when installed)")
    p.add_argument("--op", action="append", default=[], metavar="TYPE",
                   help="only cases of this op (repeatable)")
    p.add_argument("--case", metavar="REGEX", help="only cases whose name matches")
    p.add_argument("--jobs", type=int, default=None,
                   help="worker processes (default: CPU count)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds before a case counts as hung (default 60)")
    p.add_argument("--json", metavar="FILE", type=output_file,
                   help="write every case's result as JSON to FILE")
    p.add_argument("--quiet", action="store_true", help="print only the summary")
    p.set_defaults(func=cmd_conformance)

    p = sub.add_parser("calibrate", help="measure providers' real kernel times; cost models use it",
                       description="Time small and large single-op models per op family "
                       "(elementwise, transcendental, matmul, conv, pool, reduce, normalization, "
                       "data movement) on each provider, fit measured = overhead + scale * "
                       "estimated per family, and store the profile under the cache directory "
                       "(EP_HOST_CACHE_DIR overrides it), where the cost models read it.")
    p.add_argument("--provider", action="append", default=[], metavar="P",
                   help="calibrate only this provider (repeatable; default: every available one)")
    p.add_argument("--repeats", type=int, default=15, metavar="N",
                   help="timed runs per case (default 15)")
    p.add_argument("--model", metavar="MODEL",
                   help="instead, time every node of MODEL alone on each provider that claims it "
                   "and store the times, which later sessions on this machine use in place of "
                   "the providers' estimates")
    p.add_argument("--json", action="store_true", help="print the stored profile as JSON")
    p.set_defaults(func=cmd_calibrate)
    _add_examples(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from ep_host import __version__

        print(f"ep-host {__version__}")
        return 0
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    if argv is None:  # the command itself (not a call from Python): watch it from a parent
        from ep_host import supervisor

        if supervisor.wanted():
            code = supervisor.supervise()
            if code is not None:  # the parent: the child has finished
                os._exit(code)
    from ep_host.errors import HostError, ProviderError, plugin_traceback
    from ep_host.plugin_calls import record_sigint

    record_sigint()

    try:
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
        return code
    except HostError as exc:
        say(f"error: {exc}")
        if isinstance(exc, ProviderError) and exc.__cause__ is not None:  # EP_HOST_STRICT=1
            from ep_host.text import message

            print(message(plugin_traceback(exc.__cause__).rstrip("\n")), file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # the user's ^C (a plugin's is that provider's fault)
        print("ep-host: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _closed_pipe()
    finally:  # ending here is no death in plugin code, whatever an abandoned call still does
        from ep_host import plugin_calls

        if plugin_calls.marker is not None:
            plugin_calls.marker.leave()


def say(text: str) -> None:
    """``ep-host: text`` on stderr, every line capped and its control characters escaped."""
    from ep_host.text import message

    print(f"ep-host: {message(text)}", file=sys.stderr)


@contextlib.contextmanager
def writing(argument: str, path: str) -> Iterator[None]:
    """A file the command writes: an OS error becomes a ``HostError`` naming the argument."""
    from ep_host.errors import HostError, describe_exception

    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise HostError(f"{argument} {path}: cannot write it: {describe_exception(exc)}") from None


def _closed_pipe() -> int:
    """The reader of stdout went away (``ep-host explain m.onnx | head``): stop quietly.

    Python's documented recipe: point stdout at devnull so that the interpreter's final flush
    does not raise again, and exit as a process killed by SIGPIPE would (128 + 13).
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 141


# ---------------------------------------------------------------------------------------------
# providers
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# explain / place
# ---------------------------------------------------------------------------------------------


def pins_from(args: argparse.Namespace) -> dict[str, str]:
    from ep_host.errors import PlacementError

    pins = {}
    for item in args.pin:
        node, sep, provider = item.rpartition("=")
        if not sep or not node or not provider:
            raise PlacementError(f"--pin {item!r}: expected NODE=PROVIDER")
        pins[node] = provider
    return pins


class _Prepared:
    def __init__(self, model: Any, host: Any, table: Any, placement: Any, error: Any):
        self.model, self.host, self.table, self.placement, self.error = (
            model, host, table, placement, error)


def load_model_and_host(args: argparse.Namespace) -> tuple[Any, Any]:
    """The model (its warnings printed) and a host with the requested providers loaded."""
    from ep_host.declared_types import declare_output_types
    from ep_host.discovery import Host
    from ep_host.loading import load_model
    from ep_host.optimize import optimize
    from ep_host.session import provider_names, select_providers

    with status(f"loading {args.model}"):
        model = load_model(args.model)
    requested = provider_names(args.providers)
    host = Host.discover(requested, isolate=getattr(args, "isolate", None),
                         ray_address=getattr(args, "ray_address", None))
    model = declare_output_types(host, model, select_providers(host, requested))
    if not getattr(args, "no_optimize", False):
        with status("optimizing the graph"):
            model = optimize(model, disable=getattr(args, "disable_optimization", ()))
    for warning in model.warnings:
        say(f"warning: {warning}")
    return model, host


def _prepare(args: argparse.Namespace) -> _Prepared:
    """Load, discover, walk and place; a placement failure is kept, not raised."""
    from ep_host import capability
    from ep_host.errors import PlacementError
    from ep_host.placement import choose
    from ep_host.session import provider_names, select_providers

    model, host = load_model_and_host(args)
    requested = provider_names(args.providers)
    providers = [p for p in select_providers(host, requested) if p not in set(args.exclude)]
    with status(f"asking {len(providers)} provider(s) about {len(model.graph.nodes)} nodes"):
        table = capability.walk(host, model, providers)
    devices = {}
    for p in providers:
        info = host.records[p].info
        if info is not None:
            devices[p] = info.device
    try:
        placement = choose(table, devices, strategy=args.strategy, pins=pins_from(args),
                           model=model.label)
        error = None
    except PlacementError as exc:
        placement, error = None, exc
    return _Prepared(model, host, table, placement, error)


def status(message: str) -> Any:
    """A spinner on stderr while long work runs, only on a terminal."""
    if not sys.stderr.isatty():
        return contextlib.nullcontext()
    from rich.console import Console
    from rich.text import Text

    from ep_host.text import shown

    return Console(file=sys.stderr).status(Text(shown(message)))


def _resolve_node(prepared: _Prepared, name: str) -> str:
    """A node name of the model as written, as the optimized model calls it (said on stderr)."""
    from ep_host.placement import find_node

    target, note = find_node(prepared.table, name, prepared.model.label)
    if note:
        say(note)
    return target


def _unplaceable(prepared: _Prepared) -> list[str]:
    return [n.name for n in prepared.table.nodes if not prepared.table.claimants(n.name)]


def cmd_explain(args: argparse.Namespace) -> int:
    from ep_host.report import Output, explain_dict, render_explain, write_json

    prepared = _prepare(args)
    table = prepared.table
    if args.node:
        args.node = _resolve_node(prepared, args.node)
    if args.provider and args.provider not in table.providers:
        from ep_host.errors import HostError

        raise HostError(f"provider {args.provider!r} is not in use "
                        f"(providers: {', '.join(table.providers) or 'none'})")
    if args.json:
        data = explain_dict(table, prepared.placement, prepared.model.label,
                            _unplaceable(prepared))
        data["optimizations"] = dict(prepared.model.optimizations)
        write_json(data, "-")
    else:
        filtered = args.node or args.op or args.provider
        render_explain(Output(), table, prepared.placement,
                       None if filtered else prepared.model.optimizations, every=args.every,
                       node=args.node, op=args.op, provider=args.provider)
    return _exit_status(prepared)


def _exit_status(prepared: Any) -> int:
    """1, after printing the placement error the command reported past; else 0."""
    if prepared.error is not None:
        say(f"error: {prepared.error}")
        return 1
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from ep_host.report_html import write_report

    prepared = _prepare(args)
    with status(f"writing {args.output}"), writing("--output", args.output):
        counts = write_report(args.output, prepared.table, prepared.placement,
                              prepared.model.label, _unplaceable(prepared))
    say(f"report written to {args.output} ({counts['nodes']} nodes, "
        f"{counts['partitions']} partition(s), {counts['copies']} device copies)")
    return _exit_status(prepared)


def cmd_why(args: argparse.Namespace) -> int:
    import json

    from ep_host.report import Output
    from ep_host.why import render_why, why, why_dict

    prepared = _prepare(args)
    if prepared.error is not None:
        raise prepared.error
    args.node = _resolve_node(prepared, args.node)
    verdicts = why(prepared.placement, args.node, args.provider)
    if args.json:
        print(json.dumps(why_dict(prepared.placement, args.node, verdicts), indent=2))
    else:
        render_why(Output(), prepared.placement, args.node, verdicts)
    return 0


def cmd_place(args: argparse.Namespace) -> int:
    from ep_host.report import Output, explain_dict, render_placement, write_json

    prepared = _prepare(args)
    if args.json:
        with writing("--json", args.json):
            write_json(explain_dict(prepared.table, prepared.placement, prepared.model.label,
                                    _unplaceable(prepared)), args.json)
    if prepared.error is not None:
        raise prepared.error
    if args.json != "-":
        render_placement(Output(), prepared.placement)
    return 0


# ---------------------------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    from ep_host.cli_run import cmd_run as run

    return run(args)


def _conformance_provider(name: str | None) -> str:
    """The provider ``conformance`` tests: the one named (an alias resolved), else the first
    available provider whose device is the host, in name order."""
    from ep_host.errors import HostError
    from ep_host.session import discover_host, resolve_aliases

    host = discover_host([name] if name else None)
    if name:
        return (resolve_aliases(host, [name]) or [name])[0]
    on_host = sorted(r.name for r in host.records.values()
                     if r.available and r.info.device.is_host)
    if not on_host:
        raise HostError("no available provider runs on the host; name one with --provider")
    return on_host[0]


def cmd_conformance(args: argparse.Namespace) -> int:
    from ep_host import conformance
    from ep_host.errors import HostError
    from ep_host.report import Output, write_json

    with status("collecting onnx's node test cases"):
        names = conformance.select_cases(args.op, args.case)
    if not names:
        raise HostError("no conformance case matches --op/--case")
    args.provider = _conformance_provider(args.provider)
    providers = [args.provider]
    progress = ProgressBar(len(names), f"{args.provider}: {len(names)} cases")
    with progress as bar:
        results = conformance.run_cases(names, providers, jobs=args.jobs, timeout=args.timeout,
                                        on_result=lambda r: bar.advance(r.outcome))
    summary = conformance.summarize(results)
    out = Output()
    failures = [r for r in results if r.outcome != "pass"]
    if failures and not args.quiet:
        out.table(f"{len(failures)} case(s) that did not pass",
                  ["case", "op", "outcome", "reason"],
                  [(r.name, r.op, r.outcome, r.reason) for r in failures])
    ops = summary["by_op"]
    if not args.quiet:
        out.table("By op", ["op", *conformance.OUTCOMES],
                  [(op, *(c[o] for o in conformance.OUTCOMES)) for op, c in ops.items()])
    counts = summary["outcomes"]
    out.line(f"{summary['cases']} cases on {args.provider}: "
             + ", ".join(f"{counts[o]} {o}" for o in conformance.OUTCOMES))
    if args.json:
        with writing("--json", args.json):
            write_json({"schema": "ep-host/conformance/v1", "provider": args.provider,
                        "summary": summary, "cases": [r.to_dict() for r in results]}, args.json)
    return 1 if counts["wrong"] or counts["error"] else 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from ep_host import calibrate, calibration
    from ep_host.discovery import Host
    from ep_host.errors import HostError
    from ep_host.report import Output, fmt_us, write_json

    host = Host.discover(args.provider or None)
    available = [name for name, r in host.records.items() if r.status == "available"]
    providers = args.provider or available
    for p in providers:
        if p not in available:
            raise HostError(f"provider {p!r} is not available "
                            f"(available: {', '.join(available) or 'none'})")
    if args.model:
        return calibrate_nodes(args, host, providers)
    cases = calibrate.default_cases()
    with ProgressBar(len(cases) * len(providers), "calibrating") as bar:
        profile = calibrate.calibrate(
            providers, cases, repeats=args.repeats, host=host,
            on_case=lambda p, c, r: bar.advance("skipped" if isinstance(r, str) else p))
    if args.json:
        write_json(profile, "-")
        return 0
    rows = []
    for p in providers:
        for family, f in profile["providers"][p]["families"].items():
            rows.append((p, family, fmt_us(f["overhead_us"]), f"{f['scale']:.3g}", f["cases"]))
    Output().table("measured = overhead + scale * estimated, per op family",
                   ["provider", "family", "overhead", "scale", "cases"], rows)
    say(f"calibration written to {calibration.profile_path()}")
    return 0


def calibrate_nodes(args: argparse.Namespace, host: Any, providers: list[str]) -> int:
    """``ep-host calibrate --model``: every node timed on every provider that claims it."""
    from ep_host import calibrate, node_times
    from ep_host.report import Output, fmt_us, write_json

    table = calibrate.node_table(args.model, providers, host=host)
    with ProgressBar(len(table.nodes) * len(providers), "timing nodes") as bar:
        times = calibrate.calibrate_model(
            args.model, providers, host=host, table=table,
            on_node=lambda t: bar.advance("skipped" if t.skipped else t.provider))
    if args.json:
        write_json([t.__dict__ for t in times], "-")
        return 0
    rows = []
    for p in dict.fromkeys(t.provider for t in times):
        mine = [t for t in times if t.provider == p and t.measured_us is not None]
        estimated = sum(t.estimated_us for t in mine)
        measured = sum(t.measured_us or 0.0 for t in mine)
        skipped = sum(1 for t in times if t.provider == p and t.skipped)
        rows.append((p, len(mine), skipped, fmt_us(estimated), fmt_us(measured),
                     f"{measured / estimated:.2f}" if estimated > 0 else "-"))
    Output().table(f"node times of {args.model}, each node alone",
                   ["provider", "timed", "skipped", "estimated", "measured", "measured/estimated"],
                   rows)
    print(f"ep-host: node times written to {node_times.store().path}", file=sys.stderr)
    return 0


class _Bar:
    def __init__(self, progress: Any, task: Any):
        self.progress, self.task = progress, task
        self.counts: dict[str, int] = {}

    def advance(self, outcome: str) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        if self.progress is not None:
            from ep_host.text import shown

            counts = " ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
            self.progress.update(self.task, advance=1, status=shown(counts))


class ProgressBar:
    """A progress bar on stderr when it is a terminal; silent otherwise."""

    def __init__(self, total: int, description: str):
        self.total, self.description = total, description
        self.progress = None

    def __enter__(self) -> _Bar:
        if not sys.stderr.isatty():
            return _Bar(None, None)
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        from ep_host.text import shown

        self.progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("{task.fields[status]}", markup=False),
                                 console=Console(file=sys.stderr))
        self.progress.__enter__()
        task = self.progress.add_task(shown(self.description), total=self.total, status="")
        return _Bar(self.progress, task)

    def __exit__(self, *exc: Any) -> None:
        if self.progress is not None:
            self.progress.__exit__(*exc)


if __name__ == "__main__":
    sys.exit(main())
