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
  ep-host place model.onnx --strategy priority --providers cuda,cpu -o placement.json
  ep-host run model.onnx --random-inputs --compare-onnxruntime
  ep-host report model.onnx -o report.html
  ep-host why model.onnx conv1 --only-provider cuda
  ep-host conformance --providers cpu --op Conv -o conformance.json
  eval "$(ep-host completion bash)"
"""


SUBCOMMAND_EXAMPLES = {
    "providers": ["ep-host providers", "ep-host providers --json"],
    "explain": ["ep-host explain model.onnx",
                "ep-host explain model.onnx --op Conv --only-provider cuda",
                "ep-host explain model.onnx --all --json",
                "ep-host explain model.onnx --format markdown"],
    "place": ["ep-host place model.onnx",
              "ep-host place model.onnx --strategy priority --providers cuda,cpu",
              "ep-host place model.onnx --pin conv1=cpu -o placement.json",
              "ep-host place model.onnx --json"],
    "why": ["ep-host why model.onnx conv1", "ep-host why model.onnx conv1 --only-provider cuda"],
    "run": ["ep-host run model.onnx --random-inputs --compare-onnxruntime",
            "ep-host run model.onnx --input x=x.npy --output-dir outputs",
            "ep-host run model.onnx --random-inputs --repeat 50 --per-op --trace trace.json"],
    "report": ["ep-host report model.onnx -o report.html",
               "ep-host report model.onnx --providers cuda,cpu -o report.html"],
    "calibrate": ["ep-host calibrate", "ep-host calibrate --providers cpu --repeats 30",
                  "ep-host calibrate --model model.onnx"],
    "conformance": ["ep-host conformance --providers cpu --op Conv",
                    "ep-host conformance --providers cuda --case 'test_relu.*' --quiet",
                    "ep-host conformance --providers cpu -o conformance.json"],
    "completion": ["ep-host completion bash", "ep-host completion zsh"],
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


def _add_json_args(p: argparse.ArgumentParser, what: str) -> None:
    """``--json`` (print ``what`` as JSON to stdout instead of the text) and ``-o/--output FILE``
    (write the same JSON to FILE): one meaning in every command that has JSON."""
    p.add_argument("--json", action="store_true",
                   help=f"print {what} as JSON to stdout instead of the text")
    p.add_argument("-o", "--output", metavar="FILE", type=output_file,
                   help=f"also write {what} as JSON to FILE")


def _add_format_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=("rich", "plain", "markdown"), default=None,
                   help="how tables print: rich (a terminal's default), plain (aligned text, "
                   "the default when piped) or markdown (GitHub tables, every cell literal)")


def emit_json(args: argparse.Namespace, data: Any) -> bool:
    """``data`` written to ``--output`` when given and printed with ``--json``; whether it was
    printed (the text is then left out)."""
    from ep_host.report import write_json

    if args.output:
        with writing("--output", args.output):
            write_json(data, args.output)
    if args.json:
        write_json(data, "-")
    return bool(args.json)


OLD_JSON_FILE = ("--json takes no file any more: it prints the JSON to stdout; "
                 "write it to a file with -o {file} (or --output {file})")


def old_json_form(argv: list[str]) -> str | None:
    """The message for the old ``--json FILE`` form (``place``, ``conformance``), which would
    otherwise read FILE as the model or fail on an unrecognized argument; else ``None``."""
    for i, arg in enumerate(argv):
        if arg.startswith("--json="):
            return OLD_JSON_FILE.format(file=arg.split("=", 1)[1] or "FILE")
        if arg == "--json" and i + 1 < len(argv):
            following = argv[i + 1]
            if following == "-":
                return "--json takes no file any more: it prints the JSON to stdout; drop the '-'"
            if following.lower().endswith(".json"):
                return OLD_JSON_FILE.format(file=following)
    return None


class RenamedOption(argparse.Action):
    """An option that was renamed: using it is an argument error naming the new option(s).

    ``--provider`` meant three things (one provider's answers in ``explain`` and ``why``, the
    provider under test in ``conformance``, the providers to calibrate) and is an abbreviation
    argparse would silently read as ``--providers``; it is defined here so that it fails."""

    def __init__(self, option_strings: list[str], dest: str, instead: str = "",
                 **kwargs: Any):
        kwargs.pop("nargs", None)
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS, **kwargs)
        self.instead = instead

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        parser.error(f"{option_string} is gone (it meant three things): {self.instead}")


PROVIDERS_INSTEAD = "--providers A,B chooses the providers to use"
ONLY_PROVIDER_INSTEAD = ("--only-provider NAME shows only NAME's answers; "
                         "--providers A,B chooses the providers to use")


def _strategy_help() -> str:
    """Every registered placement strategy with its description, and the default."""
    listed = "; ".join(f"{s.name}: {s.description}" for s in strategies.registered())
    return f"{listed}. Default: {strategies.DEFAULT}"


def _add_model_args(p: argparse.ArgumentParser, provider_instead: str = PROVIDERS_INSTEAD) -> None:
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("--providers", type=_csv, metavar="A,B",
                   help="providers to use, in priority order (default: every installed one)")
    p.add_argument("--provider", action=RenamedOption, instead=provider_instead)
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
                   "conv_activation_fusion, gelu_fusion, sigmoid_fusion, silu_fusion, "
                   "layer_norm_fusion, skip_layer_norm_fusion, bias_gelu_fusion, "
                   "matmul_add_fusion, product_features_fusion, tree_ensemble_merging, "
                   "tree_classifier_merging, samme_vote_batching, weighted_median_fusion, "
                   "class_label_gather, cast_elimination")


COMPLETION_SHELLS = ("bash", "zsh", "tcsh")


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
    _add_json_args(p, "the providers")
    _add_format_arg(p)
    add_ray_arg(p)
    p.set_defaults(func=cmd_providers)

    p = sub.add_parser("explain", help="every provider's answer for every node",
                       description="For each node: the chosen provider and every provider's "
                       "estimated cost or decline reason.")
    _add_model_args(p, ONLY_PROVIDER_INSTEAD)
    p.add_argument("--node", help="only this node")
    p.add_argument("--op", help="only nodes of this op type (e.g. Conv, com.example::Foo)")
    p.add_argument("--only-provider", metavar="NAME",
                   help="only this provider's answers (the providers used stay as --providers "
                   "says)")
    p.add_argument("--all", action="store_true", dest="every",
                   help="every provider's answer for every node, one row each (by default a "
                   "provider that declines every node is one line above the table, a repeated "
                   "decline is shown once with a count, and function bodies nobody claims are "
                   "not listed)")
    _add_json_args(p, "the placement (schema ep-host/placement/v1)")
    _add_format_arg(p)
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("place", help="place a model: nodes and estimated time per provider",
                       description="Place every node and print per-provider totals, "
                       "partitions and device copies.")
    _add_model_args(p)
    _add_json_args(p, "the placement (schema ep-host/placement/v1)")
    _add_format_arg(p)
    p.set_defaults(func=cmd_place)

    p = sub.add_parser("why", help="why a node runs where it does, and why not elsewhere",
                       description="Each provider's verdict for one node: declined (reason), "
                       "chosen (cost), or claimed but lost: by how much, from its own cost "
                       "and from the device copies it would force (named).")
    _add_model_args(p, ONLY_PROVIDER_INSTEAD)
    p.add_argument("node", help="the node's name")
    p.add_argument("--only-provider", metavar="NAME",
                   help="only this provider's verdict (the providers used stay as --providers "
                   "says)")
    _add_json_args(p, "the verdicts")
    _add_format_arg(p)
    p.set_defaults(func=cmd_why)

    p = sub.add_parser("report", help="write the placement as one self-contained HTML page",
                       description="Write an offline HTML report: the node graph (nodes "
                       "coloured by provider, device copies as marked edges with their bytes "
                       "and time, partitions outlined; groups of nodes above 1000 nodes), "
                       "every provider's answer for every node (filterable) and the totals.")
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
    p.add_argument("--providers", type=_csv, metavar="A,B",
                   help="the provider(s) the cases run on, in priority order (default: the first "
                   "available provider on the host device, by name: the CPU EP when installed)")
    p.add_argument("--provider", action=RenamedOption,
                   instead="--providers NAME chooses the provider(s) the cases run on")
    p.add_argument("--op", action="append", default=[], metavar="TYPE",
                   help="only cases of this op (repeatable)")
    p.add_argument("--case", metavar="REGEX", help="only cases whose name matches")
    p.add_argument("--jobs", type=int, default=None,
                   help="worker processes (default: CPU count)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds before a case counts as hung (default 60)")
    _add_json_args(p, "every case's result")
    p.add_argument("--quiet", action="store_true", help="print only the summary")
    p.set_defaults(func=cmd_conformance)

    p = sub.add_parser("calibrate", help="measure providers' real kernel times; cost models use it",
                       description="Time small and large single-op models per op family "
                       "(elementwise, transcendental, matmul, conv, pool, reduce, normalization, "
                       "data movement) on each provider, fit measured = overhead + scale * "
                       "estimated per family, and store the profile under the cache directory "
                       "(EP_HOST_CACHE_DIR overrides it), where the cost models read it.")
    p.add_argument("--providers", type=_csv, default=[], metavar="A,B",
                   help="the providers to calibrate (default: every available one)")
    p.add_argument("--provider", action=RenamedOption,
                   instead="--providers A,B chooses the providers to calibrate")
    p.add_argument("--repeats", type=int, default=15, metavar="N",
                   help="timed runs per case (default 15)")
    p.add_argument("--model", metavar="MODEL",
                   help="instead, time every node of MODEL alone on each provider that claims it "
                   "and store the times, which later sessions on this machine use in place of "
                   "the providers' estimates")
    _add_json_args(p, "the stored profile (with --model: the node times)")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("completion", help="print a shell completion script",
                       description="Print a completion script for ep-host's subcommands and "
                       "options, generated by shtab (static: completing runs no Python). Try it "
                       'in this shell with eval "$(ep-host completion bash)"; to keep it, save '
                       "it where your shell reads completions: bash: "
                       "~/.local/share/bash-completion/completions/ep-host; zsh: _ep-host in a "
                       "folder of your $fpath.")
    p.add_argument("shell", choices=COMPLETION_SHELLS, help="the shell to complete in")
    p.set_defaults(func=cmd_completion)
    _add_examples(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    old_form = old_json_form(sys.argv[1:] if argv is None else list(argv))
    if old_form:
        parser.error(old_form)
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
            model = optimize(model, disable=getattr(args, "disable_optimization", ()),
                             in_place=True)
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
    from ep_host.report import Output, explain_dict, render_explain

    prepared = _prepare(args)
    table = prepared.table
    if args.node:
        args.node = _resolve_node(prepared, args.node)
    if args.only_provider and args.only_provider not in table.providers:
        from ep_host.errors import HostError

        raise HostError(f"--only-provider {args.only_provider!r} is not in use "
                        f"(providers: {', '.join(table.providers) or 'none'})")
    printed = False
    if args.json or args.output:
        data = explain_dict(table, prepared.placement, prepared.model.label,
                            _unplaceable(prepared))
        data["optimizations"] = dict(prepared.model.optimizations)
        printed = emit_json(args, data)
    if not printed:
        filtered = args.node or args.op or args.only_provider
        render_explain(Output(format=args.format), table, prepared.placement,
                       None if filtered else prepared.model.optimizations, every=args.every,
                       node=args.node, op=args.op, provider=args.only_provider)
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
    from ep_host.report import Output
    from ep_host.why import render_why, why, why_dict

    prepared = _prepare(args)
    if prepared.error is not None:
        raise prepared.error
    args.node = _resolve_node(prepared, args.node)
    verdicts = why(prepared.placement, args.node, args.only_provider)
    if not emit_json(args, why_dict(prepared.placement, args.node, verdicts)):
        render_why(Output(format=args.format), prepared.placement, args.node, verdicts)
    return 0


def cmd_place(args: argparse.Namespace) -> int:
    from ep_host.report import Output, explain_dict, render_placement

    prepared = _prepare(args)
    printed = False
    if args.json or args.output:
        printed = emit_json(args, explain_dict(prepared.table, prepared.placement,
                                               prepared.model.label, _unplaceable(prepared)))
    if prepared.error is not None:
        raise prepared.error
    if not printed:
        render_placement(Output(format=args.format), prepared.placement)
    return 0


# ---------------------------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    from ep_host.cli_run import cmd_run as run

    return run(args)


def cmd_conformance(args: argparse.Namespace) -> int:
    from ep_host.cli_measure import cmd_conformance as conformance

    return conformance(args)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from ep_host.cli_measure import cmd_calibrate as calibrate

    return calibrate(args)


def cmd_completion(args: argparse.Namespace) -> int:
    from ep_host.cli_completion import cmd_completion as completion

    return completion(args)


def calibration_cell(summary: dict[str, Any] | None) -> str:
    """``providers``' calibration column: when, and the load it was measured under."""
    if summary is None:
        return "-"
    when = (summary.get("measured_at") or "at an unrecorded time").replace("T", " ")
    load = summary.get("load")
    if not load:
        return f"{when}, load not recorded"
    busy = "busy: " if load["busy"] else ""
    return f"{when}, {busy}load {load['others_per_cpu']:.2f}/CPU of {load['cpus']}"


if __name__ == "__main__":
    sys.exit(main())
