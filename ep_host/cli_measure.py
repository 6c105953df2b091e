"""``ep-host conformance`` and ``ep-host calibrate``: the commands that measure providers, case
by case or node by node, with a progress bar on a terminal."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ep_host.cli import emit_json, say, status


def _conformance_providers(names: list[str] | None) -> list[str]:
    """The providers ``conformance`` runs the cases on: those named (aliases resolved), else the
    first available provider whose device is the host, in name order."""
    from ep_host.errors import HostError
    from ep_host.session import discover_host, resolve_aliases

    host = discover_host(names or None)
    if names:
        return resolve_aliases(host, names) or names
    on_host = sorted(r.name for r in host.records.values()
                     if r.available and r.info.device.is_host)
    if not on_host:
        raise HostError("no available provider runs on the host; name one with --providers")
    return on_host[:1]


def cmd_conformance(args: argparse.Namespace) -> int:
    from ep_host import conformance
    from ep_host.errors import HostError
    from ep_host.report import Output

    with status("collecting onnx's node test cases"):
        names = conformance.select_cases(args.op, args.case)
    if not names:
        raise HostError("no conformance case matches --op/--case")
    providers = _conformance_providers(args.providers)
    tested = ",".join(providers)
    progress = ProgressBar(len(names), f"{tested}: {len(names)} cases")
    with progress as bar:
        results = conformance.run_cases(names, providers, jobs=args.jobs, timeout=args.timeout,
                                        on_result=lambda r: bar.advance(r.outcome))
    summary = conformance.summarize(results)
    counts = summary["outcomes"]
    code = 1 if counts["wrong"] or counts["error"] else 0
    if emit_json(args, {"schema": "ep-host/conformance/v1", "provider": tested,
                        "summary": summary, "cases": [r.to_dict() for r in results]}):
        return code
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
    out.line(f"{summary['cases']} cases on {tested}: "
             + ", ".join(f"{counts[o]} {o}" for o in conformance.OUTCOMES))
    return code


def cmd_calibrate(args: argparse.Namespace) -> int:
    from ep_host import calibrate, calibration
    from ep_host.discovery import Host
    from ep_host.errors import HostError
    from ep_host.report import Output, fmt_us

    host = Host.discover(args.providers or None)
    available = [name for name, r in host.records.items() if r.status == "available"]
    providers = args.providers or available
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
    warn_if_busy({p: profile["providers"][p].get("load") for p in providers},
                 "ep-host calibrate --providers " + ",".join(providers))
    if emit_json(args, profile):
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
    from ep_host.calibration import machine_load, measured_under
    from ep_host.report import Output, fmt_us

    table = calibrate.node_table(args.model, providers, host=host)
    before = machine_load()
    with ProgressBar(len(table.nodes) * len(providers), "timing nodes") as bar:
        times = calibrate.calibrate_model(
            args.model, providers, host=host, table=table,
            on_node=lambda t: bar.advance("skipped" if t.skipped else t.provider))
    load = measured_under(before, machine_load())
    warn_if_busy({p: load for p in providers},
                 f"ep-host calibrate --model {args.model} --providers {','.join(providers)}")
    if emit_json(args, [t.__dict__ for t in times]):
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


def warn_if_busy(loads: dict[str, dict[str, Any] | None], rerun: str) -> None:
    """A warning on stderr naming the providers measured while other processes kept the machine
    busy (``calibration.measured_under``), and the command to re-run when it is idle."""
    from ep_host.calibration import BUSY_LOAD_PER_CPU

    busy = {p: load for p, load in loads.items() if load and load["busy"]}
    if not busy:
        return
    worst = max(busy.values(), key=lambda load: load["others_per_cpu"])
    say(f"warning: the machine was busy while measuring {', '.join(busy)}: other processes' "
        f"load was {worst['others_per_cpu']:.2f} per CPU ({worst['cpus']} CPUs; above "
        f"{BUSY_LOAD_PER_CPU} skews the times), so the stored times may be skewed; re-run "
        f"`{rerun}` when the machine is idle")


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
