"""The IAM policy for a guardrails daemon run on-prem with its own credentials (issue 32 item 4):
generated from what the registered rules declare (``coreburst burst guardrails-iam-policy``),
committed as docs/iam/onprem-guardrails.json, and linted by parliament
(https://github.com/duo-labs/parliament) with its community auditors, as the Lambda's role
policy is (tests/unit/infra/test_guardrails_component.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from parliament import analyze_policy_string
from typer.testing import CliRunner

from coreburst.burst import cli
from guardrails.rules import REGISTRY
from infra.guardrails_iam import is_read_action

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "docs" / "iam" / "onprem-guardrails.json"
ARGS = ["guardrails-iam-policy", "--stack", "burst", "--stack-dir", str(ROOT)]
# Writes on "*" are limited by the aws:ResourceTag/coreburst-stack condition on the same
# statement (asserted below); parliament's RESOURCE_STAR check does not read conditions.
KNOWN_FALSE_POSITIVES = {"RESOURCE_STAR"}


def _generate(*args: str) -> Any:
    return CliRunner().invoke(cli.app, list(args))


def test_the_committed_policy_is_the_generated_one() -> None:
    r = _generate(*ARGS)
    assert r.exit_code == 0, r.output
    assert COMMITTED.read_text() == r.output, (
        "docs/iam/onprem-guardrails.json is stale: run `coreburst burst guardrails-iam-policy "
        "--stack burst > docs/iam/onprem-guardrails.json`"
    )


def test_it_grants_what_every_rule_declares_and_scopes_writes_and_queues() -> None:
    doc = json.loads(COMMITTED.read_text())
    granted = {a for s in doc["Statement"] for a in s["Action"]}
    assert granted == {a for r in REGISTRY.values() for a in r.iam_actions}
    for stmt in doc["Statement"]:
        writes = [a for a in stmt["Action"] if not is_read_action(a)]
        if stmt["Resource"] == "*":
            assert not [a for a in stmt["Action"] if a.startswith("sqs:")], stmt
            if writes:
                assert stmt["Condition"] == {
                    "StringEquals": {"aws:ResourceTag/coreburst-stack": "burst"}
                }
    queues = {r for s in doc["Statement"] if s["Resource"] != "*" for r in s["Resource"]}
    assert queues == {
        "arn:aws:sqs:us-east-1:*:guardrails-spot-events-*",
        "arn:aws:sqs:us-east-1:*:guardrails-budget-events-*",
    }
    # what the Lambda needs and an on-prem daemon does not (SQLite state, webhook from a file)
    assert not [a for a in granted if a.split(":")[0] in ("dynamodb", "secretsmanager", "logs")]


def test_parliament_finds_nothing_but_the_tag_scoped_writes() -> None:
    findings = analyze_policy_string(COMMITTED.read_text(), include_community_auditors=True)
    assert [
        (f.issue, f.detail) for f in findings.findings if f.issue not in KNOWN_FALSE_POSITIVES
    ] == []
    # live: a queue grant on the wrong resource type is caught
    doc = json.loads(COMMITTED.read_text())
    doc["Statement"][-1]["Resource"] = ["arn:aws:s3:::guardrails-spot-events"]
    issues = {f.issue for f in analyze_policy_string(json.dumps(doc)).findings}
    assert "RESOURCE_MISMATCH" in issues


def test_one_rule_gets_its_own_actions_and_the_inventory() -> None:
    r = _generate(*ARGS, "--rule", "spot-interruption", "--account", "123456789012")
    doc = json.loads(r.output)
    granted = {a for s in doc["Statement"] for a in s["Action"]}
    wanted = set(REGISTRY["spot-interruption"].iam_actions) | set(REGISTRY["inventory"].iam_actions)
    assert granted == wanted
    assert doc["Statement"][-1]["Resource"] == [
        "arn:aws:sqs:us-east-1:123456789012:guardrails-spot-events-*"
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--account", "12"], "error: --account: '12' is not a 12-digit AWS account id (or *)"),
        (["--rule", "gpu-melter"], "error: --rule: unknown rule(s) gpu-melter; known: "),
        (["--stack", "nope"], "error: no stack 'nope': "),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    r = _generate(*ARGS, *args)
    assert r.exit_code == 2
    assert r.output.startswith(message) and r.output.count("\n") == 1, r.output
