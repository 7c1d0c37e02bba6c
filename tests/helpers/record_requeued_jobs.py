"""Record what a real Slurm lists for jobs it has just requeued, as ``squeue --json`` prints
them (coreburst/burst/requeue_hold.py reads these).

``python -m tests.helpers.record_requeued_jobs OUT_DIR`` starts the sandbox lab
(coreburst/sandbox/slurmlab.py, ``AuthInfo=cred_expire=70``: a 71 s requeue hold) with the
Slurm on PATH and writes, unchanged, ``squeue --json --states=all`` (every job) at each step
below to ``OUT_DIR/squeue-requeued-<release>-<step>-recorded.json``. Another release:
``.ci/slurm-chroot.sh 26.05 --run python -m tests.helpers.record_requeued_jobs OUT_DIR``
(tests/fixtures/slurm/README.md names the files this wrote).

The steps:

1. ``requeued``: job 1 (``sleep 600`` on core1) the first time it is listed ``PENDING`` after
   ``scontrol requeue 1`` (what the spot-interruption rule runs);
2. ``later``: job 1 two seconds later (the scheduler has looked at it);
3. ``lifted``: job 1 after ``scontrol update jobid=1 StartTime=now`` (what coreburst runs to
   lift the hold), core1 kept from it (a MAINT reservation) so it stays pending;
4. ``node-down``: job 2 (``sleep 600`` on core2; on Slurm 25.11 and later submitted with
   ``--requeue=expedite``) the first time it is listed pending after ``scontrol update
   nodename=core2 state=down`` (a node failure: what the resume program and the boot check do
   to a burst node), core2 also kept from it.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from coreburst.sandbox.slurmlab import SlurmLab, slurm_release
from tests.helpers.slurm_recording import main, release_name, write_all

EXPEDITE_SINCE = (25, 11)


def _states(out: str, job_id: str) -> tuple[set[str], int]:
    """The job's state words (22.05: one string; 23.02+: a list) and its restart count."""
    (job,) = [j for j in json.loads(out)["jobs"] if str(j["job_id"]) == job_id]
    st = job["job_state"]
    return ({st} if isinstance(st, str) else set(st)), int(job["restart_cnt"])


def record(out_dir: Path) -> list[Path]:
    release = release_name()
    files: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        lab = SlurmLab(Path(tmp) / "lab", {})
        try:
            lab.start()

            def show(job: str) -> str:
                # every job: 22.05's squeue --json ignores --jobs (it lists them all)
                return lab.run("squeue", "--json", "--states=all").stdout

            def until(what: str, check: Callable[[], bool], timeout_s: float = 60) -> None:
                deadline = time.monotonic() + timeout_s
                while time.monotonic() < deadline:
                    if check():
                        return
                    time.sleep(0.05)
                raise TimeoutError(f"record_requeued_jobs: timed out waiting for {what}")

            def sbatch(node: str, *args: str) -> str:
                out = lab.run(
                    "sbatch", "--parsable", "-p", "core", "-w", node, "-o", "/dev/null",
                    *args, "--wrap", "sleep 600",
                )  # fmt: skip
                return out.stdout.strip().split(";")[0]

            def keep(node: str) -> None:
                lab.run(
                    "scontrol", "create", "reservation", f"ReservationName=keep-{node}",
                    f"Nodes={node}", "Users=root", "Flags=MAINT,IGNORE_JOBS", "StartTime=now",
                    "Duration=10",
                )  # fmt: skip

            def pending_again(job: str) -> bool:
                states, restarts = _states(show(job), job)
                return restarts >= 1 and bool(states & {"PENDING", "EXPEDITING"})

            expedite = ["--requeue=expedite"] if slurm_release() >= EXPEDITE_SINCE else []
            j1, j2 = sbatch("core1"), sbatch("core2", *expedite)
            until(
                "both jobs running",
                lambda: all("RUNNING" in _states(show(j), j)[0] for j in (j1, j2)),
            )
            lab.run("scontrol", "requeue", j1)
            until("job 1 pending", lambda: pending_again(j1))
            files["requeued"] = show(j1)
            time.sleep(2)
            files["later"] = show(j1)
            keep("core1")
            lab.run("scontrol", "update", f"jobid={j1}", "StartTime=now")
            files["lifted"] = show(j1)
            keep("core2")
            lab.run("scontrol", "update", "nodename=core2", "state=down", "reason=recording")
            until("job 2 pending", lambda: pending_again(j2))
            files["node-down"] = show(j2)
        finally:
            lab.run("scancel", "--user=root", check=False)
            lab.stop()
    return write_all(
        out_dir,
        {f"squeue-requeued-{release}-{step}-recorded.json": t for step, t in files.items()},
    )


if __name__ == "__main__":
    raise SystemExit(main("record_requeued_jobs", record, sys.argv[1:]))
