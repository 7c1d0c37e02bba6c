"""The ``burst-health`` rule: EC2 scheduled events and impaired status checks drain burst
nodes and replace them before the event.

The DescribeInstanceStatus answers are the shape the EC2 API reference documents
("DescribeInstanceStatus", "InstanceStatus", "InstanceStatusEvent": Code, Description,
InstanceEventId, NotBefore, NotAfter; a finished event's Description starts "[Completed]"),
made up here and checked against botocore's EC2 service model by its Stubber. moto 5.2.5
answers DescribeInstanceStatus with no Events and every check "ok", so in the daemon test the
events are put into moto's answer by a botocore ``after-call`` hook. Slurm is the fake
scontrol of test_burst_reconcile.py (made here, not Slurm); the real slurmctld is in
tests/integration/burst/test_health_gate.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from coreburst.burst.ec2_events import BurstHealthConfig, Issue, issues, plan
from coreburst.sandbox.clocks import FakeClock
from guardrails.adapters.aws import Aws
from guardrails.adapters.slurm import parse_nodes
from guardrails.config import ConfigError
from guardrails.configfile import parse_config
from guardrails.daemon import Daemon
from guardrails.rules import REGISTRY
from guardrails.stores.sqlite import State
from infra.guardrails_iam import policy_document
from tests.helpers.burst import launch
from tests.helpers.slurm_fakes import FakeSlurm, node_line

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
P = BurstHealthConfig(enabled=True)  # event_margin 30m, impaired_grace 10m


def retirement(not_before: datetime, desc: str = "The instance is running on degraded hardware"):  # type: ignore[no-untyped-def]
    return {
        "Code": "instance-retirement",
        "Description": desc,
        "InstanceEventId": "instance-event-0d59937288b749b32",
        "NotBefore": not_before,
        "NotAfter": not_before + timedelta(days=1),
    }


def status(iid: str, events: list[dict[str, Any]], system: str = "ok", inst: str = "ok") -> dict:  # type: ignore[type-arg]
    return {
        "InstanceId": iid,
        "AvailabilityZone": "us-east-1a",
        "InstanceState": {"Code": 16, "Name": "running"},
        "Events": events,
        "SystemStatus": {
            "Status": system,
            "Details": [{"Name": "reachability", "Status": "passed"}],
        },
        "InstanceStatus": {
            "Status": inst,
            "Details": [{"Name": "reachability", "Status": "passed"}],
        },
    }


def documented(statuses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``statuses`` through botocore's Stubber: it refuses a response the EC2 model does not
    allow, so the made-up answers have EC2's documented shape."""
    ec2 = boto3.client(
        "ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    with Stubber(ec2) as stub:
        stub.add_response("describe_instance_status", {"InstanceStatuses": statuses})
        return list(ec2.describe_instance_status(InstanceIds=["i-1"])["InstanceStatuses"])


def test_events_and_impaired_checks_become_issues_with_deadlines() -> None:
    nb = NOW + timedelta(days=2)
    got = documented(
        [
            status("i-1", [retirement(nb)]),
            status("i-2", [retirement(NOW - timedelta(days=1), "[Completed] done")]),
            status("i-3", [], system="impaired"),
            status("i-4", [], inst="insufficient-data"),
            status("i-9", [retirement(nb)]),  # not a burst instance: ignored
        ]
    )
    since: dict[str, datetime] = {"i-3": NOW - timedelta(minutes=4), "i-gone": NOW}
    found = issues(got, {"i-1": "od-1", "i-2": "od-2", "i-3": "sp-1", "i-4": "cb-1"}, NOW, P, since)
    assert [(i.node, i.key, i.deadline) for i in found] == [
        ("od-1", "instance-event-0d59937288b749b32", nb - timedelta(minutes=30)),
        ("sp-1", "impaired", NOW + timedelta(minutes=6)),  # first seen 4 min ago, 10 min grace
    ]
    assert found[0].why == (
        "coreburst: EC2 instance-retirement not before 2026-12-06 12:00Z on i-1 (The instance is "
        "running on degraded hardware)"
    )
    assert found[1].why.startswith("coreburst: EC2 system status check impaired on i-3 since")
    assert since == {"i-3": NOW - timedelta(minutes=4)}  # i-gone is no longer impaired


def _issue(node: str, deadline: datetime) -> Issue:
    return Issue("i-" + node, node, "e", f"why {node}", deadline)


def test_plan_drains_first_then_forces_a_busy_node_at_the_deadline() -> None:
    nodes = parse_nodes(
        "\n".join(
            [
                node_line("od-1", "MIXED+CLOUD"),
                node_line("od-2", "MIXED+CLOUD+DRAIN+POWER_DOWN"),
                node_line("sp-1", "IDLE+CLOUD+POWERING_DOWN"),
                node_line("core1", "ALLOCATED"),
                node_line("cb-1", "ALLOCATED+CLOUD+DRAIN+POWER_DOWN"),
            ]
        )
    )
    later, past = NOW + timedelta(hours=1), NOW - timedelta(minutes=1)
    steps, left = plan(
        [
            _issue("od-1", later),
            _issue("od-2", later),  # drained and waiting for its job: nothing new
            _issue("sp-1", past),
            _issue("core1", past),
            _issue("cb-1", past),
        ],
        nodes,
        NOW,
    )
    assert [(s.issue.node, s.action) for s in steps] == [("cb-1", "force"), ("od-1", "drain")]
    assert sorted((i.node, why) for i, why in left) == [
        ("core1", "core1 is not a Slurm cloud node"),
        ("sp-1", "sp-1 is already POWERING_DOWN"),
    ]


@pytest.fixture
def ec2(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for var in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "COREBURST_KILL_SWITCH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield boto3.client("ec2", region_name="us-east-1")


def cycle(
    tmp_path: Path, slurm: FakeSlurm, events: dict[str, list[dict[str, Any]]], *,
    dry_run: bool = False, at: datetime,
) -> tuple[list[str], list[dict[str, Any]]]:  # fmt: skip
    """One daemon cycle with this rule; moto's DescribeInstanceStatus answer gets ``events``
    (instance -> documented Events). Returns (EC2 operations called, audit events)."""
    cfg = parse_config(
        f"rules: [burst-health]\ndry_run: {str(dry_run).lower()}\n"
        f'state: {{path: "{tmp_path}/s.db", audit_log: "{tmp_path}/a.jsonl"}}\n'
        "metrics_endpoint: {enabled: false}\n"
        f'safety: {{kill_switch_file: "{tmp_path}/stop"}}\n'
        f'burst_reconcile: {{stack: prod, slurm_bin_dir: "{slurm.dir}"}}\n'
        "burst_health: {enabled: true, event_margin: 30m}\n",
        "g.yaml",
    )
    session = boto3.session.Session(region_name="us-east-1")
    called: list[str] = []

    def inject(parsed: dict[str, Any], **_: Any) -> None:
        for st in parsed.get("InstanceStatuses", []):
            st["Events"] = documented([status(st["InstanceId"], events.get(st["InstanceId"], []))])[
                0
            ]["Events"]

    session.events.register("after-call.ec2.DescribeInstanceStatus", inject)
    session.events.register("before-call.ec2", lambda model, **_: called.append(model.name))
    before = (
        (tmp_path / "a.jsonl").read_text().count("\n") if (tmp_path / "a.jsonl").exists() else 0
    )
    state = State(cfg.state.path)
    d = Daemon(cfg, Aws(cfg.aws, session), state, clock=FakeClock(at))
    try:
        d.leader = True
        d.actuator.begin_cycle([])
        REGISTRY["burst-health"].run(d.context())  # type: ignore[misc]
    finally:
        d.close()
        state.close()
    audit = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()[before:]]
    return called, audit


def test_an_event_drains_the_node_then_requeues_its_job_before_not_before(
    ec2: Any, tmp_path: Path
) -> None:
    slurm = FakeSlurm(tmp_path / "bin")
    iid = launch(ec2, "od-1", stack="prod")
    launch(ec2, None, stack="prod")  # no node tag: not a burst node
    now = datetime.now(UTC)
    ev = {iid: [retirement(now + timedelta(hours=2))]}
    slurm.set_nodes(node_line("od-1", "MIXED+CLOUD"))
    called, audit = cycle(tmp_path, slurm, ev, at=now)
    nb = now + timedelta(hours=2)
    why = f"coreburst: EC2 instance-retirement not before {nb:%Y-%m-%d %H:%M}Z on {iid}"
    assert slurm.updates()[0][:3] == ["update", "nodename=od-1", "state=drain"]
    assert slurm.updates()[0][3].startswith(f"reason={why}")
    assert slurm.updates()[2] == ["update", "nodename=od-1", "state=power_down"]
    assert [e["kind"] for e in audit if e["event"] == "action.executed"] == ["health-drain"]

    # Drained, its job still running, 1 h 40 min later (inside the 30 min margin): forced.
    slurm.set_nodes(node_line("od-1", "MIXED+CLOUD+DRAIN+POWER_DOWN"))
    n = len(slurm.updates())
    called, audit = cycle(tmp_path, slurm, ev, at=now + timedelta(minutes=100))
    assert slurm.updates()[n:][-1] == ["update", "nodename=od-1", "state=power_down_force"]
    assert [e["kind"] for e in audit if e["event"] == "action.executed"] == ["health-force"]

    # The rule calls exactly the EC2 operations it declares, and the role grants them.
    model = botocore.session.get_session().get_service_model("ec2")
    assert set(called) <= set(model.operation_names)
    assert {f"ec2:{op}" for op in called} == set(REGISTRY["burst-health"].iam_actions)
    doc = policy_document({"burst-health": REGISTRY["burst-health"].iam_actions}, "k", "v")
    granted = {a for s in doc["Statement"] for a in s["Action"]}
    assert {"ec2:DescribeInstanceStatus", "ec2:DescribeInstances"} <= granted


def test_dry_run_and_finished_events_change_nothing(ec2: Any, tmp_path: Path) -> None:
    slurm = FakeSlurm(tmp_path / "bin")
    iid = launch(ec2, "od-1", stack="prod")
    now = datetime.now(UTC)
    slurm.set_nodes(node_line("od-1", "MIXED+CLOUD"))
    _, audit = cycle(
        tmp_path, slurm, {iid: [retirement(now + timedelta(hours=2))]}, dry_run=True, at=now
    )
    assert slurm.updates() == []
    (skipped,) = [e for e in audit if e["event"] == "action.skipped"]
    assert skipped["because"] == "dry-run" and skipped["kind"] == "health-drain"
    done = [retirement(now - timedelta(days=1), "[Completed] The instance was retired")]
    _, audit = cycle(tmp_path, slurm, {iid: done}, at=now)
    assert slurm.updates() == [] and not [e for e in audit if e["event"].startswith("action.")]


def test_the_config_needs_the_burst_stack() -> None:
    with pytest.raises(ConfigError, match=r"burst_health\.enabled needs burst_reconcile\.stack"):
        parse_config("burst_health: {enabled: true}\n", "g.yaml")
    assert not parse_config("{}\n", "g.yaml").burst_health.enabled  # off by default
