"""Reading which GPUs each running job holds from ``squeue --json``.

fixtures/squeue-22.05.json is real output, recorded from the Slurm lab
(coreburst/sandbox/slurmlab.py,
Debian slurm-wlm 22.05.8, plugin openapi/v0.0.38) with three jobs: one running on core1 with a
job comment, one requeued (pending, restart_cnt 1), one over two nodes. The GRES index syntax
is scontrol(1)'s ``GRES=gpu:h100:2(IDX:0-1)`` as ``scontrol -d show job`` prints it.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from guardrails.adapters.slurm import SlurmError, gpu_indices, parse_jobs

FIXTURE = Path(__file__).parent / "fixtures" / "squeue-22.05.json"


def test_running_jobs_and_the_gpus_each_holds_per_node() -> None:
    jobs = {j.job_id: j for j in parse_jobs(FIXTURE.read_text())}
    assert set(jobs) == {"1", "3"}  # job 2 was requeued: pending, holds nothing
    one, multi = jobs["1"], jobs["3"]
    assert one.gpus == {"core1": (0, 1)} and one.gpu_count == 2
    assert one.comment == "coreburst-exempt-until=2026-12-05"
    assert one.user == "root" and one.partition == "core" and not one.interactive
    assert one.time_limit == timedelta(minutes=30)
    assert one.start == datetime.fromtimestamp(1796311049, UTC)
    # Two nodes: gres_detail follows job_resources.allocated_nodes' order.
    assert multi.gpus == {"core1": (2, 3), "core2": (0, 1)} and multi.gpu_count == 4


@pytest.mark.parametrize(
    ("gres", "idx"),
    [
        ("gpu:h100:2(IDX:0-1)", (0, 1)),
        ("gpu:3(IDX:0,2-3)", (0, 2, 3)),
        ("gpu:a100:1(IDX:4),gpu:v100:1(IDX:6)", (4, 6)),
        ("gpu:1(IDX:N/A)", ()),
        ("mps:100(IDX:0)", ()),  # not a GPU
        ("", ()),
    ],
)
def test_gres_index_lists(gres: str, idx: tuple[int, ...]) -> None:
    assert gpu_indices(gres) == idx


def _doc(**job: object) -> str:
    base = {
        "job_id": 9, "job_state": "RUNNING", "start_time": 1796311049, "user_name": "ann",
        "job_resources": {"allocated_nodes": [{"nodename": "n1"}]},
        "gres_detail": ["gpu:1(IDX:0)"], "batch_flag": False, "time_limit": 4294967295,
    }  # fmt: skip
    return json.dumps({"jobs": [{**base, **job}]})


def test_interactive_and_unlimited_jobs() -> None:
    (j,) = parse_jobs(_doc())
    assert j.interactive and j.time_limit is None


def test_the_newer_wrapped_numbers_are_read() -> None:
    """Slurm 23.02+ wraps numbers as {"set", "infinite", "number"} and lists job_state."""
    (j,) = parse_jobs(
        _doc(
            job_id={"set": True, "infinite": False, "number": 9},
            start_time={"set": True, "infinite": False, "number": 1796311049},
            time_limit={"set": True, "infinite": False, "number": 90},
            job_state=["RUNNING"],
        )
    )
    assert (j.job_id, j.time_limit) == ("9", timedelta(minutes=90))


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("squeue: error: slurm_load_jobs", "not JSON"),
        ('{"meta": {}}', "no 'jobs' list"),
        (_doc(start_time=None), "lacks job_id or start_time"),
        (_doc(gres_detail=["gpu:1(IDX:0)", "gpu:1(IDX:1)"]), "2 gres_detail entries for 1"),
        (_doc(gres_detail="gpu:1(IDX:0)"), "not a list of strings"),
        (_doc(gres_detail=["gpu:1(IDX:x-1)"]), "not a number or range"),
    ],
)
def test_malformed_output_is_one_line_and_nothing_is_read(text: str, why: str) -> None:
    with pytest.raises(SlurmError, match=why) as e:
        parse_jobs(text)
    assert "\n" not in str(e.value)


def test_output_that_is_not_utf8_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's name or comment may hold any bytes (squeue prints them as given): every Slurm
    client read (squeue for core-idle, scontrol for burst) says so in one line instead of a
    UnicodeDecodeError traceback, and nothing is read from it."""
    from guardrails.adapters.slurm import Scontrol, SlurmJobs
    from guardrails.adapters.slurm import Scontrol as BurstScontrol

    sample = FIXTURE.read_bytes()
    bad = sample.replace(b'"comment": "', b'"comment": "caf\xe9 ', 1)
    assert bad != sample
    (tmp_path / "bad.json").write_bytes(bad)
    for tool in ("squeue", "scontrol"):
        script = tmp_path / tool
        script.write_text(f"#!/bin/sh\ncat {tmp_path / 'bad.json'}\n")
        script.chmod(0o755)
    for read in (
        lambda: SlurmJobs(bin_dir=tmp_path).running(),
        lambda: Scontrol(tmp_path).nodes(),
    ):
        with pytest.raises(SlurmError) as err:
            read()
        assert "not UTF-8" in str(err.value) and "\n" not in str(err.value)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with pytest.raises(SlurmError, match="not UTF-8"):
        BurstScontrol().scontrol("-o", "show", "job", "1")
