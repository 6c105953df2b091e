"""Each subcommand's --help page ends with examples, and every example parses."""

import os
import shlex
import subprocess
import sys

import pytest

from ep_host.cli import SUBCOMMAND_EXAMPLES, build_parser, main

SUBCOMMANDS = ["explain", "place", "why", "run", "report", "providers", "calibrate", "completion",
               "conformance"]


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_each_subcommand_help_ends_with_examples(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    epilog = out.split("\nexamples:\n", 1)[1]
    examples = [line.strip() for line in epilog.splitlines() if line.strip()]
    assert examples and all(line.startswith(f"ep-host {command}") for line in examples)


def test_every_example_parses_to_its_subcommand(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples naming output files and folders check their folder
    parser = build_parser()
    assert set(SUBCOMMAND_EXAMPLES) == set(SUBCOMMANDS)
    for command, lines in SUBCOMMAND_EXAMPLES.items():
        for line in lines:
            argv = shlex.split(line)
            assert argv[:2] == ["ep-host", command]
            assert parser.parse_args(argv[1:]).command == command, line


def test_descriptions_stay_wrapped_on_the_help_page():
    result = subprocess.run([sys.executable, "-m", "ep_host", "calibrate", "--help"],
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert "examples:\n  ep-host calibrate\n" in result.stdout
