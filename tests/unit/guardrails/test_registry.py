"""One registry drives what runs, what ``rules:`` may name, what the role allows and what the
layout table (docs/architecture.md) lists; each rule is a module of ``guardrails/rules/`` over
a ``RuleContext``, never the daemon; the budget relay is a rule like the others.

The budget relay's declared IAM actions are checked against the calls it makes on moto
(in-process), named as in botocore's SQS service model; IAM action = ``sqs:<Operation>``
("Actions defined by Amazon SQS", https://docs.aws.amazon.com/service-authorization/latest/
reference/list_amazonsqs.html).
"""

from __future__ import annotations

import ast
import copy
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from moto import mock_aws

from coreburst.sandbox.clocks import FakeClock
from guardrails.adapters.aws import Aws
from guardrails.configfile import RULE_NAMES, parse_config
from guardrails.daemon import Daemon
from guardrails.rules import REGISTRY
from guardrails.rules.budget_relay import BudgetRelayConfig
from guardrails.stores.sqlite import State

ROOT = Path(__file__).resolve().parents[3]
# The daemon's own rules, and the burst product's (beside the rest of burst).
RULE_HOMES = (ROOT / "guardrails" / "rules", ROOT / "coreburst" / "burst")
BUDGETS_TEXT = """AWS Budget Notification December 02, 2026
AWS Account 123456789012

Dear AWS Customer,

You requested that we alert you when the ACTUAL Cost associated with your budget-monthly budget
is greater than $40,000.00 for the current month.

Budget Name: budget-monthly
Budget Type: Cost
Budgeted Amount: $50,000.00
Alert Type: ACTUAL
Alert Threshold: > $40,000.00
ACTUAL Amount: $48,211.07
"""  # the shape AWS Budgets publishes ("Amazon SNS notifications" in the Budgets user guide)


def test_the_registry_is_the_config_vocabulary_in_run_order() -> None:
    assert sorted(REGISTRY) == sorted(RULE_NAMES)
    order = list(REGISTRY)
    assert order[0] == "inventory"  # every rule works on what it finds
    assert order.index("spend-limit") < order.index("budget-relay")  # relays the burn it records


def test_each_rule_is_its_own_module_and_the_readme_points_at_it() -> None:
    readme = (ROOT / "docs" / "architecture.md").read_text()  # the layout table
    for name, rule in REGISTRY.items():
        module = (rule.run or rule.section).__module__
        path = ROOT / (module.replace(".", "/") + ".py")
        assert path.is_file() and path.parent in RULE_HOMES, (name, path)
        rel = path.relative_to(ROOT).as_posix()
        assert re.search(rf"\| `{re.escape(name)}` \| `{re.escape(rel)}`", readme), (name, rel)


def _rule_modules() -> set[str]:
    """Every shipped module that defines a rule (a top-level ``RULE = Rule(...)``)."""
    out = set()
    for home in RULE_HOMES:
        for path in home.glob("*.py"):
            for node in ast.parse(path.read_text()).body:
                if (
                    isinstance(node, ast.Assign)
                    and [getattr(t, "id", None) for t in node.targets] == ["RULE"]
                    and isinstance(node.value, ast.Call)
                    and getattr(node.value.func, "id", None) == "Rule"
                ):
                    out.add(path.relative_to(ROOT).with_suffix("").as_posix().replace("/", "."))
    return out


def test_the_rules_registered_are_exactly_the_rule_modules_shipped() -> None:
    """One registration point (the entry points in pyproject.toml) for the daemon, the Lambda
    handler and the IAM generator: a rule module left out of it would never run, and an entry
    point without a module would fail every daemon at start."""
    from importlib.metadata import entry_points

    from guardrails.rules import ENTRY_POINT_GROUP

    declared = {ep.value.split(":")[0] for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert declared == _rule_modules()
    assert {(rule.run or rule.section).__module__ for rule in REGISTRY.values()} == declared
    assert len({rule.order for rule in REGISTRY.values()}) == len(REGISTRY)


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_no_rule_imports_the_daemon_and_the_config_imports_no_rule() -> None:
    for module in [*sorted(_rule_modules()), "guardrails.rules.base"]:
        path = ROOT / (module.replace(".", "/") + ".py")
        assert not {m for m in _imports(path) if m.startswith("guardrails.daemon")}, path
    assert not {m for m in _imports(ROOT / "guardrails" / "config.py") if "rules" in m}
    assert "getattr" not in (ROOT / "guardrails" / "rules" / "__init__.py").read_text()


def test_budget_relay_declares_exactly_the_sqs_calls_it_makes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    sqs_model = botocore.session.get_session().get_service_model("sqs")
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue = sqs.create_queue(QueueName="budget-events")["QueueUrl"]
        sqs.send_message(QueueUrl=queue, MessageBody=BUDGETS_TEXT)
        cfg = parse_config(
            f'rules: [budget-relay]\nstate: {{path: "{tmp_path}/s.db", '
            f'audit_log: "{tmp_path}/a.jsonl"}}\nmetrics_endpoint: {{enabled: false}}\n'
            f"budget_relay: {{queue_url: {json.dumps(queue)}}}\n",
            "g.yaml",
        )
        assert isinstance(cfg.budget_relay, BudgetRelayConfig) and cfg.budget_relay.queue_url
        called: list[str] = []
        session = boto3.session.Session(region_name="us-east-1")
        session.events.register(
            "before-call.sqs",
            lambda model, **_: called.append(model.name),  # type: ignore[misc]
        )
        state = State(cfg.state.path)
        d = Daemon(cfg, Aws(cfg.aws, session), state, clock=FakeClock(datetime.now(UTC)))
        try:
            report = d.run_cycle()
        finally:
            d.close()
            state.close()
        assert report.budget_notices == 1 and report.errors == []
        assert sqs.receive_message(QueueUrl=queue).get("Messages", []) == []
    assert all(op in sqs_model.operation_names for op in called)
    assert {f"sqs:{op}" for op in called} == set(REGISTRY["budget-relay"].iam_actions)


def test_the_role_grants_the_relay_only_on_the_stack_queue() -> None:
    from infra.offline import evaluate_config, load_stack_yaml

    ev = evaluate_config("prod", copy.deepcopy(load_stack_yaml("prod")))
    policy: dict[str, Any] = json.loads(ev.named("guardrails-role-policy").inputs["policy"])
    relay = set(REGISTRY["budget-relay"].iam_actions)
    for stmt in policy["Statement"]:
        acts = set(stmt["Action"] if isinstance(stmt["Action"], list) else [stmt["Action"]])
        if acts & relay:
            assert stmt["Resource"] != "*" and ":sqs:" in json.dumps(stmt["Resource"]), stmt
    granted = {a for s in policy["Statement"] for a in s["Action"]}
    assert relay <= granted
    config = json.loads(
        ev.named("guardrails-daemon").inputs["environment"]["variables"]["COREBURST_CONFIG_JSON"]
    )
    assert "budget-relay" in config["rules"]  # the deployed daemon runs what the role allows
