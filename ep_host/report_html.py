"""The placement report as one self-contained HTML file (``ep-host report``): the node graph
coloured by provider with device copies as marked edges and partitions outlined, a filterable
table of every provider's answer for every node, and the totals. It opens offline.

The page is drawn by inline JavaScript from a compact form of the placement JSON
(:func:`ep_host.report.explain_dict`) and the graph laid out in Python
(:mod:`ep_host.report_graph`): answers are deduplicated, and the picture and the table draw
only what is in view, so a 50k-node model's report opens in about a second.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

from ep_host.capability import CapabilityTable
from ep_host.placement import Placement
from ep_host.report import explain_dict
from ep_host.report_graph import LAYOUT_LIMIT, node_graph


def compact(data: dict[str, Any], graph: dict[str, Any]) -> dict[str, Any]:
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
        "graph": graph,
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


def render(data: dict[str, Any], graph: dict[str, Any]) -> str:
    """The report page for a placement JSON (``explain_dict``) and its drawn graph
    (:func:`ep_host.report_graph.node_graph`)."""
    payload = json.dumps(compact(data, graph), separators=(",", ":"), default=str)
    payload = payload.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    title = html.escape(f"ep-host report: {data['model']}")
    return (_PAGE.replace("__TITLE__", title).replace("__STYLE__", _STYLE)
            .replace("__SCRIPT__", _SCRIPT).replace("__DATA__", payload))


def write_report(path: str, table: CapabilityTable, placement: Placement | None, model: str,
                 unplaceable: Sequence[str] = (), layout_limit: int = LAYOUT_LIMIT
                 ) -> dict[str, int]:
    """Write the report to ``path``; returns counts for the command's summary line. Above
    ``layout_limit`` nodes the picture collapses (see :func:`ep_host.report_graph.node_graph`).
    """
    data = explain_dict(table, placement, model, unplaceable)
    text = render(data, node_graph(table, placement, layout_limit))
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
<p class="hint">Boxes are nodes coloured by the provider they run on; dashed outlines are
partitions (connected nodes on one provider); red dashed edges are device copies, labelled with
their bytes and estimated time; dotted ones convert a tensor's layout (NCHW to NHWC). Click a
node for every provider's answer.</p>
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
<button type="button" id="f-group" hidden></button>
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
#picture{max-height:640px;overflow:auto;border:1px solid #ccc;background:#fcfcfc}
#picture svg{display:block}.box{cursor:pointer}
.tools{display:flex;gap:.5em;align-items:center;margin:.3em 0}
#legend i.line{width:22px;height:0;border-top:2px dashed #d62728;vertical-align:3px}
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

  // the picture: the node graph as laid out in Python (boxes, routed edges, partition
  // outlines); only what is in view is drawn, so a large graph costs what the screen shows
  var G = D.graph;
  var legend = document.getElementById("legend");
  function legendItem(fill, text, line) {
    var s = el("span"), sw = el("i");
    if (line) sw.className = "line"; else sw.style.background = fill;
    s.appendChild(sw);
    s.appendChild(document.createTextNode(text));
    legend.appendChild(s);
  }
  P.forEach(function (p, i) {
    legendItem(color(i), p.name + (p.device ? " (" + p.device + ")" : ""));
  });
  legendItem("#777", "graph inputs and outputs");
  legendItem("", "device copy or layout conversion (dotted; bytes, estimated time)", true);
  var picture = document.getElementById("picture");
  var zoom = 1, BH = 0;
  var s = svg("svg", {role: "img", "aria-label": "placed graph"});
  var defs = svg("defs", {});
  [["arrow", "#777"], ["arrow-copy", "#d62728"]].forEach(function (a) {
    var m = svg("marker", {id: a[0], viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7,
                           markerHeight: 7, orient: "auto-start-reverse"});
    m.appendChild(svg("path", {d: "M0,0 L10,5 L0,10 z", fill: a[1]}));
    defs.appendChild(m);
  });
  s.appendChild(defs);
  var layers = {};
  ["outlines", "links", "boxes", "labels"].forEach(function (k) {
    layers[k] = svg("g", {"class": k});
    s.appendChild(layers[k]);
  });
  function clip(t, n) { return t.length > n ? t.slice(0, Math.max(1, n - 1)) + "\u2026" : t; }
  function groupInfo(members) {  // a group's providers (node counts) and summed cost
    var counts = new Array(NP).fill(0), none = 0, cost = 0;
    members.forEach(function (i) {
      var q = D.nodes.provider[i];
      if (q < 0) none++; else counts[q]++;
      cost += D.nodes.cost[i] || 0;
    });
    return {counts: counts, none: none, cost: cost, n: members.length};
  }
  function opList(members) {  // a chain's ops, in order, each with its count if repeated
    var out = [];
    members.forEach(function (i) {
      var op = D.ops[D.nodes.op[i]], last = out[out.length - 1];
      if (last && last[0] === op) last[1]++; else out.push([op, 1]);
    });
    return out.map(function (o) { return o[1] > 1 ? o[0] + " x" + o[1] : o[0]; }).join(", ");
  }
  // bounds of every item, for drawing only those in view
  var boxes = G.boxes, links = G.links, outlines = G.outlines;
  var linkBounds = links.map(function (l) {
    var pts = l[2], x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    for (var k = 0; k < pts.length; k += 2) {
      x0 = Math.min(x0, pts[k]); x1 = Math.max(x1, pts[k]);
      y0 = Math.min(y0, pts[k + 1]); y1 = Math.max(y1, pts[k + 1]);
    }
    return [x0, y0, x1 - x0, y1 - y0];
  });
  function inView(x, y, w, h, v) {
    return x + w >= v[0] && x <= v[2] && y + h >= v[1] && y <= v[3];
  }
  function drawBox(bi) {
    var b = boxes[bi], x = b[2], y = b[3], w = b[4], h = b[5], kind = b[0];
    var g = svg("g", {"class": "box " + (kind === "node" ? "node" : kind === "group" ? "group"
                                                                       : "io")});
    g.dataset.box = bi;
    var chars = Math.floor((w - 12) / 6.6), line1, line2, tip, fill = "#777";
    if (kind === "node") {
      var i = b[1], q = D.nodes.provider[i];
      fill = color(q);
      g.dataset.node = i;
      g.dataset.provider = q < 0 ? "" : P[q].name;
      line1 = D.ops[D.nodes.op[i]].replace(/^.*::/, "");  // the domain is in the tip
      line2 = D.nodes.name[i];
      tip = line2 + " (" + D.ops[D.nodes.op[i]] + ")\n" +
        (q < 0 ? "not placed" : "on " + P[q].name + ", " +
        fmtUs(D.nodes.cost[i]) + (pinned.has(i) ? ", pinned" : "")) + "\nclick for every answer";
    } else if (kind === "group") {
      var members = G.groups[b[1]], info = groupInfo(members), only = -1;
      var first = members[0], last = members[members.length - 1];
      for (var p = 0; p < NP; p++) if (info.counts[p] === info.n) only = p;
      fill = only >= 0 ? color(only) : "#fff";
      line1 = (only >= 0 ? P[only].name + ": " : "") + info.n + " node" +
        (info.n > 1 ? "s" : "") + ", " + fmtUs(info.cost);
      var names = D.nodes.name[first] + (info.n > 1 ? " .. " + D.nodes.name[last] : "");
      line2 = G.mode === "chains" ? opList(members) : names;
      tip = {chains: "chain", partitions: "partition", spans: "span"}[G.mode] + " of " +
        info.n + " node(s): " +
        P.map(function (pp, k) { return info.counts[k] ? pp.name + " " + info.counts[k] : ""; })
          .filter(Boolean).join(", ") + (info.none ? ", not placed " + info.none : "") +
        "\n" + names + "\nclick to list its nodes in the table below";
      g.dataset.group = b[1];
      g.dataset.first = first;
      g.dataset.last = last;
      if (only < 0) {  // a span of mixed providers: a bar per provider's share
        var bx = x;
        info.counts.forEach(function (c, k) {
          if (!c) return;
          var bw = w * c / info.n;
          g.appendChild(svg("rect", {x: bx, y: y + h - 8, width: bw, height: 8, fill: color(k)}));
          bx += bw;
        });
      }
    } else {
      line1 = kind === "input" ? "graph input" : "graph output";
      line2 = b[6];
      tip = line1 + " " + b[6] + " (host)";
    }
    g.insertBefore(svg("rect", {x: x, y: y, width: w, height: h, rx: 5, fill: fill,
                                stroke: "#333", "stroke-width": 0.6}), g.firstChild);
    var ink = fill === "#fff" ? "#222" : "#fff";
    g.appendChild(svg("text", {x: x + 6, y: y + 14, fill: ink, "font-weight": "bold"},
                      clip(line1, chars)));
    g.appendChild(svg("text", {x: x + 6, y: y + 28, fill: ink}, clip(line2, chars)));
    g.appendChild(svg("title", {}, tip));
    layers.boxes.appendChild(g);
  }
  function drawLink(li) {
    var l = links[li], pts = l[2], isCopy = l[5] > 0, isLayout = l[10] > 0;
    var d = "M" + pts[0] + "," + pts[1];
    if (pts.length === 4) {
      var my = (pts[1] + pts[3]) / 2;
      d += " C" + pts[0] + "," + my + " " + pts[2] + "," + my + " " + pts[2] + "," + pts[3];
    } else {
      for (var k = 2; k < pts.length; k += 2) d += " L" + pts[k] + "," + pts[k + 1];
    }
    var g = svg("g", {"class": isLayout ? "link copy layout" : isCopy ? "link copy" : "link"});
    g.dataset.source = l[0];
    g.dataset.target = l[1];
    g.appendChild(svg("path", {d: d, fill: "none", stroke: isCopy ? "#d62728" : "#999",
                               "stroke-width": isCopy ? 2.2 : 1.2,
                               "stroke-dasharray": isLayout ? "2 3" : isCopy ? "6 3" : "none",
                               "marker-end": isCopy ? "url(#arrow-copy)" : "url(#arrow)"}));
    var tip = l[4] + " tensor(s): " + l[3].join(", ") + (l[4] > l[3].length ? ", ..." : "");
    if (isCopy) {
      var label = (isLayout ? l[11].join(", ") + ": " : "") + fmtBytes(l[6]) + ", " +
        fmtUs(l[7]) + (l[5] > 1 ? " (" + l[5] + " copies)" : "");
      var mid = Math.floor(pts.length / 4) * 2;
      var mx = pts.length === 4 ? (pts[0] + pts[2]) / 2 : pts[mid];
      // a third of the way down: clear of the outlines around both ends
      var yy = pts.length === 4 ? pts[1] + (pts[3] - pts[1]) * 0.35 : pts[mid + 1];
      g.appendChild(svg("rect", {x: mx - label.length * 3.3 - 4, y: yy - 9,
                                 width: label.length * 6.6 + 8, height: 16, rx: 3,
                                 fill: "#fff", stroke: "#d62728", "stroke-width": 0.8}));
      g.appendChild(svg("text", {x: mx, y: yy + 3, "text-anchor": "middle", fill: "#b01e1e"},
                        label));
      tip = (isLayout ? l[10] + " layout conversion(s) " + l[11].join(", ") + "; " : "") +
        "device copy: " + l[5] + " tensor(s), " + fmtBytes(l[6]) + ", estimated " +
        fmtUs(l[7]) + " (" + l[9].join(", ") + "): " + l[8].join(", ") +
        (l[5] > l[8].length ? ", ..." : "") + "\n" + tip;
    }
    g.appendChild(svg("title", {}, tip));
    layers.links.appendChild(g);
  }
  function drawOutline(oi) {
    var o = outlines[oi], q = P.findIndex(function (p) { return p.name === o[0]; });
    var g = svg("g", {"class": "partition"});
    g.dataset.provider = o[0];
    g.appendChild(svg("rect", {x: o[4], y: o[5], width: o[6], height: o[7], rx: 8,
                               fill: color(q), "fill-opacity": 0.07, stroke: color(q),
                               "stroke-width": 1.5, "stroke-dasharray": "5 3"}));
    var label = "partition " + oi + ": " + o[0] + ", " + o[2] + " node" + (o[2] > 1 ? "s" : "") +
      ", " + fmtUs(o[3]);
    g.appendChild(svg("text", {x: o[4] + 6, y: o[5] + 12, fill: color(q),
                               "font-size": "11px"}, clip(label, Math.floor((o[6] - 8) / 5.8))));
    g.appendChild(svg("title", {}, label + "\nnodes on one provider, connected: what a " +
                                   "provider that compiles runs as one kernel"));
    layers.outlines.appendChild(g);
  }
  function drawVisible() {
    var pad = 200 / zoom;
    var v = [picture.scrollLeft / zoom - pad, picture.scrollTop / zoom - pad,
             (picture.scrollLeft + (picture.clientWidth || 1200)) / zoom + pad,
             (picture.scrollTop + (picture.clientHeight || 640)) / zoom + pad];
    ["outlines", "links", "boxes"].forEach(function (k) { layers[k].textContent = ""; });
    outlines.forEach(function (o, i) { if (inView(o[4], o[5], o[6], o[7], v)) drawOutline(i); });
    linkBounds.forEach(function (b, i) { if (inView(b[0], b[1], b[2], b[3], v)) drawLink(i); });
    boxes.forEach(function (b, i) { if (inView(b[2], b[3], b[4], b[5], v)) drawBox(i); });
  }
  function setZoom(z) {
    zoom = Math.min(2, Math.max(0.1, z));
    s.setAttribute("width", G.width * zoom);
    s.setAttribute("height", G.height * zoom);
    drawVisible();
  }
  s.setAttribute("viewBox", "0 0 " + G.width + " " + G.height);
  var tools = el("div", "tools");
  [["zoom out", 0.8], ["zoom in", 1.25], ["100%", 0]].forEach(function (t) {
    var b = el("button", "", t[0]);
    b.type = "button";
    b.addEventListener("click", function () { setZoom(t[1] ? zoom * t[1] : 1); });
    tools.appendChild(b);
  });
  var modeText = {
    nodes: "one box per node",
    chains: N + " nodes, more than " + G.limit + ": one box per chain of nodes on one " +
      "provider; click a box to list its nodes in the table",
    partitions: N + " nodes, more than " + G.limit + " chains: one box per partition " +
      "(consecutive nodes on one provider); click a box to list its nodes in the table",
    spans: N + " nodes in more than " + G.limit + " partitions: one box per span of " +
      "consecutive nodes, a bar per provider's share; click a box to list its nodes"};
  tools.appendChild(el("span", "hint", modeText[G.mode] + "; " + boxes.length + " boxes, " +
    links.length + " edges, " + outlines.length + " partition outline(s)" +
    (G.internal_copies.copies ? "; " + G.internal_copies.copies + " device copies inside " +
     "spans (" + fmtBytes(G.internal_copies.bytes) + ")" : "")));
  picture.parentNode.insertBefore(tools, picture);
  if (!D.strategy) {
    picture.parentNode.insertBefore(el("p", "declined",
      "placement failed: see the nodes no provider claims above"), picture);
  }
  picture.appendChild(s);
  var drawPending = false;
  picture.addEventListener("scroll", function () {
    if (drawPending) return;
    drawPending = true;
    requestAnimationFrame(function () { drawPending = false; drawVisible(); });
  });
  s.addEventListener("click", function (e) {
    var g = e.target.closest("g.box");
    if (!g) return;
    if (g.dataset.node !== undefined) {
      selected = +g.dataset.node;
      showDetails(selected);
    } else if (g.dataset.group !== undefined) {
      showGroup(+g.dataset.group);
    }
  });
  setZoom(1);

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
  var group = null, fGroup = document.getElementById("f-group");
  function showGroup(k) {  // the nodes of one box of the picture
    var members = G.groups[k];
    group = new Uint8Array(N);
    members.forEach(function (i) { group[i] = 1; });
    fGroup.hidden = false;
    fGroup.textContent = "the " + members.length + " node(s) of " + D.nodes.name[members[0]] +
      (members.length > 1 ? " .. " + D.nodes.name[members[members.length - 1]] : "") +
      " \u2715";
    applyFilters();
    document.getElementById("table").scrollIntoView();
  }
  fGroup.addEventListener("click", function () {
    group = null;
    fGroup.hidden = true;
    applyFilters();
  });

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
      if (group && !group[i]) continue;
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
  var linked = /^#group=(\d+)$/.exec(location.hash);  // a link to one box's nodes
  if (linked && G.groups[+linked[1]]) showGroup(+linked[1]);

  void document.body.offsetHeight;  // finish layout before taking the time
  var done = el("p", "hint");
  done.id = "render-status";
  done.dataset.ms = performance.now().toFixed(1);
  done.dataset.rows = rowsEl.childElementCount;
  done.dataset.mode = G.mode;
  done.dataset.boxes = s.querySelectorAll("g.box").length;
  done.dataset.nodes = s.querySelectorAll("g.node").length;
  done.dataset.links = s.querySelectorAll("g.link").length;
  done.dataset.copies = s.querySelectorAll("g.copy").length;
  done.dataset.outlines = s.querySelectorAll("g.partition").length;
  done.textContent = "rendered in " + done.dataset.ms + " ms";
  document.body.appendChild(done);
})();
"""
