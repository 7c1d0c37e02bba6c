"""The ``burst-reconcile`` rule on a real slurmctld (each release ``make test-slurm`` runs)
and EC2 on moto server, run by the guardrails daemon (``guardrails.daemon.Daemon``, one cycle,
not dry-run).

A job runs on a burst node (its instance launched by the real resume program); an instance
tagged with a powered-down node (one that never booted: the lab's boot watcher is held off) is
an orphan. One daemon cycle, its clock an hour ahead so both instances are past
``orphan_timeout``, terminates the orphan and leaves the busy node's instance and job alone.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from coreburst.sandbox.clocks import FakeClock
from coreburst.sandbox.emulator import AMI, fake_session
from coreburst.sandbox.slurmlab import BurstLab, SlurmLab, slurm_release
from guardrails.adapters.aws import Aws
from guardrails.adapters.slurm import Scontrol, power_down_when_idle
from guardrails.configfile import parse_config
from guardrails.daemon import Daemon
from guardrails.stores.sqlite import State

pytestmark = pytest.mark.integration


def _state(lab: BurstLab, iid: str) -> str:
    resp = lab.ec2.describe_instances(InstanceIds=[iid])
    return str(resp["Reservations"][0]["Instances"][0]["State"]["Name"])


def test_one_cycle_terminates_the_orphan_and_spares_the_busy_node(burst_lab: BurstLab) -> None:
    lab, slurm = burst_lab, burst_lab.slurm
    job = slurm.run(
        "sbatch", "--parsable", "-o", "/dev/null", "-p", "burst", "-w", "od-1", "--exclusive",
        "-N1", "-t", "10", "--wrap", "sleep 120",
    ).stdout.strip().split(";")[0]  # fmt: skip
    watcher_delay = lab.watcher.boot_delay
    try:
        lab.wait("job running on od-1", lambda: slurm.job_state(job) == ("RUNNING", "od-1"), 60)
        (busy,) = lab.instances("od-1")
        # The orphan never boots (the watcher would start its slurmd): a hung instance.
        lab.watcher.boot_delay = 3600
        assert "POWERED_DOWN" in slurm.node_state("od-2")
        orphan = lab.ec2.run_instances(
            ImageId=AMI,
            InstanceType="p5.48xlarge",
            MinCount=1,
            MaxCount=1,
            TagSpecifications=[
                {
                    "ResourceType": "instance",
                    "Tags": [
                        {"Key": "coreburst-stack", "Value": "lab"},
                        {"Key": "coreburst-cluster", "Value": "od"},
                        {"Key": "coreburst-slurm-node", "Value": "od-2"},
                    ],
                }
            ],
        )["Instances"][0]["InstanceId"]

        # A Comment that reads like fields (coreburst and operators write EC2 messages there)
        # changes nothing: od-2 stays powered down, so its instance is still an orphan.
        note = "ec2: instance-retirement State=IDLE NodeAddr=10.9.9.9"
        slurm.run("scontrol", "update", "nodename=od-2", f"comment={note}")
        # The adapter reads the real scontrol: CLOUD only on the burst nodes; --json from 23.02.
        sc = Scontrol(conf=slurm.conf)
        nodes = sc.nodes()
        assert sc.has_json is (slurm_release() >= (23, 2))
        assert not nodes["core1"].cloud and nodes["od-1"].cloud and nodes["od-1"].busy
        assert nodes["od-2"].powered_down and not nodes["od-2"].busy
        assert nodes["od-2"].comment == note and nodes["od-2"].fields["NodeAddr"] == "od-2"

        lab_dir = slurm.lab
        cfg = parse_config(
            "rules: [burst-reconcile]\ndry_run: false\n"
            f"aws: {{endpoint_url: {lab.moto.url}}}\n"
            f'state: {{path: "{lab_dir}/g.db", audit_log: "{lab_dir}/log/g-audit.jsonl"}}\n'
            "metrics_endpoint: {enabled: false}\n"
            f'safety: {{kill_switch_file: "{lab_dir}/stop"}}\n'
            "burst_reconcile: {enabled: true, stack: lab, orphan_timeout: 15m, "
            f'slurm_conf: "{slurm.conf}", heartbeat_file: "{lab_dir}/run/reconcile.hb"}}\n',
            "g.yaml",
        )
        state = State(cfg.state.path)
        d = Daemon(
            cfg,
            Aws(cfg.aws, fake_session()),
            state,
            clock=FakeClock(datetime.now(UTC) + timedelta(hours=1)),
        )
        try:
            report = d.run_cycle()
        finally:
            d.close()
            state.close()
        assert report.errors == []
        assert _state(lab, orphan) in ("shutting-down", "terminated")
        assert _state(lab, busy) == "running"
        assert slurm.job_state(job) == ("RUNNING", "od-1")
        audit = [json.loads(x) for x in cfg.state.audit_log.read_text().splitlines()]
        done = [e for e in audit if e["event"] == "action.executed"]
        assert [(e["instance_id"], e["kind"]) for e in done] == [(orphan, "terminate")]
        assert "od-2 is" in done[0]["reason"] and "POWERED_DOWN" in done[0]["reason"]
        assert json.loads((lab_dir / "run" / "reconcile.hb").read_text())["dry_run"] is False

        # The pool holds' reservations as the real slurmctld takes them: a backoff that ends by
        # itself, and a protect reservation over the same node (OVERLAP), both MAINT.
        sc = Scontrol(conf=slurm.conf)
        sc.reserve("coreburst-backoff-od-1", ["od-2"], 1)
        sc.reserve("coreburst-protect-od", ["od-2"], None)
        assert {"coreburst-backoff-od-1", "coreburst-protect-od"} <= set(sc.reservations())
        shown = slurm.run("scontrol", "-o", "show", "reservation", "coreburst-protect-od").stdout
        assert "Nodes=od-2" in shown and "MAINT" in shown and "OVERLAP" in shown
        backoff = slurm.run("scontrol", "-o", "show", "reservation", "coreburst-backoff-od-1")
        assert "Duration=00:01:00" in backoff.stdout
    finally:
        lab.watcher.boot_delay = watcher_delay
        slurm.run("scancel", job, check=False)
        for resv in ("coreburst-backoff-od-1", "coreburst-protect-od"):
            slurm.run("scontrol", "delete", f"ReservationName={resv}", check=False)


def _pending_reason(slurm: SlurmLab, job: str) -> str:
    return slurm.run("squeue", "-h", "-j", job, "-o", "%T %r", check=False).stdout.strip()


def test_power_down_when_idle_drains_the_node_and_waits_for_the_running_job(
    burst_lab: BurstLab,
) -> None:
    """What idle reclaim asks of Slurm for a burst node
    (guardrails.adapters.slurm.power_down_when_idle,
    ``scontrol update state=power_down_asap``) on the real slurmctld: the node is drained, so a
    job submitted to it now stays pending (with plain ``power_down`` Slurm 22.05 started such a
    job on the busy node); the running job is not killed (it runs to its last line); once it
    ends, Slurm powers the node down, its SuspendProgram terminates the instance, and the drain
    is cleared (the node is not lost to later jobs)."""
    lab, slurm = burst_lab, burst_lab.slurm
    done = slurm.lab / "jobs" / "asap-job-done"
    done.unlink(missing_ok=True)
    job = slurm.run(
        "sbatch", "--parsable", "-o", "/dev/null", "-p", "burst", "-w", "od-1", "-N1", "-n1",
        "-t", "10", "--wrap", f"sleep 12; touch {done}",
    ).stdout.strip().split(";")[0]  # fmt: skip
    late = ""
    try:
        lab.wait("job running on od-1", lambda: slurm.job_state(job) == ("RUNNING", "od-1"), 60)
        (iid,) = lab.instances("od-1")
        assert power_down_when_idle(Scontrol(conf=slurm.conf), ["od-1"]) == (
            "scontrol update state=power_down_asap"
        )
        lab.wait("od-1 draining", lambda: "DRAIN" in slurm.node_state("od-1"), 10)
        assert "POWER_DOWN" in slurm.node_state("od-1")
        assert slurm.node("od-1").get("Reason") == "POWER_DOWN_ASAP"
        # Room for a second one-CPU job, but no new job lands on the draining node.
        late = slurm.run(
            "sbatch", "--parsable", "-o", "/dev/null", "-p", "burst", "-w", "od-1", "-N1",
            "-n1", "-t", "10", "--wrap", "true",
        ).stdout.strip().split(";")[0]  # fmt: skip
        lab.wait(
            "the late job held back",
            lambda: "ReqNodeNotAvail" in _pending_reason(slurm, late),
            15,
        )
        time.sleep(4)  # several scheduler passes (bf_interval=2)
        # Slurm's words for it (seen on each release this runs on): 22.05 names the draining
        # node, 24.11 and 26.05 do not
        said = (
            "UnavailableNodes:od-1"
            if slurm_release() < (24, 11)
            else "May be reserved for other job"
        )
        assert _pending_reason(slurm, late) == f"PENDING ReqNodeNotAvail, {said}"
        assert slurm.job_state(job) == ("RUNNING", "od-1")
        assert _state(lab, iid) == "running"
        slurm.run("scancel", late)
        lab.wait("job completed", lambda: slurm.job_state(job)[0] == "GONE", 30)
        assert done.exists()  # ran to its last line: not killed
        lab.wait(
            "od-1 powered down, instance terminated",
            lambda: (
                "POWERED_DOWN" in slurm.node_state("od-1")
                and _state(lab, iid) in ("shutting-down", "terminated")
            ),
            30,
        )
        assert "DRAIN" not in slurm.node_state("od-1")
    finally:
        for j in (job, late):
            if j:
                slurm.run("scancel", j, check=False)
