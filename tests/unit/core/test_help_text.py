"""Help text reads as sentences: Typer's rich help (the mode of every product but
``guardrails``, which uses click's plain help) prints a docstring's line breaks as they are, so
a paragraph broken across source lines comes out broken mid-sentence ("the idle cost,\\n and
burst spend"), in a command's own help and in its group's command list. (Click's plain help
re-wraps paragraphs: guardrails' docstrings may keep their line breaks.)"""

from __future__ import annotations

from typing import Any

from typer.testing import CliRunner

from coreburst.cli import PRODUCTS, _load
from coreburst.cli import app as root


def _broken(cmd: Any, path: str, mode: str | None) -> list[str]:
    mode = getattr(cmd, "rich_markup_mode", mode)
    out = []
    if hasattr(cmd, "list_commands"):
        for name in cmd.list_commands(None):
            out += _broken(cmd.get_command(None, name), f"{path} {name}", mode)
    for para in (cmd.help or "").strip().split("\n\n"):
        # \b marks a paragraph click prints as written (examples, lists)
        if mode == "rich" and "\n" in para and not para.startswith("\b"):
            out.append(f"{path}: {para[:60]!r}")
    return out


def test_no_command_help_paragraph_has_a_hard_line_break() -> None:
    broken = [b for name, (m, a, _) in PRODUCTS.items() for b in _broken(_load(name, m, a),
              f"coreburst {name}", None)]  # fmt: skip
    assert broken == []


def test_the_core_command_list_shows_whole_sentences() -> None:
    r = CliRunner().invoke(
        root, ["core", "--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"}
    )
    assert r.exit_code == 0, r.output
    lines = [" ".join(x.strip("│ ").split()) for x in r.output.splitlines()]
    assert (
        "report Allocated versus measured GPU-hours per team and user, their idle cost and "
        "burst spend."
    ) in lines
    assert (
        "price The owned $/GPU-hour of a TCO scenario, and the config line that gives it to the "
        "daemon."
    ) in lines
