"""Layout conversions shown everywhere a device copy is: ``place`` (text and JSON), ``explain``,
``why``, the HTML report (a dashed, labelled edge) and the placement JSON's answers."""

import io
import json

from test_layout_placement import NBYTES, chain
from test_report_html import check_page, open_in_chromium

from ep_host.layouts import conversion_cost_us
from ep_host.placement import choose
from ep_host.report import Output, explain_dict, fmt_us, render_explain, render_placement
from ep_host.report_graph import node_graph
from ep_host.report_html import write_report
from ep_host.why import render_why, why, why_dict

CONVERSION = conversion_cost_us(NBYTES)


def greedy_chain():
    """x -> n0 (nhwc, 9 us) -> v0, with cpu at 10 us: greedy takes nhwc and two conversions."""
    table, devices = chain(nhwc_cost=9.0, cpu_cost=10.0, n=1)
    return choose(table, devices, strategy="greedy", model="chain"), table


def text(render, *args):
    stream = io.StringIO()
    render(Output(stream, rich=False), *args)
    return stream.getvalue()


def test_place_lists_the_conversions_with_their_layouts_and_cost():
    placement, _ = greedy_chain()
    shown = text(render_placement, placement)
    assert "0 device copies, 2 layout conversions" in shown
    assert "NCHW->NHWC" in shown and "NHWC->NCHW" in shown
    assert f"copies {fmt_us(2 * CONVERSION)} of which layout conversions " \
        f"{fmt_us(2 * CONVERSION)}" in shown
    data = json.loads(json.dumps(placement.to_dict()))
    assert [(t["tensor"], t["from"], t["to"], t["layout"]) for t in data["transfers"]] == [
        ("x", "cpu", "cpu", {"from": "NCHW", "to": "NHWC", "cost_us": CONVERSION}),
        ("v0", "cpu", "cpu", {"from": "NHWC", "to": "NCHW", "cost_us": CONVERSION})]
    assert data["totals"]["transfer_cost_us"] == 2 * CONVERSION
    answer = data["nodes"][0]["answers"]["nhwc"]
    assert answer["layouts"] == {"inputs": ["NHWC"], "outputs": ["NHWC"]}
    assert "layouts" not in data["nodes"][0]["answers"]["cpu"]


def test_explain_marks_layout_claims_and_lists_the_conversions():
    placement, table = greedy_chain()
    shown = text(render_explain, table, placement)
    assert f"*nhwc     {fmt_us(9.0)} (in NHWC; out NHWC)" in shown
    conversions = shown[shown.index("2 layout conversion(s)"):].splitlines()
    assert conversions[0] == f"2 layout conversion(s), estimated {fmt_us(2 * CONVERSION)}"
    assert [line.split()[:3] for line in conversions[2:4]] == [["x", "NCHW->NHWC", "cpu"],
                                                             ["v0", "NHWC->NCHW", "cpu"]]
    data = explain_dict(table, placement, "chain")
    assert sum(1 for t in data["transfers"] if "layout" in t) == 2


def test_why_counts_the_conversions_a_move_would_add():
    placement = choose(*chain(nhwc_cost=9.0, cpu_cost=10.0, n=1), model="chain")
    assert placement.by_node["n0"].provider == "cpu"
    verdicts = why(placement, "n0")
    lost = next(v for v in verdicts if v.provider == "nhwc")
    assert lost.outcome == "lost" and lost.own_us == -1.0
    assert lost.copies_us == 2 * CONVERSION
    assert lost.margin_us == 2 * CONVERSION - 1.0
    shown = text(render_why, placement, "n0", verdicts)
    assert "would add layout conversion of x NCHW->NHWC on cpu" in shown
    assert "would add layout conversion of v0 NHWC->NCHW on cpu" in shown
    layouts = [c["layout"] for c in why_dict(placement, "n0", verdicts)["verdicts"][1]["copies"]]
    assert [(c["from"], c["to"]) for c in layouts] == [("NCHW", "NHWC"), ("NHWC", "NCHW")]


def test_the_html_report_draws_conversions_as_dotted_labelled_edges(tmp_path):
    placement, table = greedy_chain()
    links = node_graph(table, placement)["links"]
    # the drawn edges that carry a conversion: (conversions, their layout changes)
    assert sorted((link[10], tuple(link[11])) for link in links if link[10]) == [
        (1, ("NCHW->NHWC",)), (1, ("NHWC->NCHW",))]
    out = tmp_path / "layouts.html"
    write_report(str(out), table, placement, "chain")
    dom, attrs, console, _ = open_in_chromium(out, tmp_path)
    check_page(dom, attrs, console)
    assert attrs["copies"] == "2"
    assert dom.count('class="link copy layout"') == 2 and 'stroke-dasharray="2 3"' in dom
    assert "NCHW-&gt;NHWC" in dom and "of which 2 layout conversions" in dom
