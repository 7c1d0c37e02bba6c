"""Requeue → running again: how long a requeued burst job waits before it runs on another node.

Three ways a burst job is requeued, each on the Slurm lab (coreburst/sandbox/slurmlab.py: a
real slurmctld and a slurmd per node, EC2 on moto server behind the lab's CapacityProxy, a
launched instance "boots" 2.5 s later by starting its slurmd), each with another node free to
take the job:

1. ``capacity``: every CreateFleet on pool ``od``'s launch template gets EC2's
   InsufficientInstanceCapacity answer (the proxy, as EC2 documents it); the job (``-p
   burst,spot``; sp-1 is kept from its first placement) lands on an od node, the resume
   program fails it (DOWN: the job requeues) and holds the pool; the spot pool's node takes it.
2. ``spot``: the job (``-p spot,burst``; od kept from its first placement) runs on ``sp-1``
   and traps SIGUSR1 (it checkpoints and runs on); EC2's Spot Instance Interruption Warning
   for its instance (the documented event, on moto's SQS) is read by the guardrails daemon's
   ``spot-interruption`` rule (one cycle: drain + signal), the instance is reclaimed, and the
   next cycle requeues the job (``scontrol requeue``) and powers the node down; an od node
   takes it. ``spot-ended``: the same with a job whose batch shell ends on the signal (it is
   FAILED when the rule requeues it); not run by default.
3. ``boot``: the job (``-p burst``) lands on an od node whose first instance fails the
   boot-time health gate (``coreburst burst node-check --gate`` on a recorded DCGM failure):
   the node is set DOWN before its slurmd starts and the job requeues; the other od node or
   the same node's next instance takes it.

Each run has a lab of its own (what one scenario leaves behind does not reach the next). For
each: the seconds from the requeue (seen by polling ``squeue --json`` every 0.1 s, or the
audit record of the requeue coreburst made when earlier) to it being eligible (its
``eligible_time``: Slurm's requeue hold), to it leaving PENDING (Slurm allocated a node) and to
RUNNING; and who ended the hold: ``coreburst`` (coreburst/burst/requeue_hold.py, as the
audit logs say), ``slurm`` (expedited requeue: no hold), ``none set`` (Slurm set no hold) or
``-`` (it was waited out).
A job allocated a powered-down cloud node stays CONFIGURING until the node has booted and
slurmctld's next check of configuring jobs (``job_time_limit()``, every 30 s on 22.05), so
requeue → RUNNING also holds that poll, which no program of coreburst's shortens.

On Slurm 25.11 and later jobs are submitted with ``--requeue=expedite`` (``--expedite no``:
without, to see coreburst lift the hold there too), which coreburst's slurm-conf include
allows (``enable_expedited_requeue``). The lab's ``AuthInfo=cred_expire=70`` makes Slurm's
requeue hold 71 s here (121 s at Slurm's default). The figures are this machine's.

$ python benchmarks/requeue_restart.py                 # capacity, spot, boot once each
$ python benchmarks/requeue_restart.py --paths capacity,spot-ended --runs 2 --json out.json
$ .ci/slurm-chroot.sh 24.11 --run python benchmarks/requeue_restart.py   # another release
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from coreburst.burst import requeue_hold  # noqa: E402
from coreburst.burst.slurmconf import EXPEDITED_REQUEUE_SINCE  # noqa: E402
from coreburst.sandbox.emulator import fake_session  # noqa: E402
from coreburst.sandbox.slurmlab import (  # noqa: E402
    BurstLab,
    missing_prerequisite,
    slurm_release,
    start_burst_lab,
    wait_until,
)

HEALTH = REPO / "tests" / "fixtures" / "health"
EVENTS = REPO / "tests" / "fixtures" / "aws" / "events"
PATHS = ("capacity", "spot", "spot-ended", "boot")
DEFAULT_PATHS = ("capacity", "spot", "boot")
# A requeued job waiting to start again (25.11+: EXPEDITING after an expedited requeue).
PENDING = frozenset({"PENDING", "EXPEDITING"})
RAN = frozenset({"RUNNING", "COMPLETING", "COMPLETED"})
# The spot job checkpoints on SIGUSR1 and runs on, as a job built for spot does ("spot"), or
# its batch shell ends on the signal ("spot-ended": the job FAILED before it is requeued).
SPOT_SCRIPT = """#!/bin/bash
{trap}
for i in $(seq 600); do sleep 1; done
"""
TRAP = """trap 'echo "USR1 $SLURM_JOB_ID $SLURM_RESTART_COUNT"' USR1"""


def _view(lab: BurstLab, job: str) -> requeue_hold.JobView | None:
    """The job as coreburst reads it (``squeue --json --states=all``)."""
    out = lab.slurm.run("squeue", *requeue_hold.READ, check=False).stdout
    try:
        return requeue_hold.parse_jobs(out).get(job)
    except RuntimeError:
        return None


class Watch:
    """Polls one job every 0.1 s: when it was seen requeued, when it became eligible, when it
    left PENDING and when it was RUNNING (epoch seconds). A requeue coreburst made (the spot
    rule's ``scontrol requeue``, the resume program's DOWN) is timed from its audit record
    when that is earlier than it was seen (the spot rule's cycle requeues and lifts before
    the poll looks)."""

    def __init__(self, lab: BurstLab, job: str) -> None:
        self.lab, self.job = lab, job
        self.requeued: float | None = None
        self.eligible: float | None = None
        self.allocated: float | None = None
        self.running: float | None = None
        self.gave_up: float | None = None
        self.expedited = False
        self.node = ""

    def until_requeued(self, timeout_s: float, step: Callable[[], None] | None = None) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if step is not None:
                step()
            v = _view(self.lab, self.job)
            if v is not None and v.restarts >= 1 and "COMPLETING" not in v.states:
                self.requeued = time.time()
                if v.states & PENDING:
                    self.eligible = v.eligible or self.requeued  # none: eligible now
                    self.expedited = "EXPEDITING" in v.states
                else:  # allocated again already: eligible by then
                    self.eligible = self.allocated = time.time()
                return
            time.sleep(0.1)
        raise TimeoutError(f"job {self.job} not requeued within {timeout_s:.0f} s")

    def until_running(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            v = _view(self.lab, self.job)
            states = v.states if v is not None else frozenset()
            if v is not None and states & PENDING:  # the hold may be lifted after the requeue
                self.eligible = v.eligible or self.eligible
            elif self.allocated is None:
                self.allocated = time.time()
            # 23.02+ list a job whose cloud node is still booting RUNNING, CONFIGURING
            if states & RAN and "CONFIGURING" not in states:
                self.running = time.time()
                self.node = self.lab.slurm.job_state(self.job)[1]
                return
            time.sleep(0.1)
        self.gave_up = timeout_s  # not running within timeout_s: the row says so

    def row(self, lifted: bool, caused_at: float | None = None) -> dict[str, Any]:
        """The seconds since the requeue; who ended the hold: ``coreburst`` (``lifted``: its
        audit log says so), ``slurm`` (expedited requeue: no hold), ``-`` (waited out)."""
        assert self.requeued is not None
        t0 = min(self.requeued, caused_at or self.requeued)

        def since(t: float | None) -> float | None:
            return None if t is None else round(max(0.0, t - t0), 1)

        if lifted:
            by = "coreburst"
        elif self.expedited:
            by = "slurm (expedited)"
        elif self.eligible is not None and self.eligible - t0 <= 1:
            by = "none set"  # 22.05 sets none on a job whose node it lost under it
        else:
            by = "-"
        return {
            "eligible": since(self.eligible),
            "allocated": since(self.allocated),
            "running": since(self.running),
            "gave_up_after": self.gave_up,
            "node": self.node,
            "hold_ended_by": by,
        }


def _audit(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


class Bench:
    def __init__(self, lab: BurstLab, expedite: bool) -> None:
        self.lab = lab
        self.burst_audit = lab.slurm.lab / "log" / "burst-audit.jsonl"
        self.requeue = ["--requeue=expedite"] if expedite else []

    def sbatch(self, *args: str) -> str:
        out = self.lab.slurm.run("sbatch", "--parsable", "-o", "/dev/null", *self.requeue, *args)
        return out.stdout.strip().split(";")[0]

    def keep(self, name: str, nodes: str) -> str:
        """A MAINT reservation that keeps ``nodes`` from a job's first placement."""
        resv = f"bench-keep-{name}-{int(time.time() * 1000)}"
        self.lab.slurm.run(
            "scontrol", "create", "reservation", f"ReservationName={resv}", f"Nodes={nodes}",
            "Users=root", "Flags=MAINT,IGNORE_JOBS", "StartTime=now", "Duration=10",
        )  # fmt: skip
        return resv

    def capacity(self) -> dict[str, Any]:
        lab = self.lab
        assert lab.proxy is not None
        # EC2's InsufficientInstanceCapacity answer naming no choice: every (type, zone) of
        # od is backed off and the pool held; spot launches.
        resp = lab.ec2.describe_launch_templates()
        (od_lt,) = [
            t["LaunchTemplateId"]
            for t in resp["LaunchTemplates"]
            if t["LaunchTemplateName"].startswith("od-lt-")
        ]
        lab.proxy.out_of_capacity = {od_lt}
        resv = self.keep("sp", "sp-1")
        n_audit = len(_audit(self.burst_audit))
        job = self.sbatch("-p", "burst,spot", "--exclusive", "-N1", "-t", "10", "--wrap", "sleep 5")
        w = Watch(lab, job)
        w.until_requeued(60)
        lab.slurm.run("scontrol", "delete", f"ReservationName={resv}")
        w.until_running(240)
        events = _audit(self.burst_audit)[n_audit:]
        lifted = any(
            job in e.get("lifted", []) for e in events if e["event"] == "resume.requeue_hold"
        )
        failed = [e["ts"] for e in events if e["event"] == "resume.failed"]
        return w.row(lifted, failed[0] if failed else None)

    def spot(self, trap: bool = True) -> dict[str, Any]:
        lab = self.lab
        d = lab.slurm.lab
        sqs = fake_session().client("sqs", endpoint_url=lab.moto.url, region_name="us-east-1")
        queue = sqs.create_queue(QueueName=f"bench-spot-{uuid.uuid4().hex[:8]}")["QueueUrl"]
        g_audit = d / "log" / "bench-g-audit.jsonl"
        cfg = (
            "rules: [spot-interruption]\ndry_run: false\n"
            f"aws: {{endpoint_url: {lab.moto.url}}}\n"
            f'state: {{path: "{d}/bench-g.db", audit_log: "{g_audit}"}}\n'
            "metrics_endpoint: {enabled: false}\n"
            f'safety: {{kill_switch_file: "{d}/stop"}}\n'
            f'burst_reconcile: {{stack: lab, slurm_conf: "{lab.slurm.conf}"}}\n'
            f"spot_interruption: {{enabled: true, queue_url: {json.dumps(queue)}, "
            "signal: USR1, signal_to: batch, grace: 10m}\n"
        )
        script = d / "jobs" / "bench-spot.sh"
        script.write_text(SPOT_SCRIPT.format(trap=TRAP if trap else ""))
        script.chmod(0o755)
        resv = self.keep("od", "od-[1-2]")
        job = self.sbatch("-p", "spot,burst", "-N1", "-t", "10", str(script))
        wait_until("job on sp-1", lambda: lab.slurm.job_state(job) == ("RUNNING", "sp-1"), 120)
        lab.slurm.run("scontrol", "delete", f"ReservationName={resv}")
        (iid,) = lab.instances("sp-1")
        event = json.loads((EVENTS / "spot_interruption_warning.json").read_text())
        event.update(
            id=str(uuid.uuid4()),
            region="us-east-1",
            time=f"{datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}",
            resources=[f"arn:aws:ec2:us-east-1a:instance/{iid}"],
        )
        event["detail"]["instance-id"] = iid
        sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(event))
        _cycle(cfg)  # drain + signal
        lab.ec2.terminate_instances(InstanceIds=[iid])  # EC2 reclaims it
        wait_until("sp-1's slurmd gone", lambda: "sp-1" not in lab.watcher.booted, 15)
        n_audit = len(_audit(g_audit))
        w = Watch(lab, job)
        cycled: list[bool] = []

        def cycle_once() -> None:
            if not cycled:
                cycled.append(True)
                _cycle(cfg)  # requeue, power down, lift

        w.until_requeued(60, cycle_once)
        w.until_running(240)
        events = [e for e in _audit(g_audit)[n_audit:] if e["event"] == "action.executed"]
        lifted = any(e.get("kind") == "lift-hold" for e in events)
        requeued = [
            datetime.fromisoformat(e["ts"]).timestamp()
            for e in events
            if e.get("kind") == "requeue"
        ]
        return w.row(lifted, requeued[0] if requeued else None)

    def spot_ended(self) -> dict[str, Any]:
        return self.spot(trap=False)

    def boot(self) -> dict[str, Any]:
        lab = self.lab
        for n in ("od-1", "od-2"):
            lab.watcher.health[n] = [HEALTH / "p5-dcgm-fail", HEALTH / "p5-healthy"]
        n_audit = len(_audit(self.burst_audit))
        job = self.sbatch("-p", "burst", "--exclusive", "-N1", "-t", "10", "--wrap", "sleep 5")
        w = Watch(lab, job)
        w.until_requeued(90)
        # the job's next node boots healthy (the failed one is replaced)
        lab.watcher.health = {n: [HEALTH / "p5-healthy"] for n in ("od-1", "od-2")}
        w.until_running(240)
        lifted = any(
            job in e.get("hold_lifted", [])
            for e in _audit(self.burst_audit)[n_audit:]
            if e["event"] == "health.failed"
        )
        return w.row(lifted)


def _cycle(cfg_text: str) -> None:
    """One guardrails daemon cycle with ``cfg_text`` (not dry-run)."""
    from guardrails.adapters.aws import Aws
    from guardrails.configfile import parse_config
    from guardrails.daemon import Daemon
    from guardrails.stores.sqlite import State

    cfg = parse_config(cfg_text, "bench.yaml")
    state = State(cfg.state.path)
    d = Daemon(cfg, Aws(cfg.aws, fake_session()), state)
    try:
        errors = d.run_cycle().errors
    finally:
        d.close()
        state.close()
    if errors:
        raise RuntimeError(f"daemon cycle: {errors}")


def _fmt(v: float | None, gave_up: float | None = None) -> str:
    if v is None:
        return f">{gave_up:.0f}" if gave_up else "-"
    return f"{v:.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--paths", default=",".join(DEFAULT_PATHS), help=", ".join(PATHS))
    ap.add_argument("--runs", type=int, default=1, help="runs per path")
    ap.add_argument(
        "--expedite",
        choices=("auto", "yes", "no"),
        default="auto",
        help="submit with --requeue=expedite (auto: on Slurm 25.11 and later)",
    )
    ap.add_argument("--json", type=Path, help="also write the rows to this file")
    ap.add_argument(
        "--lab-dir", type=Path, help="keep each run's lab under here (default: temporary ones)"
    )
    args = ap.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    unknown = [p for p in paths if p not in PATHS]
    if unknown:
        ap.error(f"unknown path(s) {', '.join(unknown)}: choose from {', '.join(PATHS)}")
    why = missing_prerequisite()
    if why:
        print(f"requeue → running: skipped ({why})")
        return 0
    version = subprocess.run(
        ["slurmctld", "-V"], capture_output=True, text=True, check=True, timeout=30
    ).stdout.strip()
    release = slurm_release()
    expedite = {"yes": True, "no": False}.get(args.expedite, release >= EXPEDITED_REQUEUE_SINCE)
    rows: list[dict[str, Any]] = []
    print(f"requeue → running again on {version}: {', '.join(paths)} x {args.runs} (a few minutes)")
    for path in paths:
        for i in range(args.runs):
            # A lab of its own per run: what one scenario leaves (a backed-off pool, the lab's
            # slurmstepd of an "interrupted" node, which a real instance takes with it) does
            # not reach the next.
            with tempfile.TemporaryDirectory(prefix="coreburst-bench-requeue-") as tmp:
                lab_dir = args.lab_dir / f"{path}-{i + 1}" if args.lab_dir else Path(tmp)
                lab_dir.mkdir(parents=True, exist_ok=True)
                lab = start_burst_lab(lab_dir, suspend_time=2, resume_timeout=40, suspend_timeout=2)
                try:
                    row = getattr(Bench(lab, expedite), path.replace("-", "_"))()
                finally:
                    lab.slurm.run("scancel", "--user=root", check=False)
                    lab.stop()
            rows.append({"path": path, **row})
            took = _fmt(row["running"], row["gave_up_after"])
            where = row["node"] or "no node"
            print(f"  {path} {i + 1}/{args.runs}: RUNNING {took} s after the requeue on {where}",
                  flush=True)  # fmt: skip
    how = "--requeue=expedite" if expedite else "no --requeue=expedite"
    print(f"seconds from the requeue, Slurm {release[0]}.{release[1]:02d} ({version}; jobs {how})")
    print(
        f"  {'path':<10} {'eligible':>8} {'allocated':>9} {'RUNNING':>8}  {'node':<5} hold ended by"
    )
    for r in rows:
        print(
            f"  {r['path']:<10} {_fmt(r['eligible']):>8} {_fmt(r['allocated']):>9} "
            f"{_fmt(r['running'], r['gave_up_after']):>8}  {r['node'] or '-':<5} "
            f"{r['hold_ended_by']}"
        )
    if args.json:
        doc = {"slurm": version, "expedite": expedite, "rows": rows}
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
