"""`ep-host providers`: the installed providers, and with ``--ray`` those of each cluster node."""

from __future__ import annotations

import argparse
import os
from typing import Any


def add_ray_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ray", metavar="ADDRESS", dest="ray_address",
                   help="also use the providers on the other nodes of this Ray cluster (needs "
                   "ep-host[ray]; 'auto' joins the one running here), each named NAME@nodeK")


def cmd_providers(args: argparse.Namespace) -> int:
    from ep_host.calibration import load_summary
    from ep_host.cli import calibration_cell, emit_json
    from ep_host.discovery import Host
    from ep_host.report import Output

    if args.ray_address:
        return cluster_providers(args)
    host = Host.discover()
    records = host.providers()
    calibrated = {r.name: load_summary(r.name) for r in records}
    if emit_json(args, [{**capped_record(r.to_dict()), "calibration": calibrated[r.name]}
                        for r in records]):
        return 0
    out = Output(format=args.format)
    if not records:
        out.line("no providers installed (entry-point group ep_host.providers)"
                 + (": EP_HOST_PROVIDERS is set" if "EP_HOST_PROVIDERS" in os.environ else ""))
        return 0
    out.table(
        "Installed execution providers",
        ["name", "distribution", "version", "device", "calibrated", "status"],
        [(r.name, r.distribution or "-", r.version or "-", r.device or "-",
          calibration_cell(calibrated[r.name]),
          r.status if not r.fault else f"{r.status}: {r.fault}") for r in records],
    )
    return 0


def cluster_providers(args: argparse.Namespace) -> int:
    """``providers --ray``: the providers installed on each node of the cluster."""
    from ep_host import cluster
    from ep_host.cli import emit_json, status
    from ep_host.report import Output

    with status(f"listing the providers of the Ray cluster at {args.ray_address}"):
        nodes = cluster.discover(args.ray_address)
    if emit_json(args, [{**n.to_dict(), "providers": [capped_record(p) for p in n.providers]}
                        for n in nodes]):
        return 0
    out = Output(format=args.format)
    rows = []
    for node in nodes:
        where = f"{node.label} ({node.address}{', driver' if node.is_driver else ''})"
        if node.fault or not node.providers:
            rows.append((where, "-", "-", "-", "-", node.fault or "no providers installed"))
        for p in node.providers:
            name = p["name"] if node.is_driver else cluster.remote_name(p["name"], node.label)
            rows.append((where, name, p["distribution"] or "-", p["version"] or "-",
                         p["device"] or "-",
                         p["status"] if not p["fault"] else f"{p['status']}: {p['fault']}"))
    out.table("Execution providers per Ray node",
              ["node", "name", "distribution", "version", "device", "status"], rows)
    return 0


def capped_record(record: dict[str, Any]) -> dict[str, Any]:
    """A provider's JSON record with its provider-supplied text (all but its name) capped."""
    from ep_host.text import capped

    return {k: capped(v) if isinstance(v, str) and k != "name" else v
            for k, v in record.items()}
