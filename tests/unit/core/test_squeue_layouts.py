"""``squeue --json`` as each Slurm release prints a job's nodes, read by the core-idle rule.

Up to 23.11 a job's nodes are ``job_resources.allocated_nodes[].nodename``; from 24.05
``job_resources.nodes.allocation[].name``. The fixtures (tests/fixtures/slurm/, see its
README.md) are made up by us in the shape of SchedMD's data_parser source at tags
slurm-23-11-10-1 (v0.0.40) and slurm-24-05-8-1 (v0.0.41); both describe the same four jobs.
squeue-24.11-recorded.json is real output of Slurm 24.11.5 (Debian trixie, in a chroot) with
jobs much like those. The real 22.05 recording is read in test_slurm_jobs.py. Prometheus here
is the loopback fake of test_core_rule_cycles.py (made up by us in the shape of Prometheus's
range-query API).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from coreburst.sandbox.clocks import FakeClock
from guardrails.adapters.slurm import SlurmError, parse_jobs
from tests.helpers.core_idle import FakePrometheus, _script, daemon

SLURM = Path(__file__).parents[2] / "fixtures" / "slurm"
V40 = SLURM / "squeue-23.11-v0.0.40.json"
V41 = SLURM / "squeue-24.05-v0.0.41.json"
V42_REAL = SLURM / "squeue-24.11-recorded.json"


@pytest.mark.parametrize("fixture", [V40, V41], ids=["23.11", "24.05"])
def test_both_layouts_give_each_running_job_its_gpus_per_node(fixture: Path) -> None:
    jobs = {j.job_id: j for j in parse_jobs(fixture.read_text())}
    assert set(jobs) == {"101", "103", "104"}  # 102 is pending
    assert {k: j.gpus for k, j in jobs.items()} == {
        "101": {"core1": (0, 1)},
        "103": {"core1": (2, 3), "core2": (0, 1)},  # gres_detail in the nodes' order
        "104": {"core2": (4,)},
    }
    assert jobs["101"].comment == "coreburst-exempt-until=2026-12-05"
    assert jobs["101"].time_limit == timedelta(minutes=30)
    assert jobs["103"].user == "ann" and jobs["103"].account == "ml"
    assert jobs["103"].start == datetime.fromtimestamp(1796311069, UTC)
    assert jobs["104"].interactive and jobs["104"].time_limit is None


def test_real_slurm_24_11_output() -> None:
    jobs = {j.job_id: j for j in parse_jobs(V42_REAL.read_text())}
    assert {k: j.gpus for k, j in jobs.items()} == {
        "1": {"core1": (0, 1)},
        "3": {"core1": (2, 3), "core2": (0, 1)},
        "4": {"core2": (2,)},
    }  # job 2 is held: pending
    assert jobs["1"].comment == "coreburst-exempt-until=2026-12-05"
    assert jobs["1"].time_limit == timedelta(minutes=30) and not jobs["1"].interactive
    assert jobs["4"].interactive and jobs["4"].time_limit is None  # salloc -t UNLIMITED


def test_the_fixtures_are_the_two_layouts() -> None:
    """Guards the test above: each fixture has only its release's layout."""
    for path, has, lacks in ((V40, "allocated_nodes", "allocation"), (V41, "allocation", "")):
        job = json.loads(path.read_text())["jobs"][2]
        text = json.dumps(job["job_resources"])
        assert f'"{has}"' in text and (not lacks or f'"{lacks}"' not in text)
    for path in (V41, V42_REAL):
        assert '"allocated_nodes"' not in path.read_text()


def _v41(**res: object) -> str:
    doc = json.loads(V41.read_text())
    doc["jobs"] = [doc["jobs"][2]]
    doc["jobs"][0]["job_resources"] = res or None
    return json.dumps(doc)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (_v41(), "job 103: holds GRES but lists no nodes (neither job_resources.allocated_nodes"),
        (_v41(nodes={"list": "core[1-2]"}), "holds GRES but lists no nodes"),
        (
            _v41(nodes={"allocation": [{"index": 0, "name": "core1"}]}),
            "2 gres_detail entries for 1",
        ),
        (_v41(nodes={"allocation": [{"index": 0}, {"index": 1}]}), "an allocated node has no name"),
    ],
)
def test_a_job_whose_nodes_cannot_be_read_is_one_line_and_nothing_is_read(
    text: str, why: str
) -> None:
    with pytest.raises(SlurmError, match=re.escape(why)) as e:
        parse_jobs(text)
    assert "\n" not in str(e.value)


def test_a_core_idle_cycle_on_slurm_24_05_warns_about_the_idle_job(
    tmp_path: Path, aws_env: None
) -> None:
    """The daemon's core-idle rule over the 24.05 layout (which made every cycle fail with
    "N gres_detail entries for 0 allocated nodes"): the jobs are read and judged."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir / "squeue", f'cat "{V41}"\n')
    for tool in ("scontrol", "scancel"):
        _script(bin_dir / tool, f'echo "{tool} $*" >> "{bin_dir}/calls"\n')
    prom = FakePrometheus(
        {"core1.lab.example": (0, 1, 2, 3), "core2.lab.example": (0, 1, 4)}, lambda *_: 0.0
    )
    start = max(j.start for j in parse_jobs(V41.read_text()))
    d = daemon(tmp_path, bin_dir, prom, FakeClock(start + timedelta(hours=2)))
    try:
        r = d.run_cycle()
        rows = [json.loads(x["payload"]) for x in d.state.outbox_rows()]
    finally:
        d.close()
        d.state.close()
        prom.stop()
    assert r.errors == []
    texts = [p["blocks"][0]["text"]["text"] for p in rows]
    assert "Slurm job 103 holds 4 of 4 GPU(s) idle" in texts
    assert not any("job 101" in t for t in texts)  # exempt by its comment
