"""The resume program reads SLURM_RESUME_FILE in both layouts slurmctld writes.

Slurm 22.05 writes ``{"all_nodes", "jobs": [{"job_id", "nodes"}]}``; 23.02 renamed the keys
(``all_nodes_resume``; per job ``nodes_alloc``, the job's whole allocation, and
``nodes_resume``, the part being resumed now) and added ``extra``, ``features``,
``oversubscribe``, ``partition``, ``reservation``. The fixtures (tests/fixtures/slurm/, see its
README.md) are the examples of SchedMD's doc/html/elastic_computing.shtml at tags
slurm-22-05-8-1 and slurm-23-02-7-1 (made valid JSON), written by src/slurmctld/power_save.c
of those tags.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from coreburst.burst.launch import launch_groups
from coreburst.burst.power import read_resume_file

SLURM = Path(__file__).parents[2] / "fixtures" / "slurm"


def test_slurm_22_05_layout() -> None:
    jobs = read_resume_file(str(SLURM / "resume-22.05.json"))
    assert jobs == [
        ("140814", ["cloud1", "cloud2", "cloud3"]),
        ("140815", ["cloud1", "cloud2"]),
    ]
    groups = launch_groups(["cloud1", "cloud2", "cloud3"], jobs)
    assert [(g.label, g.nodes, g.all_or_nothing) for g in groups] == [
        ("job 140814", ["cloud1", "cloud2", "cloud3"], True)
    ]


def test_slurm_23_02_layout_uses_each_jobs_whole_allocation() -> None:
    """A job's nodes are its allocation (``nodes_alloc``), not just those resumed this time
    (cloud4 of job 140814 is up already): the launch groups keep only nodes being resumed."""
    jobs = read_resume_file(str(SLURM / "resume-23.02.json"))
    assert jobs == [
        ("140814", ["cloud1", "cloud2", "cloud3", "cloud4"]),
        ("140815", ["cloud1", "cloud2"]),
        ("140816", ["cloud7", "cloud8"]),
    ]
    groups = launch_groups(["cloud1", "cloud2", "cloud3", "cloud7", "cloud8"], jobs)
    assert [(g.label, g.nodes, g.all_or_nothing) for g in groups] == [
        ("job 140814", ["cloud1", "cloud2", "cloud3"], True),
        ("job 140816", ["cloud7", "cloud8"], True),
    ]


@pytest.mark.parametrize("name", ["resume-22.05.json", "resume-23.02.json"])
def test_the_fixtures_are_the_two_layouts(name: str) -> None:
    """Guards the tests above: each file has only its release's keys."""
    text = (SLURM / name).read_text()
    old = '"all_nodes"' in text and '"nodes"' in text
    new = '"all_nodes_resume"' in text and '"nodes_alloc"' in text and '"nodes_resume"' in text
    assert (old, new) == ((True, False) if name == "resume-22.05.json" else (False, True))
