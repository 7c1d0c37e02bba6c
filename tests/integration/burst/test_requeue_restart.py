"""A requeued burst job runs again in seconds (issue 31 item 4), on a real slurmctld: Debian 12's
22.05 on the host, 24.11 and 26.05 through ``.ci/slurm-chroot.sh`` (EC2 is moto server behind
coreburst/sandbox/slurmlab.py's CapacityProxy, which answers CreateFleet on pool od's launch
template with EC2's InsufficientInstanceCapacity in the shape the EC2 API reference documents;
moto has no notion of capacity).

The core is full, so a ``-p core,burst`` job is placed on an od node; its launch fails for
capacity, the resume program sets the node DOWN (Slurm requeues the job), holds the pool and
lifts Slurm's requeue hold (coreburst/burst/requeue_hold.py). A core node then frees up: the job
runs there within 30 s of its requeue (Slurm alone would hold it 71 s with the lab's
``cred_expire=70``, 121 s at its default), as the job's own output says (the node and its
restart count). On Slurm 25.11+ the job is submitted with ``--requeue=expedite`` (docs/burst.md)
and comes back with no hold at all (expedited requeue, which the include's
``enable_expedited_requeue`` allows): nothing for coreburst to lift. On 22.05 this is also the
launch that Slurm's "TBD" node list broke (the include's PrologSlurmctld), and a new core job
runs after it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coreburst.burst import requeue_hold
from coreburst.burst.slurmconf import EXPEDITED_REQUEUE_SINCE
from coreburst.sandbox.slurmlab import (
    BurstLab,
    burst_lab,
    missing_prerequisite,
    slurm_release,
    wait_until,
)
from tests.helpers.prereq import require

pytestmark = pytest.mark.integration

WITHIN_S = 30
SCRIPT = """#!/bin/bash
echo "ran on $SLURMD_NODENAME restart $SLURM_RESTART_COUNT"
"""


@pytest.fixture(scope="module", name="lab")
def lab_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BurstLab]:
    require(missing_prerequisite())
    with burst_lab(tmp_path_factory.mktemp("requeuelab"), capacity_proxy=True) as lab:
        yield lab


def _view(lab: BurstLab, job: str) -> requeue_hold.JobView | None:
    """The job as coreburst reads it (``squeue --json --states=all``)."""
    out = lab.slurm.run("squeue", *requeue_hold.READ).stdout
    return requeue_hold.parse_jobs(out).get(job)


def _ran(lab: BurstLab, job: str) -> bool:
    v = _view(lab, job)
    ran = v is not None and bool(v.states & {"RUNNING", "COMPLETING", "COMPLETED"})
    return ran and v is not None and "CONFIGURING" not in v.states  # 23.02+: a flag


def _done(lab: BurstLab, job: str) -> bool:
    v = _view(lab, job)
    return v is not None and v.states == {"COMPLETED"}


def _audit(lab: BurstLab) -> list[dict[str, Any]]:
    path = lab.slurm.lab / "log" / "burst-audit.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _sbatch(lab: BurstLab, *args: str) -> str:
    return lab.slurm.run("sbatch", "--parsable", *args).stdout.strip().split(";")[0]


def test_after_a_capacity_failure_the_job_runs_on_a_free_core_node_within_30_s(
    lab: BurstLab, tmp_path: Path
) -> None:
    slurm, proxy = lab.slurm, lab.proxy
    assert proxy is not None
    expedite = slurm_release() >= EXPEDITED_REQUEUE_SINCE
    n_audit = len(_audit(lab))
    blockers = [
        _sbatch(lab, "-o", "/dev/null", "-p", "core", "-w", n, "--exclusive", "--wrap", "sleep 600")
        for n in ("core1", "core2")
    ]
    out, script = tmp_path / "job.out", tmp_path / "job.sh"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    resp = lab.ec2.describe_launch_templates()
    proxy.out_of_capacity = {
        t["LaunchTemplateId"]
        for t in resp["LaunchTemplates"]
        if t["LaunchTemplateName"].startswith("od-lt-")
    }
    job = ""
    try:
        wait_until(
            "the core full",
            lambda: all(slurm.job_state(b)[0] == "RUNNING" for b in blockers),
            60,
        )
        job = _sbatch(
            lab, "-o", str(out), "-p", "core,burst", "--exclusive", "-N1", "-t", "5",
            *(["--requeue=expedite"] if expedite else []), str(script),
        )  # fmt: skip
        requeued: list[float] = []

        def was_requeued() -> bool:
            v = _view(lab, job)
            if v is not None and v.restarts >= 1 and v.states & {"PENDING", "EXPEDITING"}:
                requeued.append(time.monotonic())
                return True
            return False

        wait_until("the job requeued after its failed launch", was_requeued, 60, every=0.1)
        slurm.run("scancel", blockers[0])  # a core node can take it now
        wait_until("the job running again", lambda: _ran(lab, job), 90, every=0.1)
        took = time.monotonic() - requeued[0]
        print(f"job {job}: RUNNING {took:.1f} s after its requeue")  # pytest -rP
        assert took < WITHIN_S, f"RUNNING {took:.1f} s after the requeue"
        wait_until("the job done", lambda: out.exists() and out.read_text().strip() != "", 30)
        assert out.read_text().split() == ["ran", "on", "core1", "restart", "1"], out.read_text()
        events = _audit(lab)[n_audit:]
        (failed,) = [e for e in events if e["event"] == "resume.failed"]
        assert failed["code"] == "InsufficientInstanceCapacity"
        (hold,) = [e for e in events if e["event"] == "resume.requeue_hold"]
        if expedite:  # Slurm's expedited requeue: no hold, nothing lifted
            assert hold["lifted"] == [] and hold["expedited"] == [job], hold
        else:  # Slurm held it; coreburst lifted it
            assert hold["lifted"] == [job], hold
        # a new core job still starts (22.05: the requeued job's node list did not leak)
        core = _sbatch(lab, "-o", "/dev/null", "-p", "core", "-w", "core2", "--wrap", "true")
        slurm.run("scancel", blockers[1])
        wait_until("a new core job done", lambda: _done(lab, core), 30)
    finally:
        proxy.out_of_capacity = set()
        for j in [*blockers, job]:
            if j:
                slurm.run("scancel", j, check=False)
        slurm.burst_cli(
            "release-hold", "od", "--stack", "lab", "--stack-dir", str(slurm.lab),
            "--reason", "test done",
        )  # fmt: skip
