"""Every stack file shipped at the repository root plans and passes its policies as shipped
(the burst example once failed at once: its node join was missing)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from coreburst.cli import app

ROOT = Path(__file__).resolve().parents[3]
STACKS = sorted(p.name.split(".")[1] for p in ROOT.glob("Pulumi.*.yaml"))


def test_the_shipped_stacks_are_found() -> None:
    assert {"dev", "prod", "burst"} <= set(STACKS)


@pytest.mark.parametrize("stack", STACKS)
def test_a_shipped_stack_plans(stack: str) -> None:
    res = CliRunner().invoke(app, ["plan", "--stack", stack, "--stack-dir", str(ROOT)])
    assert res.exit_code == 0, res.output
    assert "policies: PASS" in res.output
