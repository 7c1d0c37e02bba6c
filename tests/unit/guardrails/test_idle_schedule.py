"""The guardrails' CloudWatch bill within $15 a day per 1,000 p5 (issue 23, item 4): late data
is not a hole, and a node is read only when it could have become idle.

- The nodes send every 5 min (the agent's ``force_flush_interval`` 300; the Neuron publisher's
  ``--flush-interval``), so the newest datapoints arrive up to ``idle.publish_delay`` late: the
  stretch after the newest complete period may last ``max_gap + publish_delay``; a hole inside
  the window stays held to ``max_gap``; no data is blind, never idle.
- A node whose last read showed a busy period at t cannot be idle for the window before
  t + window, so it is not read before then; a marked node is read at its reclaim time; a node
  without data at every read. The expected read times below are worked out from those rules
  and the published minutes, not taken from the code.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws

from coreburst.common.catalog import load_catalog
from coreburst.common.telemetry import AGENT_FLUSH_INTERVAL_S, UTILIZATION_METRICS
from coreburst.sandbox.clocks import FakeClock
from coreburst.sandbox.emulator import FleetNode, fake_session, launch, publish
from guardrails.adapters.aws import Aws, inventory
from guardrails.configfile import parse_config
from guardrails.daemon import Daemon
from guardrails.idle import IdleParams, PeriodStat, assess_rollup, decide
from guardrails.model import Node
from guardrails.stores.sqlite import State

GPU = UTILIZATION_METRICS["nvidia"]
DEFS = {k: (m.namespace, m.metric_name, m.device_dimension) for k, m in UTILIZATION_METRICS.items()}
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
P = IdleParams(window=timedelta(minutes=30), max_gap=timedelta(minutes=5))  # delay 5 min


def _periods(minutes_ago: range, value: float = 1.0, samples: float = 8.0) -> list[PeriodStat]:
    return [PeriodStat(NOW - timedelta(minutes=m), value, value, samples) for m in minutes_ago]


def _node() -> Node:
    return Node("i-1", "us-east-1", "us-east-1a", "p5.48xlarge", "nvidia", 8, "on-demand", NOW)


# -- the trailing delay -------------------------------------------------------------------------
def test_the_default_publish_delay_is_the_agents_flush() -> None:
    assert AGENT_FLUSH_INTERVAL_S == 300
    assert parse_config("").idle.publish_delay == timedelta(minutes=5) == P.publish_delay


def test_data_late_within_the_publish_delay_is_not_a_hole() -> None:
    # complete periods from the window's start to 8 min ago: 8 <= 5 (max gap) + 5 (delay)
    u = assess_rollup(_periods(range(30, 7, -1)), 8, NOW, P)
    assert u.state == "idle", u.reason
    # 10 min is the limit, 11 is stale: blind, and the reason names both allowances
    assert assess_rollup(_periods(range(30, 9, -1)), 8, NOW, P).state == "idle"
    u = assess_rollup(_periods(range(30, 10, -1)), 8, NOW, P)
    assert u.state == "unknown"
    assert u.reason == "stale: last complete period 660s ago (max gap 300s + publish delay 300s)"
    assert u.idle_from is None  # late data may still fill it: read again at the next read
    # without the delay, 8 min is stale again
    strict = IdleParams(window=P.window, max_gap=P.max_gap, publish_delay=timedelta(minutes=1))
    assert assess_rollup(_periods(range(30, 7, -1)), 8, NOW, strict).state == "unknown"


def test_a_hole_inside_the_window_is_still_held_to_max_gap() -> None:
    # minutes 20..15 missing inside (7 min between the periods stamped 21 and 14 min ago),
    # up to date at the end: blind
    pts = _periods(range(30, 20, -1)) + _periods(range(14, -1, -1))
    u = assess_rollup(pts, 8, NOW, P)
    assert u.state == "unknown" and u.reason.startswith("partial: a 420s gap"), u.reason
    # it cannot be idle until that hole (ending 14 min ago) is within max_gap of the start
    assert u.idle_from == NOW - timedelta(minutes=14) + P.window - P.max_gap
    # a 6-minute hole at the window's start (no allowance there either)
    u = assess_rollup(_periods(range(24, -1, -1)), 8, NOW, P)
    assert u.state == "unknown" and "partial" in u.reason


def test_periods_that_arrived_incomplete_after_the_last_complete_one_are_a_hole() -> None:
    # complete up to 9 min ago, then every period with 7 of 8 GPUs: the data came, so the
    # stretch is a hole (8 min > max gap), not a delay
    pts = _periods(range(30, 8, -1)) + _periods(range(8, 0, -1), samples=7.0)
    u = assess_rollup(pts, 8, NOW, P)
    assert u.state == "unknown" and "only 7 of 8" in u.reason, u.reason
    # the hole is known to last until 1 min ago: not idle before it ends + window - max_gap
    assert u.idle_from == NOW - timedelta(minutes=1) + P.window - P.max_gap


def test_no_data_is_blind_never_idle() -> None:
    u = assess_rollup([], 8, NOW, P)
    assert u.state == "unknown" and u.idle_from is None
    d = decide(_node(), u, None, NOW, P)
    assert d.state == "unknown" and d.step == "none" and "never reclaimed" in d.reason


def test_a_busy_node_cannot_be_idle_before_its_busy_minute_leaves_the_window() -> None:
    pts = (
        _periods(range(30, 11, -1)) + _periods(range(11, 10, -1), 60.0) + _periods(range(10, 0, -1))
    )
    u = assess_rollup(pts, 8, NOW, P)
    assert u.state == "busy"
    busy_at = NOW - timedelta(minutes=11)
    assert u.idle_from == busy_at + P.window + timedelta(seconds=1)
    # just after it, with the same periods (the busy one now outside), it is idle
    later = u.idle_from
    assert assess_rollup(pts, 8, later - timedelta(seconds=1), P).state == "busy"
    assert assess_rollup(pts + _periods(range(0, -20, -1)), 8, later, P).state == "idle"


# -- the schedule, through the daemon -----------------------------------------------------------
WINDOW, EVERY, GRACE = 20, 5, 10  # minutes
DELAY = AGENT_FLUSH_INTERVAL_S // 60
BUSY_UNTIL = 12  # node A's last busy minute is T0 + 11


@pytest.fixture
def fleet() -> Iterator[tuple[Aws, Any, Any]]:
    with mock_aws():
        aws = Aws(parse_config("").aws, session=fake_session())
        yield aws, aws.client("ec2", "us-east-1"), aws.client("cloudwatch", "us-east-1")


def _flushed_until(minute: int) -> int:
    """Minutes (from T0) whose datapoints have arrived by ``minute``: the nodes flush at
    T0 + 2, 7, 12, ... (5 min apart, not in step with the reads), each flush carrying the
    minutes collected since the one before."""
    return (minute - 2) // DELAY * DELAY + 2


def test_each_node_is_read_only_when_it_could_be_idle(fleet: Any, tmp_path: Path) -> None:
    """Cycles every minute for 70 min. C is busy throughout, A busy until T0 + 11 then idle,
    D sends nothing. Data arrives in 5-minute flushes. Reads (idle.every 5m): D at every read;
    C at the first read after its newest busy minute seen + window; A likewise, then (idle,
    marked) not until its reclaim time; A is found idle no later than window + idle.every +
    publish_delay after its last busy datapoint and never while that datapoint is in the
    window."""
    aws, ec2, cw = fleet
    a, c, d = (launch(ec2, "p5.48xlarge", {"owner": "ana"})[0] for _ in range(3))
    nodes = inventory(ec2, "us-east-1", ["p5.48xlarge"], load_catalog())
    t0 = max(n.launch_time for n in nodes).replace(second=0, microsecond=0) + timedelta(hours=1)
    cfg = parse_config(
        f"""
regions: [us-east-1]
dry_run: true
idle: {{window: {WINDOW}m, max_gap: 2m, period: 1m, every: {EVERY}m}}
reclaim: {{grace: {GRACE}m}}
spend: {{cost_explorer: false, include_lustre: false, direct_connect_ports: [],
         spot_price: catalog-estimate}}
egress: {{enabled: false}}
state: {{path: "{tmp_path}/s.db", audit_log: "{tmp_path}/a.jsonl"}}
metrics_endpoint: {{enabled: false}}
""",
        "g.yaml",
    )
    assert cfg.idle.publish_delay == timedelta(minutes=DELAY)

    def send(lo: int, hi: int) -> None:  # minutes [lo, hi) from T0
        at = t0 + timedelta(minutes=lo)
        for node, busy in ((a, lo < BUSY_UNTIL), (c, True)):
            # a flush never straddles BUSY_UNTIL here (flushes at 2, 7, 12: 12 is one)
            publish(
                {"us-east-1": cw},
                [FleetNode(node, "us-east-1", "nvidia", 8, "busy" if busy else "idle")],
                at,
                at + timedelta(minutes=hi - lo),
                metric_defs=DEFS,
            )

    sent_until = _flushed_until(0)
    send(-WINDOW - 10, sent_until)
    seen: list[list[dict[str, Any]]] = []
    cw.meta.events.register_first(
        "provide-client-params.cloudwatch.GetMetricData",
        lambda params, **_: seen.append(list(params["MetricDataQueries"])),
    )
    clock = FakeClock(t0)
    state = State(cfg.state.path)
    daemon = Daemon(cfg, aws, state, clock=clock)
    reads: dict[str, list[int]] = {a: [], c: [], d: []}
    newest_seen: dict[int, int] = {}  # read minute -> newest minute arrived then
    states: dict[str, dict[int, str]] = {a: {}, c: {}, d: {}}
    steps: dict[int, str] = {}
    for minute in range(71):
        if _flushed_until(minute) > sent_until:
            send(sent_until, _flushed_until(minute))
            sent_until = _flushed_until(minute)
        clock.set(t0 + timedelta(minutes=minute))
        k = len(seen)
        report = daemon.run_cycle()
        read = {
            q["MetricStat"]["Metric"]["Dimensions"][0]["Value"]
            for call in seen[k:]
            for q in call
            if q["MetricStat"]["Metric"]["MetricName"] == GPU.metric_name
        }
        for iid in read:
            reads[iid].append(minute)
        newest_seen[minute] = sent_until - 1
        for x in report.decisions:
            states[x.instance_id][minute] = x.state
            if x.instance_id == a:
                steps[minute] = x.step
    daemon.close()
    state.close()

    due_reads = list(range(0, 71, EVERY))
    # D (no data): blind at every read, read at every read
    assert reads[d] == due_reads
    assert set(states[d].values()) == {"unknown"}
    # C (busy): each read at the first read after (newest busy minute it saw) + window
    for r1, r2 in zip(reads[c], reads[c][1:], strict=False):
        assert r2 == min(r for r in due_reads if r > newest_seen[r1] + WINDOW), (r1, r2)
    # worked out from the flushes: at each read the newest minute is 4 min old, so the next
    # read is after 16 min more: 20 min apart (the model's bound for a 20-min window is 15)
    assert reads[c] == [0, 20, 40, 60]
    assert set(states[c].values()) == {"busy"}  # reported busy between its reads too
    # A: busy minute 11 arrives with the flush at 12; read at 0 (newest seen -4: next after
    # 16 = 20), at 20 (newest busy 11: next after 31 = 35), at 35 found idle and marked
    found = min(m for m, s in states[a].items() if s == "idle")
    assert found == 35 and steps[found] == "mark"
    last_busy = BUSY_UNTIL - 1
    assert found - last_busy <= WINDOW + EVERY + DELAY  # 24 <= 30
    assert found > last_busy + WINDOW  # never idle while the busy minute is in the window
    assert all(s == "busy" for m, s in states[a].items() if m < found)
    # marked: not read at the reads of 40; read (fresh, twice: the read and the check before
    # acting) at its reclaim time, 35 + 10 = 45, and acted on (dry run)
    assert [m for m in reads[a] if m > found][:1] == [found + GRACE]
    assert reads[a][:3] == [0, 20, 35]
    assert steps[found + GRACE] == "act"


def _one_busy_node(fleet: Any, tmp_path: Path) -> tuple[Any, Any, str, datetime, Any]:
    """One p5 busy from T0 - 40 min to T0 + 40 min, and a config reading it every 5 min."""
    aws, ec2, cw = fleet
    busy = launch(ec2, "p5.48xlarge", {})[0]
    nodes = inventory(ec2, "us-east-1", ["p5.48xlarge"], load_catalog())
    t0 = nodes[0].launch_time.replace(second=0, microsecond=0) + timedelta(hours=1)
    publish(
        {"us-east-1": cw},
        [FleetNode(busy, "us-east-1", "nvidia", 8, "busy")],
        t0 - timedelta(minutes=40),
        t0 + timedelta(minutes=40),
        metric_defs=DEFS,
    )
    cfg = parse_config(
        f"""
regions: [us-east-1]
idle: {{window: 20m, max_gap: 2m, every: 5m}}
spend: {{cost_explorer: false, include_lustre: false, direct_connect_ports: [],
         spot_price: catalog-estimate}}
egress: {{enabled: false}}
state: {{path: "{tmp_path}/s.db", audit_log: "{tmp_path}/a.jsonl"}}
metrics_endpoint: {{enabled: false}}
""",
        "g.yaml",
    )
    return aws, cw, busy, t0, cfg


def test_a_fresh_process_keeps_the_schedule(fleet: Any, tmp_path: Path) -> None:
    """The schedule lives in the state store: a new Daemon (a Lambda invocation) on the same
    store does not read a busy node before its time and reports it busy meanwhile."""
    aws, cw, busy, t0, cfg = _one_busy_node(fleet, tmp_path)
    seen: list[int] = []
    cw.meta.events.register_first(
        "provide-client-params.cloudwatch.GetMetricData",
        lambda params, **_: seen.append(len(params["MetricDataQueries"])),
    )

    def invocation(minute: int) -> tuple[int, Any]:
        store = State(cfg.state.path)
        dmn = Daemon(cfg, aws, store, clock=FakeClock(t0 + timedelta(minutes=minute)))
        k = len(seen)
        r = dmn.run_cycle()
        dmn.close()
        store.close()
        return sum(seen[k:]), next(x for x in r.decisions if x.instance_id == busy)

    n, dec = invocation(0)
    assert n == 2 and dec.state == "busy"  # Maximum and SampleCount
    # newest busy minute t0 - 1: not idle for 20 min before t0 + 19, so no read at 5..15
    for minute in (5, 10, 15):
        n, dec = invocation(minute)
        assert n == 0 and dec.state == "busy"
        assert "busy at its last read; next read after" in dec.reason
    n, dec = invocation(20)
    assert n == 2 and dec.state == "busy"


def test_the_stored_schedule_of_10000_nodes_fits_one_dynamodb_item() -> None:
    """DynamoDB items are at most 400 KB (Developer Guide, "Service, account, and table
    quotas"); the store keeps the record as one JSON string. Each node id is written once,
    grouped by next read time and state, and a new process reads the same schedule back."""
    import json

    from guardrails.adapters.cloudwatch import SeriesCache
    from guardrails.rules.idle_reclaim import LAST_READ_KEY, _last_read_record, _load_last_read

    cache = SeriesCache()
    nodes = [
        Node(f"i-{k:017x}", "us-east-1", "us-east-1a", "p5.48xlarge", "nvidia", 8, "spot", NOW)
        for k in range(10_000)
    ]
    for k, n in enumerate(nodes):
        cache.idle_states[n.instance_id] = ("busy", "idle", "unknown")[k % 3]
        if k % 7:  # some idle / unknown nodes are read at every read
            cache.idle_next[n.instance_id] = NOW + timedelta(minutes=k % 30)
    record = _last_read_record(cache, nodes, NOW)
    value = json.dumps(record, default=str)  # as guardrails/stores/dynamodb.py puts it
    assert len(LAST_READ_KEY) + len("kv") + len(value.encode()) < 400_000
    fresh = SeriesCache()
    _load_last_read(fresh, json.loads(value))
    assert fresh.idle_next == cache.idle_next and fresh.idle_states == cache.idle_states
    assert fresh.idle_read_at == NOW


def test_a_standby_leaves_the_stored_schedule_to_the_leader(fleet: Any, tmp_path: Path) -> None:
    """One actor per store: a standby daemon (another process holds the lease) reads and
    decides for its report, but the schedule in the shared store is the leader's. Written by a
    standby, it made the leader skip every read (seen as two daemons on one state file where
    the leader never marked in 4 cycles)."""
    from guardrails.rules.idle_reclaim import LAST_READ_KEY

    aws, _cw, busy, t0, cfg = _one_busy_node(fleet, tmp_path)
    store = State(cfg.state.path)
    assert store.acquire_lease("leader", "another-host~1:1:x", t0, 3600)
    standby = Daemon(cfg, aws, store, clock=FakeClock(t0))
    r = standby.run_cycle()
    standby.close()
    assert next(x for x in r.decisions if x.instance_id == busy).state == "busy"
    assert store.get(LAST_READ_KEY) is None
    store.release_lease("leader", "another-host~1:1:x")
    leader = Daemon(cfg, aws, store, clock=FakeClock(t0 + timedelta(minutes=1)))
    leader.run_cycle()
    leader.close()
    assert busy in str(store.get(LAST_READ_KEY))
    store.close()
