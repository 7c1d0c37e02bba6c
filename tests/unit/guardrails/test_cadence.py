"""CloudWatch dollars at the default cadence (issue 14, item 5): egress read every
``egress.every``, the trn2 heartbeat only where the rollup is blind, both cadences kept in the
state store so a fresh process (the Lambda) honours them, and org-scan on the rollup.

What the byte reads are held to:
- Amazon EC2 User Guide, "List the available CloudWatch metrics for your instances"
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/viewing_metrics_with_cloudwatch.html),
  NetworkOut: "The number of bytes sent out by the instance on all network interfaces ... The
  number reported is the number of bytes sent during the period" (basic monitoring: 5-minute
  periods, detailed: 1-minute), so the Sum of the periods in [start, end) is the bytes sent
  in that span, and spans that meet on period boundaries neither miss nor repeat a byte.
- moto (the emulator here) counts a datapoint in a GetMetricData answer when
  StartTime <= its timestamp < EndTime, per period from StartTime.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from coreburst.common.catalog import load_catalog
from coreburst.common.telemetry import UTILIZATION_METRICS
from coreburst.sandbox.clocks import FakeClock
from coreburst.sandbox.emulator import FleetNode, fake_session, launch, publish
from guardrails import org
from guardrails.adapters.aws import Aws, inventory
from guardrails.adapters.cloudwatch import sum_bytes
from guardrails.configfile import parse_config
from guardrails.daemon import Daemon
from guardrails.egress import SETTLE, read_span
from guardrails.rules.idle_reclaim import utilization
from guardrails.stores.dynamodb import DynamoState, create_table
from guardrails.stores.sqlite import State

DEFS = {k: (m.namespace, m.metric_name, m.device_dimension) for k, m in UTILIZATION_METRICS.items()}
HEARTBEAT = "coreburst_publisher_heartbeat"


@pytest.fixture
def fleet() -> Iterator[tuple[Aws, Any, Any]]:
    with mock_aws():
        aws = Aws(parse_config("").aws, session=fake_session())
        yield aws, aws.client("ec2", "us-east-1"), aws.client("cloudwatch", "us-east-1")


def _queries(cw: Any) -> list[list[dict[str, Any]]]:
    seen: list[list[dict[str, Any]]] = []
    cw.meta.events.register_first(
        "provide-client-params.cloudwatch.GetMetricData",
        lambda params, **_: seen.append(list(params["MetricDataQueries"])),
    )
    return seen


def _names(calls: list[list[dict[str, Any]]]) -> list[str]:
    return [q["MetricStat"]["Metric"]["MetricName"] for call in calls for q in call]


# -- egress.every: the setting ----------------------------------------------------------------
def test_egress_every_defaults_to_15m_and_is_range_checked() -> None:
    assert parse_config("").egress.every == timedelta(minutes=15)
    assert parse_config("egress: {every: 1h}").egress.every == timedelta(hours=1)
    for bad in ("30s", "2d"):
        with pytest.raises(ValueError, match=r"egress\.every.*allowed 1m to 1d"):
            parse_config(f"egress: {{every: {bad}}}", "g.yaml")


# -- the byte reads meet end to end ------------------------------------------------------------
@pytest.mark.parametrize("every_s", [60, 300])  # detailed and basic monitoring
def test_consecutive_byte_reads_count_every_byte_once(fleet: Any, every_s: int) -> None:
    """NetworkOut published every ``every_s`` with a different byte count each time; reads at
    uneven times (7, 15, 23 and 40 minutes apart) cover spans that meet exactly, and their sum
    is every byte published in [first start, last end) — none missed, none counted twice."""
    _, ec2, cw = fleet
    iid = launch(ec2, "p5.48xlarge", {})[0]
    t0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    stamps = [t0 + timedelta(seconds=every_s * k) for k in range(3 * 3600 // every_s)]
    for i in range(0, len(stamps), 500):
        cw.put_metric_data(
            Namespace="AWS/EC2",
            MetricData=[
                {
                    "MetricName": "NetworkOut",
                    "Dimensions": [{"Name": "InstanceId", "Value": iid}],
                    "Timestamp": t,
                    "Value": float(1000 + k),
                    "Unit": "Bytes",
                }
                for k, t in enumerate(stamps[i : i + 500], start=i)
            ],
        )
    window = timedelta(hours=1)
    now = t0 + timedelta(hours=1, minutes=3, seconds=20)
    last_end: datetime | None = None
    spans: list[tuple[datetime, datetime]] = []
    total = 0.0
    for step in (0, 7, 15, 23, 40):
        now += timedelta(minutes=step)
        span = read_span(now, last_end, window)
        assert span is not None
        start, end = span
        assert end <= now - SETTLE and end.minute % 5 == 0 and end.second == 0
        got, failed = sum_bytes(
            cw, "AWS/EC2", "NetworkOut", "InstanceId", ids=[iid], start=start, end=end
        )
        assert not failed
        total += got[iid]
        spans.append(span)
        last_end = end
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))  # no gap, no overlap
    first, last = spans[0][0], spans[-1][1]
    expected = sum(1000 + k for k, t in enumerate(stamps) if first <= t < last)
    assert total == expected
    # a read that is not on period boundaries is refused, not silently misaligned
    with pytest.raises(ValueError, match="boundaries"):
        sum_bytes(cw, "AWS/EC2", "NetworkOut", "InstanceId", ids=[iid], start=t0, end=now)


def test_a_gap_longer_than_the_window_restarts_at_the_window() -> None:
    t = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    start, end = read_span(t, t - timedelta(hours=3), timedelta(hours=1)) or (t, t)
    assert (end - start, end) == (timedelta(hours=1), t - SETTLE)
    assert read_span(t, t - SETTLE, timedelta(hours=1)) is None  # nothing new yet


# -- the daemon: egress every 15 min, a spike still found --------------------------------------
def _daemon_cfg(tmp: Path, **extra: str) -> Any:
    return parse_config(
        f"""
regions: [us-east-1]
dry_run: true
idle: {{window: 10m, max_gap: 2m, period: 1m{extra.get("idle", "")}}}
reclaim: {{grace: 1h}}
spend: {{cost_explorer: false, include_lustre: false, direct_connect_ports: [],
         spot_price: catalog-estimate}}
egress: {{enabled: true, include_nat: false, window: 30m, daily_threshold_usd: 100000,
          min_baseline_samples: 2, spike_factor: 3}}
state: {{path: "{tmp}/s.db", audit_log: "{tmp}/a.jsonl"}}
metrics_endpoint: {{enabled: false}}
""",
        "g.yaml",
    )


def test_egress_spike_found_within_every_plus_settle(fleet: Any, tmp_path: Path) -> None:
    """Cycles every minute; NetworkOut is read at the first and then every 15 min only. A
    spike that starts after a read is alerted at a later read, within ``every`` + the
    settling delay + one period of its start, and the alert says over what span and how often
    bytes are read."""
    aws, ec2, cw = fleet
    ids = launch(ec2, "p5.48xlarge", {"owner": "ana"}, count=2)
    nodes = [FleetNode(i, "us-east-1", "nvidia", 8, "busy", egress_gb_per_hour=10.0) for i in ids]
    now = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(hours=2)
    spike_at = now + timedelta(minutes=47)
    publish({"us-east-1": cw}, nodes, now - timedelta(minutes=45), spike_at, metric_defs=DEFS)
    publish(
        {"us-east-1": cw},
        nodes,
        spike_at,
        spike_at + timedelta(minutes=40),
        metric_defs=DEFS,
        spike={ids[1]: 400.0},
    )
    cfg = _daemon_cfg(tmp_path)
    clock = FakeClock(now)
    state = State(cfg.state.path)
    d = Daemon(cfg, aws, state, clock=clock)
    sent = _queries(cw)
    reads: list[int] = []
    alert_at: datetime | None = None
    alert: dict[str, Any] | None = None
    for minute in range(0, 80):
        clock.set(now + timedelta(minutes=minute))
        k = len(sent)
        r = d.run_cycle()
        if "NetworkOut" in _names(sent[k:]):
            reads.append(minute)
        if r.egress and r.egress["alert"] and alert_at is None:
            alert_at, alert = clock.now(), r.egress
    d.close()
    state.close()
    assert reads == [0, 15, 30, 45, 60, 75]
    assert alert_at is not None and alert is not None
    assert alert_at - spike_at <= cfg.egress.every + SETTLE + timedelta(minutes=5)
    assert alert["top_talkers"][0][0] == ids[1]
    assert "read every 15m" in alert["alert"] and "of bytes sent up to" in alert["alert"]


# -- both cadences survive a fresh process ------------------------------------------------------
@pytest.fixture(params=["sqlite", "dynamodb"])
def store_opener(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Any]:
    """A new handle on one shared store each call, as a new process (a Lambda) opens it."""
    if request.param == "sqlite":
        return lambda: State(tmp_path / "shared.sqlite")
    table = create_table(
        boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing"
        ).resource("dynamodb", region_name="us-east-1"),
        "coreburst-state",
    )
    return lambda: DynamoState(table)


def test_a_fresh_daemon_on_the_same_store_keeps_both_cadences(
    fleet: Any, tmp_path: Path, store_opener: Callable[[], Any]
) -> None:
    """Each cycle by a new Daemon on a new store handle (what each Lambda invocation does).
    Within ``idle.every`` / ``egress.every`` of the last read, a new daemon reads neither the
    rollup nor NetworkOut, and reports the last read's states rather than "not read yet";
    after the interval it reads again, but only the nodes the schedule says are due (kept in
    the store too): the blind node at every read, the busy node once its busy minute has left
    the 10-minute window, the idle node (marked) not before its reclaim time."""
    aws, ec2, cw = fleet
    idle_id, busy_id, blind_id = (launch(ec2, "p5.48xlarge", {})[0] for _ in range(3))
    nodes = inventory(ec2, "us-east-1", ["p5.48xlarge"], load_catalog())
    now = max(n.launch_time for n in nodes).replace(second=0, microsecond=0) + timedelta(hours=1)
    publish(
        {"us-east-1": cw},
        [
            FleetNode(idle_id, "us-east-1", "nvidia", 8, "idle"),
            FleetNode(busy_id, "us-east-1", "nvidia", 8, "busy"),
            FleetNode(blind_id, "us-east-1", "nvidia", 8, "missing"),
        ],
        now - timedelta(minutes=45),
        now + timedelta(minutes=20),
        metric_defs=DEFS,
    )
    cfg = _daemon_cfg(tmp_path)
    sent = _queries(cw)

    def invocation(minute: int) -> tuple[list[str], set[str], dict[str, str]]:
        store = store_opener()
        d = Daemon(cfg, aws, store, clock=FakeClock(now + timedelta(minutes=minute)))
        k = len(sent)
        r = d.run_cycle()
        d.close()
        store.close()
        read = {
            q["MetricStat"]["Metric"]["Dimensions"][0]["Value"]
            for call in sent[k:]
            for q in call
            if q["MetricStat"]["Metric"]["MetricName"] == GPU_NAME
        }
        return _names(sent[k:]), read, {x.instance_id: x.state for x in r.decisions}

    last_read = {idle_id: "idle", busy_id: "busy", blind_id: "unknown"}
    names, read, states = invocation(0)
    assert "NetworkOut" in names and read == {idle_id, busy_id, blind_id}
    assert states == last_read
    for minute in (1, 4):
        names, read, states = invocation(minute)
        assert names == []  # nothing read for idle or egress
        assert states == last_read  # as last read
    # idle.every (5m) has passed, egress.every (15m) has not: only the blind node is due (the
    # busy node's minute at now - 1 is in the window until now + 9; the idle one is marked)
    names, read, states = invocation(5)
    assert read == {blind_id} and "NetworkOut" not in names
    assert states == last_read
    names, read, _ = invocation(10)  # the busy minute has left the window: read again
    assert read == {busy_id, blind_id} and "NetworkOut" not in names
    names, read, _ = invocation(15)
    assert "NetworkOut" in names and read == {blind_id}


GPU_NAME = UTILIZATION_METRICS["nvidia"].metric_name


# -- the trn2 heartbeat: only where the rollup is blind, and in explain --------------------------
def test_heartbeat_read_only_for_blind_trn2_and_for_every_trn2_in_explain(fleet: Any) -> None:
    aws, ec2, cw = fleet
    alive, silent = (launch(ec2, "trn2.48xlarge", {})[0] for _ in range(2))
    nodes = inventory(ec2, "us-east-1", ["trn2.48xlarge"], load_catalog())
    now = max(n.launch_time for n in nodes).replace(second=0, microsecond=0) + timedelta(hours=1)
    publish(
        {"us-east-1": cw},
        [
            FleetNode(alive, "us-east-1", "neuron", 64, "idle"),
            FleetNode(silent, "us-east-1", "neuron", 64, "missing"),  # publisher not running
        ],
        now - timedelta(minutes=12),
        now + timedelta(minutes=1),
        metric_defs=DEFS,
    )
    cfg = parse_config("idle: {window: 10m, max_gap: 2m, period: 1m}\n")
    sent = _queries(cw)
    utils = utilization(aws, cfg, nodes, now)
    beats = [
        q["MetricStat"]["Metric"]["Dimensions"][0]["Value"]
        for call in sent
        for q in call
        if q["MetricStat"]["Metric"]["MetricName"] == HEARTBEAT
    ]
    assert beats == [silent]
    assert utils[alive].state == "idle"
    assert utils[silent].state == "unknown" and "publisher dead" in utils[silent].reason
    sent.clear()
    utilization(aws, cfg, nodes, now, heartbeats="all")
    assert _names(sent).count(HEARTBEAT) == 2


# -- org-scan reads the rollup -------------------------------------------------------------------
def test_org_scan_region_reads_two_metrics_per_instance(fleet: Any) -> None:
    """Before: every per-device series (8 per p5, after ListMetrics pages). Now: the rollup's
    two statistics per instance (Maximum, SampleCount), GetMetricData calls <=
    ceil(2 x instances / 500) + 1, no ListMetrics, and the same states the daemon decides."""
    aws, ec2, cw = fleet
    ids = launch(ec2, "p5.48xlarge", {}, count=180)
    nodes = inventory(ec2, "us-east-1", ["p5.48xlarge"], load_catalog())
    now = max(n.launch_time for n in nodes).replace(second=0, microsecond=0) + timedelta(hours=1)
    profiles = ["idle", "busy", "missing"]
    publish(
        {"us-east-1": cw},
        [FleetNode(i, "us-east-1", "nvidia", 8, profiles[k % 3]) for k, i in enumerate(ids)],
        now - timedelta(minutes=12),
        now + timedelta(minutes=1),
        metric_defs=DEFS,
    )
    cfg = parse_config("idle: {window: 10m, max_gap: 2m, period: 1m}\nregions: [us-east-1]\n")
    sent = _queries(cw)
    before = dict(aws.counter.calls)
    rows = org.scan_region(aws, cfg, "us-east-1", load_catalog(), now)
    calls = {k: v - before.get(k, 0) for k, v in aws.counter.calls.items()}
    assert calls.get("ListMetrics", 0) == 0
    assert calls["GetMetricData"] <= math.ceil(2 * len(ids) / 500) + 1
    assert len(_names(sent)) == 2 * len(ids)
    got = {r.instance_id: r.state for r in rows}
    assert got == {
        ids[k]: {"idle": "idle", "busy": "busy", "missing": "unknown"}[profiles[k % 3]]
        for k in range(len(ids))
    }
    assert all(r.usd_per_hour for r in rows)
