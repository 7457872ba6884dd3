"""The command line a new user expects: mistakes are exit 2 with a did-you-mean, colour follows
NO_COLOR / FORCE_COLOR, a failing workload shows its traceback, diff rows are ordered by size."""

from __future__ import annotations

import pytest

from diagnose.commands import main
from diagnose.model.config import load_config
from diagnose.base.errors import UsageError

from conftest import CAPTURES, ROOT

A, B = str(CAPTURES / "matmul_bf16"), str(CAPTURES / "matmul_fp32")


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_two_targets_without_diff_suggest_diff(capsys):
    assert main([A, B]) == 2
    assert f"`diagnose diff {A} {B}`" in _error(capsys)


def test_a_misspelt_subcommand_suggests_the_right_one(capsys):
    assert main(["dif", A, B]) == 2
    assert f"did you mean `diagnose diff {A} {B}`?" in _error(capsys)
    assert main(["rule"]) == 2
    assert "`diagnose rules`" in _error(capsys)


def test_a_file_named_like_a_subcommand_is_still_a_target(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dif").write_text("not a trace")
    assert main(["dif", "--no-html", "-o", str(tmp_path / "out")]) == 2
    assert "did you mean" not in _error(capsys)


@pytest.mark.parametrize(
    "argv, wrong, right",
    [
        ([A, "--fromat", "md"], "--fromat", "--format"),
        (["--fromat", "md", A], "--fromat", "--format"),
        ([A, "--jsn"], "--jsn", "--json"),
        (["diff", A, B, "--fail-on-regresion", "5"], "--fail-on-regresion", "--fail-on-regression"),
    ],
)
def test_a_misspelt_option_gets_the_nearest(argv, wrong, right, capsys):
    assert main(argv) == 2
    assert f"unknown option {wrong!r}; did you mean {right!r}?" in _error(capsys)


def test_an_extra_argument_after_a_trace_is_an_error(tmp_path, capsys):
    assert main([A, "junk.py", "-o", str(tmp_path / "o")]) == 2
    assert "unexpected argument(s)" in _error(capsys)


@pytest.mark.parametrize(
    "toml, says",
    [
        ('[tool.diagnose]\nfaill-on = "high"\n', "unknown key 'faill-on' in [tool.diagnose]; did you mean 'fail-on'?"),
        ("[tool.diagnose]\nthreshold = {}\n", "did you mean 'thresholds'?"),
        ('[tool.diagnose]\nfail-on = "hgh"\n', "[tool.diagnose] fail-on must be one of high, medium, low"),
        (
            '[tool.diagnose.thresholds]\n"launch-overhead.min_recoverable_shar" = 0.5\n',
            "[tool.diagnose.thresholds]: unknown threshold 'launch-overhead.min_recoverable_shar'; did you mean",
        ),
    ],
)
def test_pyproject_tool_table_is_validated(toml, says, tmp_path, monkeypatch, capsys):
    (tmp_path / "pyproject.toml").write_text(toml)
    monkeypatch.chdir(tmp_path)
    assert main([A, "-q", "--no-html"]) == 2
    err = _error(capsys)
    assert str(tmp_path / "pyproject.toml") in err and says in err


def test_pyproject_known_keys_still_load(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.diagnose]\nfail-on = "high"\n[tool.diagnose.thresholds]\n"launch-overhead.min_recoverable_share" = 0.5\n'
    )
    from diagnose.rulebook.engine import known_thresholds
    from diagnose.rules import ALL_RULES

    config = load_config(start=tmp_path, known=known_thresholds(ALL_RULES))
    assert config.fail_on == "high" and config.overrides == {"launch-overhead.min_recoverable_share": 0.5}
    with pytest.raises(UsageError, match="^unknown threshold 'nope.x'"):  # --set's own mistake names no file
        load_config(["nope.x=1"], start=tmp_path, known=known_thresholds(ALL_RULES))


@pytest.mark.parametrize(
    "env, tty, coloured",
    [
        ({}, True, True),
        ({"NO_COLOR": "1"}, True, False),
        ({"NO_COLOR": ""}, True, True),
        ({}, False, False),
        ({"FORCE_COLOR": "1"}, False, True),
        ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, False, False),
    ],
)
def test_colour_follows_no_color_and_force_color(env, tty, coloured, monkeypatch):
    from diagnose.report.richtext import colour

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert colour(tty) is coloured


def test_no_color_output_has_no_escape_codes_and_force_color_has(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FORCE_COLOR", "1")
    main([A, "--no-html", "-o", str(tmp_path / "a")])
    assert "\x1b[" in capsys.readouterr().out
    monkeypatch.setenv("NO_COLOR", "1")
    main([A, "--no-html", "-o", str(tmp_path / "b")])
    assert "\x1b[" not in capsys.readouterr().out


def test_a_failing_workloads_traceback_is_on_stderr(capsys):
    from diagnose.commands.run import print_workload_error

    here = str(ROOT / "diagnose" / "child" / "capture.py")
    tb = (
        "Traceback (most recent call last):\n"
        f'  File "{here}", line 263, in run_script\n    runpy.run_path(spec.path, run_name="__main__")\n'
        '  File "<frozen runpy>", line 291, in run_path\n'
        '  File "boom.py", line 5, in outer\n    inner()\n'
        '  File "boom.py", line 2, in inner\n    raise ValueError("boom")\nValueError: boom'
    )
    from diagnose.model.details import CaptureError

    print_workload_error(CaptureError(type="ValueError", message="boom", traceback=tb))
    err = capsys.readouterr().err
    assert 'File "boom.py", line 2, in inner' in err and "ValueError: boom" in err
    assert "capture.py" not in err and "frozen" not in err


def test_diff_rows_are_ordered_by_size_whatever_the_sign_and_shares_add_up():
    from types import SimpleNamespace

    from diagnose.report.diff_views import bucket_rows

    deltas = {"compute": 50.0, "launch": -400.0, "copy": 10.0, "host": 300.0, "a": 5.0, "b": -3.0, "c": 2.0}
    buckets = [
        SimpleNamespace(id=k, label=k, before_us=1000.0, after_us=1000.0 + d, delta_us=d)
        for k, d in sorted(deltas.items(), key=lambda kv: -kv[1])
    ]  # signed order, as attribution gives
    r = SimpleNamespace(buckets=buckets, step_delta_us=sum(deltas.values()))
    rows = bucket_rows(r, limit=4)
    assert [row["id"] for row in rows] == ["launch", "host", "compute", "rest"]
    assert rows[-1]["change"] == "+14.0 µs"
    assert sum(int(row["share"].rstrip("%").replace("−", "-")) for row in rows) == 100


def test_open_says_when_it_found_no_browser(tmp_path, monkeypatch, capsys):
    import webbrowser

    monkeypatch.setattr(webbrowser, "open", lambda url: False)
    assert main([A, "--open", "-q", "-o", str(tmp_path / "o")]) == 0
    assert "--open: no browser found" in _error(capsys)


def test_rules_one_rule_and_formats(capsys):
    import json

    from diagnose.rules import ALL_RULES

    assert main(["rules", "sync-stall"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("sync-stall: ") and "--set sync-stall.min_syncs_per_step" in out and "**Signal.**" in out
    assert main(["rules", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in data["rules"]] == [r.id for r in ALL_RULES] and data["timeline"]
    assert main(["rules", "launch-overhead", "--format", "md"]) == 0
    assert "| `min_recoverable_share` | 0.25 |" in capsys.readouterr().out
    assert main(["rules", "--format", "md"]) == 0
    assert capsys.readouterr().out.count("\n| `") == len(ALL_RULES)
    assert main(["rules", "sync-stal"]) == 2
    assert "did you mean 'sync-stall'?" in _error(capsys)


def test_rules_table_never_breaks_a_name_at_80_columns():
    import io

    from rich.console import Console

    from diagnose.metrics.timeline import PARAMETERS
    from diagnose.rules import ALL_RULES
    from diagnose.ruleset.rules_table import print_rules

    buffer = io.StringIO()
    print_rules(Console(file=buffer, width=80, highlight=False))
    text = buffer.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    names = [r.id for r in ALL_RULES] + [t.name for r in ALL_RULES for t in r.thresholds] + [t.name for t in PARAMETERS]
    assert [n for n in names if n not in text] == []
