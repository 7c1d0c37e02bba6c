"""Off a terminal (a pipe, `| tee`, a CI log) no command breaks a line mid-sentence (issue 24
item 4): Rich's 80-column default is not applied to output that is not a TTY. CliRunner's
stdout is not a TTY, as a pipe is not."""

from __future__ import annotations

import io
from pathlib import Path

from typer.testing import CliRunner

from coreburst.cli import app
from coreburst.common.console import PIPE_WIDTH, console

ROOT = Path(__file__).resolve().parents[2]


def test_plan_keeps_each_sentence_on_one_line() -> None:
    res = CliRunner().invoke(app, ["plan", "--stack", "burst", "--stack-dir", str(ROOT)])
    assert res.exit_code == 0, res.output
    (line,) = [x for x in res.output.splitlines() if "CloudWatch per day" in x]
    assert "GetMetricData" in line and line.rstrip().endswith("unverified)")


def test_a_long_line_and_a_wide_table_stay_whole_off_a_terminal() -> None:
    from rich.table import Table

    out = io.StringIO()
    c = console(file=out)
    c.print("word " * 60)
    t = Table("a" * 50, "b" * 50, "c" * 50)
    t.add_row("x" * 50, "y" * 50, "z" * 50)
    c.print(t)
    lines = out.getvalue().splitlines()
    assert lines[0].strip() == ("word " * 60).strip()
    assert any("x" * 50 in x and "z" * 50 in x for x in lines)
    assert max(len(x) for x in lines[1:]) <= PIPE_WIDTH  # the table fits the width
