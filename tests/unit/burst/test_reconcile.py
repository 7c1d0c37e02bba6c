"""The ``burst-reconcile`` rule on moto (in process) with a fake ``scontrol`` made here, run by
the daemon (its gate: dry-run, kill switch, leader lease, audit, run-once intents). The real
slurmctld is in tests/integration/burst/test_reconcile.py.

IAM actions are ``ec2:<Operation>`` of botocore's EC2 service model ("Actions defined by Amazon
EC2", https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2.html).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from moto import mock_aws

from coreburst.burst.config import BurstStack, parse_burst
from coreburst.burst.holds import ICE, pools_of
from coreburst.burst.power import Audit, Power
from coreburst.burst.reconcile import Instance, plan, write_heartbeat
from coreburst.burst.slurm_side import HEARTBEAT_REASON
from coreburst.sandbox.clocks import FakeClock
from guardrails.adapters.aws import Aws
from guardrails.adapters.slurm import Scontrol, SlurmError, parse_nodes
from guardrails.config import ConfigError
from guardrails.configfile import parse_config
from guardrails.daemon import Daemon
from guardrails.rules import REGISTRY
from guardrails.stores.sqlite import State
from tests.helpers.burst import STACK, _templates, launch, stack_map
from tests.helpers.slurm_fakes import (
    RELEASES,
    FakeSlurm,
    RecordingSlurm,
    node_line,
    squeue_job,
    squeue_json,
)


@pytest.fixture
def ec2(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for var in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "COREBURST_KILL_SWITCH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield boto3.client("ec2", region_name="us-east-1")


@pytest.fixture
def slurm(tmp_path: Path) -> FakeSlurm:
    return FakeSlurm(tmp_path / "slurm-bin")


def state_of(ec2: Any, iid: str) -> str:
    return str(
        ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]["State"][
            "Name"
        ]
    )


def cycle(
    tmp_path: Path,
    slurm: FakeSlurm,
    *,
    dry_run: bool = False,
    ahead: timedelta = timedelta(hours=1),
    extra: str = "",
    top: str = "",
) -> tuple[Any, list[dict[str, Any]]]:
    """One daemon cycle with only this rule (and inventory), the clock ``ahead`` of now."""
    cfg = parse_config(
        f"rules: [burst-reconcile]\ndry_run: {str(dry_run).lower()}\n{top}"
        f'state: {{path: "{tmp_path}/s.db", audit_log: "{tmp_path}/a.jsonl"}}\n'
        "metrics_endpoint: {enabled: false}\n"
        f'safety: {{kill_switch_file: "{tmp_path}/stop"}}\n'
        f"burst_reconcile: {{enabled: true, stack: {STACK}, orphan_timeout: 15m, "
        f'slurm_bin_dir: "{slurm.dir}", heartbeat_file: "{tmp_path}/hb.json"{extra}}}\n',
        "g.yaml",
    )
    state = State(cfg.state.path)
    d = Daemon(
        cfg,
        Aws(cfg.aws, boto3.session.Session(region_name="us-east-1")),
        state,
        clock=FakeClock(datetime.now(UTC) + ahead),
    )
    try:
        report = d.run_cycle()
    finally:
        d.close()
        state.close()
    audit = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    return report, audit


def test_parse_nodes_reads_states_reason_and_cloud_flag() -> None:
    nodes = parse_nodes(
        "\n".join(
            [
                node_line("core1", "IDLE"),
                node_line("od-1", "IDLE+CLOUD+POWERED_DOWN"),
                node_line(
                    "od-2", "DOWN+CLOUD+POWERING_DOWN", reason="(Code:X)Failure when resuming"
                ),
                node_line("sp-1", "MIXED+CLOUD", boot="2026-12-03T10:01:00"),
            ]
        )
    )
    assert set(nodes) == {"core1", "od-1", "od-2", "sp-1"}
    assert not nodes["core1"].cloud and nodes["od-1"].cloud and nodes["od-1"].powered_down
    assert nodes["od-2"].reason.startswith("(Code:X)Failure when resuming [root@")
    assert nodes["sp-1"].busy and not nodes["sp-1"].powered_down
    assert nodes["sp-1"].boot_time == "2026-12-03T10:01:00"
    assert nodes["od-1"].fields["OS"].startswith("Linux 6.1.0-18-amd64 #1 SMP")


def test_scontrol_failures_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(SlurmError, match="not found: install slurm-client or set slurm_bin_dir"):
        Scontrol(tmp_path / "nowhere").nodes()
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "scontrol").write_text("#!/bin/sh\nsleep 5\n")
    (slow / "scontrol").chmod(0o755)
    with pytest.raises(SlurmError, match=r"timed out after 0\.3s"):
        Scontrol(slow, timeout_s=0.3).nodes()


def test_enabled_needs_a_stack() -> None:
    with pytest.raises(ConfigError, match=r"burst_reconcile: .*set stack"):
        parse_config("burst_reconcile: {enabled: true}\n", "g.yaml")
    assert not parse_config("{}\n", "g.yaml").burst_reconcile.enabled  # off by default


def test_orphans_are_terminated_after_the_timeout(
    ec2: Any, slurm: FakeSlurm, tmp_path: Path
) -> None:
    """a) Tagged with a powered-down node, with a node Slurm does not know, or with no node
    tag at all: terminated. Another stack's instance and a node that is up: left alone."""
    slurm.set_nodes(
        node_line("core1", "IDLE"),
        node_line("od-1", "IDLE+CLOUD+POWERED_DOWN"),
        node_line("od-2", "IDLE+CLOUD", boot="2026-12-03T10:00:00"),
    )
    down = launch(ec2, "od-1")
    unknown = launch(ec2, "od-9")
    untagged = launch(ec2, None)
    up = launch(ec2, "od-2")
    other = launch(ec2, "od-1", stack="staging")
    report, audit = cycle(tmp_path, slurm)
    assert report.errors == []
    for iid in (down, unknown, untagged):
        assert state_of(ec2, iid) in ("shutting-down", "terminated"), iid
    assert state_of(ec2, up) == "running" and state_of(ec2, other) == "running"
    done = {e["instance_id"]: e for e in audit if e["event"] == "action.executed"}
    assert set(done) == {down, unknown, untagged}
    assert "POWERED_DOWN" in done[down]["reason"] and "no node od-9" in done[unknown]["reason"]
    assert slurm.updates() == []  # od-2 has its instance: nothing to power down


def test_young_instances_are_not_orphans(ec2: Any, slurm: FakeSlurm, tmp_path: Path) -> None:
    slurm.set_nodes(node_line("od-1", "IDLE+CLOUD+POWERED_DOWN"))
    iid = launch(ec2, "od-1")
    untagged = launch(ec2, None)
    cycle(tmp_path, slurm, ahead=timedelta(minutes=5))
    assert state_of(ec2, iid) == "running" and state_of(ec2, untagged) == "running"


def test_lost_instance_powers_down_cloud_nodes_only(
    ec2: Any, slurm: FakeSlurm, tmp_path: Path
) -> None:
    """b) A cloud node up with no instance is powered down; a core node (no CLOUD flag), a
    node powering up (its instance may not be tagged yet) and a powered-down one are not."""
    slurm.set_nodes(
        node_line("core1", "ALLOCATED"),
        node_line("od-1", "ALLOCATED+CLOUD", boot="2026-12-03T10:00:00"),
        node_line("od-2", "IDLE+CLOUD+POWERING_UP"),
        node_line("sp-1", "IDLE+CLOUD+POWERED_DOWN"),
        node_line("cb-1", "IDLE+CLOUD", boot="2026-12-03T10:02:00"),
    )
    launch(ec2, "cb-1")
    report, audit = cycle(tmp_path, slurm)
    assert report.errors == []
    assert slurm.updates() == [["update", "nodename=od-1", "state=power_down_force"]]
    ex = [e for e in audit if e["event"] == "action.executed"]
    assert [(e["instance_id"], e["kind"]) for e in ex] == [("od-1", "power-down")]
    # The same boot of od-1 is powered down once, even if Slurm still shows it up next cycle.
    cycle(tmp_path, slurm)
    assert len(slurm.updates()) == 1


def test_busy_node_instance_is_never_terminated(ec2: Any, slurm: FakeSlurm, tmp_path: Path) -> None:
    """c) Busy in the first read (ALLOCATED while powering down), or busy again in the
    re-read right before terminating: the instance stays, the audit says why."""
    slurm.set_nodes(
        node_line("od-1", "ALLOCATED+CLOUD+POWERING_DOWN", boot="2026-12-03T10:00:00"),
        node_line("od-2", "IDLE+CLOUD+POWERED_DOWN"),
    )
    # The re-read (second "show nodes"): od-2 was resumed and took a job meanwhile.
    slurm.set_nodes(
        node_line("od-1", "ALLOCATED+CLOUD+POWERING_DOWN", boot="2026-12-03T10:00:00"),
        node_line("od-2", "ALLOCATED+CLOUD", boot="2026-12-03T10:30:00"),
        page=2,
    )
    busy = launch(ec2, "od-1")
    resumed = launch(ec2, "od-2")
    _, audit = cycle(tmp_path, slurm)
    assert state_of(ec2, busy) == "running" and state_of(ec2, resumed) == "running"
    guarded = {e["instance_id"]: e["why"] for e in audit if e["event"] == "burst.guarded"}
    assert "busy" in guarded[busy] and "now ALLOCATED+CLOUD" in guarded[resumed]
    assert not [e for e in audit if e["event"] in ("action.executed", "action.skipped")]


def test_dry_run_terminates_nothing_and_says_what_it_would(
    ec2: Any, slurm: FakeSlurm, tmp_path: Path
) -> None:
    slurm.set_nodes(node_line("od-1", "IDLE+CLOUD+POWERED_DOWN"), node_line("od-2", "IDLE+CLOUD"))
    iid = launch(ec2, "od-1")
    _, audit = cycle(tmp_path, slurm, dry_run=True)
    assert state_of(ec2, iid) == "running" and slurm.updates() == []
    skipped = {e["instance_id"]: e for e in audit if e["event"] == "action.skipped"}
    assert skipped[iid]["because"] == "dry-run" and skipped[iid]["kind"] == "terminate"
    assert skipped["od-2"]["because"] == "dry-run" and skipped["od-2"]["kind"] == "power-down"
    hb = json.loads((tmp_path / "hb.json").read_text())
    assert hb["dry_run"] is True and datetime.fromisoformat(hb["ts"]) > datetime.now(UTC)


@pytest.mark.parametrize("how", ["env", "file"])
def test_kill_switch_stops_it(
    ec2: Any, slurm: FakeSlurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    if how == "env":
        monkeypatch.setenv("COREBURST_KILL_SWITCH", "1")
    else:
        (tmp_path / "stop").touch()
    slurm.set_nodes(node_line("od-1", "IDLE+CLOUD+POWERED_DOWN"), node_line("od-2", "IDLE+CLOUD"))
    iid = launch(ec2, "od-1")
    _, audit = cycle(tmp_path, slurm)
    assert state_of(ec2, iid) == "running" and slurm.updates() == []
    skipped = [e for e in audit if e["event"] == "action.skipped"]
    assert len(skipped) == 2 and all(e["because"].startswith("kill switch") for e in skipped)


def test_the_rule_declares_exactly_the_ec2_calls_it_makes(
    ec2: Any, slurm: FakeSlurm, tmp_path: Path
) -> None:
    slurm.set_nodes(node_line("od-1", "IDLE+CLOUD+POWERED_DOWN"))
    launch(ec2, "od-1")
    called: list[str] = []
    cfg = parse_config(
        f'dry_run: false\nstate: {{path: "{tmp_path}/s.db", audit_log: "{tmp_path}/a.jsonl"}}\n'
        f'safety: {{kill_switch_file: "{tmp_path}/stop"}}\n'
        f'burst_reconcile: {{enabled: true, stack: {STACK}, slurm_bin_dir: "{slurm.dir}"}}\n',
        "g.yaml",
    )
    session = boto3.session.Session(region_name="us-east-1")
    state = State(cfg.state.path)
    d = Daemon(
        cfg, Aws(cfg.aws, session), state, clock=FakeClock(datetime.now(UTC) + timedelta(hours=1))
    )
    try:
        d.leader = True
        d.actuator.begin_cycle([])
        session.events.register(
            "before-call.ec2",
            lambda model, **_: called.append(model.name),  # type: ignore[misc]
        )
        REGISTRY["burst-reconcile"].run(d.context())  # type: ignore[misc]
    finally:
        d.close()
        state.close()
    model = botocore.session.get_session().get_service_model("ec2")
    assert all(op in model.operation_names for op in called)
    assert {f"ec2:{op}" for op in called} == set(REGISTRY["burst-reconcile"].iam_actions)


def test_plan_skips_auto_scaling_members_and_untagged_when_off() -> None:
    now = datetime(2026, 12, 3, 12, tzinfo=UTC)
    old = now - timedelta(hours=1)
    asg = Instance("i-1", "us-east-1", "running", old, None, asg=True)
    bare = Instance("i-2", "us-east-1", "running", old, None)
    assert [
        i.instance_id for i, _ in plan([asg, bare], {}, now, timedelta(minutes=15)).terminate
    ] == ["i-2"]
    assert plan([asg, bare], {}, now, timedelta(minutes=15), untagged_orphans=False).terminate == []


# -- d) the heartbeat, read by the resume program (coreburst/burst/power.py)
# ------------------------------
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def _hb_stack(tmp_path: Path, hb: Path | None) -> BurstStack:
    burst: dict[str, Any] = {"auditLog": str(tmp_path / "a.jsonl")}
    if hb is not None:
        burst |= {
            "reconcilerHeartbeat": str(hb),
            "reconcilerIntervalS": 60,
            "heartbeatIntervals": 3,
        }
    s = parse_burst(
        "t",
        stack_map(
            [
                {
                    "name": "od",
                    "instanceType": "p5.48xlarge",
                    "nodes": 2,
                    "capacity": {"model": "on-demand"},
                }
            ],
            burst,
        ),
    )
    return s.model_copy(update={"config": s.config.model_copy(update={"region": "us-east-1"})})


@pytest.mark.parametrize(
    ("age", "refused"),
    [
        (None, False),
        (timedelta(seconds=60), False),
        (timedelta(minutes=4), True),
        ("missing", True),
    ],
)
def test_resume_refuses_when_the_heartbeat_is_stale(
    ec2: Any, tmp_path: Path, age: Any, refused: bool
) -> None:
    """The file the rule writes (write_heartbeat) is what resume reads: older than 3 x 60 s,
    or missing, and resume launches nothing, sets the nodes DOWN with HEARTBEAT_REASON and
    powers them down; with no heartbeat configured the check is off."""
    hb = tmp_path / "hb.json"
    if isinstance(age, timedelta):
        write_heartbeat(hb, NOW - age, dry_run=False, leader=True)
    _templates(ec2, "t", ["od"])
    rec = RecordingSlurm()
    stack = _hb_stack(tmp_path, None if age is None else hb)
    result = Power(stack, ec2, rec, Audit(tmp_path / "a.jsonl"), now=lambda: NOW).resume(
        "od-[1-2]", None
    )
    live = ec2.describe_instances(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )
    n_live = sum(len(r["Instances"]) for r in live["Reservations"])
    if refused:
        assert result.refused == ["od-1", "od-2"] and not result.launched and n_live == 0
        assert rec.calls == [
            ("update", "nodename=od-[1-2]", "state=down", f"reason={HEARTBEAT_REASON}"),
            ("update", "nodename=od-[1-2]", "state=power_down_force"),
        ]
        ev = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()][-1]
        assert ev["event"] == "resume.refused" and "heartbeat" in ev["reason"]
    else:
        assert sorted(result.launched) == ["od-1", "od-2"] and n_live == 2


def test_heartbeat_is_replaced_atomically(tmp_path: Path) -> None:
    hb = tmp_path / "d" / "hb.json"
    write_heartbeat(hb, NOW, dry_run=False, leader=True)
    first = os.stat(hb).st_ino
    write_heartbeat(hb, NOW + timedelta(minutes=1), dry_run=False, leader=True)
    assert os.stat(hb).st_ino != first  # a new file renamed over the old one
    assert json.loads(hb.read_text())["ts"].startswith("2026-12-03T12:01")
    assert [p.name for p in hb.parent.iterdir()] == ["hb.json"]


# -- e) pool holds from the resume program's audit log -----------------------------------------
def _burst_event(path: Path, ts: datetime, event: str, **fields: Any) -> None:
    """An event as coreburst/burst/power.py's Audit writes it (epoch ``ts``, ``event``, fields)."""
    with path.open("a") as f:
        f.write(json.dumps({"ts": round(ts.timestamp(), 3), "event": event, **fields}) + "\n")


def test_capacity_error_holds_the_pool_for_the_backoff(
    ec2: Any, slurm: FakeSlurm, tmp_path: Path
) -> None:
    """An InsufficientInstanceCapacity resume failure 10 min ago: the pool's idle cloud nodes
    go into a MAINT reservation ending when the 30 min backoff the resume program wrote on it
    (the stack's capacityBackoffS: 1800) does; once, and only that pool. Another error code, or
    one older than its backoff, holds nothing."""
    now = datetime.now(UTC) + timedelta(hours=1)
    log = tmp_path / "burst-audit.jsonl"
    ice = {"code": ICE, "backoff_s": 1800}
    _burst_event(log, now - timedelta(minutes=10), "resume.failed", nodes="od-[1-2]", **ice)
    _burst_event(log, now - timedelta(minutes=5), "resume.failed", nodes="sp-1", code="Unsupported")
    _burst_event(log, now - timedelta(minutes=50), "resume.failed", nodes="cb-1", **ice)
    with log.open("a") as f:
        f.write("not json\n")
    slurm.set_nodes(
        node_line("core1", "IDLE"),
        node_line("od-1", "IDLE+CLOUD+POWERED_DOWN"),
        node_line("od-2", "IDLE+CLOUD+POWERED_DOWN"),
        node_line("sp-1", "IDLE+CLOUD+POWERED_DOWN"),
        node_line("cb-1", "IDLE+CLOUD+POWERED_DOWN"),
    )
    extra = f', burst_audit_log: "{log}"'
    report, audit = cycle(tmp_path, slurm, extra=extra)
    assert report.errors == []
    (create,) = slurm.creates()
    assert create[:3] == ["create", "reservation", create[2]]
    assert create[2].startswith("ReservationName=coreburst-backoff-od-")
    assert "Nodes=od-1,od-2" in create and "Duration=20" in create
    assert "Flags=MAINT,IGNORE_JOBS,OVERLAP" in create
    held = [e for e in audit if e["event"] == "burst.hold"]
    assert [e["pool"] for e in held] == ["od"] and ICE in held[0]["why"]
    # Next cycle: the reservation exists (scontrol shows it), so nothing is created again.
    name = create[2].split("=", 1)[1]
    (slurm.dir / "reservations.txt").write_text(
        f"ReservationName={name} StartTime=2026-12-03T10:00:00 Nodes=od-[1-2] Flags=MAINT\n"
    )
    cycle(tmp_path, slurm, extra=extra)
    assert len(slurm.creates()) == 1


def test_repeated_bootstrap_failures_protect_the_pool(
    ec2: Any, slurm: FakeSlurm, tmp_path: Path
) -> None:
    """Three resume-fail events (nodes that never registered) within the window: the pool is
    held with no end; two are not enough; the busy node is left out of the reservation."""
    now = datetime.now(UTC) + timedelta(hours=1)
    log = tmp_path / "burst-audit.jsonl"
    for minutes in (50, 30, 10):
        _burst_event(log, now - timedelta(minutes=minutes), "resume-fail", nodes="sp-1")
    for minutes in (40, 20):
        _burst_event(log, now - timedelta(minutes=minutes), "resume-fail", nodes="od-[1-2]")
    slurm.set_nodes(
        node_line("od-1", "IDLE+CLOUD+POWERED_DOWN"),
        node_line("od-2", "IDLE+CLOUD+POWERED_DOWN"),
        node_line("sp-1", "IDLE+CLOUD+POWERED_DOWN"),
        node_line("sp-2", "MIXED+CLOUD", boot="2026-12-03T10:00:00"),
    )
    launch(ec2, "sp-2")
    extra = f', burst_audit_log: "{log}", bootstrap_failures_before_protect: 3'
    cycle(tmp_path, slurm, extra=extra)
    (create,) = slurm.creates()
    assert "ReservationName=coreburst-protect-sp" in create
    assert "Nodes=sp-1" in create and "Duration=UNLIMITED" in create


def test_holds_dry_run_creates_nothing(ec2: Any, slurm: FakeSlurm, tmp_path: Path) -> None:
    log = tmp_path / "burst-audit.jsonl"
    _burst_event(
        log, datetime.now(UTC) + timedelta(minutes=55), "resume.failed", nodes="od-1", code=ICE
    )
    slurm.set_nodes(node_line("od-1", "IDLE+CLOUD+POWERED_DOWN"))
    _, audit = cycle(tmp_path, slurm, dry_run=True, extra=f', burst_audit_log: "{log}"')
    assert slurm.creates() == []
    assert [e["because"] for e in audit if e["event"] == "action.skipped"] == ["dry-run"]


def test_pools_of_hostlists() -> None:
    assert pools_of("od-[1-2,5],sp-1") == {"od", "sp"}
    assert pools_of("my-pool-[01-10]") == {"my-pool"} and pools_of("core") == set()


def test_unreadable_audit_log_is_one_error_and_the_pass_completes(
    ec2: Any, slurm: FakeSlurm, tmp_path: Path
) -> None:
    log = tmp_path / "burst-audit.jsonl"
    log.write_bytes(b'{"ts": 1, "event": "resume.failed", "nodes": "od-1\xff"}\n')
    slurm.set_nodes(node_line("od-1", "IDLE+CLOUD+POWERED_DOWN"))
    report, _ = cycle(tmp_path, slurm, extra=f', burst_audit_log: "{log}"')
    assert len(report.errors) == 1 and "not UTF-8 at byte" in report.errors[0]
    assert "\n" not in report.errors[0] and (tmp_path / "hb.json").exists()


# -- f) spend-gate holds lifted on the daemon's schedule; Slack on holds --------------------------
def _outbox(tmp_path: Path) -> list[dict[str, Any]]:
    """The Slack payloads the cycle queued (guardrails.stores.sqlite outbox rows)."""
    st = State(tmp_path / "s.db")
    try:
        return [{"key": r["dedupe_key"], **json.loads(r["payload"])} for r in st.outbox_rows()]
    finally:
        st.close()


def _snapshot(tmp_path: Path, at: datetime, today: float, scope: str = "account") -> None:
    """A spend snapshot as the spend-limit rule writes it each cycle (State.add_spend)."""
    st = State(tmp_path / "s.db")
    st.add_spend(at, scope, burn=0.0, today=today, mtd=today, proj=today * 30)
    st.close()


def _hold_line(name: str, nodes: str) -> str:
    """One line of ``scontrol -o show reservation`` (22.05); made up here from scontrol(1)'s
    format, the real one is read in tests/integration/burst/test_spend_gate.py."""
    return (
        f"ReservationName={name} StartTime=2026-12-03T11:00:00 EndTime=2027-12-03T11:00:00 "
        f"Duration=365-00:00:00 Nodes={nodes} NodeCnt=1 CoreCnt=2 Features=(null) "
        "PartitionName=(null) Flags=MAINT,IGNORE_JOBS,SPEC_NODES TRES=cpu=2 Users=root "
        "Groups=(null) Accounts=(null) Licenses=(null) State=ACTIVE BurstBuffer=(null) "
        "Watts=n/a MaxStartDelay=(null)\n"
    )


SCOPE_1000 = "spend: {scopes: [{name: account, daily_limit_usd: 1000}]}\n"


@pytest.mark.parametrize("dry_run", [False, True])
def test_spend_holds_are_released_on_the_schedule_when_the_scope_has_room(
    ec2: Any, slurm: FakeSlurm, tmp_path: Path, dry_run: bool
) -> None:
    """$100 left today: the $50 hold goes (cheapest first), $80 and $300 stay; the delete is an
    actuator action (audit, dry-run respected), and Slack says the hold lifted."""
    _snapshot(tmp_path, datetime.now(UTC) + timedelta(minutes=55), today=900.0)
    (slurm.dir / "reservations.txt").write_text(
        _hold_line("coreburst-spend-300usd-1-1", "od-[1-2]")
        + _hold_line("coreburst-spend-80usd-2-2", "od-3")
        + _hold_line("coreburst-spend-50usd-3-3", "od-4")
        + _hold_line("coreburst-backoff-sp-9", "sp-1")
    )
    slurm.set_nodes(node_line("od-4", "IDLE+CLOUD+POWERED_DOWN"))
    report, audit = cycle(tmp_path, slurm, dry_run=dry_run, top=SCOPE_1000)
    assert report.errors == []
    kept = {e["reservation"]: e["why"] for e in audit if e["event"] == "burst.spend-kept"}
    assert set(kept) == {"coreburst-spend-300usd-1-1", "coreburst-spend-80usd-2-2"}
    assert "$80 projected > $50 left" in kept["coreburst-spend-80usd-2-2"]
    if dry_run:
        assert slurm.deletes() == [] and _outbox(tmp_path) == []
        (sk,) = [e for e in audit if e["event"] == "action.skipped"]
        assert sk["kind"] == "release" and sk["because"] == "dry-run"
        return
    assert slurm.deletes() == [["delete", "ReservationName=coreburst-spend-50usd-3-3"]]
    (ex,) = [e for e in audit if e["event"] == "action.executed"]
    assert ex["kind"] == "release" and "$100 left today" in ex["reason"]
    (msg,) = _outbox(tmp_path)
    assert msg["key"] == "burst-released:coreburst-spend-50usd-3-3" and "od-4" in json.dumps(msg)
    # Released once: the next cycle (Slurm still listing it) records the intent as done.
    cycle(tmp_path, slurm, top=SCOPE_1000)
    assert len(slurm.deletes()) == 1


@pytest.mark.parametrize(
    ("snapshot_age", "needle"),
    [(None, "no spend snapshot for scope account"), (timedelta(hours=2), "min old")],
)
def test_spend_holds_stay_without_a_fresh_snapshot(
    ec2: Any, slurm: FakeSlurm, tmp_path: Path, snapshot_age: timedelta | None, needle: str
) -> None:
    """Fail closed: the daemon is not measuring spend, so nothing is released."""
    if snapshot_age is not None:
        _snapshot(tmp_path, datetime.now(UTC) + timedelta(hours=1) - snapshot_age, today=0.0)
    (slurm.dir / "reservations.txt").write_text(_hold_line("coreburst-spend-5usd-1-1", "od-1"))
    _, audit = cycle(tmp_path, slurm, top=SCOPE_1000)
    assert slurm.deletes() == []
    (kept,) = [e for e in audit if e["event"] == "burst.spend-kept"]
    assert needle in kept["why"]


def test_held_jobs_and_pool_holds_are_told_in_slack(
    ec2: Any, slurm: FakeSlurm, tmp_path: Path
) -> None:
    """A spend hold still in place: Slack names the waiting jobs and the reason (once); one
    already lifted says nothing. A capacity backoff placed this cycle says so too."""
    now = datetime.now(UTC) + timedelta(hours=1)
    log = tmp_path / "burst-audit.jsonl"
    reason = "$98 projected > $49 left today (account)"
    _burst_event(
        log, now - timedelta(minutes=3), "resume.held", nodes="od-[1-2]", jobs=[41, 42],
        cost_usd=98.3, reason=reason, reservation="coreburst-spend-99usd-5-5",
    )  # fmt: skip
    _burst_event(
        log, now - timedelta(minutes=9), "resume.held", nodes="od-3", jobs=[7],
        cost_usd=1.0, reason=reason, reservation="coreburst-spend-1usd-1-1",
    )  # fmt: skip
    _burst_event(log, now - timedelta(minutes=2), "resume.failed", nodes="sp-1", code=ICE)
    (slurm.dir / "reservations.txt").write_text(_hold_line("coreburst-spend-99usd-5-5", "od-[1-2]"))
    slurm.set_nodes(
        node_line("od-1", "DOWN+CLOUD+POWERED_DOWN"), node_line("sp-1", "IDLE+CLOUD+POWERED_DOWN")
    )
    _snapshot(tmp_path, now - timedelta(minutes=1), today=951.0)
    extra = f', burst_audit_log: "{log}"'
    report, _ = cycle(tmp_path, slurm, extra=extra, top=SCOPE_1000)
    assert report.errors == []
    msgs = {m["key"]: m for m in _outbox(tmp_path)}
    assert set(msgs) == {
        "burst-held:coreburst-spend-99usd-5-5",
        next(k for k in msgs if k.startswith("burst-pool:coreburst-backoff-sp-")),
    }
    held = json.dumps(msgs["burst-held:coreburst-spend-99usd-5-5"])
    assert "Jobs waiting: 41, 42" in held and "left today (account)" in held
    pool = json.dumps(next(m for k, m in msgs.items() if k.startswith("burst-pool:")))
    assert "backed off" in pool and ICE in pool and "sp-1" in pool
    cycle(tmp_path, slurm, extra=extra, top=SCOPE_1000)
    assert len(_outbox(tmp_path)) == 2  # told once


def test_burst_messages_stay_within_slack_limits_at_maximal_inputs() -> None:
    """slack_sdk's block models and Slack's Block Kit limits (tests/helpers/slack.py
    check_payload) for every burst message, at hostile sizes."""
    from guardrails import messages
    from tests.helpers.slack import UNI, check_payload

    huge = UNI * 400
    jobs = [f"{i}{UNI}" for i in range(20_000)]
    nodes = [f"od-{i}" for i in range(5_000)]
    alerts = [
        messages.burst_spend_held(huge, huge, jobs, huge, cost_usd=1e15, scope=huge),
        messages.burst_spend_held("", "", [], "", cost_usd=0.0, scope=""),
        messages.burst_spend_released(huge, huge, {"today": -1e12, "this month": 1e15}),
        messages.burst_pool_held(huge, huge, nodes, huge, 10**9),
        messages.burst_pool_held(huge, huge, nodes, huge, None),
    ]
    for a in alerts:
        check_payload(a.payload())
    text = json.dumps(alerts[0].payload())
    assert "and 19950 more" in text and "<!channel>" not in text


# -- g) duplicate instances for one node --------------------------------------------------------
def _ip(ec2: Any, iid: str) -> str:
    return str(
        ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0][
            "PrivateIpAddress"
        ]
    )


@pytest.mark.parametrize("dry_run", [False, True])
def test_duplicates_keep_the_instance_at_the_node_address(
    ec2: Any, slurm: FakeSlurm, tmp_path: Path, dry_run: bool
) -> None:
    """Two instances tagged od-1 (a resume retried after a crash): the one whose private IP is
    Slurm's NodeAddr for od-1 stays, the other is terminated (audited; dry-run skips it)."""
    first, second = launch(ec2, "od-1"), launch(ec2, "od-1")
    slurm.set_nodes(node_line("od-1", "ALLOCATED+CLOUD", addr=_ip(ec2, second)))
    _, audit = cycle(tmp_path, slurm, dry_run=dry_run)
    assert state_of(ec2, second) == "running"
    (dup,) = [e for e in audit if e["event"] == "burst.duplicate"]
    assert dup["instance_id"] == first and second in dup["why"]
    if dry_run:
        assert state_of(ec2, first) == "running"
        (sk,) = [e for e in audit if e["event"] == "action.skipped"]
        assert sk["instance_id"] == first and sk["because"] == "dry-run"
    else:
        assert state_of(ec2, first) in ("shutting-down", "terminated")
        (ex,) = [e for e in audit if e["event"] == "action.executed"]
        assert ex["instance_id"] == first and ex["reason"].startswith("burst duplicate:")


def test_duplicates_nobody_can_tell_apart_are_left(
    ec2: Any, slurm: FakeSlurm, tmp_path: Path
) -> None:
    """No instance at the node's NodeAddr (e.g. address not told yet): none is terminated;
    a young duplicate is not terminated either."""
    a, b = launch(ec2, "od-1"), launch(ec2, "od-1")
    slurm.set_nodes(node_line("od-1", "IDLE+CLOUD", addr="10.9.9.9"))
    _, audit = cycle(tmp_path, slurm)
    assert state_of(ec2, a) == "running" and state_of(ec2, b) == "running"
    guarded = [e for e in audit if e["event"] == "burst.guarded"]
    assert {e["instance_id"] for e in guarded} == {a, b}
    assert "0 at its NodeAddr 10.9.9.9" in guarded[0]["why"]
    slurm.set_nodes(node_line("od-1", "IDLE+CLOUD", addr=_ip(ec2, b)))
    cycle(tmp_path / "young", FakeSlurm(slurm.dir), ahead=timedelta(minutes=1))
    assert state_of(ec2, a) == "running"


def test_duplicate_rechecked_before_terminating(ec2: Any, slurm: FakeSlurm, tmp_path: Path) -> None:
    """Slurm's NodeAddr changed to the duplicate between the reads: nothing is terminated."""
    a, b = launch(ec2, "od-1"), launch(ec2, "od-1")
    slurm.set_nodes(node_line("od-1", "IDLE+CLOUD", addr=_ip(ec2, b)))
    slurm.set_nodes(node_line("od-1", "IDLE+CLOUD", addr=_ip(ec2, a)), page=2)
    _, audit = cycle(tmp_path, slurm)
    assert state_of(ec2, a) == "running" and state_of(ec2, b) == "running"
    assert any("changed since" in e.get("why", "") for e in audit if e["event"] == "burst.guarded")


# -- h) idle reclaim of a Slurm-owned node asks Slurm -------------------------------------------
def _act_on(
    slurm: FakeSlurm, tmp_path: Path, iid: str, tags: dict[str, str], *, enabled: bool
) -> list[dict[str, Any]]:
    """The idle-reclaim rule's act step (guardrails.rules.idle_reclaim._apply) on one node the
    reclaim decision says to stop, under a daemon that holds the lease and acts."""
    from guardrails.idle import Utilization, decide
    from guardrails.model import Node
    from guardrails.rules import idle_reclaim

    cfg = parse_config(
        f'dry_run: false\nstate: {{path: "{tmp_path}/s.db", audit_log: "{tmp_path}/a.jsonl"}}\n'
        "metrics_endpoint: {enabled: false}\n"
        f'safety: {{kill_switch_file: "{tmp_path}/stop"}}\n'
        f"burst_reconcile: {{enabled: {str(enabled).lower()}, stack: {STACK}, "
        f'slurm_bin_dir: "{slurm.dir}"}}\n',
        "g.yaml",
    )
    now = datetime.now(UTC)
    node = Node(
        iid, "us-east-1", "us-east-1a", "p5.48xlarge", "nvidia", 8, "on-demand",
        now - timedelta(hours=5), tags,
    )  # fmt: skip
    marked = now - timedelta(hours=3)
    d = decide(
        node,
        Utilization("idle", "all GPUs below 5% for 30m"),
        marked,
        now,
        idle_reclaim.idle_params(cfg),
    )
    assert d.step == "act", d
    state = State(cfg.state.path)
    dmn = Daemon(cfg, Aws(cfg.aws, boto3.session.Session(region_name="us-east-1")), state)
    try:
        dmn.leader = True
        dmn.actuator.begin_cycle([])
        idle_reclaim._apply(dmn.context(), node, d, {})
    finally:
        dmn.close()
        state.close()
    return [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]


def test_idle_reclaim_asks_slurm_to_power_down_a_burst_node(
    ec2: Any, slurm: FakeSlurm, tmp_path: Path
) -> None:
    """An idle instance tagged with a Slurm node is never stopped through EC2: Slurm is asked
    to drain it and power it down once its jobs end (State=POWER_DOWN_ASAP: no new job lands
    on it, none is killed); an untagged one is stopped as before."""
    iid = launch(ec2, "od-1")
    audit = _act_on(slurm, tmp_path, iid, {"coreburst-slurm-node": "od-1"}, enabled=True)
    assert state_of(ec2, iid) == "running"
    assert slurm.updates() == [["update", "nodename=od-1", "state=power_down_asap"]]
    (ex,) = [e for e in audit if e["event"] == "action.executed"]
    assert ex["kind"] == "power-down-when-idle" and ex["instance_id"] == "od-1"
    plain = launch(ec2, None)
    _act_on(slurm, tmp_path / "plain", plain, {}, enabled=True)
    assert state_of(ec2, plain) in ("stopping", "stopped")
    assert len(slurm.updates()) == 1


def test_idle_reclaim_leaves_a_burst_node_to_slurm_without_the_reconciler(
    ec2: Any, slurm: FakeSlurm, tmp_path: Path
) -> None:
    iid = launch(ec2, "od-1")
    audit = _act_on(slurm, tmp_path, iid, {"coreburst-slurm-node": "od-1"}, enabled=False)
    assert state_of(ec2, iid) == "running" and slurm.calls() == []
    (left,) = [e for e in audit if e["event"] == "reclaim.left-to-slurm"]
    assert "SuspendTime" in left["why"]


def test_spot_waiting_picks_spot_only_jobs_pending_long_enough() -> None:
    """squeue -h -t PD -o %i|%P|%V (squeue(1): job id, partitions, submit time); made up here in
    that format."""
    from coreburst.burst.reconcile import spot_waiting

    now = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    out = (
        "11|spot|2026-12-04T11:40:00\n"  # 20 min: falls back
        "12|spot|2026-12-04T11:55:00\n"  # 5 min: waits
        "13|spot,burst|2026-12-04T11:00:00\n"  # already may run on demand
        "14|core|2026-12-04T11:00:00\n"  # not a spot job
        "garbage line\n15|spot|not-a-time\n"
    )
    got = spot_waiting(out, now, timedelta(minutes=10), "spot", "burst")
    assert [(j, p) for j, p, _ in got] == [("11", "spot")]
    assert got[0][2] == 1200


FAKE_SQUEUE = """#!/bin/sh
# A fake squeue made for this test (not Slurm): it records its argv; "--json ..." answers with
# jobs.json, anything else with pending spot jobs in the -o %i|%P|%V format (squeue.txt).
here="$(dirname "$0")"
echo "$*" >> "$here/squeue-calls.txt"
case "$1" in
  --json) cat "$here/jobs.json" ;;
  *) cat "$here/squeue.txt" ;;
esac
"""


@pytest.mark.parametrize("release", RELEASES)
def test_spot_fallback_adds_its_reason_and_keeps_the_sites_comment(
    ec2: Any, slurm: FakeSlurm, tmp_path: Path, release: str
) -> None:
    """Job 11 waited 20 min for spot: the on-demand partition is added with the reason as a
    coreburst note after the job's own AdminComment (job 1 of the release's real
    ``squeue --json --states=all`` recording, tests/fixtures/slurm/README.md, as job 11: a
    site's text with two spaces and ``Partition=``, a user's Comment that reads like Slurm
    fields), which is read once for all jobs; the user's Comment is not in the note."""
    (slurm.dir / "jobs.json").write_text(
        squeue_json(squeue_job(11, like=1, release=release), release=release)
    )
    submitted = datetime.now(UTC) + timedelta(hours=1) - timedelta(minutes=20)
    (slurm.dir / "squeue.txt").write_text(f"11|spot|{submitted:%Y-%m-%dT%H:%M:%S}\n")
    squeue = slurm.dir / "squeue"
    squeue.write_text(FAKE_SQUEUE)
    squeue.chmod(squeue.stat().st_mode | stat.S_IEXEC)
    report, audit = cycle(tmp_path, slurm, extra=", spot_fallback: true, spot_fallback_after: 10m")
    assert not report.errors, report.errors
    (update,) = [c for c in slurm.updates() if c[1:2] == ["jobid=11"]]
    assert update[2] == "partition=spot,burst"
    assert update[3].startswith(
        "AdminComment=site: project=alpha  Partition=fake | ops | coreburst: pending 0:20:"
    )
    assert update[3].endswith("burst added; the burst spend gate checks the on-demand price")
    assert "keep me" not in update[3] and len(update) == 4
    squeued = (slurm.dir / "squeue-calls.txt").read_text().splitlines()
    assert squeued.count("--json --states=all") == 1
    assert not [c for c in slurm.calls() if c[:3] == ["-o", "show", "job"]]
    assert [e["job"] for e in audit if e.get("event") == "burst.spot_fallback"] == ["11"]


def test_a_refused_spot_fallback_is_not_said_done_and_is_decided_again(
    ec2: Any, slurm: FakeSlurm, tmp_path: Path
) -> None:
    """slurmctld 24.11 and 26.05 refuse a partition change for some seconds after a job's
    submission (scontrol: "Resource temporarily unavailable for job N", exit 1; seen on the
    lab, tests/integration/burst/test_capacity.py): that cycle says the action failed and not
    that the job fell back; the next cycle moves it, and says so once."""
    (slurm.dir / "jobs.json").write_text(
        squeue_json(squeue_job(11, like=2, release="24.11"), release="24.11")
    )
    submitted = datetime.now(UTC) + timedelta(hours=1) - timedelta(minutes=20)
    (slurm.dir / "squeue.txt").write_text(f"11|spot|{submitted:%Y-%m-%dT%H:%M:%S}\n")
    squeue = slurm.dir / "squeue"
    squeue.write_text(FAKE_SQUEUE)
    squeue.chmod(squeue.stat().st_mode | stat.S_IEXEC)
    (slurm.dir / "update-refused.txt").write_text("Resource temporarily unavailable for job 11\n")
    extra = ", spot_fallback: true, spot_fallback_after: 10m"
    report, audit = cycle(tmp_path, slurm, extra=extra)
    assert [e for e in audit if e.get("event") == "burst.spot_fallback"] == []
    (failed,) = [e for e in audit if e.get("event") == "action.failed"]
    assert failed["key"] == "burst-spot-fallback:11"
    assert "Resource temporarily unavailable for job 11" in str(failed["error"])
    report, audit = cycle(tmp_path, slurm, extra=extra)
    assert not report.errors, report.errors
    assert [e["job"] for e in audit if e.get("event") == "burst.spot_fallback"] == ["11"]
    moved = [c for c in slurm.updates() if c[1:3] == ["jobid=11", "partition=spot,burst"]]
    assert len(moved) == 2  # refused, then taken
