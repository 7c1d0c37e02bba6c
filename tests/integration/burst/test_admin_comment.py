"""coreburst's notes on a job's AdminComment against a real Slurm (the lab of
coreburst/sandbox/slurmlab.py: Debian's slurm-wlm 22.05 here, 24.11 and 26.05 through
``.ci/slurm-chroot.sh``): a site's AdminComment holding two spaces and ``Partition=``, and a
user's ``--comment`` that reads like the rest of a ``scontrol -o`` line, survive exactly.

Slurm 25.11 prints ``scontrol -o show job`` with one space where 22.05 printed two after the
AdminComment; a reader of that text took the user's Comment for the end of the AdminComment and
wrote it back. The notes here are written through the product's own paths (the spot rule's
Slurm side, then the power programs'), which read ``squeue --json --states=all``, and checked
with squeue's JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from coreburst.burst.config import parse_burst
from coreburst.burst.slurm_side import SlurmSide
from coreburst.burst.slurmconf import node_set_of
from coreburst.burst.spot_interruption import Slurm as SpotSlurm
from coreburst.sandbox.slurmlab import SlurmLab, missing_prerequisite
from guardrails.adapters.slurm import Scontrol
from tests.helpers.burst import CLUSTERS, stack_map
from tests.helpers.prereq import require

pytestmark = pytest.mark.integration

SITE = "site: project=alpha  Partition=fake | ops"
USER = "x y Comment=user note: keep me StdErr= StdIn=/dev/null"
USER_2 = "just a note  with two spaces"
SPOT = "coreburst: spot interruption warning for i-0abc (terminate at 01:02:00Z)"
BURST = "coreburst: bursting on od-1 (1 x p5.48xlarge on-demand): $55.04/h"


@pytest.fixture(scope="module", name="lab")
def lab_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmLab]:
    require(missing_prerequisite())
    lab = SlurmLab(tmp_path_factory.mktemp("commentlab") / "lab", {})
    try:
        lab.start()
        yield lab
    finally:
        lab.stop()


def _held(lab: SlurmLab, *args: str) -> str:
    out = lab.run("sbatch", "--parsable", "-H", "-p", "core", "-o", "/dev/null", *args)
    return out.stdout.strip().split(";")[0]


def _shown(lab: SlurmLab) -> dict[str, dict[str, Any]]:
    """job id -> its object in the real ``squeue --json --states=all``."""
    doc = json.loads(lab.run("squeue", "--json", "--states=all").stdout)
    return {str(j["job_id"]): j for j in doc["jobs"]}


def test_a_sites_comment_and_a_users_comment_round_trip_exactly(
    lab: SlurmLab, tmp_path: Path
) -> None:
    j1 = _held(lab, "--comment", USER, "--wrap", "sleep 1")
    lab.run("scontrol", "update", f"jobid={j1}", f"AdminComment={SITE}")
    j2 = _held(lab, "--comment", USER_2, "-t", "90", "--wrap", "sleep 1")
    try:
        sc = Scontrol(conf=lab.conf, timeout_s=30)
        # The spot rule's note (coreburst/burst/spot_interruption.py), a "requeue" kind.
        spot = SpotSlurm(sc)
        spot.note(j1, SPOT)
        spot.note(j2, SPOT)
        shown = _shown(lab)
        assert shown[j1]["admin_comment"] == f"{SITE} | {SPOT}"
        assert shown[j2]["admin_comment"] == SPOT
        assert (shown[j1]["comment"], shown[j2]["comment"]) == (USER, USER_2)

        # The power programs' note (coreburst/burst/slurm_side.py), a "burst" kind, in a later
        # run: it reads back what the spot rule wrote, exactly, and keeps it.
        stack = parse_burst(
            "lab",
            stack_map(
                CLUSTERS,
                {"logFile": str(tmp_path / "p.log"), "auditLog": str(tmp_path / "a.jsonl")},
            ),
        )
        side = SlurmSide(
            stack, sc, lambda *a, **k: None, now=lambda: datetime.now(UTC),
            nodes_of=node_set_of(stack), claims=lambda: pytest.fail("no claims here"),
            choices=lambda ns: ([], {}), release=lambda *a, **k: None,
        )  # fmt: skip
        side.note_jobs([j1], "burst", BURST)
        shown = _shown(lab)
        assert shown[j1]["admin_comment"] == f"{SITE} | {BURST} | {SPOT}"
        assert shown[j2]["admin_comment"] == SPOT
        assert (shown[j1]["comment"], shown[j2]["comment"]) == (USER, USER_2)
    finally:
        lab.run("scancel", j1, j2, check=False)
