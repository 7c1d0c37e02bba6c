"""Spend that reads like a forecast (issue 14, item 7): a scope's first cycle accrues from each
instance's launch time (DescribeInstances' LaunchTime), not from midnight, and alerts give the
time a limit is reached at the current burn, again minutes after the burn rises.

moto in-process answers DescribeInstances; its instances' LaunchTime comes from moto's own
``utcnow``, which the fixture pins (a test-only fixture: moto otherwise stamps the wall clock)
so the fake clock and the launch times agree. p5.48xlarge on-demand in us-east-1 is $55.04/h
(catalog, source ``ref``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws

from coreburst.sandbox.clocks import FakeClock
from coreburst.sandbox.emulator import fake_session, launch
from guardrails import messages
from guardrails.adapters.aws import Aws
from guardrails.configfile import parse_config
from guardrails.daemon import Daemon
from guardrails.spend import accrue_since_launch, breach_time
from guardrails.stores.sqlite import State

P5 = 55.04
DAY = datetime(2026, 12, 3, tzinfo=UTC)


def at(h: int, m: int = 0) -> datetime:
    return DAY + timedelta(hours=h, minutes=m)


def test_first_cycle_accrues_from_launch_not_midnight() -> None:
    items = [(P5, at(9)), (P5, at(11)), (2.25, None)]  # two nodes and a DX port (no start)
    got = accrue_since_launch(0.0, None, items, at(12))
    assert got == pytest.approx(P5 * 3 + P5 * 1 + 2.25 * 12)
    # launched yesterday: from midnight
    assert accrue_since_launch(0.0, None, [(P5, at(-5))], at(2)) == pytest.approx(P5 * 2)
    # a later cycle: from the last sample, or from launch when that is later
    got = accrue_since_launch(100.0, at(12), [(P5, at(9)), (P5, at(12, 30))], at(13))
    assert got == pytest.approx(100.0 + P5 * 1 + P5 * 0.5)
    # a new day starts from zero at midnight
    assert accrue_since_launch(999.0, at(23), [(P5, at(9))], at(25)) == pytest.approx(P5)
    # a launch time after "now" (this clock behind EC2's): counted from midnight, the safe side
    assert accrue_since_launch(0.0, None, [(P5, at(15))], at(12)) == pytest.approx(P5 * 12)


def test_breach_time_at_the_current_burn() -> None:
    end = at(24)
    assert breach_time(400.0, 1000.0, 120.0, at(12), end) == at(17)
    assert breach_time(1000.0, 1000.0, 120.0, at(12), end) == at(12)  # already reached
    assert breach_time(400.0, 1000.0, 0.0, at(12), end) is None  # nothing burns
    assert breach_time(400.0, 1000.0, 10.0, at(12), end) is None  # not before the day ends


def test_messages_read_like_a_forecast() -> None:
    a = messages.spend_threshold(
        "account",
        "daily:2026-12-03",
        50,
        spent=600.0,
        limit=1000.0,
        burn=412.0,
        projected_month=1.0,
        enforce=False,
        now=at(13, 22),
        breach_at=at(14, 20),
    )
    assert "Forecast: daily limit reached at 14:20 UTC at $412/h." in a.lines
    f = messages.spend_forecast(
        "account",
        "daily:2026-12-03",
        now=at(9),
        breach_at=at(14, 20),
        spent=100.0,
        limit=1000.0,
        burn=412.0,
    )
    assert f.title == "Spend account: daily limit reached at 14:20 UTC at the current burn"
    assert f.lines[0] == "Forecast: daily limit reached at 14:20 UTC at $412/h."


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    import moto.ec2.models.instances as moto_instances

    launched = {"at": at(9)}
    # moto stamps LaunchTime with its utcnow (naive UTC); pin it to the test's timeline
    monkeypatch.setattr(moto_instances, "utcnow", lambda: launched["at"].replace(tzinfo=None))
    with mock_aws():
        aws = Aws(parse_config("").aws, session=fake_session())
        ec2 = aws.client("ec2", "us-east-1")
        cfg = parse_config(
            f"""
regions: [us-east-1]
idle: {{window: 10m, max_gap: 2m}}
safety: {{kill_switch_file: null}}
spend:
  cost_explorer: false
  include_lustre: false
  direct_connect_ports: []
  scopes: [{{name: account, daily_limit_usd: 1000}}]
egress: {{enabled: false}}
state: {{path: "{tmp_path}/s.db", audit_log: "{tmp_path}/a.jsonl"}}
metrics_endpoint: {{enabled: false}}
""",
            "g.yaml",
        )
        clock = FakeClock(at(12))
        state = State(cfg.state.path)
        d = Daemon(cfg, aws, state, clock=clock)

        def launch_at(when: datetime, count: int) -> None:
            launched["at"] = when
            launch(ec2, "p5.48xlarge", {"team": "ml"}, count=count)

        try:
            yield d, clock, state, launch_at
        finally:
            d.close()
            state.close()


def forecasts(state: State) -> list[str]:
    out = []
    for r in state.outbox_rows():
        if r["dedupe_key"].startswith("forecast:"):
            out.append(json.loads(r["payload"])["blocks"][0]["text"]["text"])
    return out


def test_daemon_forecasts_from_launch_time_and_follows_the_burn(fleet: Any) -> None:
    d, clock, state, launch_at = fleet
    launch_at(at(9), 2)
    r = d.run_cycle()
    acct = r.spend["account"]
    # the first cycle counts 09:00-12:00, not 00:00-12:00 (which would be $1,321)
    assert acct["today_usd"] == pytest.approx(2 * P5 * 3)
    # $330.24 spent, $669.76 to go at $110.08/h: 6.08 h -> 18:05
    assert acct["daily_limit_at"].startswith("2026-12-03T18:05:03")
    assert forecasts(state) == [
        "Spend account: daily limit reached at 18:05 UTC at the current burn"
    ]

    # the burn doubles at 12:05; ten minutes later the forecast says so
    launch_at(at(12, 5), 2)
    clock.set(at(12, 10))
    r = d.run_cycle()
    acct = r.spend["account"]
    spent = 2 * P5 * 3 + 2 * P5 * 10 / 60 + 2 * P5 * 5 / 60
    assert acct["today_usd"] == pytest.approx(spent)
    assert acct["burn_usd_per_hour"] == pytest.approx(4 * P5)
    breach = at(12, 10) + timedelta(hours=(1000 - spent) / (4 * P5))
    assert breach.strftime("%H:%M") == "15:05"
    assert forecasts(state)[-1] == (
        "Spend account: daily limit reached at 15:05 UTC at the current burn"
    )
    assert len(forecasts(state)) == 2

    # the same burn next cycle: the same forecast, nothing new
    clock.advance(timedelta(minutes=10))
    d.run_cycle()
    assert len(forecasts(state)) == 2
