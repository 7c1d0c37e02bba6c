"""Real servers for the core-idle tests: Prometheus (Debian package ``prometheus``) serving a
backfilled history of recorded dcgm-exporter metrics (fixtures/dcgm-core-lab.prom), and the
real Slurm lab of the burst tests (coreburst/sandbox/slurmlab.py: Slurm 22.05, core nodes
core1/core2 with
eight fake GPUs each as character devices 1:3 in gres.conf).

The history runs from seven days ago to four hours ahead, so the tests' daemon clock can stand
an hour or two after the lab's jobs started and still find every GPU's data. Skipped only when
prometheus/promtool (or root and Slurm, for the lab) are missing; failed instead under ``CI=true``
(tests/helpers/prereq.py). Everything started here is
stopped at the end, with bounded waits.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from coreburst.sandbox import prometheus as promlab
from coreburst.sandbox.slurmlab import SlurmLab
from coreburst.sandbox.slurmlab import missing_prerequisite as slurm_missing
from tests.helpers.prereq import require

FIXTURES = Path(__file__).parent / "fixtures"
HISTORY_BACK = timedelta(days=7)
HISTORY_AHEAD = timedelta(hours=4)
STEP_S = 120.0

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def history_now() -> datetime:
    """The real time the history is built around (its 'now')."""
    return datetime.now(UTC).replace(microsecond=0)


@pytest.fixture(scope="session")
def prometheus(
    tmp_path_factory: pytest.TempPathFactory, history_now: datetime
) -> Iterator[promlab.PrometheusServer]:
    require(promlab.missing_prerequisite())
    scrape = (FIXTURES / "dcgm-core-lab.prom").read_text()
    history = promlab.openmetrics_history(
        scrape, history_now - HISTORY_BACK, history_now + HISTORY_AHEAD, STEP_S
    )
    with promlab.PrometheusServer(tmp_path_factory.mktemp("prometheus"), history) as server:
        yield server


@pytest.fixture(scope="module")
def slurm_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmLab]:
    require(slurm_missing())
    lab = SlurmLab(tmp_path_factory.mktemp("corelab"), {})
    try:
        yield lab.start()
    finally:
        lab.stop()
