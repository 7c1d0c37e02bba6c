"""A real Slurm (munged, slurmctld, slurmd per node) on 127.0.0.1 with the burst side rendered
by ``coreburst.burst.cli slurm-conf`` and the power programs pointed at a moto server on 127.0.0.1:
the
lab in coreburst/sandbox/slurmlab.py, which ``coreburst burst demo`` and benchmarks/burst_resume.py
share.

Skipped only when not root or the Slurm binaries are missing (Debian: slurmctld slurmd
slurm-client munge). Everything started here is stopped at the end, with bounded waits.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coreburst.sandbox.slurmlab import BurstLab, burst_lab, missing_prerequisite

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", name="burst_lab")
def burst_lab_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BurstLab]:
    why = missing_prerequisite()
    if why:
        pytest.skip(why)
    with burst_lab(tmp_path_factory.mktemp("burstlab")) as lab:
        yield lab
