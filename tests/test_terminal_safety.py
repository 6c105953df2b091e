"""What reaches the terminal: names and reasons print literally (control characters escaped, no
rich markup read in them), piped and on a pseudo-terminal; long reasons are capped; a closed pipe
ends quietly."""

import json
import os
import pty
import re
import select
import subprocess
import sys
import time

import onnx
import pytest
from hostkit import make_model, write_distribution
from onnx import TensorProto, helper

from ep_host.text import capped, message, printable, shown

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CNN = os.path.join(ROOT, "examples", "cnn.onnx")

OSC_TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"
RED = "\x1b[31m"
RLO = "\u202e"
RAW = (OSC_TITLE, CLEAR, RED, RLO, "\x07", "\x9b", "\x08")

HOSTILE_REASON = (f"{OSC_TITLE}{CLEAR}{RED}red\rover\nforged  row{RLO}evil\x9b\x08 "
                  "pip install 'ep-host-evil[cuda12]'")

EVIL = f"""
from ep_host import Device, KernelMatch, ProviderInfo, hookimpl

@hookimpl
def ep_host_provider_info():
    return ProviderInfo(name="evil", device=Device(name={"cpu" + CLEAR!r}, kind="cpu"))

@hookimpl
def ep_host_supports_op(node, context):
    return KernelMatch.unsupported({HOSTILE_REASON!r}, code="op")
"""

HUGE = """
from ep_host import ProviderInfo, hookimpl

@hookimpl
def ep_host_provider_info():
    return ProviderInfo(name="huge", available=False, reason="cannot run: " + "x" * 10_000_000)

@hookimpl
def ep_host_supports_op(node, context):
    return None
"""

HOSTILE_NODE = f"relu{OSC_TITLE}[op]"
FORGED_NODE = "add\n*cpu  forged row"
HOSTILE_INPUT = f"x{CLEAR}"
HOSTILE_OUTPUT = f"out{RLO}evil"


@pytest.fixture
def site(tmp_path):
    root = tmp_path / "site"
    write_distribution(root, "ep-evil", {"evil": "evil_mod"}, {"evil_mod": EVIL})
    write_distribution(root, "ep-huge", {"huge": "huge_mod"}, {"huge_mod": HUGE})
    return root


@pytest.fixture
def hostile_model(tmp_path):
    model = make_model(
        [helper.make_node("Add", [HOSTILE_INPUT, "y"], ["s"], name=FORGED_NODE),
         helper.make_node("Relu", ["s"], [HOSTILE_OUTPUT], name=HOSTILE_NODE)],
        [(HOSTILE_INPUT, TensorProto.FLOAT, [2, 3]), ("y", TensorProto.FLOAT, [2, 3])],
        [(HOSTILE_OUTPUT, TensorProto.FLOAT, [2, 3])])
    model.graph.name = f"graph{RED}"
    path = tmp_path / "hostile.onnx"
    onnx.save(model, path)
    return str(path)


@pytest.fixture
def chain_model(tmp_path):
    """50 Relus in a chain."""
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"relu{i}")
             for i in range(50)]
    model = make_model(nodes, [("t0", TensorProto.FLOAT, [4])], [("t50", TensorProto.FLOAT, [4])])
    path = tmp_path / "chain.onnx"
    onnx.save(model, path)
    return str(path)


def _env(site=None, **extra):
    env = dict(os.environ, **extra)
    paths = [str(site)] if site else []
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in sys.path if p])
    env.pop("EP_HOST_PROVIDERS", None)
    return env


def ep_host(*args, site=None, **env):
    return subprocess.run([sys.executable, "-m", "ep_host", *args], capture_output=True,
                          text=True, env=_env(site, **env), timeout=300)


def on_pty(*args, site=None, timeout=300):
    """Run the command with stdin, stdout and stderr on a pseudo-terminal, as a user's shell
    would (TERM=xterm, 200 columns); its exit code and everything it wrote."""
    master, slave = pty.openpty()
    env = _env(site, TERM="xterm", COLUMNS="200", LINES="50")
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "ep_host", *args], stdin=slave, stdout=slave,
                            stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed its side
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
    code = proc.wait(timeout=30)
    return code, b"".join(chunks).decode("utf-8", "replace")


def assert_no_raw_controls(text):
    for raw in RAW:
        assert raw not in text, f"{raw!r} reached the output raw"


# ---------------------------------------------------------------------------------------------
# the text helpers
# ---------------------------------------------------------------------------------------------


def test_printable_shows_every_control_character_as_an_escape():
    assert printable(OSC_TITLE) == "\\x1b]0;pwned\\x07"
    assert printable("a\nb\rc\td") == "a\\nb\\rc\\td"
    assert printable(f"x{RLO}y\u2066z\u2028") == "x\\u202ey\\u2066z\\u2028"
    assert printable("\x9b2J\x7f\x00") == "\\x9b2J\\x7f\\x00"
    plain = "conv1/Conv [op] pip install 'ep-host-cuda[cuda12]' déjà 日本"
    assert printable(plain) == plain


def test_capped_counts_what_it_leaves_out():
    assert capped("abc", 5) == "abc"
    assert capped("x" * 1200, 500) == "x" * 500 + "... (700 more characters)"
    assert len(shown("\x1b" * 10_000)) < 3000


def test_message_keeps_lines_but_escapes_and_caps_each():
    text = message(f"first {CLEAR}\n  second\r" + "y" * 5000)
    first, second = text.split("\n")
    assert first == "first \\x1b[2J"
    assert second.startswith("  second\\ryyy") and "more characters" in second


# ---------------------------------------------------------------------------------------------
# piped
# ---------------------------------------------------------------------------------------------


def test_explain_place_and_why_escape_model_names_when_piped(hostile_model):
    for args in (["explain", hostile_model], ["place", hostile_model],
                 ["why", hostile_model, HOSTILE_NODE]):
        result = ep_host(*args, "--providers", "cpu")
        assert result.returncode == 0, result.stderr
        assert_no_raw_controls(result.stdout + result.stderr)
        assert "\\x1b]0;pwned\\x07[op]" in result.stdout
    explain = ep_host("explain", hostile_model, "--providers", "cpu").stdout
    # the newline in a node name cannot forge a row: the name stays on its own line
    assert "add\\n*cpu  forged row" in explain
    assert not any(line.startswith("*cpu  forged row") for line in explain.splitlines())


def test_a_providers_hostile_reason_is_escaped_in_every_command(site, hostile_model):
    for args in (["explain", hostile_model], ["why", hostile_model, HOSTILE_NODE],
                 ["providers"]):
        result = ep_host(*args, site=site)
        assert result.returncode == 0, result.stderr
        assert_no_raw_controls(result.stdout + result.stderr)
    explain = ep_host("explain", hostile_model, site=site).stdout
    assert "declined [op]: \\x1b]0;pwned\\x07\\x1b[2J\\x1b[31mred\\rover\\nforged" in explain
    assert "pip install 'ep-host-evil[cuda12]'" in explain


def test_json_keeps_names_and_reasons_exact(site, hostile_model):
    result = ep_host("explain", hostile_model, "--json", site=site)
    assert result.returncode == 0, result.stderr
    assert_no_raw_controls(result.stdout)  # json escapes them itself
    data = json.loads(result.stdout)
    names = [n["name"] for n in data["nodes"]]
    assert FORGED_NODE in names and HOSTILE_NODE in names
    answer = next(n for n in data["nodes"] if n["name"] == HOSTILE_NODE)["answers"]["evil"]
    assert answer["reason"] == HOSTILE_REASON
    why = json.loads(ep_host("why", hostile_model, HOSTILE_NODE, "--json", site=site).stdout)
    assert why["node"] == HOSTILE_NODE
    assert {v["provider"]: v for v in why["verdicts"]}["evil"]["reason"] == HOSTILE_REASON


def test_error_messages_escape_names(tmp_path):
    model = make_model([helper.make_node(f"Op{CLEAR}", ["x"], ["y"], name=f"n{OSC_TITLE}",
                                         domain="evil.domain")],
                       [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])],
                       domains=[("evil.domain", 1)])
    path = tmp_path / "unplaceable.onnx"
    onnx.save(model, path)
    result = ep_host("explain", str(path), "--providers", "cpu")
    assert result.returncode == 1
    assert "cannot be placed" in result.stderr and "Traceback" not in result.stderr
    assert_no_raw_controls(result.stdout + result.stderr)
    assert "n\\x1b]0;pwned\\x07" in result.stderr
    result = ep_host("why", str(path), f"missing{CLEAR}", "--providers", "cpu")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert_no_raw_controls(result.stdout + result.stderr)


# ---------------------------------------------------------------------------------------------
# unbounded text
# ---------------------------------------------------------------------------------------------


def test_a_ten_megabyte_reason_is_capped_in_the_table_and_the_json(site, chain_model):
    result = ep_host("explain", chain_model, "--all", site=site)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout) < 200_000
    cells = re.findall(r"declined \[device\]: (.*)cannot run: (x+)\.\.\. \((\d+) more "
                       r"characters\)", result.stdout)
    assert len(cells) == 50
    for prefix, shown_x, left_out in cells:
        assert len(prefix) + len("cannot run: ") + len(shown_x) == 500
        assert len(shown_x) + int(left_out) == 10_000_000
    result = ep_host("explain", chain_model, "--json", site=site)
    data = json.loads(result.stdout)
    assert len(result.stdout) < 500_000
    reasons = [n["answers"]["huge"]["reason"] for n in data["nodes"]]
    assert len(reasons) == 50
    assert all(re.fullmatch(r".*cannot run: x+\.\.\. \(\d+ more characters\)", r)
               and len(r) < 600 for r in reasons)


def test_a_ten_megabyte_fault_is_capped_in_providers(site):
    for args in (["providers"], ["providers", "--json"]):
        result = ep_host(*args, site=site)
        assert result.returncode == 0, result.stderr
        assert len(result.stdout) < 20_000
        assert "more characters)" in result.stdout
    records = {r["name"]: r for r in json.loads(ep_host("providers", "--json", site=site).stdout)}
    assert records["huge"]["status"] == "unavailable"
    assert records["huge"]["fault"].startswith("cannot run: xxx")


# ---------------------------------------------------------------------------------------------
# on a terminal
# ---------------------------------------------------------------------------------------------


def test_reason_codes_and_install_hints_print_literally_on_a_terminal(site, hostile_model):
    code, out = on_pty("explain", hostile_model, site=site)
    assert code == 0, out
    assert "declined [op]:" in out
    assert "pip install 'ep-host-evil[cuda12]'" in out
    assert "\\x1b]0;pwned\\x07[op]" in out  # the node's name, escaped, its [op] kept
    assert "│" in out  # it is rich's table, not the piped text
    for raw in (OSC_TITLE, CLEAR, RED, RLO, "\x07", "\x9b"):
        assert raw not in out


def test_providers_and_why_print_literally_on_a_terminal(site, hostile_model):
    code, out = on_pty("providers", site=site)
    assert code == 0, out
    assert "cannot run:" in out and "more characters)" in out
    assert CLEAR not in out and "cpu\\x1b[2J" in out  # the evil provider's device, escaped
    code, out = on_pty("why", hostile_model, HOSTILE_NODE, "--only-provider", "evil",
                       site=site)
    assert code == 0, out
    assert "evil: declined [op]: \\x1b]0;pwned" in out
    assert OSC_TITLE not in out and RLO not in out


# ---------------------------------------------------------------------------------------------
# a closed pipe
# ---------------------------------------------------------------------------------------------


def _with_closed_stdout(*args):
    """Run with stdout a pipe whose reader is already gone: every write fails with EPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run([sys.executable, "-m", "ep_host", *args], stdout=write_end,
                                stderr=subprocess.PIPE, text=True, env=_env(), timeout=300)
    finally:
        os.close(write_end)
    return result


@pytest.mark.parametrize("args", [["explain", CNN], ["place", CNN], ["providers"],
                                  ["explain", CNN, "--json"]])
def test_a_closed_pipe_ends_quietly(args):
    result = _with_closed_stdout(*args)
    assert result.returncode == 141, result.stderr
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr
    assert result.stderr == ""


def test_piping_into_head_prints_the_first_line_and_no_traceback(tmp_path):
    """More output than a pipe holds, so the command is still writing when head exits."""
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"relu{i}")
             for i in range(1500)]
    onnx.save(make_model(nodes, [("t0", TensorProto.FLOAT, [4])],
                         [("t1500", TensorProto.FLOAT, [4])]), tmp_path / "long.onnx")
    command = (f"{sys.executable} -m ep_host explain long.onnx --all 2>err.txt | head -1; "
               "cat err.txt")
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=_env(),
                            timeout=300, cwd=tmp_path)
    assert result.stdout.splitlines()[0].startswith("Every provider's answer")
    assert len(result.stdout.splitlines()) == 1, result.stdout[-2000:]
