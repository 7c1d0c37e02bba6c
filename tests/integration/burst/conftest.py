"""A real Slurm (munged, slurmctld, slurmd per node) on 127.0.0.1 with the burst side rendered
by ``coreburst.burst.cli slurm-conf`` and the power programs pointed at a moto server on 127.0.0.1:
the
lab in coreburst/sandbox/slurmlab.py, which ``coreburst burst demo`` and benchmarks/burst_resume.py
share.

Skipped only when not root or the Slurm binaries are missing (Debian: slurmctld slurmd
slurm-client munge); failed instead under ``CI=true`` (tests/helpers/prereq.py). Everything
started here is stopped at the end, with bounded waits.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coreburst.sandbox.slurmlab import BurstLab, burst_lab, missing_prerequisite
from tests.helpers.prereq import require

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", name="burst_lab")
def burst_lab_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BurstLab]:
    require(missing_prerequisite())
    with burst_lab(tmp_path_factory.mktemp("burstlab")) as lab:
        yield lab
