"""The core-idle rule when its sources fail: Slurm unreadable or malformed -> one error line,
nothing decided; Prometheus unreachable -> every job blind, never acted on; a standby daemon
never warns. ``squeue`` here is a stand-in script that prints the real Slurm 22.05 output
recorded in fixtures/squeue-22.05.json (or fails); ``scontrol``/``scancel`` stand-ins record
any call (none may come)."""

from __future__ import annotations

import json
import stat
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from coreburst.sandbox.clocks import FakeClock
from guardrails.adapters.aws import Aws
from guardrails.adapters.slurm import parse_jobs
from guardrails.configfile import parse_config
from guardrails.daemon import Daemon
from guardrails.rules import REGISTRY
from guardrails.stores.sqlite import State

FIXTURE = Path(__file__).parent / "fixtures" / "squeue-22.05.json"


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    _script(d / "squeue", f'cat "{FIXTURE}"\n')
    for tool in ("scontrol", "scancel"):
        _script(d / tool, f'echo "{tool} $*" >> "{d}/calls"\n')
    return d


def run_rule(tmp_path: Path, bin_dir: Path, *, leader: bool = True) -> tuple[Any, list[Any]]:
    cfg = parse_config(
        f'dry_run: false\nstate: {{path: "{tmp_path}/s.db", audit_log: "{tmp_path}/a.jsonl"}}\n'
        f'safety: {{kill_switch_file: "{tmp_path}/stop"}}\nmetrics_endpoint: {{enabled: false}}\n'
        "core_idle: {enabled: true, prometheus_url: 'http://127.0.0.1:9', policy: cancel,"
        f' prometheus_timeout_s: 2, slurm_bin_dir: "{bin_dir}"}}\n',
        "g.yaml",
    )
    start = max(j.start for j in parse_jobs(FIXTURE.read_text()))
    state = State(cfg.state.path)
    d = Daemon(
        cfg,
        Aws(cfg.aws, boto3.session.Session(region_name="us-east-1")),
        state,
        clock=FakeClock(start + timedelta(hours=5)),
    )
    try:
        d.leader = leader
        d.actuator.begin_cycle(d.report.actions)
        REGISTRY["core-idle"].run(d.context())  # type: ignore[misc]
        report = d.report
        usage = list(state.core_usage(start - timedelta(days=1)))
        queued = [json.loads(r["payload"]) for r in state.outbox_rows()]
    finally:
        d.close()
        state.close()
    assert not (bin_dir / "calls").exists()  # nothing requeued or cancelled
    return report, [usage, queued]


@pytest.mark.parametrize(
    ("squeue", "error"),
    [
        ('echo "<html>"\n', "core-idle: squeue --json: output is not JSON"),
        (
            'echo "slurm_load_jobs error: Unable to contact slurm controller" >&2; exit 1\n',
            "core-idle: squeue --json --states=RUNNING failed (1): slurm_load_jobs error: Unable "
            "to contact slurm controller",
        ),
    ],
)
def test_slurm_unreadable_is_one_line_and_nothing_is_decided(
    tmp_path: Path, bin_dir: Path, aws_env: None, squeue: str, error: str
) -> None:
    _script(bin_dir / "squeue", squeue)
    report, (usage, queued) = run_rule(tmp_path, bin_dir)
    assert report.errors == [error]
    assert usage == [] and queued == [] and not report.states


def test_prometheus_unreachable_makes_every_job_blind(
    tmp_path: Path, bin_dir: Path, aws_env: None
) -> None:
    report, (usage, queued) = run_rule(tmp_path, bin_dir)
    assert len(report.errors) == 1 and "unreachable" in report.errors[0]
    # job 1 carries --comment=coreburst-exempt-until=2026-12-05 (recorded): exempt; job 3 blind
    assert dict(report.states) == {"core-exempt": 1, "core-blind": 1} and report.actions == []
    assert {r["job_id"]: r["used_gpu_h"] for r in usage} == {"1": None, "3": None}
    assert [q["blocks"][0]["text"]["text"] for q in queued] == [
        "1 Slurm job(s) on the core without usable GPU data"
    ]


def test_a_standby_daemon_records_nothing_and_warns_nobody(
    tmp_path: Path, bin_dir: Path, aws_env: None
) -> None:
    report, (usage, _) = run_rule(tmp_path, bin_dir, leader=False)
    assert usage == [] and report.actions == []
