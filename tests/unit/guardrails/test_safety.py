"""Daemon safety rules around one action: dry-run, kill switch, per-cycle cap, breaker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from guardrails.aws import Aws
from guardrails.clock import FakeClock
from guardrails.config import parse_config
from guardrails.daemon import Daemon
from guardrails.state import State


def make(tmp: Path, extra: str = "", owner: str | None = None, state: str = "") -> Daemon:
    cfg = parse_config(
        f"""
safety: {{max_actions_per_cycle: 2, breaker_failures: 3, breaker_reset: 30m,
          kill_switch_file: "{tmp}/stop"}}
state: {{path: "{tmp}/s.db", audit_log: "{tmp}/a.jsonl"{state}}}
{extra}
"""
    )
    clock = FakeClock(datetime(2026, 5, 5, 12, tzinfo=UTC))
    d = Daemon(cfg, Aws(cfg.aws), State(cfg.state.path), clock=clock, owner_id=owner)
    # What run_cycle does first: take the leader lease on the store.
    d.leader = d.state.acquire_lease("leader", d.owner_id, clock.now(), 180)
    return d


def test_only_the_lease_holder_acts(tmp_path: Path) -> None:
    first = make(tmp_path, owner="host-a")
    second = make(tmp_path, owner="host-b")  # a second daemon on the same store
    assert first.leader and not second.leader
    assert second.gate() == "another daemon holds the leader lease"
    assert not act(second, "a")
    assert act(first, "a")
    assert make(tmp_path, owner="host-a").leader  # a restarted leader resumes its lease


def ok() -> str:
    return "StopInstances"


def boom() -> str:
    raise ClientError({"Error": {"Code": "Throttling", "Message": "slow down"}}, "StopInstances")


def act(d: Daemon, key: str, call: Any = ok) -> bool:
    return d.execute(key, f"i-{key}", "us-east-1", "stop", reason="test", call=call)


def test_cap_per_cycle(tmp_path: Path) -> None:
    d = make(tmp_path)
    assert [act(d, k) for k in "abc"] == [True, True, False]
    d._actions_this_cycle = 0  # next cycle
    assert act(d, "c")


def test_same_action_is_never_run_twice(tmp_path: Path) -> None:
    d = make(tmp_path)
    calls: list[int] = []

    def counted() -> str:
        calls.append(1)
        return "StopInstances"

    assert act(d, "a", counted)
    assert not act(d, "a", counted)
    assert calls == [1]


def test_dry_run_and_kill_switch_skip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not act(make(tmp_path / "dry", "dry_run: true"), "a")
    d = make(tmp_path)
    (tmp_path / "stop").write_text("")
    assert not act(d, "b")
    (tmp_path / "stop").unlink()
    monkeypatch.setenv("COREBURST_KILL_SWITCH", "1")
    assert not act(d, "c")
    monkeypatch.delenv("COREBURST_KILL_SWITCH")
    assert act(d, "d")


def test_breaker_opens_after_consecutive_failures_and_half_opens(tmp_path: Path) -> None:
    d = make(tmp_path, "safety: {max_actions_per_cycle: 100, breaker_failures: 3}")
    assert not any(act(d, f"f{i}", boom) for i in range(3))
    assert d.breaker_open()
    assert not act(d, "next")  # refused without calling
    alerts = [r["dedupe_key"] for r in d.state.outbox_rows()]
    assert any(k.startswith("breaker:") for k in alerts)
    assert isinstance(d.clock, FakeClock)
    d.clock.advance(timedelta(minutes=31))
    assert not d.breaker_open()
    assert act(d, "retry")
    assert d.state.get("breaker")["failures"] == 0


def test_snapshots_are_pruned_hourly_past_retention(tmp_path: Path) -> None:
    d = make(tmp_path, "egress: {baseline: 24h}", state=", snapshot_retention: 2d")
    t0 = d.clock.now()
    for h in range(0, 96, 12):
        d.state.add_spend(t0 - timedelta(hours=h), "account", burn=1, today=1, mtd=1, proj=1)
        d.state.add_egress(t0 - timedelta(hours=h), 1.0, 1.0)
    d._prune(t0)
    assert d.state.egress_history(t0 - timedelta(days=9), t0 + timedelta(seconds=1)) == [1.0] * 5
    d.state.add_egress(t0 - timedelta(days=5), 1.0, 1.0)
    d._prune(t0 + timedelta(minutes=30))  # within the hour: not again
    assert len(d.state.egress_history(t0 - timedelta(days=9), t0 + timedelta(seconds=1))) == 6
    d._prune(t0 + timedelta(hours=1))  # cut-off now t0-47h: the 5-day row and t0-48h go
    assert len(d.state.egress_history(t0 - timedelta(days=9), t0 + timedelta(seconds=1))) == 4
