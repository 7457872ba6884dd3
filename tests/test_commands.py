"""The subcommands are units (diagnose/commands): found by the registry, and a new one is one module."""

from __future__ import annotations

import sys

import pytest

from diagnose import commands
from diagnose.commands import main

CENSUS = '''
from diagnose.commands import common


class CensusCommand(common.Command):
    """A subcommand that only this test has."""

    name = "census"
    order = 70
    usage = "diagnose census [--deep]"
    summary = "  diagnose census         the models a workload holds\\n"

    def add_arguments(self, p):
        p.add_argument("--deep", action="store_true")

    def run(self, args):
        print("counted deep" if args.deep else "counted")
        return 0


COMMAND = CensusCommand
'''


def test_the_registry_holds_every_subcommand_in_help_order():
    assert commands.names() == ("run", "demo", "rules", "diff", "schema", "probe")
    assert all(c.overview == commands.commands()["run"].overview for c in commands.commands().values())


@pytest.fixture
def census_module(tmp_path, monkeypatch):
    """diagnose/commands as it would be with one more module in it, census.py."""
    (tmp_path / "census.py").write_text(CENSUS)
    monkeypatch.setattr(commands, "__path__", [*commands.__path__, str(tmp_path)])
    commands.commands.cache_clear()
    yield
    commands.commands.cache_clear()
    sys.modules.pop("diagnose.commands.census", None)


def test_a_new_subcommand_is_one_module(census_module, capsys):
    assert main(["census", "--deep"]) == 0
    assert capsys.readouterr().out == "counted deep\n"
    assert main(["censsu"]) == 2
    assert "did you mean `diagnose census`?" in capsys.readouterr().err
    assert main(["census", "--deeep"]) == 2
    assert "did you mean '--deep'?" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "  diagnose census         the models a workload holds\n" in capsys.readouterr().out
