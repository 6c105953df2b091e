"""The placement report as one self-contained HTML file (``ep-host report``): the placed graph
with same-provider runs collapsed into boxes and device copies and layout conversions as labelled
edges (conversions dashed, with their layouts), a filterable
table of every provider's answer for every node, and the totals. No network, no libraries.

The page is drawn by inline JavaScript from a compact form of the placement JSON
(:func:`ep_host.report.explain_dict`): answers are deduplicated and the table renders only the
rows in view, so a 50k-node model's report opens in about a second.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

from ep_host.capability import CapabilityTable
from ep_host.placement import Placement
from ep_host.report import explain_dict
from ep_host.transfers import copy_walk

MAX_EDGE_TENSORS = 5


def compact(data: dict[str, Any], edges: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The placement JSON in columns: names, op and provider indices, deduplicated answers."""
    providers = [p["name"] for p in data["providers"]]
    p_index = {p: i for i, p in enumerate(providers)}
    ops: dict[str, int] = {}
    answers: dict[tuple, int] = {}
    answer_list: list[list[Any]] = []
    names, op_idx, placed, costs, pinned = [], [], [], [], []
    per_provider: list[list[int]] = [[] for _ in providers]
    for node in data["nodes"]:
        names.append(node["name"])
        op = node["op_type"]
        if node["domain"] not in ("", "ai.onnx"):
            op = f"{node['domain']}::{op}"
        op_idx.append(ops.setdefault(op, len(ops)))
        placed.append(p_index.get(node["provider"], -1))
        costs.append(node["cost_us"])
        if node["pinned"]:
            pinned.append(len(names) - 1)
        for i, p in enumerate(providers):
            per_provider[i].append(_answer_index(node["answers"][p], answers, answer_list))
    index = {n: i for i, n in enumerate(names)}
    return {
        "model": data["model"],
        "strategy": data["strategy"],
        "providers": data["providers"],
        "ops": list(ops),
        "answers": answer_list,
        "nodes": {"name": names, "op": op_idx, "provider": placed, "cost": costs,
                  "pinned": pinned, "answer": per_provider},
        "partitions": [[p_index[p["provider"]], index[p["first"]], index[p["last"]],
                        p["nodes"], p["cost_us"]] for p in data["partitions"]],
        "compiled": [[p_index[p["provider"]], p["nodes"], p["cost_us"], p["launch_us"]]
                     for p in data.get("compiled_partitions", [])],
        "transfers": {"count": len(data["transfers"]),
                      "bytes": sum(t["bytes"] for t in data["transfers"]),
                      "conversions": sum(1 for t in data["transfers"] if "layout" in t)},
        "edges": list(edges),
        "totals": data["totals"],
        "unplaceable": data["unplaceable"],
        "expanded": {k: {"op": v["op_type"], "into": len(v["into"])}
                     for k, v in data["expanded"].items()},
        "extra": {k: v for k, v in data.items() if k not in _KNOWN and _is_plain(v)},
    }


_KNOWN = {"schema", "model", "strategy", "providers", "nodes", "transfers", "totals",
          "partitions", "compiled_partitions", "unplaceable", "expanded"}


def _is_plain(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool)) or (
        isinstance(value, dict) and all(isinstance(v, (str, int, float, bool, type(None)))
                                        for v in value.values()))


def _answer_index(answer: dict[str, Any], seen: dict[tuple, int], out: list[list[Any]]) -> int:
    if answer["supported"]:
        c = answer["cost"]
        row = [1, c["total_us"], c["compute_us"], c["memory_us"], c["transfer_us"],
               c["launch_us"], c["bytes_moved"], c["flops"], answer.get("host_inputs", [])]
        key = tuple(row[:8]) + tuple(row[8])
    else:
        row = [0, answer["code"], answer["reason"]]
        key = tuple(row)
    i = seen.get(key)
    if i is None:
        i = seen[key] = len(out)
        out.append(row)
    return i


def copy_edges(placement: Placement) -> list[dict[str, Any]]:
    """Device copies and layout conversions between partitions, summed per (from, to) pair
    of boxes; ``conversions`` counts the tensors converted and ``layouts`` names the changes.

    Box -1 is the graph's inputs and weights on the host, box ``len(partitions)`` its outputs.
    The copies are :func:`ep_host.transfers.copy_walk`'s, each in the partition whose node
    first needs the tensor on the destination device.
    """
    if not placement.transfers:
        return []
    parts = placement.partitions()
    part_of = {name: i for i, part in enumerate(parts) for name in part.nodes}
    edges: dict[tuple[int, int], dict[str, Any]] = {}
    for t, producer, consumer in copy_walk(placement):
        key = (-1 if producer is None else part_of[producer],
               len(parts) if consumer is None else part_of[consumer])
        e = edges.setdefault(key, {"from": key[0], "to": key[1], "bytes": 0, "cost_us": 0.0,
                                   "count": 0, "tensors": [], "devices": set(),
                                   "conversions": 0, "layouts": set()})
        e["bytes"] += t.nbytes
        e["cost_us"] += t.cost_us
        e["count"] += 1
        e["devices"].add(f"{t.source} -> {t.destination}")
        if t.converts:
            e["conversions"] += 1
            e["layouts"].add(t.layouts)
        if len(e["tensors"]) < MAX_EDGE_TENSORS:
            e["tensors"].append(t.tensor)
    return [{**e, "devices": sorted(e["devices"]), "layouts": sorted(e["layouts"])}
            for e in edges.values()]


def render(data: dict[str, Any], edges: Sequence[dict[str, Any]] = ()) -> str:
    """The report page for a placement JSON (``explain_dict``) and its :func:`copy_edges`."""
    payload = json.dumps(compact(data, edges), separators=(",", ":"), default=str)
    payload = payload.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    title = html.escape(f"ep-host report: {data['model']}")
    return (_PAGE.replace("__TITLE__", title).replace("__STYLE__", _STYLE)
            .replace("__SCRIPT__", _SCRIPT).replace("__DATA__", payload))


def write_report(path: str, table: CapabilityTable, placement: Placement | None, model: str,
                 unplaceable: Sequence[str] = ()) -> dict[str, int]:
    """Write the report to ``path``; returns counts for the command's summary line."""
    data = explain_dict(table, placement, model, unplaceable)
    edges = copy_edges(placement) if placement is not None else []
    text = render(data, edges)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return {"nodes": len(data["nodes"]), "partitions": len(data["partitions"]),
            "copies": len(data["transfers"]), "bytes": len(text.encode())}


_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy"
 content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>__STYLE__</style>
</head>
<body>
<header><h1>__TITLE__</h1><p id="summary"></p></header>
<div id="errors" role="alert"></div>
<section><h2>Totals</h2><div id="totals"></div></section>
<section><h2>Placed graph</h2>
<p class="hint">Consecutive nodes on one provider are one box; coloured arrows are device
copies, labelled with their bytes; dashed arrows convert a tensor's layout (NCHW->NHWC); grey
lines follow execution order.</p>
<div id="legend"></div><div id="picture"></div></section>
<section><h2>Every node, every provider</h2>
<div id="filters">
<label>provider <select id="f-provider"></select></label>
<label>outcome <select id="f-outcome">
<option value="any">any</option><option value="0">chosen</option>
<option value="1">claimed, not chosen</option><option value="2">declined</option>
</select></label>
<label>op <select id="f-op"></select></label>
<label>node <input id="f-name" type="search" placeholder="name contains"></label>
<span id="count"></span>
</div>
<p class="hint">A provider alone shows the nodes placed on it; with an outcome, the nodes
whose answer from that provider is that outcome. Click a row for every answer in full.</p>
<div id="table"><div id="thead" class="row head"></div>
<div id="viewport"><div id="spacer"><div id="rows"></div></div></div></div>
<div id="details"></div>
</section>
<script type="application/json" id="data">__DATA__</script>
<script>__SCRIPT__</script>
</body>
</html>
"""

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1em 2em;color:#222}
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.15em;margin:1.2em 0 .4em}
.hint{color:#666;font-size:.9em;margin:.2em 0 .5em}
#errors:empty{display:none}#errors{background:#fee;border:1px solid #c00;padding:.5em}
table.totals{border-collapse:collapse}table.totals td,table.totals th{padding:2px 10px;
text-align:left;border-bottom:1px solid #ddd}table.totals td.num{text-align:right}
#picture{max-height:560px;overflow:auto;border:1px solid #ccc;background:#fcfcfc}
#legend span{display:inline-block;margin-right:1.2em}
#legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
#filters{display:flex;gap:1em;flex-wrap:wrap;align-items:center;margin:.3em 0}
#table{border:1px solid #ccc}
#viewport{height:480px;overflow:auto;position:relative}
#spacer{position:relative}
.row{display:grid;height:24px;line-height:24px;border-bottom:1px solid #eee;cursor:pointer}
.row>div{overflow:hidden;white-space:nowrap;text-overflow:ellipsis;padding:0 6px}
#rows .row{position:absolute;left:0;right:0}
#rows .row:hover{background:#f3f6fb}
.head{font-weight:600;background:#f4f4f4;cursor:default}
.chosen{font-weight:600}.declined{color:#999}.claimed{color:#222}
.sel{background:#fff8dc}
#details{margin-top:.6em}#details pre{white-space:pre-wrap;background:#f7f7f7;padding:.5em}
svg text{font:12px system-ui,sans-serif}
"""

_SCRIPT = r"""
"use strict";
(function () {
  var errors = document.getElementById("errors");
  window.addEventListener("error", function (e) {
    errors.textContent += "script error: " + e.message + "\n";
  });
  var D = JSON.parse(document.getElementById("data").textContent);
  var P = D.providers, NP = P.length, N = D.nodes.name.length;
  var COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
                "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
  var SVGNS = "http://www.w3.org/2000/svg";
  var ROW_H = 24, MAX_BOXES = 2000;
  var pinned = new Set(D.nodes.pinned);

  function color(p) { return p < 0 ? "#999" : COLORS[p % COLORS.length]; }
  function fmtUs(us) {
    if (us === null || us === undefined) return "-";
    if (us >= 1e6) return (us / 1e6).toFixed(2) + " s";
    if (us >= 1e3) return (us / 1e3).toFixed(2) + " ms";
    return us.toFixed(2) + " us";
  }
  function fmtBytes(n) {
    var units = ["B", "KiB", "MiB", "GiB"];
    for (var i = 0; i < units.length; i++) {
      if (n < 1024 || i === units.length - 1) return i ? n.toFixed(1) + " " + units[i] : n + " B";
      n /= 1024;
    }
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function svg(tag, attrs, text) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function answer(i, p) { return D.answers[D.nodes.answer[p][i]]; }
  function outcome(i, p) {
    if (D.nodes.provider[i] === p) return 0;
    return answer(i, p)[0] ? 1 : 2;
  }
  function verdict(a) {
    return a[0] ? fmtUs(a[1]) : "declined [" + a[1] + "]: " + a[2];
  }

  // summary and totals
  var T = D.totals;
  document.getElementById("summary").textContent = N + " nodes, " + NP + " provider(s), " +
    "strategy " + (D.strategy || "none (placement failed)") + ", " + D.partitions.length +
    " partition(s), " + D.transfers.count + " device copies (" + fmtBytes(D.transfers.bytes) + ")" +
    (D.transfers.conversions ?
     ", of which " + D.transfers.conversions + " layout conversions" : "");
  var totals = document.getElementById("totals");
  var tt = el("table", "totals"), tr = el("tr");
  ["provider", "device", "nodes", "estimated"].forEach(function (h) {
    tr.appendChild(el("th", "", h));
  });
  tt.appendChild(tr);
  P.forEach(function (p, i) {
    var t = T && T.providers[p.name] ? T.providers[p.name] : {nodes: 0, cost_us: 0};
    var r = el("tr"), c = el("td");
    var sw = el("i");
    sw.style.cssText = "display:inline-block;width:10px;height:10px;margin-right:4px";
    sw.style.background = color(i);
    c.appendChild(sw); c.appendChild(document.createTextNode(p.name)); r.appendChild(c);
    r.appendChild(el("td", "", p.device || "-"));
    r.appendChild(el("td", "num", String(t.nodes)));
    r.appendChild(el("td", "num", fmtUs(t.cost_us)));
    tt.appendChild(r);
  });
  totals.appendChild(tt);
  if (T) {
    var lines = ["nodes " + fmtUs(T.node_cost_us), "copies " + fmtUs(T.transfer_cost_us),
                 "total estimated " + fmtUs(T.total_us)];
    for (var k in T) {
      if (["providers", "node_cost_us", "transfer_cost_us", "total_us"].indexOf(k) < 0 &&
          typeof T[k] === "number") lines.push(k.replace(/_/g, " ") + " " + T[k].toFixed(2));
    }
    totals.appendChild(el("p", "", lines.join("; ")));
  }
  D.compiled.forEach(function (c, i) {
    var members = c[1].length <= 6 ? c[1].join(", ")
      : c[1].slice(0, 5).join(", ") + ", ... " + c[1][c[1].length - 1];
    totals.appendChild(el("p", "", "compiled partition " + i + " on " + P[c[0]].name + ": " +
      c[1].length + " nodes, " + fmtUs(c[2]) + (c[3] ? " + " + fmtUs(c[3]) + " launch" : "") +
      " (" + members + ")"));
  });
  for (var key in D.extra) {
    var v = D.extra[key];
    if (v && typeof v === "object") {
      v = Object.keys(v).map(function (k) {
        return k + " " + (typeof v[k] === "number" ? fmtUs(v[k]) : v[k]);
      }).join(", ");
    }
    totals.appendChild(el("p", "", key.replace(/_/g, " ") + ": " + v));
  }
  if (D.unplaceable.length) {
    totals.appendChild(el("p", "declined", D.unplaceable.length +
      " node(s) no provider claims: " + D.unplaceable.slice(0, 20).join(", ") +
      (D.unplaceable.length > 20 ? ", ..." : "")));
  }
  var exp = Object.keys(D.expanded);
  if (exp.length) {
    totals.appendChild(el("p", "", exp.length + " function node(s) expanded into their bodies: " +
      exp.slice(0, 20).map(function (k) { return k + " (" + D.expanded[k].op + ", " +
        D.expanded[k].into + " nodes)"; }).join(", ")));
  }

  // the picture: lanes (host I/O, then one per provider), one box per partition
  var legend = document.getElementById("legend");
  P.forEach(function (p, i) {
    var s = el("span"), sw = el("i"); sw.style.background = color(i);
    s.appendChild(sw);
    s.appendChild(document.createTextNode(p.name + (p.device ? " (" + p.device + ")" : "")));
    legend.appendChild(s);
  });
  var picture = document.getElementById("picture");
  var parts = D.partitions, shown = Math.min(parts.length, MAX_BOXES);
  var LANE_W = 240, BOX_W = 190, BOX_H = 38, ROW = 64, TOP = 40, LEFT = 20;
  var W = LEFT * 2 + LANE_W * (NP + 1), H = TOP + ROW * (shown + 2) + 20;
  var s = svg("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img",
                      "aria-label": "placed graph"});
  for (var l = 0; l <= NP; l++) {
    var lx = LEFT + l * LANE_W;
    s.appendChild(svg("rect", {x: lx, y: 0, width: LANE_W - 10, height: H,
                               fill: l ? color(l - 1) : "#888", "fill-opacity": 0.06}));
    s.appendChild(svg("text", {x: lx + 8, y: 20, "font-weight": "bold"},
                      l ? P[l - 1].name + (P[l - 1].device ? " @ " + P[l - 1].device : "")
                        : "host I/O"));
  }
  function boxPos(b) {  // b: -1 inputs, 0..shown-1 partitions, parts.length outputs
    if (b < 0) return {x: LEFT, y: TOP};
    if (b >= parts.length) return {x: LEFT, y: TOP + ROW * (shown + 1)};
    return {x: LEFT + (parts[b][0] + 1) * LANE_W, y: TOP + ROW * (b + 1)};
  }
  var order = [-1];
  for (var b = 0; b < shown; b++) order.push(b);
  order.push(parts.length);
  for (var j = 1; j < order.length; j++) {
    var a0 = boxPos(order[j - 1]), a1 = boxPos(order[j]);
    s.appendChild(svg("line", {x1: a0.x + BOX_W / 2, y1: a0.y + BOX_H, x2: a1.x + BOX_W / 2,
                               y2: a1.y, stroke: "#bbb", "stroke-width": 1}));
  }
  function box(b, fill, line1, line2, tip) {
    var p = boxPos(b), g = svg("g", {"class": "box"});
    g.appendChild(svg("rect", {x: p.x, y: p.y, width: BOX_W, height: BOX_H, rx: 5,
                               fill: fill, stroke: "#333", "stroke-width": 0.5}));
    g.appendChild(svg("text", {x: p.x + 6, y: p.y + 15, fill: "#fff"}, line1));
    g.appendChild(svg("text", {x: p.x + 6, y: p.y + 31, fill: "#fff"}, line2));
    g.appendChild(svg("title", {}, tip));
    s.appendChild(g);
  }
  function clip(t, n) { return t.length > n ? t.slice(0, n - 1) + "\u2026" : t; }
  box(-1, "#777", "graph inputs", "and weights (host)",
      "graph inputs and initializers start on the host");
  for (var i = 0; i < shown; i++) {
    var pt = parts[i], first = D.nodes.name[pt[1]], last = D.nodes.name[pt[2]];
    box(i, color(pt[0]), clip(P[pt[0]].name + ": " + pt[3] + " node" + (pt[3] > 1 ? "s" : "") +
        ", " + fmtUs(pt[4]), 30), clip(pt[3] > 1 ? first + " .. " + last : first, 30),
        "partition " + i + ": " + pt[3] + " nodes on " + P[pt[0]].name + ", " + fmtUs(pt[4]) +
        "\n" + first + (pt[3] > 1 ? " .. " + last : ""));
  }
  box(parts.length, "#777", "graph outputs", "(host)", "graph outputs end on the host");
  var skipped = 0;
  D.edges.forEach(function (e) {
    if ((e.from >= shown && e.from < parts.length) || (e.to >= shown && e.to < parts.length)) {
      skipped++;
      return;
    }
    var a = boxPos(e.from), c = boxPos(e.to);
    var right = c.x >= a.x;
    var x1 = a.x + (right ? BOX_W : 0), y1 = a.y + BOX_H / 2;
    var x2 = c.x + (right ? 0 : BOX_W), y2 = c.y + BOX_H / 2;
    if (a.x === c.x) { x1 = a.x + BOX_W; x2 = c.x + BOX_W; }
    var bend = a.x === c.x ? 60 : (x2 - x1) / 2;
    var d = "M" + x1 + "," + y1 + " C" + (x1 + bend) + "," + y1 + " " +
            (x2 - (a.x === c.x ? -60 : bend)) + "," + y2 + " " + x2 + "," + y2;
    var stroke = e.to >= parts.length || e.from < 0 ? "#555" : color(parts[e.to][0]);
    var converts = e.conversions > 0;
    var g = svg("g", {"class": converts ? "copy layout" : "copy"});
    var line = {d: d, fill: "none", stroke: stroke, "stroke-width": 2,
                "marker-end": "url(#arrow)"};
    if (converts) line["stroke-dasharray"] = "6,3";
    g.appendChild(svg("path", line));
    var label = fmtBytes(e.bytes) + (e.count > 1 ? " (" + e.count + " tensors)" : "") +
      (converts ? " " + e.layouts.join(", ") : "");
    var mx = (x1 + x2) / 2 + (a.x === c.x ? 45 : 0), my = (y1 + y2) / 2;
    g.appendChild(svg("rect", {x: mx - label.length * 3.3 - 3, y: my - 11,
                               width: label.length * 6.6 + 6, height: 15, fill: "#fff",
                               "fill-opacity": 0.85}));
    g.appendChild(svg("text", {x: mx, y: my, "text-anchor": "middle"}, label));
    g.appendChild(svg("title", {}, e.count + " copy(ies)" +
      (converts ? " (" + e.conversions + " layout conversion(s): " + e.layouts.join(", ") +
       ")" : "") + ", " + fmtBytes(e.bytes) + ", " +
      fmtUs(e.cost_us) + " (" + e.devices.join(", ") + "): " + e.tensors.join(", ") +
      (e.count > e.tensors.length ? ", ..." : "")));
    s.appendChild(g);
  });
  var defs = svg("defs", {}), m = svg("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 9,
    refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse"});
  m.appendChild(svg("path", {d: "M0,0 L10,5 L0,10 z", fill: "#333"}));
  defs.appendChild(m);
  s.insertBefore(defs, s.firstChild);
  if (!D.strategy) {
    picture.appendChild(el("p", "declined",
                           "placement failed: see the nodes no provider claims above"));
  }
  if (parts.length > shown) {
    picture.appendChild(el("p", "hint", "showing the first " + shown + " of " + parts.length +
      " partitions" +
      (skipped ? "; " + skipped + " copy edge(s) to later partitions omitted" : "") +
      "; the table below lists every node"));
  }
  picture.appendChild(s);

  // the table: filters, and only the rows in view
  var fProvider = document.getElementById("f-provider");
  var fOutcome = document.getElementById("f-outcome");
  var fOp = document.getElementById("f-op"), fName = document.getElementById("f-name");
  function option(sel, value, text) {
    var o = el("option", "", text);
    o.value = value;
    sel.appendChild(o);
  }
  option(fProvider, "any", "any");
  P.forEach(function (p, i) { option(fProvider, String(i), p.name); });
  var opCounts = new Array(D.ops.length).fill(0);
  for (var n = 0; n < N; n++) opCounts[D.nodes.op[n]]++;
  option(fOp, "any", "any");
  D.ops.map(function (o, i) { return [o, i]; }).sort().forEach(function (x) {
    option(fOp, String(x[1]), x[0] + " (" + opCounts[x[1]] + ")");
  });
  var template = "70px minmax(140px,2fr) 130px 100px" + " minmax(140px,2fr)".repeat(NP);
  var head = document.getElementById("thead");
  head.style.gridTemplateColumns = template;
  var headers = ["#", "node", "op", "placed on"].concat(P.map(function (p) { return p.name; }));
  headers.forEach(function (h) { head.appendChild(el("div", "", h)); });
  var viewport = document.getElementById("viewport"), spacer = document.getElementById("spacer");
  var rowsEl = document.getElementById("rows"), countEl = document.getElementById("count");
  var visible = new Int32Array(N), nVisible = 0, selected = -1, selProvider = -1;

  function applyFilters() {
    var p = fProvider.value === "any" ? -1 : +fProvider.value;
    var o = fOutcome.value === "any" ? -1 : +fOutcome.value;
    var op = fOp.value === "any" ? -1 : +fOp.value;
    var text = fName.value.trim();
    selProvider = p;
    nVisible = 0;
    for (var i = 0; i < N; i++) {
      if (op >= 0 && D.nodes.op[i] !== op) continue;
      if (text && D.nodes.name[i].indexOf(text) < 0) continue;
      if (o < 0 && p >= 0 && D.nodes.provider[i] !== p) continue;
      if (o >= 0) {
        var hit = false;
        for (var q = 0; q < NP && !hit; q++) {
          if ((p < 0 || q === p) && outcome(i, q) === o) hit = true;
        }
        if (!hit) continue;
      }
      visible[nVisible++] = i;
    }
    countEl.textContent = nVisible + " of " + N + " nodes";
    spacer.style.height = nVisible * ROW_H + "px";
    viewport.scrollTop = 0;
    renderRows();
  }
  function renderRows() {
    var h = viewport.clientHeight || 480;
    var first = Math.max(0, Math.floor(viewport.scrollTop / ROW_H) - 10);
    var last = Math.min(nVisible, Math.ceil((viewport.scrollTop + h) / ROW_H) + 10);
    var frag = document.createDocumentFragment();
    for (var r = first; r < last; r++) {
      var i = visible[r], row = el("div", "row" + (i === selected ? " sel" : ""));
      row.style.gridTemplateColumns = template;
      row.style.top = r * ROW_H + "px";
      row.dataset.node = i;
      row.appendChild(el("div", "", String(i)));
      row.appendChild(el("div", "", D.nodes.name[i]));
      row.appendChild(el("div", "", D.ops[D.nodes.op[i]]));
      var placed = D.nodes.provider[i];
      var pc = el("div", "", placed < 0 ? "none"
                                        : P[placed].name + (pinned.has(i) ? " (pinned)" : ""));
      if (placed >= 0) pc.style.color = color(placed);
      row.appendChild(pc);
      for (var q = 0; q < NP; q++) {
        var a = answer(i, q), oc = outcome(i, q), t = verdict(a);
        var cell = el("div", ["chosen", "claimed", "declined"][oc],
                      (oc === 0 ? "\u2605 " : "") + t);
        cell.title = t;
        if (q === selProvider) cell.style.background = "#f6f6ff";
        row.appendChild(cell);
      }
      frag.appendChild(row);
    }
    rowsEl.textContent = "";
    rowsEl.appendChild(frag);
  }
  var pending = false;
  viewport.addEventListener("scroll", function () {
    if (pending) return;
    pending = true;
    requestAnimationFrame(function () { pending = false; renderRows(); });
  });
  rowsEl.addEventListener("click", function (e) {
    var row = e.target.closest(".row");
    if (!row) return;
    selected = +row.dataset.node;
    showDetails(selected);
    renderRows();
  });
  function showDetails(i) {
    var box = document.getElementById("details");
    box.textContent = "";
    box.appendChild(el("h3", "", D.nodes.name[i] + " (" + D.ops[D.nodes.op[i]] + ")"));
    var lines = [];
    for (var q = 0; q < NP; q++) {
      var a = answer(i, q), oc = outcome(i, q);
      if (a[0]) {
        lines.push(P[q].name + ": " + ["chosen", "claims it", ""][oc] + ", total " + fmtUs(a[1]) +
          " = max(compute " + fmtUs(a[2]) + ", memory " + fmtUs(a[3]) + ") + transfer " +
          fmtUs(a[4]) + " + launch " + fmtUs(a[5]) + "; " + fmtBytes(a[6]) + " moved, " +
          a[7] + " flops" + (a[8].length ? "; host inputs " + a[8].join(", ") : ""));
      } else {
        lines.push(P[q].name + ": declined [" + a[1] + "]: " + a[2]);
      }
    }
    box.appendChild(el("pre", "", lines.join("\n")));
  }
  [fProvider, fOutcome, fOp].forEach(function (f) { f.addEventListener("change", applyFilters); });
  fName.addEventListener("input", applyFilters);
  applyFilters();

  void document.body.offsetHeight;  // finish layout before taking the time
  var done = el("p", "hint");
  done.id = "render-status";
  done.dataset.ms = performance.now().toFixed(1);
  done.dataset.rows = rowsEl.childElementCount;
  done.dataset.boxes = s.querySelectorAll("g.box").length;
  done.dataset.copies = s.querySelectorAll("g.copy").length;
  done.textContent = "rendered in " + done.dataset.ms + " ms";
  document.body.appendChild(done);
})();
"""
