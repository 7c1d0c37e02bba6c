"""A spot interruption on a real slurmctld (Debian slurm-wlm 22.05) with EC2 and SQS on moto
server, acted on by the guardrails daemon's ``spot-interruption`` rule (one cycle at a time,
not dry-run).

A job in the spot partition runs on ``sp-1`` (its spot instance launched by the real resume
program); its batch script traps SIGUSR1. EC2's "EC2 Spot Instance Interruption Warning" for
that instance (the example event of the Amazon EC2 User Guide, "Spot Instance interruption
notices": tests/fixtures/aws/events/spot_interruption_warning.json, with this instance's id) is
put on the queue as EventBridge delivers it. One cycle drains the node with the reason and
signals the batch shell (the script sees it); EC2 then reclaims the instance (terminated on
moto, and the lab stops the node's slurmd as a lost instance would); the next cycle requeues
the job with the reason in its AdminComment, powers the node down and lifts the job's requeue
hold where Slurm set one (it could start again at once; the spot pool is kept from it here),
and the node is back in the pool (``idle~``) with no instance left behind.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from coreburst.burst import requeue_hold
from coreburst.burst.spot_interruption import REASON_PREFIX
from coreburst.sandbox.emulator import fake_session
from coreburst.sandbox.slurmlab import BurstLab, burst_lab, missing_prerequisite
from guardrails.adapters.aws import Aws
from guardrails.configfile import parse_config
from guardrails.daemon import Daemon
from guardrails.stores.sqlite import State
from tests.helpers.prereq import require

pytestmark = pytest.mark.integration

EVENTS = Path(__file__).resolve().parents[2] / "fixtures" / "aws" / "events"
KEEP = "test-keep-sp"
SCRIPT = """#!/bin/bash
# Checkpoint on SIGUSR1 (here: say so in a file), then go on until Slurm stops the job.
trap 'echo "USR1 $SLURM_JOB_ID $SLURM_RESTART_COUNT" >> {out}' USR1
for i in $(seq 600); do sleep 1; done
"""


@pytest.fixture(scope="module", name="lab")
def lab_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BurstLab]:
    require(missing_prerequisite())
    with burst_lab(tmp_path_factory.mktemp("spotlab")) as lab:
        yield lab


def _job(lab: BurstLab, job: str) -> dict[str, str]:
    out = lab.slurm.run("scontrol", "-o", "show", "job", job).stdout
    return dict(t.partition("=")[::2] for t in out.split() if "=" in t)


def _cycle(lab: BurstLab, cfg_text: str) -> tuple[list[dict[str, object]], list[str]]:
    """One daemon cycle: (its audit events, the cycle's errors)."""
    cfg = parse_config(cfg_text, "g.yaml")
    log = cfg.state.audit_log
    before = log.read_text().count("\n") if log.exists() else 0
    state = State(cfg.state.path)
    d = Daemon(cfg, Aws(cfg.aws, fake_session()), state)
    try:
        report = d.run_cycle()
    finally:
        d.close()
        state.close()
    return [json.loads(x) for x in log.read_text().splitlines()[before:]], report.errors


def test_interruption_warning_drains_signals_requeues_and_returns_the_node(
    lab: BurstLab,
) -> None:
    slurm, d = lab.slurm, lab.slurm.lab
    sqs = fake_session().client("sqs", endpoint_url=lab.moto.url, region_name="us-east-1")
    queue = sqs.create_queue(QueueName="spot-events")["QueueUrl"]
    cfg_text = (
        "rules: [spot-interruption]\ndry_run: false\n"
        f"aws: {{endpoint_url: {lab.moto.url}}}\n"
        f'state: {{path: "{d}/g.db", audit_log: "{d}/log/g-audit.jsonl"}}\n'
        "metrics_endpoint: {enabled: false}\n"
        f'safety: {{kill_switch_file: "{d}/stop"}}\n'
        f'burst_reconcile: {{stack: lab, slurm_conf: "{slurm.conf}"}}\n'
        f"spot_interruption: {{enabled: true, queue_url: {json.dumps(queue)}, signal: USR1, "
        "signal_to: batch, grace: 10m}\n"
    )
    seen = d / "jobs" / "spot-signal.txt"
    script = d / "jobs" / "spot-job.sh"
    script.write_text(SCRIPT.format(out=seen))
    script.chmod(0o755)
    job = slurm.run(
        "sbatch", "--parsable", "-o", "/dev/null", "-p", "spot", "-N1", "-t", "10", str(script)
    ).stdout.strip().split(";")[0]  # fmt: skip
    try:
        lab.wait("job running on sp-1", lambda: slurm.job_state(job) == ("RUNNING", "sp-1"), 60)
        (iid,) = lab.instances("sp-1")
        event = json.loads((EVENTS / "spot_interruption_warning.json").read_text())
        event_id = str(uuid.uuid4())
        event.update(
            id=event_id, region="us-east-1", time=f"{datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}"
        )
        event["resources"] = [f"arn:aws:ec2:us-east-1a:instance/{iid}"]
        event["detail"]["instance-id"] = iid
        sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(event))

        events, errors = _cycle(lab, cfg_text)
        assert errors == []
        state = slurm.node_state("sp-1")
        assert "DRAIN" in state.split("+") or "DRAINING" in state, state
        node_text = slurm.run("scontrol", "show", "node", "sp-1").stdout
        assert f"Reason={REASON_PREFIX}interruption {iid}" in node_text, node_text
        kinds = [e["kind"] for e in events if e["event"] == "action.executed"]
        assert kinds == ["drain", "signal"]
        lab.wait("the job script saw SIGUSR1", seen.exists, 15)
        assert seen.read_text().split()[:2] == ["USR1", job]
        assert slurm.job_state(job) == ("RUNNING", "sp-1")  # the signal alone ends nothing
        shown = slurm.run("scontrol", "show", "job", job).stdout
        assert "AdminComment=coreburst: spot interruption warning" in shown
        assert sqs.receive_message(QueueUrl=queue).get("Messages", []) == []

        # EC2 reclaims the instance; the lab's boot watcher stops sp-1's slurmd. The spot pool
        # is kept from the job from here on (a MAINT reservation, as after a capacity failure),
        # so it stays pending below instead of starting again at once on a new sp-1.
        lab.ec2.terminate_instances(InstanceIds=[iid])
        lab.wait("sp-1's slurmd gone", lambda: "sp-1" not in lab.watcher.booted, 10)
        slurm.run(
            "scontrol", "create", "reservation", f"ReservationName={KEEP}", "Nodes=sp-1",
            "Users=root", "Flags=MAINT,IGNORE_JOBS", "StartTime=now", "Duration=10",
        )  # fmt: skip
        events, errors = _cycle(lab, cfg_text)
        assert errors == []
        done = [(e["kind"], e["instance_id"]) for e in events if e["event"] == "action.executed"]
        assert done[:2] == [("requeue", "sp-1"), ("power-down", "sp-1")]
        # Slurm's requeue hold is gone: lifted by the rule once the node is being powered down,
        # or never set (22.05 sets none on a job whose node it lost under it)
        assert done[2:] in ([], [("lift-hold", "sp-1")]), done
        view = requeue_hold.parse_jobs(slurm.run("squeue", *requeue_hold.READ).stdout)[job]
        assert requeue_hold.status(view, time.time()) == "eligible", view
        info = _job(lab, job)
        assert info["JobState"] == "PENDING" and int(info["Restarts"]) == 1, info
        shown = slurm.run("scontrol", "show", "job", job).stdout
        assert "AdminComment=coreburst: requeued" in shown and iid in shown

        def back() -> bool:
            st = slurm.node_state("sp-1").split("+")
            return "POWERED_DOWN" in st and "POWERING_DOWN" not in st

        lab.wait("sp-1 powered down", back, 20)
        # Slurm 22.05 clears the drain with the forced power-down (the rule would undrain a
        # node still drained by it): the next cycle finds the node back and says so.
        events, errors = _cycle(lab, cfg_text)
        assert errors == []
        assert [e["node"] for e in events if e["event"] == "spot.returned"] == ["sp-1"]
        states = slurm.node_state("sp-1").split("+")
        assert "IDLE" in states and "POWERED_DOWN" in states and "DRAIN" not in states, states
        # Slack (the daemon's outbox): the warning, the requeue, the return to the pool.
        st = State(d / "g.db")
        try:
            told = {r["dedupe_key"]: r["payload"] for r in st.outbox_rows()}
        finally:
            st.close()
        assert "Spot interruption: burst node sp-1" in told[f"spot:{event_id}"]
        assert job in told[f"spot:{event_id}:requeued"]
        assert "back in the pool" in told[f"spot:{event_id}:returned"]
        # Nothing orphaned: no live instance of the stack is left for sp-1.
        assert lab.instances("sp-1") == []
        assert lab.instances("sp-1", ("terminated",)) == [iid]
    finally:
        slurm.run("scancel", job, check=False)
        slurm.run("scontrol", "delete", f"ReservationName={KEEP}", check=False)
