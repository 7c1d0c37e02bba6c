"""The core-idle rule over several daemon cycles as a job's GPUs go from partly to wholly idle.

``squeue`` is a stand-in script printing the real Slurm 22.05 output recorded in
fixtures/squeue-22.05.json (job 3 holds core1 GPUs 2-3 and core2 GPUs 0-1, a 30-minute time
limit: a *short* job, window 30m, grace 30m; job 1 is exempt by its comment); ``scancel``/
``scontrol`` stand-ins record their calls. Prometheus is a fake made up by us: a loopback HTTP
server answering ``POST /api/v1/query_range`` in the matrix shape of Prometheus's docs ("HTTP
API: Range queries", "Range vectors") with dcgm-exporter's labels (gpu, hostname; see
tests/integration/core/fixtures/dcgm-core-lab.prom), filtering hosts by the query's
``hostname=~"..."`` matcher. The real Prometheus and Slurm run in tests/integration/core.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from coreburst.sandbox.clocks import FakeClock
from guardrails.daemon import Daemon
from tests.helpers.core_idle import FIXTURE, START, FakePrometheus, _script, daemon


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    _script(d / "squeue", f'cat "{FIXTURE}"\n')
    for tool in ("scontrol", "scancel"):
        _script(d / tool, f'echo "{tool} $*" >> "{d}/calls"\n')
    return d


def _warnings(d: Daemon) -> list[str]:
    rows = [json.loads(r["payload"]) for r in d.state.outbox_rows()]
    return [p["blocks"][0]["text"]["text"] for p in rows if "Slurm job 3 holds" in json.dumps(p)]


def _calls(bin_dir: Path) -> list[str]:
    f = bin_dir / "calls"
    return f.read_text().splitlines() if f.exists() else []


def _idle_gpus(d: Daemon) -> dict[str, float]:
    """coreburst_guardrails_idle_gpus as the daemon's metrics endpoint exposes it."""
    text = generate_latest(d.metrics.registry).decode()
    return {
        s.labels["owner"]: s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "coreburst_guardrails_idle_gpus"
    }


BUSY_UNTIL = START + timedelta(minutes=60)


def some_then_all_idle(host: str, gpu: int, t: datetime) -> float:
    """core1 GPU 2 busy for the job's first hour; every other GPU idle throughout."""
    return 55.0 if (host, gpu) == ("core1.lab.example", 2) and t < BUSY_UNTIL else 0.0


HOSTS = {"core1.lab.example": (0, 1, 2, 3), "core2.lab.example": (0, 1)}


def test_some_gpus_idle_is_warned_once_then_all_idle_is_warned_again_and_acted_on(
    tmp_path: Path, bin_dir: Path, aws_env: None
) -> None:
    prom = FakePrometheus(HOSTS, some_then_all_idle)
    clock = FakeClock(START + timedelta(minutes=45))
    d = daemon(tmp_path, bin_dir, prom, clock)
    try:
        # 1: three of four GPUs idle for the 30m window -> warned, nothing promised.
        r = d.run_cycle()
        assert r.errors == [] and r.states["core-some-idle"] == 1
        assert _warnings(d) == ["Slurm job 3 holds 3 of 4 GPU(s) idle"]
        assert _idle_gpus(d) == {"root": 3.0}  # the metrics endpoint: idle GPUs by owner
        # 2: still some idle, well past a grace: no second warning, and never acted on.
        clock.advance(timedelta(minutes=35))
        r = d.run_cycle()
        assert r.states["core-some-idle"] == 1 and r.actions == []
        assert len(_warnings(d)) == 1
        # 3: GPU 2 idle since minute 60; at minute 95 all four were idle for the window ->
        # warned again (the grace starts now), not acted on yet.
        clock.advance(timedelta(minutes=15))
        r = d.run_cycle()
        assert r.states["core-idle"] == 1 and r.actions == []
        assert _idle_gpus(d) == {"root": 4.0}
        assert _warnings(d) == [
            "Slurm job 3 holds 3 of 4 GPU(s) idle",
            "Slurm job 3 holds 4 of 4 GPU(s) idle",
        ]
        warned = [e for e in _audit(d) if e["event"] == "core.warn"]
        assert [e["state"] for e in warned] == ["some-idle", "idle"]
        assert warned[1]["act_after"] == str(clock.now() + timedelta(minutes=30))
        # 4: inside the grace that started with the second warning: nothing.
        clock.advance(timedelta(minutes=20))
        assert d.run_cycle().actions == [] and _calls(bin_dir) == []
        # 5: past it -> cancelled, once, through scancel.
        clock.advance(timedelta(minutes=11))
        assert d.run_cycle().actions == ["cancel slurm-job-3"]
        assert _calls(bin_dir) == ["scancel 3"]
        assert len(_warnings(d)) == 2
    finally:
        d.close()
        d.state.close()
        prom.stop()


def test_two_exporters_for_one_node_make_its_jobs_blind_and_the_cycle_says_why(
    tmp_path: Path, bin_dir: Path, aws_env: None
) -> None:
    hosts = {**HOSTS, "core2.old.example": (0, 1)}  # a renamed host still scraped
    prom = FakePrometheus(hosts, lambda *_: 0.0)
    clock = FakeClock(START + timedelta(hours=3))
    d = daemon(tmp_path, bin_dir, prom, clock)
    try:
        r = d.run_cycle()
        assert r.states["core-blind"] == 1 and r.actions == [] and _warnings(d) == []
        assert r.errors == [
            "core-idle: Slurm node core2's GPUs are blind: exporter hosts core2.lab.example and "
            "core2.old.example both match Slurm node core2; set core_idle.host_map"
        ]
        decision = next(
            e for e in _audit(d) if e["event"] == "core.decision" and e["job_id"] == "3"
        )
        assert decision["state"] == "blind" and "both match Slurm node core2" in decision["reason"]
        clock.advance(timedelta(hours=2))
        assert d.run_cycle().actions == [] and _calls(bin_dir) == []
    finally:
        d.close()
        d.state.close()
        prom.stop()


def _audit(d: Daemon) -> list[dict[str, Any]]:
    return [json.loads(x) for x in d.cfg.state.audit_log.read_text().splitlines()]
