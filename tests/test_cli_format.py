"""``--format markdown|plain|rich`` for the table commands: markdown is GitHub tables whose every
cell and line renders as exactly its text (checked by rendering it with markdown-it, a
CommonMark parser with GitHub's tables)."""

import html
import io
import os
import re

import pytest
from markdown_it import MarkdownIt

from ep_host.cli import main
from ep_host.report import Output

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CNN = os.path.join(ROOT, "examples", "cnn.onnx")

TRICKY = ["a|b", "*not bold* _nor this_", "[a link](http://x)", "<b>tag</b>", "`code`",
          "back\\slash \\| pipe", "~~struck~~", "&copy; &amp;", "# heading", "- item",
          "1. first", "> quote", "===", "plain 2.5 us (100.0%)"]


def render(markdown):
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown)


def cells(rendered):
    return [html.unescape(c) for c in re.findall(r"<t[dh]>(.*?)</t[dh]>", rendered)]


def test_every_markdown_cell_renders_as_its_text():
    stream = io.StringIO()
    out = Output(stream, format="markdown")
    out.table("a | title *here*", ["text", "again"], [(t, t) for t in TRICKY])
    rendered = render(stream.getvalue())
    assert "<table>" in rendered
    assert cells(rendered) == ["text", "again", *(t for t in TRICKY for _ in range(2))]
    assert "<p>a | title *here*</p>" in html.unescape(rendered)


@pytest.mark.parametrize("text", TRICKY)
def test_every_markdown_line_renders_as_its_text(text):
    stream = io.StringIO()
    Output(stream, format="markdown").line(text)
    assert html.unescape(render(stream.getvalue())) == f"<p>{text}</p>\n"


def test_consecutive_lines_stay_apart():
    stream = io.StringIO()
    out = Output(stream, format="markdown")
    out.line("first line")
    out.line("second line")
    assert render(stream.getvalue()) == "<p>first line</p>\n<p>second line</p>\n"


def markdown_tables(text):
    """Each table's rows, as cells, from markdown a command printed."""
    return [[r for r in re.findall(r"<tr>(.*?)</tr>", t, re.S)]
            for t in re.findall(r"<table>(.*?)</table>", render(text), re.S)]


def test_explain_in_markdown_keeps_reason_codes_and_install_hints(capsys):
    assert main(["explain", CNN, "--providers", "cuda,cpu", "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    tables = markdown_tables(out)
    assert len(tables) == 2  # the answers and the summary per provider
    rendered = html.unescape(render(out))
    assert "│" not in out and "\x1b[" not in out
    if "cupy is not installed" in out:  # the decline above the table keeps its brackets
        assert "declined [device]" in rendered and "'ep-host-cuda[cuda12]'" in rendered
    assert "<td>*cpu</td>" in rendered


@pytest.mark.parametrize("argv", [
    ["providers"],
    ["place", CNN, "--providers", "cpu"],
    ["why", CNN, "conv1/Conv", "--providers", "cpu,example"],
])
def test_the_other_table_commands_print_markdown(argv, capsys):
    assert main([*argv, "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("|")]
    if argv[0] != "why":  # why is lines, no table
        assert lines and all(line.endswith("|") for line in lines)
        assert markdown_tables(out)
    assert "│" not in out and "\x1b[" not in out


def test_format_forces_rich_or_plain_whatever_the_stream(capsys):
    assert main(["providers", "--format", "rich"]) == 0
    assert "┃" in capsys.readouterr().out or "│" in capsys.readouterr().out
    assert main(["providers", "--format", "plain"]) == 0
    out = capsys.readouterr().out
    assert "│" not in out and "┃" not in out and "name" in out.splitlines()[1]


def test_an_unknown_format_is_an_argument_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["providers", "--format", "html"])
    assert exit_info.value.code == 2 and "invalid choice" in capsys.readouterr().err
