"""Daemon safety rules around one action — dry-run, kill switch, per-cycle cap, breaker, intents,
outbox, leases, pruning, crash recovery — each run on both state stores: SQLite and DynamoDB
(moto, in-process; the ``open_store`` fixture in tests/unit/conftest.py).

AWS is moto throughout: EC2 for instance states, DynamoDB for the second store. Errors are
built the way botocore raises them (``ClientError`` with the service's error shape).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import structlog
from botocore.exceptions import ClientError

from coreburst.sandbox.clocks import FakeClock
from coreburst.sandbox.emulator import launch
from guardrails.adapters.aws import Aws
from guardrails.adapters.slack import Alert, Outbox
from guardrails.config import SlackConfig
from guardrails.configfile import parse_config
from guardrails.daemon import Daemon
from guardrails.stores.base import StateStore

T0 = datetime(2026, 5, 5, 12, tzinfo=UTC)
Make = Callable[..., Daemon]


@pytest.fixture
def make(open_store: Callable[[str], StateStore], tmp_path: Path) -> Iterator[Make]:
    """``make(store="main", extra="", owner=None, state="")``: a daemon on a (new handle on
    the) named store, as a fresh process would open it, holding the lease if it can."""
    made: list[Daemon] = []

    def build(
        store: str = "main",
        extra: str = "",
        owner: str | None = None,
        state: str = "",
        clock: FakeClock | None = None,
    ) -> Daemon:
        cfg = parse_config(
            f"""
dry_run: false
safety: {{max_actions_per_cycle: 2, breaker_failures: 3, breaker_reset: 30m,
          kill_switch_file: "{tmp_path}/stop"}}
state: {{path: "{tmp_path}/{store}.db", audit_log: "{tmp_path}/{store}-audit.jsonl"{state}}}
spend: {{cost_explorer: false, include_lustre: false, direct_connect_ports: [],
         spot_price: catalog-estimate}}
egress: {{enabled: false}}
metrics_endpoint: {{enabled: false}}
{extra}
"""
        )
        clock = clock or FakeClock(T0)
        d = Daemon(cfg, Aws(cfg.aws), open_store(store), clock=clock, owner_id=owner)
        # What run_cycle does first: take the leader lease on the store.
        d.leader = d.state.acquire_lease("leader", d.owner_id, clock.now(), 180)
        made.append(d)
        return d

    yield build
    for d in made:
        d.close()


def ok() -> str:
    return "StopInstances"


def throttled(op: str = "StopInstances") -> ClientError:
    return ClientError({"Error": {"Code": "Throttling", "Message": "slow down"}}, op)


def boom() -> str:
    raise throttled()


def act(d: Daemon, key: str, call: Any = ok, instance_id: str | None = None) -> bool:
    return d.actuator.execute(
        key, instance_id or f"i-{key}", "us-east-1", "stop", reason="test", call=call
    )


def audit_events(d: Daemon) -> list[str]:
    import json

    return [json.loads(x)["event"] for x in d.cfg.state.audit_log.read_text().splitlines()]


# -- lease ----------------------------------------------------------------------------------
def test_only_the_lease_holder_acts(make: Make) -> None:
    first = make(owner="host-a")
    second = make(owner="host-b")  # a second daemon on the same store
    assert first.leader and not second.leader
    assert second.actuator.gate() == "another daemon holds the leader lease"
    assert not act(second, "a")
    assert act(first, "a")
    assert make(owner="host-a").leader  # a restarted leader resumes its lease


def test_a_closed_daemon_hands_the_lease_over_at_once(make: Make) -> None:
    first = make(owner="host-a")
    assert not make(owner="host-b").leader
    first.close()  # shutdown, or the end of a Lambda invocation
    assert not first.leader
    assert make(owner="host-b").leader  # no waiting for the 180 s lease to run out


def test_lease_ttl_is_what_the_daemon_was_given(make: Make, open_store: Any) -> None:
    d = make(owner="lambda:req-1")
    assert d.lease_ttl == timedelta(seconds=180)  # interval 60 s: the long-running default
    d.lease_ttl = timedelta(seconds=60)  # what a scheduled invocation passes
    d.run_cycle()
    assert d.leader
    other = open_store("main")
    assert not other.acquire_lease("leader", "lambda:req-2", T0 + timedelta(seconds=59), 60)
    assert other.acquire_lease("leader", "lambda:req-2", T0 + timedelta(seconds=61), 60)


# -- gate -----------------------------------------------------------------------------------
def test_cap_per_cycle(make: Make) -> None:
    d = make()
    assert [act(d, k) for k in "abc"] == [True, True, False]
    d.actuator.actions_this_cycle = 0  # next cycle
    assert act(d, "c")


def test_same_action_is_never_run_twice(make: Make) -> None:
    d = make()
    calls: list[int] = []

    def counted() -> str:
        calls.append(1)
        return "StopInstances"

    assert act(d, "a", counted)
    assert not act(d, "a", counted)
    assert make().state.action("a")["status"] == "done"  # on the store, for every handle
    assert not act(make(), "a", counted)  # nor by a restarted daemon
    assert calls == [1]


def test_dry_run_and_kill_switch_skip(
    make: Make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not act(make("dry", "dry_run: true"), "a")
    d = make()
    (tmp_path / "stop").write_text("")
    assert not act(d, "b")
    (tmp_path / "stop").unlink()
    monkeypatch.setenv("COREBURST_KILL_SWITCH", "1")
    assert not act(d, "c")
    monkeypatch.delenv("COREBURST_KILL_SWITCH")
    assert act(d, "d")


# -- breaker and failed actions -------------------------------------------------------------
def test_breaker_opens_after_consecutive_failures_and_half_opens(make: Make) -> None:
    d = make(extra="safety: {max_actions_per_cycle: 100, breaker_failures: 3}")
    assert not any(act(d, f"f{i}", boom) for i in range(3))
    assert d.actuator.breaker_open()
    assert not act(d, "next")  # refused without calling
    alerts = [r["dedupe_key"] for r in d.state.outbox_rows()]
    assert any(k.startswith("breaker:") for k in alerts)
    assert isinstance(d.clock, FakeClock)
    d.clock.advance(timedelta(minutes=31))
    assert not d.actuator.breaker_open()
    assert act(d, "retry")
    assert d.state.get("breaker")["failures"] == 0


def test_failed_action_is_counted_its_intent_cleared_and_the_next_cycle_recovers(
    make: Make,
) -> None:
    """On DynamoDB this used to raise AttributeError (the daemon deleted the intent with a SQL
    statement): the breaker never counted, the intent stayed, and every later cycle failed in
    recovery."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    (iid,) = launch(ec2, "t3.micro", {})
    d = make(owner="host-a")

    def refused() -> str:
        ec2.stop_instances(InstanceIds=[iid])  # the call really goes out first...
        raise throttled()  # ...and AWS answers with an error

    key = f"reclaim:{iid}:1"
    assert act(d, key, refused, instance_id=iid) is False
    assert d.state.get("breaker")["failures"] == 1
    assert d.state.action(key) is None and list(d.state.pending_intents()) == []
    assert "action.failed" in audit_events(d)

    nxt = make(owner="host-a")  # the next cycle, e.g. the next Lambda invocation
    report = nxt.run_cycle()
    assert report.errors == []
    assert "action.intent-dropped" not in audit_events(nxt)
    assert act(nxt, key, instance_id=iid)  # re-decided, and may now act
    assert nxt.state.get("breaker")["failures"] == 0


def test_drop_intent_never_drops_a_finished_action(make: Make) -> None:
    d = make()
    assert act(d, "a")
    assert d.state.drop_intent("a") is False
    assert d.state.action("a")["status"] == "done"
    assert d.state.drop_intent("never-recorded") is False


# -- crash at the intent boundary (what kill -9 leaves behind), then a restart ----------------
class Crash(BaseException):
    """The process dies here: nothing after this line of the daemon runs."""


def test_crash_before_the_call_restart_drops_the_intent_and_acts_once(make: Make) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    (iid,) = launch(ec2, "t3.micro", {})
    key = f"reclaim:{iid}:1"
    d = make(owner="host-a")

    def dies_before_calling() -> str:
        raise Crash

    with pytest.raises(Crash):
        act(d, key, dies_before_calling, instance_id=iid)
    assert [r["key"] for r in make(owner="host-x").state.pending_intents()] == [key]

    restarted = make(owner="host-a")
    restarted.actuator.recover_intents()
    assert restarted.state.action(key) is None
    assert "action.intent-dropped" in audit_events(restarted)
    calls: list[str] = []

    def stop() -> str:
        calls.append(iid)
        ec2.stop_instances(InstanceIds=[iid])
        return "StopInstances"

    assert act(restarted, key, stop, instance_id=iid)
    assert not act(make(owner="host-a"), key, stop, instance_id=iid)
    assert calls == [iid]


def test_crash_after_the_call_restart_confirms_it_and_alerts_once(make: Make) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    (iid,) = launch(ec2, "t3.micro", {})
    key = f"reclaim:{iid}:1"
    d = make(owner="host-a")

    def stops_then_dies() -> str:
        ec2.stop_instances(InstanceIds=[iid])
        raise Crash

    with pytest.raises(Crash):
        act(d, key, stops_then_dies, instance_id=iid)
    for _ in range(2):  # a second restart finds nothing more to do
        restarted = make(owner="host-a")
        restarted.actuator.recover_intents()
    row = restarted.state.action(key)
    assert (row["status"], row["detail"]) == ("done", "confirmed after restart")
    acts = [r for r in restarted.state.outbox_rows() if r["dedupe_key"] == f"act:{key}"]
    assert len(acts) == 1
    assert audit_events(restarted).count("action.confirmed-after-restart") == 1


def test_a_standby_never_recovers_the_leaders_intents(make: Make) -> None:
    leader = make(owner="host-a")
    assert leader.state.record_intent("k", "i-1", "us-east-1", "stop", T0)
    standby = make(owner="host-b")
    standby.actuator.recover_intents()
    assert [r["key"] for r in standby.state.pending_intents()] == ["k"]


# -- outbox ---------------------------------------------------------------------------------
class FakeSlack:
    """Answers as Slack's incoming webhook does: 200, or 500/429 (with Retry-After) as
    scripted — https://api.slack.com/apis/rate-limits (made up by us, following that page)."""

    def __init__(self, script: list[tuple[int, dict[str, str]]]) -> None:
        self.script = script
        self.delivered: list[dict[str, Any]] = []

    def __call__(self, payload: dict[str, Any]) -> tuple[int, Any]:
        status, headers = self.script.pop(0) if self.script else (200, {})
        if status == 200:
            self.delivered.append(payload)
        return status, headers


def test_outbox_survives_a_restart_and_delivers_once(open_store: Any) -> None:
    clock = FakeClock(T0)
    cfg = SlackConfig(backoff_base=timedelta(seconds=5))
    slack = FakeSlack([(500, {}), (429, {"Retry-After": "60"})])
    log = structlog.get_logger("test")

    def outbox() -> Outbox:
        store = open_store("main")
        return Outbox(store, cfg, clock, url="http://127.0.0.1:1/x", log=log, send=slack)

    first = outbox()
    assert first.enqueue(Alert("ev-1", "k", "title", ["line"]))
    assert first.flush() == 0  # 500
    clock.advance(timedelta(seconds=5))
    assert first.flush() == 0  # 429: wait 60 s
    second = outbox()  # restarted
    assert not second.enqueue(Alert("ev-1", "k", "title", ["line"]))  # deduped across restarts
    clock.advance(timedelta(seconds=59))
    assert second.flush() == 0
    clock.advance(timedelta(seconds=1))
    assert second.flush() == 1
    assert outbox().flush() == 0
    assert len(slack.delivered) == 1


# -- pruning --------------------------------------------------------------------------------
def test_snapshots_are_pruned_hourly_past_retention(make: Make) -> None:
    d = make(extra="egress: {baseline: 24h}", state=", snapshot_retention: 2d")
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


def test_a_failing_prune_is_an_error_in_log_audit_and_report(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a role without dynamodb:BatchWriteItem gets back (error shape: DynamoDB API
    reference, "Common Errors" — AccessDeniedException, HTTP 400)."""
    d = make()
    denied = ClientError(
        {"Error": {"Code": "AccessDeniedException", "Message": "not authorized"}},
        "BatchWriteItem",
    )

    def refuse(*_: Any, **__: Any) -> int:
        raise denied

    monkeypatch.setattr(d.state, "prune_snapshots", refuse)
    with structlog.testing.capture_logs() as logs:
        report = d.run_cycle()
    failed = [e for e in logs if e["event"] == "state.prune_failed"]
    assert failed and failed[0]["log_level"] == "error"
    assert "AccessDeniedException" in failed[0]["error"]
    assert any(e.startswith("state prune: ClientError") for e in report.errors)
    assert "state.prune_failed" in audit_events(d)
    assert d.state.get("last_cycle")["errors"] == report.errors
    # Tried again hourly, not every cycle.
    d.clock.advance(timedelta(minutes=5))
    assert not any("prune" in e for e in d.run_cycle().errors)
    d.clock.advance(timedelta(hours=1))
    assert any("prune" in e for e in d.run_cycle().errors)
