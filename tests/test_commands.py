"""The subcommands are units (diagnose/commands): found by the registry, and a new one is one module."""
from __future__ import annotations

import sys

import pytest

from diagnose import commands
from diagnose.cli import main

PROBE = '''
from diagnose.commands import common


class ProbeCommand(common.Command):
    """A subcommand that only this test has."""

    name = "probe"
    order = 60
    usage = "diagnose probe [--deep]"
    summary = "  diagnose probe          what this machine can capture\\n"

    def add_arguments(self, p):
        p.add_argument("--deep", action="store_true")

    def run(self, args):
        print("probed deep" if args.deep else "probed")
        return 0


COMMAND = ProbeCommand
'''


def test_the_registry_holds_every_subcommand_in_help_order():
    assert commands.names() == ("run", "demo", "rules", "diff", "schema")
    assert all(c.overview == commands.commands()["run"].overview for c in commands.commands().values())


@pytest.fixture
def probe_module(tmp_path, monkeypatch):
    """diagnose/commands as it would be with one more module in it, probe.py."""
    (tmp_path / "probe.py").write_text(PROBE)
    monkeypatch.setattr(commands, "__path__", [*commands.__path__, str(tmp_path)])
    commands.commands.cache_clear()
    yield
    commands.commands.cache_clear()
    sys.modules.pop("diagnose.commands.probe", None)


def test_a_new_subcommand_is_one_module(probe_module, capsys):
    assert main(["probe", "--deep"]) == 0
    assert capsys.readouterr().out == "probed deep\n"
    assert main(["prob"]) == 2
    assert "did you mean `diagnose probe`?" in capsys.readouterr().err
    assert main(["probe", "--deeep"]) == 2
    assert "did you mean '--deep'?" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "  diagnose probe          what this machine can capture\n" in capsys.readouterr().out
