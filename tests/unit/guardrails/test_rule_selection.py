"""One setting, ``coreburst:guardrails.rules``, drives both the deployed role's permissions and
which rules the daemon runs: a rule left out neither runs nor fails every cycle for want of a
permission.

The stack is evaluated under Pulumi mocks (infra.offline); the daemon then runs one cycle with
the exact config the stack put in ``COREBURST_CONFIG_JSON`` against moto (in-process), and
every AWS call it makes is checked against the IAM policy the stack generated. Operation names
map to IAM actions as ``<service>:<Operation>`` for these services, per the Service
Authorization Reference (https://docs.aws.amazon.com/service-authorization/latest/reference/
reference_policies_actions-resources-contextkeys.html).
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from coreburst.sandbox.clocks import FakeClock
from coreburst.sandbox.emulator import launch
from guardrails.adapters.aws import Aws
from guardrails.cli import app
from guardrails.configfile import RULE_NAMES, parse_config
from guardrails.daemon import Daemon
from guardrails.rules import REGISTRY
from guardrails.stores.sqlite import State
from infra.offline import evaluate_config, load_stack_yaml

SPEND_EGRESS_ONLY = {
    "ce:GetCostAndUsage",
    "fsx:DescribeFileSystems",
    "directconnect:DescribeConnections",
    "ec2:DescribeNatGateways",
    "autoscaling:UpdateAutoScalingGroup",
}


def deployed(rules: list[str] | None) -> tuple[dict[str, Any], set[str]]:
    """The daemon config and the granted actions of the prod stack with ``rules``."""
    stack = copy.deepcopy(load_stack_yaml("prod"))
    if rules is not None:
        stack["coreburst:guardrails"]["rules"] = rules
    ev = evaluate_config("prod", stack)
    env = ev.named("guardrails-daemon").inputs["environment"]["variables"]
    policy = json.loads(ev.named("guardrails-role-policy").inputs["policy"])
    granted = {
        a
        for s in policy["Statement"]
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    return json.loads(env["COREBURST_CONFIG_JSON"]), granted


@pytest.fixture
def aws_region() -> str:
    """The default region ``aws_env`` (tests/unit/conftest.py) sets here: the prod stack's."""
    return "us-east-2"


def one_cycle(daemon_config: dict[str, Any], tmp: Path) -> tuple[set[str], list[str]]:
    """Run the deployed config for one cycle; the IAM actions it called and its errors."""
    cfg = parse_config(
        json.dumps(
            {
                **daemon_config,
                "state": {"path": str(tmp / "s.db"), "audit_log": str(tmp / "audit.jsonl")},
            }
        ),
        "lambda env",
    )
    region = cfg.regions[0]
    launch(boto3.client("ec2", region_name=region), "p5.48xlarge", {"owner": "ml"}, count=2)
    called: set[str] = set()
    session = boto3.session.Session(region_name=region)

    def record(model: Any, **_: Any) -> None:
        called.add(f"{model.service_model.service_name}:{model.name}")

    session.events.register("before-call", record)
    state = State(cfg.state.path)
    d = Daemon(cfg, Aws(cfg.aws, session), state, clock=FakeClock(datetime.now(UTC)))
    try:
        report = d.run_cycle()
    finally:
        d.close()
        state.close()
    return called, report.errors


def test_a_stack_with_only_idle_reclaim_runs_only_it(aws_env: None, tmp_path: Path) -> None:
    config, granted = deployed(["idle-reclaim"])
    assert config["rules"] == ["idle-reclaim", "inventory"]
    assert not granted & SPEND_EGRESS_ONLY  # the role lacks what spend and egress need
    assert {"ec2:DescribeInstances", "ec2:StopInstances", "cloudwatch:GetMetricData"} <= granted
    called, errors = one_cycle(config, tmp_path)
    # the idle rule reads the per-instance rollup: GetMetricData, no ListMetrics needed
    assert "ec2:DescribeInstances" in called and "cloudwatch:GetMetricData" in called
    assert not called & SPEND_EGRESS_ONLY, called
    assert called <= granted, called - granted  # nothing it does would be denied
    assert errors == []


def test_the_default_stack_runs_every_rule(aws_env: None, tmp_path: Path) -> None:
    """The contrast that makes the test above mean something: with every rule selected, the
    spend and egress calls are made (and granted)."""
    config, granted = deployed(None)
    assert config["rules"] == sorted(REGISTRY)
    called, _ = one_cycle(config, tmp_path)
    assert {"fsx:DescribeFileSystems", "ec2:DescribeNatGateways", "ce:GetCostAndUsage"} <= called
    assert called <= granted, called - granted


def test_check_config_rejects_an_unknown_rule_in_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "g.yaml"
    cfg.write_text("rules: [idle-reclaim, gpu-melter]\n")
    r = CliRunner().invoke(app, ["check-config", str(cfg)])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "rules" in lines[0] and "unknown rule(s) gpu-melter" in lines[0]
    assert "known: " + ", ".join(sorted(RULE_NAMES)) in lines[0]  # every rule, sorted
    cfg.write_text("rules: [spend-limit]\n")
    ok = CliRunner().invoke(app, ["check-config", str(cfg)])
    assert ok.exit_code == 0 and "rules spend-limit;" in ok.output
