"""The Slurm lab (coreburst/sandbox/slurmlab.py) that the demo, the benchmark and these tests share
stops
everything it started, including a job still running when it stops: a ``slurmstepd`` (and its
job) outlives the slurmd that started it, on the real Slurm 22.05 here. Before the lab ended
job steps, such processes stayed behind for good (found on this machine after a test run).
"""

from __future__ import annotations

from pathlib import Path

import psutil  # type: ignore[import-untyped]
import pytest

from coreburst.sandbox.slurmlab import SlurmLab, missing_prerequisite, wait_until
from tests.helpers.prereq import require

pytestmark = pytest.mark.integration


def test_stop_ends_running_job_steps(tmp_path: Path) -> None:
    require(missing_prerequisite())
    lab = SlurmLab(tmp_path / "lab", {})
    try:
        lab.start()
        out = lab.run(
            "sbatch", "--parsable", "-p", "core", "-o", "/dev/null", "--wrap", "sleep 300"
        )
        job = out.stdout.strip().split(";")[0]
        wait_until("job running", lambda: lab.job_state(job)[0] == "RUNNING", 20)
        wait_until("its slurmstepd", lambda: len(lab.job_steps()) >= 2, 10)
        steps = lab.job_steps()
        names = {p.name() for p in steps}
        assert "slurmstepd" in names and "sleep" in names, names
    finally:
        lab.stop()
    left = [p for p in steps if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert left == [], [(p.pid, p.name()) for p in left]
    assert lab.job_steps() == []
