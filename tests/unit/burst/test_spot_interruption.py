"""The ``spot-interruption`` rule on moto (in process: SQS and EC2) with fake Slurm tools made
here (``scontrol``, ``squeue``, ``scancel``: they record their argv and answer from files),
run by the daemon (its gate: dry-run, kill switch, leader lease, audit, run-once intents). The
real slurmctld is in tests/integration/burst/test_spot_interruption.py.

The events are the examples AWS publishes (tests/fixtures/aws/events/: Amazon EC2 User Guide,
"Spot Instance interruption notices" and "EC2 instance rebalance recommendations"), with the
instance id of an instance launched on moto. IAM actions are ``<service>:<Operation>`` of
botocore's service models ("Actions defined by Amazon SQS" / "... Amazon EC2", Service
Authorization Reference).
"""

from __future__ import annotations

import copy
import json
import re
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import moto.sqs.models
import pytest
from moto import mock_aws

from coreburst.burst.spot_interruption import (
    MAX_TRIES,
    REASON_PREFIX,
    WATCH_KEY,
    SpotEvent,
    parse_event,
)
from coreburst.sandbox.clocks import FakeClock
from guardrails.adapters.aws import Aws
from guardrails.config import ConfigError
from guardrails.configfile import parse_config
from guardrails.daemon import Daemon
from guardrails.rules import REGISTRY
from guardrails.stores.sqlite import State
from tests.helpers.burst import AMI
from tests.helpers.slurm_fakes import node_line, squeue_job, squeue_json

EVENTS = Path(__file__).resolve().parents[2] / "fixtures" / "aws" / "events"
T0 = datetime(2026, 12, 4, 1, 0, tzinfo=UTC)

FAKE_TOOL = """#!{python}
# A fake Slurm client made for these tests (not Slurm), installed as scontrol, squeue and
# scancel: it records its name and argv, answers "scontrol -o show nodes" with nodes.txt,
# "scontrol -o show job N" with job-N.txt (or Slurm's "Invalid job id specified" error),
# "squeue --json ..." with squeue-json.txt, any other squeue with squeue.txt, "scontrol --json
# ..." as Slurm 22.05 does (it has no --json), "scontrol requeue N" by listing job N in
# squeue-json.txt as real 22.05-26.05 slurmctlds list a job they have just requeued (pending,
# restart count up, held: Reason=BeginTime; tests/fixtures/slurm/squeue-requeued-*), and every
# other call with nothing.
import json, pathlib, sys
here = pathlib.Path(sys.argv[0]).parent
tool, args = pathlib.Path(sys.argv[0]).name, sys.argv[1:]
with open(here / "calls.jsonl", "a") as f:
    f.write(json.dumps([tool, *args]) + "\\n")
def show(name):
    p = here / name
    print(p.read_text() if p.exists() else "", end="")
if tool == "scontrol" and args[:3] == ["-o", "show", "nodes"]:
    show("nodes.txt")
elif tool == "scontrol" and args[:1] == ["--json"]:
    print("scontrol: unrecognized option '--json'", file=sys.stderr)
    sys.exit(1)
elif tool == "scontrol" and args[:3] == ["-o", "show", "job"]:
    if not (here / f"job-{{args[3]}}.txt").exists():
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        sys.exit(1)
    show(f"job-{{args[3]}}.txt")
elif tool == "squeue" and args[:1] == ["--json"]:
    show("squeue-json.txt")
elif tool == "squeue":
    show("squeue.txt")
elif tool == "scontrol" and args[:1] == ["requeue"]:
    listed = here / "squeue-json.txt"
    doc = json.loads(listed.read_text())
    for j in doc["jobs"]:
        if str(j["job_id"]) == args[1]:
            j.update(job_state="PENDING", state_reason="BeginTime",
                     restart_cnt=j["restart_cnt"] + 1)
    listed.write_text(json.dumps(doc))
"""


# A real ``scontrol -o show job`` line of Slurm 22.05.8 (tests/fixtures/slurm/README.md: job 2
# there, no AdminComment); job_line gives it this test's id, state, restarts, node and partition.
RECORDED = next(
    line
    for line in (
        Path(__file__).parents[2] / "fixtures" / "slurm" / "scontrol-show-job-22.05-recorded.txt"
    )
    .read_text()
    .splitlines()
    if line.startswith("JobId=2 ")
)


def job_line(
    job: str, state: str, restarts: int, node: str = "sp-1", comment: str | None = None
) -> str:
    """Job ``job`` as ``scontrol -o show job`` prints it (the recording, fields replaced)."""
    line = RECORDED
    for key, value in (
        ("JobId", job), ("JobState", state), ("Restarts", str(restarts)), ("NodeList", node),
        ("Partition", "spot"),
    ):  # fmt: skip
        line = re.sub(rf"\b{key}=\S*", f"{key}={value}".replace("\\", "\\\\"), line, count=1)
    if comment is not None:  # where Slurm prints it (src/api/job_info.c), as recorded
        line = line.replace(" StdErr=", f" AdminComment={comment}  StdErr=", 1)
    return line


class FakeSlurm:
    def __init__(self, bin_dir: Path) -> None:
        self.dir = bin_dir
        bin_dir.mkdir(parents=True, exist_ok=True)
        for tool in ("scontrol", "squeue", "scancel"):
            exe = bin_dir / tool
            exe.write_text(FAKE_TOOL.format(python=sys.executable))
            exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
        (self.dir / "squeue-json.txt").write_text(squeue_json())

    def job(
        self, jid: str, state: str, restarts: int, node: str = "sp-1", comment: str = ""
    ) -> None:
        """Job ``jid`` as ``scontrol -o show job N`` prints it (:func:`job_line`) and in
        ``squeue --json --states=all`` (job 2 of the real 22.05 recording: squeue_job), with
        ``comment`` as its AdminComment."""
        (self.dir / f"job-{jid}.txt").write_text(
            job_line(jid, state, restarts, node, comment or None) + "\n"
        )
        obj = squeue_job(jid, admin_comment=comment)
        obj.update(job_state=state, restart_cnt=restarts, nodes=node, partition="spot")
        (self.dir / f"job-{jid}.json").write_text(json.dumps(obj))
        listed = [json.loads(p.read_text()) for p in sorted(self.dir.glob("job-*.json"))]
        (self.dir / "squeue-json.txt").write_text(squeue_json(*listed))

    def node(self, state: str, reason: str = "", boot: str = "2026-12-04T00:50:00") -> None:
        lines = [node_line("sp-1", state, reason, boot), node_line("core1", "IDLE")]
        (self.dir / "nodes.txt").write_text("".join(f"{ln}\n" for ln in lines))

    def jobs(self, **jobs: tuple[str, int]) -> None:
        """Jobs on sp-1: id -> (state, restarts); squeue lists the running ones."""
        rows = ""
        for job, (state, restarts) in jobs.items():
            jid = job.lstrip("j")
            self.job(jid, state, restarts)
            if state == "RUNNING":
                rows += f"{jid:<40} {restarts:<12} \n"
        (self.dir / "squeue.txt").write_text(rows)

    def calls(self) -> list[list[str]]:
        path = self.dir / "calls.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    def writes(self) -> list[list[str]]:
        """Every call that changes Slurm: scontrol update/requeue, scancel."""
        return [c for c in self.calls() if c[0] == "scancel" or c[1:2] in (["update"], ["requeue"])]

    def clear(self) -> None:
        (self.dir / "calls.jsonl").unlink(missing_ok=True)


@dataclass
class World:
    sqs: Any
    ec2: Any
    queue: str
    slurm: FakeSlurm
    tmp: Path
    clock: FakeClock
    called: list[str]

    def config(self, **spot: Any) -> str:
        section = {"enabled": True, "queue_url": self.queue, "grace": "90s", **spot}
        return (
            "rules: [spot-interruption]\ndry_run: false\n"
            f'state: {{path: "{self.tmp}/s.db", audit_log: "{self.tmp}/a.jsonl"}}\n'
            "metrics_endpoint: {enabled: false}\n"
            f'safety: {{kill_switch_file: "{self.tmp}/stop"}}\n'
            f'burst_reconcile: {{stack: lab, slurm_bin_dir: "{self.slurm.dir}"}}\n'
            f"spot_interruption: {json.dumps(section)}\n"
        )

    def launch(self, node: str | None = "sp-1", stack: str = "lab") -> str:
        tags = [{"Key": "coreburst-stack", "Value": stack}]
        if node:
            tags.append({"Key": "coreburst-slurm-node", "Value": node})
        resp = self.ec2.run_instances(
            ImageId=AMI, InstanceType="p5.48xlarge", MinCount=1, MaxCount=1,
            InstanceMarketOptions={"MarketType": "spot"},
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
        )  # fmt: skip
        return str(resp["Instances"][0]["InstanceId"])

    def send(self, fixture: str, iid: str, event_id: str = "e-1") -> dict[str, Any]:
        """The documented event, for ``iid`` in us-east-1, onto the queue as EventBridge
        delivers it (the event itself is the body)."""
        event = json.loads((EVENTS / fixture).read_text())
        event.update(id=event_id, region="us-east-1")
        event["detail"]["instance-id"] = iid
        self.sqs.send_message(QueueUrl=self.queue, MessageBody=json.dumps(event))
        return dict(event)

    def cycle(self, cfg_text: str | None = None, **spot: Any) -> tuple[Any, list[dict[str, Any]]]:
        cfg = parse_config(cfg_text or self.config(**spot), "g.yaml")
        log = cfg.state.audit_log
        before = log.read_text().count("\n") if log.exists() else 0
        state = State(cfg.state.path)
        session = boto3.session.Session(region_name="us-east-1")
        session.events.register(
            "before-call",
            lambda model, **_: self.called.append(  # type: ignore[misc]
                f"{model.service_model.service_name}:{model.name}"
            ),
        )
        d = Daemon(cfg, Aws(cfg.aws, session), state, clock=self.clock)
        try:
            report = d.run_cycle()
        finally:
            d.close()
            state.close()
        return report, [json.loads(x) for x in log.read_text().splitlines()[before:]]

    def instances_live(self, node: str) -> list[str]:
        resp = self.ec2.describe_instances(
            Filters=[
                {"Name": "tag:coreburst-slurm-node", "Values": [node]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ]
        )
        return [i["InstanceId"] for r in resp["Reservations"] for i in r["Instances"]]

    def queued(self) -> int:
        attrs = self.sqs.get_queue_attributes(
            QueueUrl=self.queue,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(
            attrs["ApproximateNumberOfMessagesNotVisible"]
        )

    def state(self) -> State:
        return State(self.tmp / "s.db")

    def outbox(self) -> list[dict[str, Any]]:
        st = self.state()
        try:
            return [json.loads(r["payload"]) | {"key": r["dedupe_key"]} for r in st.outbox_rows()]
        finally:
            st.close()

    def watch(self) -> dict[str, Any]:
        st = self.state()
        try:
            return dict(st.get(WATCH_KEY) or {})
        finally:
            st.close()


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    for var in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "COREBURST_KILL_SWITCH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue = sqs.create_queue(QueueName="spot-events")["QueueUrl"]
        slurm = FakeSlurm(tmp_path / "slurm-bin")
        slurm.node("ALLOCATED+CLOUD")
        yield World(
            sqs, boto3.client("ec2", region_name="us-east-1"), queue, slurm, tmp_path,
            FakeClock(T0), [],
        )  # fmt: skip


def _executed(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["kind"], e["instance_id"]) for e in events if e["event"] == "action.executed"]


def _text(alert: dict[str, Any]) -> str:
    return json.dumps(alert)


# -- the documented events ---------------------------------------------------------------------
def test_the_documented_events_parse() -> None:
    warn = parse_event((EVENTS / "spot_interruption_warning.json").read_text())
    rebal = parse_event((EVENTS / "rebalance_recommendation.json").read_text())
    assert warn == SpotEvent(
        "12345678-1234-1234-1234-123456789012", "interruption", "i-1234567890abcdef0",
        "us-east-2", "2026-12-04T01:00:00Z", "terminate",
    )  # fmt: skip
    assert isinstance(rebal, SpotEvent)
    assert (rebal.kind, rebal.instance_id, rebal.action) == (
        "rebalance",
        "i-1234567890abcdef0",
        "",
    )


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("", "not JSON"),
        ("[1]", "not a JSON object"),
        ('{"detail-type": "EC2 Instance State-change Notification"}', "is neither"),
        ('{"detail-type": "EC2 Instance Rebalance Recommendation", "detail": {}}', "instance-id"),
        (
            '{"detail-type": "EC2 Instance Rebalance Recommendation",'
            ' "detail": {"instance-id": "i-0123456789abcdef0"}}',
            "id or region missing",
        ),
    ],
)
def test_malformed_messages_say_why(body: str, why: str) -> None:
    got = parse_event(body)
    assert isinstance(got, str) and why in got


# -- interruption warning ----------------------------------------------------------------------
def test_warning_drains_signals_then_requeues_after_grace_and_returns_the_node(
    world: World,
) -> None:
    iid = world.launch()
    world.slurm.jobs(j42=("RUNNING", 0))
    world.send("spot_interruption_warning.json", iid)

    report, events = world.cycle()
    assert report.errors == []
    reason = f"reason={REASON_PREFIX}interruption {iid}"
    assert world.slurm.writes()[:2] == [
        ["scontrol", "update", "nodename=sp-1", "state=drain", reason],
        ["scancel", "--signal=USR1", "--batch", "42"],
    ]
    (note,) = [c for c in world.slurm.writes() if c[1:3] == ["update", "jobid=42"]]
    assert note[3].startswith("AdminComment=coreburst: spot interruption warning")
    assert "sent SIGUSR1 (batch); requeue by 01:01:30Z" in note[3]
    assert "warning (terminate at 01:02:00Z)" in note[3]  # the event's time + 2 min
    assert _executed(events) == [("drain", "sp-1"), ("signal", "sp-1")]
    assert world.queued() == 0  # settled: the message is gone
    (alert,) = world.outbox()
    assert alert["key"] == "spot:e-1" and "Spot interruption: burst node sp-1" in _text(alert)
    assert world.watch()[iid]["jobs"] == {"42": 0}

    # Within the grace nothing more happens.
    world.slurm.clear()
    world.slurm.node("ALLOCATED+CLOUD+DRAIN", f"{REASON_PREFIX}interruption {iid}")
    world.clock.advance(timedelta(seconds=60))
    world.cycle()
    assert world.slurm.writes() == []

    # After it: the job is requeued (its reason on it) and the node powered down.
    world.clock.advance(timedelta(seconds=31))
    report, events = world.cycle()
    assert report.errors == []
    # ... and, once the node is being powered down, the job's requeue hold is lifted
    assert _executed(events) == [
        ("requeue", "sp-1"), ("power-down", "sp-1"), ("lift-hold", "sp-1"),
    ]  # fmt: skip
    writes = world.slurm.writes()
    assert writes[0] == ["scontrol", "requeue", "42"]
    assert writes[1][3].startswith("AdminComment=coreburst: requeued 2026-12-04 01:01:31Z")
    assert "(1m30s after the signal)" in writes[1][3]
    assert writes[2] == ["scontrol", "update", "nodename=sp-1", "state=power_down_force"]
    assert writes[3] == ["scontrol", "update", "jobid=42", "StartTime=now"]
    assert "jobs on sp-1 requeued" in _text(world.outbox()[-1])

    # Powered down but still drained by us: undrained; then it is back in the pool.
    world.slurm.clear()
    world.slurm.jobs(j42=("PENDING", 1))
    world.slurm.node("IDLE+DRAIN+CLOUD+POWERED_DOWN", f"{REASON_PREFIX}interruption {iid}")
    _, events = world.cycle()
    assert _executed(events) == [("return-to-pool", "sp-1")]
    assert world.slurm.writes() == [["scontrol", "update", "nodename=sp-1", "state=resume"]]
    world.slurm.node("IDLE+CLOUD+POWERED_DOWN")
    _, events = world.cycle()
    assert [e["node"] for e in events if e["event"] == "spot.returned"] == ["sp-1"]
    assert world.watch() == {}
    assert "back in the pool" in _text(world.outbox()[-1])


def test_the_spot_notes_keep_the_sites_comment_and_the_bursting_note(world: World) -> None:
    """Job 42's AdminComment holds a site's text and the resume program's bursting note (a
    note of another kind): the warning, then the requeue, replace only each other."""
    site = "site: project=alpha  Partition=fake | ops"  # as recorded (tests/fixtures/slurm)
    burst = "coreburst: bursting on sp-1 (1 x p5en.48xlarge spot): $30.00/h"
    iid = world.launch()
    world.slurm.jobs(j42=("RUNNING", 0))
    world.slurm.job("42", "RUNNING", 0, comment=f"{site} | {burst}")
    world.send("spot_interruption_warning.json", iid)
    world.cycle()
    (note,) = [c for c in world.slurm.writes() if c[1:3] == ["update", "jobid=42"]]
    parts = note[3].removeprefix("AdminComment=").split(" | ")
    assert parts[:2] == ["site: project=alpha  Partition=fake", "ops"] and parts[3] == burst
    assert parts[2].startswith("coreburst: spot interruption warning") and len(parts) == 4
    assert world.slurm.calls().count(["squeue", "--json", "--states=all"]) == 1

    world.slurm.clear()  # Slurm now shows the note written above
    world.slurm.job("42", "RUNNING", 0, comment=" | ".join(parts))
    world.slurm.node("ALLOCATED+CLOUD+DRAIN", f"{REASON_PREFIX}interruption {iid}")
    world.clock.advance(timedelta(seconds=91))
    world.cycle()
    (note,) = [
        c for c in world.slurm.writes() if c[1:3] == ["update", "jobid=42"] and "Admin" in c[3]
    ]
    after = note[3].removeprefix("AdminComment=").split(" | ")
    assert after[:2] == parts[:2] and after[3] == burst and len(after) == 4
    assert after[2].startswith("coreburst: requeued 2026-12-04 01:01:31Z")
    # the requeue read the job's state once (scontrol), the note every job's comment once
    # (squeue --json), and the lift of its requeue hold every job once more (its hold)
    assert [c for c in world.slurm.calls() if c[1:4] == ["-o", "show", "job"]] == [
        ["scontrol", "-o", "show", "job", "42"]
    ]
    assert world.slurm.calls().count(["squeue", "--json", "--states=all"]) == 2


def test_instance_gone_requeues_at_once_and_never_a_job_that_left_the_node(
    world: World,
) -> None:
    iid = world.launch()
    world.slurm.jobs(j7=("RUNNING", 0), j8=("RUNNING", 2))
    world.send("spot_interruption_warning.json", iid)
    world.cycle(grace="10m")
    world.slurm.clear()
    # Job 8 was requeued meanwhile by someone else and runs elsewhere (its restart count
    # moved on); job 7 still runs on sp-1. EC2 takes the instance.
    world.slurm.jobs(j7=("RUNNING", 0))
    world.slurm.job("8", "RUNNING", 3, node="sp-2")
    world.ec2.terminate_instances(InstanceIds=[iid])
    _, events = world.cycle(grace="10m")
    assert [c for c in world.slurm.writes() if c[1] == "requeue"] == [["scontrol", "requeue", "7"]]
    left = [e for e in events if e["event"] == "spot.job-left"]
    assert [(e["job"], e["restarts"]) for e in left] == [("8", 3)]
    assert "its instance is gone" in next(
        c[3] for c in world.slurm.writes() if c[1:3] == ["update", "jobid=7"]
    )
    # the node is set DOWN before its forced power-down (Slurm ends the lost run at once),
    # then job 7's requeue hold is lifted; job 8 is not this rule's
    node_writes = [c[3:] for c in world.slurm.writes() if c[1:3] == ["update", "nodename=sp-1"]]
    assert node_writes == [
        ["state=down", f"reason={REASON_PREFIX}interruption {iid}: instance gone"],
        ["state=power_down_force"],
    ]
    lifts = [c[2] for c in world.slurm.writes() if c[3:] == ["StartTime=now"]]
    assert lifts == ["jobid=7"]


def test_a_node_booted_again_is_never_touched_for_the_old_instance(world: World) -> None:
    """Between the warning and the requeue the node got a new instance (a new boot): the jobs
    on it now are not the warned instance's. A late warning for an instance already gone,
    while another instance carries the node, is left alone too."""
    iid = world.launch()
    world.slurm.jobs(j42=("RUNNING", 0))
    world.send("spot_interruption_warning.json", iid)
    world.cycle(grace="10m")
    world.ec2.terminate_instances(InstanceIds=[iid])
    new = world.launch()
    world.slurm.clear()
    world.slurm.node("ALLOCATED+CLOUD", boot="2026-12-04T01:05:00")
    world.slurm.jobs(j43=("RUNNING", 0))
    _, events = world.cycle(grace="10m")
    assert world.slurm.writes() == []
    assert [e["why"] for e in events if e["event"] == "spot.done"] == [
        "node sp-1 booted again (2026-12-04T01:05:00)"
    ]
    assert world.watch() == {}

    world.send("spot_interruption_warning.json", iid, event_id="late")
    _, events = world.cycle(grace="10m")
    assert world.slurm.writes() == []
    (ignored,) = [e for e in events if e["event"] == "spot.ignored"]
    assert ignored["instance_id"] == iid and "has another" in ignored["why"]
    assert world.instances_live("sp-1") == [new]


def test_a_duplicate_event_acts_once(world: World) -> None:
    iid = world.launch()
    world.slurm.jobs(j42=("RUNNING", 0))
    world.send("spot_interruption_warning.json", iid, event_id="dup")
    world.cycle()
    world.slurm.clear()
    world.send("spot_interruption_warning.json", iid, event_id="dup")  # delivered again
    _, events = world.cycle()
    assert world.slurm.writes() == []
    assert [e["event_id"] for e in events if e["event"] == "spot.duplicate"] == ["dup"]
    assert world.queued() == 0


def test_a_failing_drain_leaves_the_message_for_the_next_cycle(world: World) -> None:
    iid = world.launch()
    (world.slurm.dir / "scontrol").write_text(
        f"#!{sys.executable}\nimport sys\n"
        "if 'update' in sys.argv: sys.exit(print('slurm_update error: Unable to contact slurm "
        "controller', file=sys.stderr) or 1)\n"
        "if '--json' in sys.argv: sys.exit(print(\"scontrol: unrecognized option '--json'\", "
        "file=sys.stderr) or 1)\n"
        "print(open(__file__.rsplit('/', 1)[0] + '/nodes.txt').read(), end='')\n"
    )
    world.send("spot_interruption_warning.json", iid)
    report, events = world.cycle()
    assert any("Unable to contact slurm controller" in e for e in report.errors)
    assert world.queued() == 1 and world.watch() == {}
    assert [e["event"] for e in events if e["event"].startswith("action.")] == ["action.failed"]


# -- rebalance ---------------------------------------------------------------------------------
def test_rebalance_drains_and_notifies_without_signal_or_requeue(world: World) -> None:
    iid = world.launch()
    world.slurm.jobs(j42=("RUNNING", 0))
    world.send("rebalance_recommendation.json", iid)
    _, events = world.cycle()
    assert _executed(events) == [("drain", "sp-1")]
    assert not [c for c in world.slurm.calls() if c[0] == "scancel"]
    (alert,) = world.outbox()
    assert "Spot rebalance: burst node sp-1" in _text(alert) and "run on" in _text(alert)
    world.slurm.clear()
    world.clock.advance(timedelta(hours=1))
    world.cycle()
    assert world.slurm.writes() == []  # the job runs on; no grace for a rebalance

    # The warning follows: now the job is signalled (the drain reason says interruption).
    world.send("spot_interruption_warning.json", iid, event_id="e-2")
    world.slurm.node("ALLOCATED+CLOUD+DRAIN", f"{REASON_PREFIX}rebalance {iid}")
    _, events = world.cycle()
    assert _executed(events) == [("drain", "sp-1"), ("signal", "sp-1")]


def test_rebalance_signal_is_configurable(world: World) -> None:
    iid = world.launch()
    world.slurm.jobs(j42=("RUNNING", 0))
    world.send("rebalance_recommendation.json", iid)
    world.cycle(rebalance_signal=True, signal="TERM", signal_to="full")
    assert ["scancel", "--signal=TERM", "--full", "42"] in world.slurm.writes()


# -- safety ------------------------------------------------------------------------------------
def test_rule_dry_run_reports_and_changes_nothing(world: World) -> None:
    iid = world.launch()
    world.slurm.jobs(j42=("RUNNING", 0))
    world.send("spot_interruption_warning.json", iid)
    _, events = world.cycle(dry_run=True)
    assert world.slurm.writes() == []
    skipped = [e for e in events if e["event"] == "action.skipped"]
    assert {e["because"] for e in skipped} == {"spot_interruption.dry_run"}
    assert [e["kind"] for e in skipped] == ["drain", "signal"]
    (alert,) = world.outbox()
    assert "would drain" in _text(alert) and "Dry-run: nothing was done." in _text(alert)
    assert world.queued() == 0 and world.watch() == {}


def test_kill_switch_leaves_the_queue_to_later(world: World) -> None:
    iid = world.launch()
    world.slurm.jobs(j42=("RUNNING", 0))
    world.send("spot_interruption_warning.json", iid)
    (world.tmp / "stop").touch()
    _, events = world.cycle()
    assert world.slurm.calls() == []
    assert [e["because"] for e in events if e["event"] == "spot.deferred"] == [
        f"kill switch: {world.tmp}/stop exists"
    ]
    assert world.queued() == 1  # never received: still visible to the next cycle
    (world.tmp / "stop").unlink()
    _, events = world.cycle()
    assert _executed(events) == [("drain", "sp-1"), ("signal", "sp-1")]


def test_a_cap_reached_before_the_signal_keeps_the_message_and_requeues_nothing(
    world: World,
) -> None:
    iid = world.launch()
    world.slurm.jobs(j42=("RUNNING", 0))
    world.send("spot_interruption_warning.json", iid)
    capped = world.config().replace("safety: {", "safety: {max_actions_per_cycle: 1, ")
    _, events = world.cycle(capped)
    assert _executed(events) == [("drain", "sp-1")]
    (skipped,) = [e for e in events if e["event"] == "action.skipped"]
    assert skipped["kind"] == "signal" and "cap of 1" in skipped["because"]
    # Not settled: no watch record (so no requeue without the signal), the message stays.
    assert world.watch() == {} and world.queued() == 1
    assert [c for c in world.slurm.writes() if c[0] == "scancel" or c[1] == "requeue"] == []


@pytest.mark.parametrize(
    ("node", "stack"),
    [(None, "lab"), ("sp-1", "other-stack")],
    ids=["no-node-tag", "other-stack"],
)
def test_an_instance_that_is_no_burst_node_is_left_alone(
    world: World, node: str | None, stack: str
) -> None:
    iid = world.launch(node, stack)
    world.send("spot_interruption_warning.json", iid)
    _, events = world.cycle()
    assert world.slurm.writes() == []
    assert [e["instance_id"] for e in events if e["event"] == "spot.ignored"] == [iid]
    assert world.queued() == 0


def test_an_unreadable_message_is_reported_and_dropped(world: World) -> None:
    world.sqs.send_message(QueueUrl=world.queue, MessageBody="\udcff not json".encode(
        "utf-8", "surrogateescape").decode("latin-1"))  # fmt: skip
    report, events = world.cycle()
    assert [e["why"] for e in events if e["event"] == "spot.unreadable"] == ["not JSON"]
    assert report.errors and world.queued() == 0 and world.slurm.calls() == []


def _later(world: World, monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """The next cycle, ``seconds`` on: the daemon's clock, and moto's SQS clock (what makes a
    received message visible again after its VisibilityTimeout)."""
    world.clock.advance(timedelta(seconds=seconds))
    real = moto.sqs.models.unix_time_millis
    monkeypatch.setattr(moto.sqs.models, "unix_time_millis", lambda: real() + seconds * 1000)


def _set_aside_alerts(world: World) -> list[dict[str, Any]]:
    return [a for a in world.outbox() if a["key"].startswith("spot:set-aside:")]


def test_a_lone_surrogate_in_the_id_is_set_aside_and_the_warning_behind_it_acts(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33: an event id holding text that is not valid UTF-8 (a lone surrogate, as the
    JSON escape \\udc80 decodes) failed the rule in every cycle, and a real warning queued
    behind it was never acted on. It is set aside at once with one alert; the warning is acted
    on in the same cycle."""
    iid = world.launch()
    world.slurm.jobs(j42=("RUNNING", 0))
    poison = json.loads((EVENTS / "spot_interruption_warning.json").read_text())
    poison.update(id="e-\udc80-1", region="us-east-1")
    poison["detail"]["instance-id"] = iid
    body = json.dumps(poison)  # JSON's own escape: valid JSON, its id not valid text
    assert '"id": "e-\\udc80-1"' in body
    world.sqs.send_message(QueueUrl=world.queue, MessageBody=body)
    world.send("spot_interruption_warning.json", iid, event_id="real")

    report, events = world.cycle()
    assert [w[:2] for w in world.slurm.writes()[:2]] == [
        ["scontrol", "update"], ["scancel", "--signal=USR1"],
    ]  # fmt: skip
    assert world.watch()[iid]["event_id"] == "real"
    (aside,) = [e for e in events if e["event"] == "spot.set-aside"]
    assert aside["why"] == "id 'e-\\\\udc80-1' is not valid Unicode text" and aside["tries"] == 1
    assert any("set aside: id 'e-\\\\udc80-1'" in e for e in report.errors)
    (alert,) = _set_aside_alerts(world)
    # the alert's JSON doubles each backslash of the escaped id
    assert "Why: id 'e-\\\\\\\\udc80-1' is not valid Unicode text" in _text(alert)
    assert world.queued() == 0

    _later(world, monkeypatch, 60)
    _, events = world.cycle()
    assert not [e for e in events if e["event"].startswith("spot.set-aside")]
    assert len(_set_aside_alerts(world)) == 1


def test_a_message_failing_every_cycle_is_set_aside_after_max_tries(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warning whose node cannot be drained (Slurm refuses that node) is tried MAX_TRIES
    times (SQS's ApproximateReceiveCount), then deleted with one alert; the warning behind it
    is acted on in the first cycle."""
    lines = [node_line(n, "ALLOCATED+CLOUD", "", "2026-12-04T00:50:00") for n in ("sp-bad", "sp-1")]
    (world.slurm.dir / "nodes.txt").write_text("".join(f"{ln}\n" for ln in lines))
    tool = world.slurm.dir / "scontrol"
    shebang, rest = tool.read_text().split("\n", 1)
    tool.write_text(
        f"{shebang}\nimport sys\nif 'update' in sys.argv and 'nodename=sp-bad' in sys.argv:\n"
        "    sys.exit(print('slurm_update error: Invalid node name specified', file=sys.stderr)"
        f" or 1)\n{rest}"
    )
    bad, good = world.launch("sp-bad"), world.launch("sp-1")
    world.send("spot_interruption_warning.json", bad, event_id="bad")
    world.send("spot_interruption_warning.json", good, event_id="good")

    tries = []
    for cycle in range(1, MAX_TRIES + 1):
        report, events = world.cycle()
        if cycle == 1:
            assert world.watch().keys() == {good}  # acted on behind the failing one
        tries += [(e["event"], e["tries"]) for e in events if e["event"].startswith("spot.")
                  and e.get("event_id", "bad") == "bad" and "tries" in e]  # fmt: skip
        assert any("Invalid node name specified" in e for e in report.errors)
        _later(world, monkeypatch, 31 * cycle)
    assert tries == [("spot.retry", n) for n in range(1, MAX_TRIES)] + [
        ("spot.set-aside", MAX_TRIES)
    ]
    (alert,) = _set_aside_alerts(world)
    assert f"spot interruption of {bad}, event bad" in _text(alert)
    assert f"after {MAX_TRIES} deliveries" in _text(alert)
    assert world.queued() == 0
    world.cycle()
    assert len(_set_aside_alerts(world)) == 1


def test_declares_exactly_the_aws_calls_it_makes(world: World) -> None:
    iid = world.launch()
    world.slurm.jobs(j42=("RUNNING", 0))
    world.send("spot_interruption_warning.json", iid)
    world.called.clear()
    world.cycle()
    world.ec2.terminate_instances(InstanceIds=[iid])
    world.cycle()
    mine = {c for c in world.called if c.startswith(("sqs:", "ec2:DescribeInstances"))}
    session = botocore.session.get_session()
    for call in mine:
        service, _, op = call.partition(":")
        assert op in session.get_service_model(service).operation_names
    assert mine == set(REGISTRY["spot-interruption"].iam_actions)


# -- config ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("{signal: KILL}", "spot_interruption.signal: Input should be 'USR1'"),
        ("{signal_to: children}", "spot_interruption.signal_to: Input should be 'batch'"),
        ("{grace: 1s}", "spot_interruption.grace: 1s is out of range; allowed 5s to 10m"),
        ("{enabled: true, queue_url: https://x}", "needs burst_reconcile.stack"),
    ],
)
def test_bad_config_is_one_line_naming_the_key(section: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(f"spot_interruption: {section}\n", "g.yaml")
    text = str(err.value)
    assert message in text and "\n" not in text, text


# -- the stack: EventBridge rules, the queue and the role --------------------------------------
def test_the_stack_routes_both_events_to_the_queue_and_grants_only_it() -> None:
    from infra.offline import FAKE_ACCOUNT, evaluate_config, load_stack_yaml

    ev = evaluate_config("prod", copy.deepcopy(load_stack_yaml("prod")))
    patterns = sorted(
        json.loads(ev.named(f"guardrails-spot-{k}").inputs["eventPattern"])["detail-type"][0]
        for k in ("interruption", "rebalance")
    )
    # The detail-types and source the Amazon EC2 User Guide gives for the two events.
    assert patterns == [
        "EC2 Instance Rebalance Recommendation",
        "EC2 Spot Instance Interruption Warning",
    ]
    for k in ("interruption", "rebalance"):
        pattern = json.loads(ev.named(f"guardrails-spot-{k}").inputs["eventPattern"])
        assert pattern["source"] == ["aws.ec2"]
        target = ev.named(f"guardrails-spot-{k}-to-queue").inputs
        assert ":sqs:" in target["arn"] and "spot-events" in target["arn"]
    (send,) = json.loads(ev.named("guardrails-spot-events-policy").inputs["policy"])["Statement"]
    assert send["Principal"] == {"Service": "events.amazonaws.com"}
    assert send["Action"] == "sqs:SendMessage"
    sources = send["Condition"]["ArnEquals"]["aws:SourceArn"]
    # Only the two rules may send (their ARNs; the offline mocks make up the ARN's form).
    names = {s.rsplit(":", 1)[-1].rsplit("/", 1)[-1] for s in sources}
    assert names == {"guardrails-spot-interruption", "guardrails-spot-rebalance"}, sources
    assert all(FAKE_ACCOUNT in s for s in sources)
    policy = json.loads(ev.named("guardrails-role-policy").inputs["policy"])
    spot_arn = send["Resource"]
    on_queue = [s for s in policy["Statement"] if spot_arn in json.dumps(s["Resource"])]
    assert [sorted(s["Action"]) for s in on_queue] == [["sqs:DeleteMessage", "sqs:ReceiveMessage"]]
    for stmt in policy["Statement"]:  # no SQS grant on "*"
        acts = stmt["Action"] if isinstance(stmt["Action"], list) else [stmt["Action"]]
        assert stmt["Resource"] != "*" or not [a for a in acts if a.startswith("sqs:")], stmt
