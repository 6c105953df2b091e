"""``ep-host completion SHELL`` prints a static completion script (shtab) that completes the
subcommands, their options and choices, and paths; neither it nor ``--help`` imports onnx."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What bash runs when the user presses TAB: the function the script registered for ep-host,
# called with the words typed so far; prints what it offers.
DRIVE = r"""
source "$1"; shift
spec=$(complete -p ep-host); fn=${spec#*-F }; fn=${fn%% *}
COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}
"$fn" ep-host "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
"""


def ep_host(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "ep_host", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory):
    result = ep_host("completion", "bash")
    assert result.returncode == 0, result.stderr
    path = tmp_path_factory.mktemp("completion") / "ep-host.bash"
    path.write_text(result.stdout)
    return path


def offered(script, *words, cwd=None):
    result = subprocess.run(["bash", "-c", DRIVE, "drive", str(script), "ep-host", *words],
                            capture_output=True, text=True, timeout=60, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_bash_completes_subcommands_options_and_choices(bash_script):
    assert offered(bash_script, "ex") == ["explain"]
    assert offered(bash_script, "c") == ["conformance", "calibrate", "completion"]
    assert offered(bash_script, "explain", "--only") == ["--only-provider"]
    assert sorted(offered(bash_script, "place", "m.onnx", "--strategy", "")) == [
        "greedy", "optimal", "priority"]
    assert offered(bash_script, "completion", "") == ["bash", "zsh", "tcsh"]


def test_bash_completes_the_model_as_a_path(bash_script):
    examples = os.path.join(ROOT, "examples")
    assert offered(bash_script, "explain", "cn", cwd=examples) == ["cnn.onnx"]


def test_renamed_options_are_not_offered(bash_script):
    assert offered(bash_script, "explain", "--provider") == ["--providers"]


def test_zsh_script_is_a_compdef_for_ep_host():
    result = ep_host("completion", "zsh")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("#compdef ep-host")
    assert "--only-provider" in result.stdout and "conformance" in result.stdout


def test_an_unknown_shell_is_an_argument_error():
    result = ep_host("completion", "fish-and-chips")
    assert result.returncode == 2 and "invalid choice" in result.stderr


@pytest.mark.parametrize("argv", [["--help"], ["explain", "--help"], ["completion", "bash"]])
def test_help_and_completion_import_neither_onnx_nor_what_they_do_not_need(argv):
    code = ("import sys\nfrom ep_host.cli import main\n"
            f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('onnx', 'ep_host_cpu', 'onnxruntime', 'rich', 'shtab')), file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    loaded = result.stderr.strip().splitlines()[-1]
    assert loaded == ("['shtab']" if argv[0] == "completion" else "[]")
