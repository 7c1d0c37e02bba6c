"""docs/burst.md's "First burst on a real account" walk-through (issue 32): its steps come in the
order a deployment needs them, and every `coreburst` command it gives exists with the options
it names (the commands themselves run in the tests of each part: check, install, slurm-conf,
status, plan, iam-policy)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from coreburst.cli import PRODUCTS, _load

DOC = Path(__file__).resolve().parents[3] / "docs" / "burst.md"


def _walkthrough() -> str:
    text = DOC.read_text()
    start = text.index("## First burst on a real account\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def _commands(section: str) -> list[list[str]]:
    """Every `coreburst ...` command in the section's inline code, as argv without the program
    name (the text between backticks may wrap over lines)."""
    out = []
    for raw in re.findall(r"`([^`]+)`", section.replace("\n", " ")):
        code = re.sub(r"^sudo /opt/coreburst/bin/", "", re.sub(r"\s+", " ", raw).strip())
        if code.startswith("coreburst ") and " " in code[len("coreburst ") :]:
            out.append(shlex.split(re.sub(r"<[^>]*>", "PLACEHOLDER", code))[1:])
    return out


def test_the_steps_come_in_the_order_a_deployment_needs() -> None:
    steps = re.findall(r"^\s*\d+\. \*\*([^*]+)\*\*", _walkthrough(), re.M)
    assert steps == [
        "Network",
        "Image",
        "Preflight, before `pulumi up`",
        "`pulumi up --stack burst`",
        "Preflight again",
        "Controller install",
        "`slurm-conf`, then install it",
        "Preflight on the controller",
        "A test job",
        "Status",
    ]


def test_it_lists_what_only_a_real_account_can_confirm() -> None:
    assert "What only a real account and a real controller can confirm" in _walkthrough()


@pytest.mark.parametrize("argv", _commands(_walkthrough()), ids=lambda a: " ".join(a[:2]))
def test_every_command_exists_with_the_options_it_names(argv: list[str]) -> None:
    product, *rest = argv
    module, attr, _ = PRODUCTS[product]
    cmd: Any = _load(product, module, attr)
    while hasattr(cmd, "get_command") and rest and not rest[0].startswith("-"):
        sub = cmd.get_command(None, rest[0])
        assert sub is not None, f"coreburst {product}: no command {rest[0]!r}"
        cmd, rest = sub, rest[1:]
    known = {o for p in cmd.params for o in p.opts + p.secondary_opts}
    named = {a.split("=", 1)[0] for a in rest if a.startswith("--")}
    assert named <= known, f"{' '.join(argv)}: unknown {sorted(named - known)}"


def test_the_walkthrough_names_each_command_it_needs() -> None:
    names = {" ".join(a[:2]) for a in _commands(_walkthrough())}
    assert {
        "plan --stack",
        "burst check",
        "burst iam-policy",
        "burst guardrails-iam-policy",
        "burst slurm-conf",
        "burst install",
        "burst status",
    } <= names
