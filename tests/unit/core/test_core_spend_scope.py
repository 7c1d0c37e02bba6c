"""Issue 16, item 3: "spend scopes and reports show both". A spend scope lists the Slurm
accounts of the on-prem core that belong to it (``spend.scopes[].slurm_accounts``); the
``spend-limit`` rule puts their month-to-date core GPU-hours, priced at
``core_idle.gpu_hour_usd``, beside the scope's cloud spend in the cycle report, in
``guardrails status`` and in the daily/monthly limit messages, and never counts that owned,
sunk cost against the cloud limits.

moto in-process answers DescribeInstances (as in tests/unit/guardrails/test_forecast.py, whose
LaunchTime pinning this follows); p5.48xlarge on-demand in us-east-1 is $55.04/h (catalog,
source ``ref``). The core rows are written with the state store's own ``record_core_usage``, as
the core-idle rule writes them (allocated = GPUs x hours since start).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws
from typer.testing import CliRunner

from coreburst.sandbox.clocks import FakeClock
from coreburst.sandbox.emulator import fake_session, launch
from guardrails.adapters.aws import Aws
from guardrails.cli import app as guardrails_app
from guardrails.config import ConfigError
from guardrails.configfile import parse_config
from guardrails.daemon import Daemon
from guardrails.spend import core_spend
from guardrails.stores.sqlite import State

P5 = 55.04
DAY = datetime(2026, 12, 3, tzinfo=UTC)


def at(h: int, m: int = 0) -> datetime:
    return DAY + timedelta(hours=h, minutes=m)


# ml's job ran 8 GPUs from Nov 30 (before this month) to 11:00 on Dec 3: 83 h, 59 of them in
# December; 25 % efficiency. ml-dev's 4-GPU job is blind (unmeasured). cv is another scope's.
CORE_MTD_TEXT = (
    "core (Slurm ml, ml-dev) 516 GPU-h this month at $1.90 = $980, 75 % of measured GPU-hours "
    "idle (44 GPU-h unmeasured); owned, not counted against cloud limits"
)


def record_core(state: State) -> None:
    runs = [  # job, account, start, gpus, used fraction (None: blind)
        ("1", "ml", datetime(2026, 11, 30, tzinfo=UTC), 8, 0.25),
        ("2", "ml-dev", at(0), 4, None),
        ("3", "cv", at(0), 8, 1.0),
    ]
    for job, acct, start, gpus, eff in runs:
        alloc = gpus * (at(11) - start).total_seconds() / 3600
        state.record_core_usage(
            f"{job}:1", at(11), job_id=job, user="ann", account=acct, partition="core",
            start=start, gpus=gpus, allocated_gpu_h=alloc,
            used_gpu_h=None if eff is None else alloc * eff, state="busy",
        )  # fmt: skip


CONFIG = """
regions: [us-east-1]
idle: {{window: 10m, max_gap: 2m}}
safety: {{kill_switch_file: null}}
spend:
  cost_explorer: false
  include_lustre: false
  direct_connect_ports: []
  scopes:
    - {{name: ml, tag_key: team, tag_value: ml, daily_limit_usd: 100,
       slurm_accounts: [ml, ml-dev]}}
    - {{name: vision, tag_key: team, tag_value: cv, daily_limit_usd: 100}}
core_idle: {{gpu_hour_usd: 1.9}}
egress: {{enabled: false}}
state: {{path: "{tmp}/s.db", audit_log: "{tmp}/a.jsonl"}}
metrics_endpoint: {{enabled: false}}
"""


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    import moto.ec2.models.instances as moto_instances

    monkeypatch.setattr(moto_instances, "utcnow", lambda: at(9).replace(tzinfo=None))
    path = tmp_path / "g.yaml"
    path.write_text(CONFIG.format(tmp=tmp_path))
    with mock_aws():
        aws = Aws(parse_config("").aws, session=fake_session())
        cfg = parse_config(path.read_text(), str(path))
        state = State(cfg.state.path)
        record_core(state)
        clock = FakeClock(at(11, 30))
        d = Daemon(cfg, aws, state, clock=clock)
        try:
            yield d, clock, state, aws.client("ec2", "us-east-1"), path
        finally:
            d.close()
            state.close()


def spend_alerts(state: State) -> list[str]:
    return [
        json.dumps(json.loads(r["payload"]))
        for r in state.outbox_rows()
        if r["dedupe_key"].startswith(("spend:", "forecast:"))
    ]


def test_a_scope_shows_its_core_gpu_hours_beside_cloud_spend(fleet: Any) -> None:
    d, clock, state, ec2, path = fleet
    r = d.run_cycle()
    core = r.spend["ml"]["core_month_to_date"]
    # by hand: ml 8 GPUs x 59 h in December = 472 GPU-h, 118 used; ml-dev 4 x 11 h = 44, blind
    assert core == {
        "accounts": ["ml", "ml-dev"], "jobs": 2, "gpu_h": 516.0, "measured_gpu_h": 472.0,
        "used_gpu_h": 118.0, "idle_pct": 75.0, "usd_per_gpu_hour": 1.9, "usd": 980.4,
    }  # fmt: skip
    assert "core_month_to_date" not in r.spend["vision"]  # no slurm_accounts: no core line
    # $980 of owned core is more than the $100 daily limit, yet no cloud dollar was spent:
    # sunk cost trips no limit
    assert r.spend["ml"]["today_usd"] == 0.0 and spend_alerts(state) == []

    # the cloud burns: 2 x p5 from the 11:30 sample to 12:00 = $55.04, 55 % of $100 -> the
    # 50 % threshold
    launch(ec2, "p5.48xlarge", {"team": "ml"}, count=2)
    clock.set(at(12))
    r = d.run_cycle()
    assert r.spend["ml"]["today_usd"] == pytest.approx(P5)
    alerts = spend_alerts(state)
    threshold = [a for a in alerts if "50% of the daily limit" in a]
    forecast = [a for a in alerts if "limit reached at" in a and "current burn" in a]
    assert threshold and forecast
    assert all(f"Also {CORE_MTD_TEXT}." in a for a in threshold + forecast)

    # guardrails status: the same line in the scope's row
    out = CliRunner().invoke(
        guardrails_app, ["status", "--config", str(path)], env={"COLUMNS": "400"}
    )
    assert out.exit_code == 0, out.output
    assert CORE_MTD_TEXT in " ".join(out.output.split())


def test_without_a_price_the_core_shows_gpu_hours_only() -> None:
    from guardrails.messages import core_spend_text

    rows = [
        {"account": "ml", "start": at(0).isoformat(), "last_seen": at(10).isoformat(),
         "gpus": 1, "allocated_gpu_h": 10.0, "used_gpu_h": None},
    ]  # fmt: skip
    c = core_spend(rows, ["ml"], at(0), None).as_dict()
    assert core_spend_text(c) == (
        "core (Slurm ml) 10 GPU-h this month (no core_idle.gpu_hour_usd: no $ figure), idle "
        "share unknown (no DCGM data); owned, not counted against cloud limits"
    )


@pytest.mark.parametrize(
    ("yaml_text", "says"),
    [
        (
            "spend: {scopes: [{name: ml, slurm_accounts: [ML]}]}",
            "spend.scopes.0: slurm_accounts: 'ML' is not a Slurm account name",
        ),
        (
            "spend: {scopes: [{name: ml, slurm_accounts: ['ml team']}]}",
            "'ml team' is not a Slurm account name",
        ),
        ("spend: {scopes: [{name: ml, slurm_accounts: [ml, ml]}]}", "ml is listed twice"),
        (
            "spend: {scopes: [{name: a, slurm_accounts: [ml]}, {name: b, slurm_accounts: [ml]}]}",
            "spend: Slurm account ml is in scopes a and b",
        ),
        ("spend: {scopes: [{name: ml, slurm_accounts: ml}]}", "spend.scopes.0.slurm_accounts"),
        (  # month-to-date core figures need a month of the rule's records
            "state: {snapshot_retention: 7d}\nspend: {scopes: [{name: ml, slurm_accounts: [ml]}]}",
            "state.snapshot_retention (7d) is shorter than a month",
        ),
    ],
)
def test_bad_slurm_accounts_are_one_line(yaml_text: str, says: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(yaml_text, "g.yaml")
    assert says in str(e.value) and "\n" not in str(e.value)


def test_check_config_exits_2_on_an_account_in_two_scopes(tmp_path: Path) -> None:
    bad = tmp_path / "g.yaml"
    bad.write_text(
        "spend: {scopes: [{name: a, slurm_accounts: [ml]}, {name: b, slurm_accounts: [ml]}]}\n"
    )
    r = CliRunner().invoke(guardrails_app, ["check-config", str(bad)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "Slurm account ml is in scopes a and b" in r.output
