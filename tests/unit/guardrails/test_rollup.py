"""Query cost near the limit (issue 14, item 4): the idle decision reads one per-instance
rollup (Maximum, Minimum, SampleCount per period) instead of one series per accelerator.

What CloudWatch documents, and what the emulators here are held to:

- Amazon CloudWatch API Reference, GetMetricStatistics: "CloudWatch aggregates data points
  based on the length of the period that you specify. For example, if you request statistics
  with a one-hour period, CloudWatch aggregates all data points with time stamps that fall
  within each one-hour period." (GetMetricData's MetricStat answers the same statistics.)
- Amazon CloudWatch User Guide, "CloudWatch concepts: Statistics": SampleCount is the count
  (number) of data points used for the statistical calculation; Minimum / Maximum the lowest /
  highest value observed during the period.
- CloudWatch API Reference, PutMetricData / MetricDatum ``StatisticValues`` (StatisticSet:
  SampleCount, Sum, Minimum, Maximum): a pre-aggregated set, aggregated with other values of
  the same metric and dimension set in the period.
- CloudWatch User Guide, "Dimensions": a metric is its namespace, name and *exact* dimension
  set, so per-accelerator values never land in the InstanceId-only rollup.

Stock moto (in-process, the unit tests' emulator) and ``benchmarks/indexed_moto.py`` (the
benchmark's) are both checked against those rules, then the daemon's own read path runs on
stock moto.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws
from moto.cloudwatch import models

import coreburst.common.neuron_report as nr
from coreburst.common.catalog import load_catalog
from coreburst.common.telemetry import (
    PUBLISHER_HEARTBEATS,
    ROLLUP_PARTIAL_IDLE_STATS,
    ROLLUP_STATS,
    UTILIZATION_METRICS,
    cloudwatch_agent_config,
)
from coreburst.sandbox.clocks import FakeClock
from coreburst.sandbox.emulator import FleetNode, fake_session, launch, publish
from guardrails.adapters.aws import Aws, inventory
from guardrails.adapters.cloudwatch import SeriesCache, fetch_rollups
from guardrails.configfile import parse_config
from guardrails.daemon import Daemon
from guardrails.idle import IdleParams, PeriodStat, assess_rollup
from guardrails.rules.idle_reclaim import per_device_stats, utilization
from guardrails.stores.sqlite import State
from infra.userdata import neuron_publisher_command, neuron_publisher_source

ROOT = Path(__file__).parents[3]
GPU = UTILIZATION_METRICS["nvidia"]
NEURON = UTILIZATION_METRICS["neuron"]
DEFS = {k: (m.namespace, m.metric_name, m.device_dimension) for k, m in UTILIZATION_METRICS.items()}
IDLE = "idle: {window: 10m, max_gap: 2m, period: 1m}\n"
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


# -- the emulators aggregate one dimension set's values per period --------------------------
@pytest.fixture
def indexed() -> Any:
    stock = (
        models.CloudWatchBackend.get_metric_data,
        models.CloudWatchBackend.get_filtered_metrics,
    )
    spec = importlib.util.spec_from_file_location(
        "indexed_moto_rollup", ROOT / "benchmarks/indexed_moto.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["indexed_moto_rollup"] = mod
    spec.loader.exec_module(mod)
    models.CloudWatchBackend.get_metric_data, models.CloudWatchBackend.get_filtered_metrics = stock
    yield mod
    del sys.modules["indexed_moto_rollup"]


def _seed_rollups(cw: Any, t0: datetime, other_namespace: bool = True) -> None:
    """i-a: 8 GPU values a minute under InstanceId alone (the agent's aggregation_dimensions)
    and each again under InstanceId + index; i-b: one statistic set a minute (the Neuron
    publisher); i-c: both kinds in the same minute. The same name and dimensions in a second
    namespace must never mix in."""
    data: list[dict[str, Any]] = []
    for m in range(3):
        at = t0 + timedelta(minutes=m, seconds=5)
        for dev in range(8):
            v = float(10 * dev + m)
            base = {"MetricName": "u", "Timestamp": at, "Value": v, "Unit": "Percent"}
            data.append({**base, "Dimensions": [{"Name": "InstanceId", "Value": "i-a"}]})
            data.append(
                {
                    **base,
                    "Dimensions": [
                        {"Name": "InstanceId", "Value": "i-a"},
                        {"Name": "index", "Value": str(dev)},
                    ],
                }
            )
        stat = {"SampleCount": 64.0, "Sum": 64.0, "Minimum": 0.0, "Maximum": 2.0 + m}
        for iid in ("i-b", "i-c"):
            data.append(
                {
                    "MetricName": "u",
                    "Timestamp": at,
                    "StatisticValues": stat,
                    "Unit": "Percent",
                    "Dimensions": [{"Name": "InstanceId", "Value": iid}],
                }
            )
        data.append(
            {
                "MetricName": "u",
                "Timestamp": at + timedelta(seconds=20),
                "Value": 50.0,
                "Unit": "Percent",
                "Dimensions": [{"Name": "InstanceId", "Value": "i-c"}],
            }
        )
    cw.put_metric_data(Namespace="N", MetricData=data[:500])
    cw.put_metric_data(Namespace="N", MetricData=data[500:])
    if not other_namespace:
        return
    cw.put_metric_data(
        Namespace="Other",
        MetricData=[
            {
                "MetricName": "u",
                "Timestamp": t0 + timedelta(seconds=5),
                "Value": 99.0,
                "Dimensions": [{"Name": "InstanceId", "Value": "i-a"}],
            }
        ],
    )


def _rollup_answers(backend: Any, get_metric_data: Any, t0: datetime) -> dict[str, Any]:
    queries = [
        {
            "Id": f"{iid.replace('-', '')}{stat.lower()}",
            "MetricStat": {
                "Metric": {
                    "Namespace": "N",
                    "MetricName": "u",
                    "Dimensions": [{"Name": "InstanceId", "Value": iid}],
                },
                "Period": 60,
                "Stat": stat,
            },
        }
        for iid in ("i-a", "i-b", "i-c")
        for stat in (*ROLLUP_PARTIAL_IDLE_STATS, "Sum")
    ]
    t0 = t0.replace(tzinfo=None)  # moto keeps naive UTC datetimes
    got = get_metric_data(backend, queries, t0, t0 + timedelta(minutes=3), "TimestampAscending")
    return {r["id"]: [float(v) for v in r["values"]] for r in got}


def _expected() -> dict[str, list[float]]:
    return {
        # 8 values a minute: 0..70 + m
        "iamaximum": [70.0, 71.0, 72.0],
        "iaminimum": [0.0, 1.0, 2.0],
        "iasamplecount": [8.0, 8.0, 8.0],
        "iasum": [280.0 + 8 * m for m in range(3)],
        # one statistic set a minute
        "ibmaximum": [2.0, 3.0, 4.0],
        "ibminimum": [0.0, 0.0, 0.0],
        "ibsamplecount": [64.0, 64.0, 64.0],
        "ibsum": [64.0, 64.0, 64.0],
        # a statistic set and a single value in one minute: aggregated together
        "icmaximum": [50.0, 50.0, 50.0],
        "icminimum": [0.0, 0.0, 0.0],
        "icsamplecount": [65.0, 65.0, 65.0],
        "icsum": [114.0, 114.0, 114.0],
    }


def test_stock_moto_aggregates_one_dimension_sets_values_per_period() -> None:
    with mock_aws():
        cw = Aws(parse_config("").aws, session=fake_session()).client("cloudwatch", "us-east-1")
        _seed_rollups(cw, T0, other_namespace=False)
        backend = models.cloudwatch_backends["123456789012"]["us-east-1"]
        got = _rollup_answers(backend, models.CloudWatchBackend.get_metric_data, T0)
    assert got == _expected()


def test_stock_moto_mixes_namespaces_but_no_two_of_our_series_share_name_and_dimensions() -> None:
    """moto 5's GetMetricData drops its namespace filter once a query names dimensions, so a
    value of the same name and dimensions published under another namespace lands in the
    answer (CloudWatch keeps namespaces apart). The unit tests run on it, so every series the
    daemon reads must differ in name or dimensions from every other one published here."""
    with mock_aws():
        cw = Aws(parse_config("").aws, session=fake_session()).client("cloudwatch", "us-east-1")
        _seed_rollups(cw, T0)
        backend = models.cloudwatch_backends["123456789012"]["us-east-1"]
        got = _rollup_answers(backend, models.CloudWatchBackend.get_metric_data, T0)
    assert got["iamaximum"][0] == 99.0  # the deviation, kept visible
    read = [(m.metric_name, m.rollup_dimension_names) for m in UTILIZATION_METRICS.values()]
    read += [(m.metric_name, m.dimension_names) for m in UTILIZATION_METRICS.values()]
    read += [(h.metric_name, h.dimension_names) for h in PUBLISHER_HEARTBEATS.values()]
    read += [("NetworkOut", ("InstanceId",))]  # AWS/EC2, read by the egress rule
    assert len(read) == len(set(read))


def test_the_benchmarks_indexed_emulator_aggregates_the_same_way(indexed: Any) -> None:
    """Before the fix its index keyed series by name and dimensions only, so i-a's rollup took
    in the 99 % published under another namespace (a Maximum CloudWatch never returns)."""
    with mock_aws():
        cw = Aws(parse_config("").aws, session=fake_session()).client("cloudwatch", "us-east-1")
        _seed_rollups(cw, T0)
        backend = models.cloudwatch_backends["123456789012"]["us-east-1"]
        got = _rollup_answers(backend, indexed.get_metric_data, T0)
    assert got == _expected()


# -- the agent and the Neuron publisher publish the rollup ----------------------------------
def test_agent_config_publishes_per_gpu_and_rollup_and_drops_the_originals() -> None:
    """CloudWatch agent configuration file reference ("Manually create or edit the CloudWatch
    agent configuration file", metrics section): ``aggregation_dimensions`` lists the
    dimension sets to roll metrics up to; ``drop_original_metrics`` (per plugin section) stops
    the agent also sending the original metric with all its dimensions. The per-GPU set only
    with ``per_device`` (tests/unit/guardrails/test_published_vs_queried.py)."""
    assert json.loads(cloudwatch_agent_config())["metrics"]["aggregation_dimensions"] == [
        list(GPU.rollup_dimension_names)
    ]
    cfg = json.loads(cloudwatch_agent_config(per_device=True))
    m = cfg["metrics"]
    assert m["append_dimensions"] == {"InstanceId": "${aws:InstanceId}"}
    assert m["aggregation_dimensions"] == [
        list(GPU.rollup_dimension_names),
        list(GPU.dimension_names),
    ]
    assert m["aggregation_dimensions"][0] == ["InstanceId"]
    gpu = m["metrics_collected"]["nvidia_gpu"]
    assert gpu["drop_original_metrics"] == gpu["measurement"]
    # the daemon reads nvidia_smi_<measurement>: the utilization one is among those rolled up
    assert (
        GPU.metric_name == "nvidia_smi_utilization_gpu" and "utilization_gpu" in gpu["measurement"]
    )


def test_neuron_publisher_sends_one_statistic_set_per_report() -> None:
    util = {str(i): 0.0 for i in range(64)} | {"3": 97.25}
    pts = nr.datapoints_for(
        util,
        instance_id="i-1",
        metric=NEURON.metric_name,
        device_dimension=NEURON.device_dimension,
        heartbeat_metric=PUBLISHER_HEARTBEATS["neuron"].metric_name,
    )
    rollups = [p for p in pts if "StatisticValues" in p]
    assert len(rollups) == 1 and pts[-1]["MetricName"].endswith("heartbeat")
    assert rollups[0]["Dimensions"] == [{"Name": "InstanceId", "Value": "i-1"}]
    assert rollups[0]["StatisticValues"] == {
        "SampleCount": 64.0,
        "Sum": 97.25,
        "Minimum": 0.0,
        "Maximum": 97.25,
    }
    # the botocore model accepts it (PutMetricData's MetricDatum.StatisticValues)
    import botocore.session

    model = botocore.session.get_session().get_service_model("cloudwatch")
    datum = model.operation_model("PutMetricData").input_shape.members["MetricData"].member
    assert set(rollups[0]) <= set(datum.members)
    assert set(rollups[0]["StatisticValues"]) == set(datum.members["StatisticValues"].members)


def test_publisher_interval_keeps_each_cores_peak(tmp_path: Path) -> None:
    """With ``--interval 60`` (what the launch template passes) three reports in a row make two
    publishes: the first at once, then the peak of the next two when neuron-monitor ends."""
    rec = tmp_path / "calls.jsonl"
    fake = tmp_path / "aws"
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(rec)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    fake.chmod(0o755)
    fix = ROOT / "tests" / "fixtures" / "neuron"
    names = ["report_no_application.json", "report_one_app_8_cores.json"]
    reports = [json.loads((fix / n).read_text()) for n in names]
    lines = "\n".join(json.dumps(r) for r in [reports[0], reports[1], reports[0]]) + "\n"
    script = tmp_path / "pub.py"
    script.write_text(neuron_publisher_source())
    cmd = neuron_publisher_command(2).split()[2:]
    assert cmd[cmd.index("--interval") + 1] == "60"
    r = subprocess.run(
        [sys.executable, str(script), *cmd],
        input=lines.encode(),
        check=False,
        capture_output=True,
        env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"},
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    calls = [json.loads(x) for x in rec.read_text().splitlines()]
    assert len(calls) == 2
    first, last = (json.loads(c[5]) for c in calls)
    assert max(p.get("Value", 0.0) for p in first[:-1]) == 0.0
    # the busy report in the middle survives the idle one after it
    assert last[-2]["StatisticValues"]["Maximum"] == 97.25


# -- the daemon reads the rollup -------------------------------------------------------------
@pytest.fixture
def fleet() -> Any:
    with mock_aws():
        aws = Aws(parse_config("").aws, session=fake_session())
        yield aws, aws.client("ec2", "us-east-1"), aws.client("cloudwatch", "us-east-1")


def _queries(cw: Any) -> list[list[dict[str, Any]]]:
    """Every GetMetricData call's queries, as sent."""
    seen: list[list[dict[str, Any]]] = []
    cw.meta.events.register_first(
        "provide-client-params.cloudwatch.GetMetricData",
        lambda params, **_: seen.append(list(params["MetricDataQueries"])),
    )
    return seen


@pytest.mark.parametrize("partial_idle", [False, True])
def test_rollup_decisions_two_metrics_per_instance_no_listing(
    fleet: Any, partial_idle: bool
) -> None:
    """By default the rollup's Maximum and SampleCount (2 metrics per instance); with
    ``idle.report_partial_idle`` also its Minimum (3), for the "devices idle in every period"
    note on a busy node. The decisions are the same either way."""
    aws, ec2, cw = fleet
    plan = {
        "idle": ("p5.48xlarge", 8, "idle"),
        "seven": ("p5.48xlarge", 7, "idle"),  # one GPU silent: blind
        "busy": ("p5.48xlarge", 8, "busy"),
        "one-idle": ("p5.48xlarge", 8, "one-idle"),
        "missing": ("p5.48xlarge", 8, "missing"),
        "trn": ("trn2.48xlarge", 64, "idle"),
        "trn-63": ("trn2.48xlarge", 63, "idle"),
    }
    ids = {name: launch(ec2, t, {})[0] for name, (t, _, _) in plan.items()}
    nodes = inventory(ec2, "us-east-1", ["p5.48xlarge", "trn2.48xlarge"], load_catalog())
    now = max(n.launch_time for n in nodes).replace(second=0, microsecond=0) + timedelta(hours=1)
    publish(
        {"us-east-1": cw},
        [
            FleetNode(ids[k], "us-east-1", "neuron" if t.startswith("trn") else "nvidia", d, p)
            for k, (t, d, p) in plan.items()
        ],
        now - timedelta(minutes=12),
        now + timedelta(minutes=1),
        metric_defs=DEFS,
    )
    sent = _queries(cw)
    before = dict(aws.counter.calls)
    flag = str(partial_idle).lower()
    cfg = parse_config(f"idle: {{window: 10m, max_gap: 2m, report_partial_idle: {flag}}}\n")
    utils = utilization(aws, cfg, nodes, now)
    got = {k: utils[i] for k, i in ids.items()}
    assert got["idle"].state == "idle" and "all 8 devices below 5%" in got["idle"].reason
    assert got["seven"].state == "unknown"
    assert "only 7 of 8 accelerator series present" in got["seven"].reason
    assert got["busy"].state == "busy"
    assert got["one-idle"].state == "busy"
    # the note needs the idlest accelerator (Minimum): only with report_partial_idle
    assert ("devices idle in every period" in got["one-idle"].reason) == partial_idle
    assert "devices idle" not in got["busy"].reason
    assert got["missing"].state == "unknown"
    assert got["trn"].state == "idle" and "all 64 devices" in got["trn"].reason
    assert got["trn-63"].state == "unknown" and "only 63 of 64" in got["trn-63"].reason
    calls = {k: v - before.get(k, 0) for k, v in aws.counter.calls.items()}
    assert calls.get("ListMetrics", 0) == 0  # the rollup's dimension set is known
    queries = [q for call in sent for q in call]
    rollup = [q for q in queries if len(q["MetricStat"]["Metric"]["Dimensions"]) == 1]
    util_q = [
        q
        for q in rollup
        if q["MetricStat"]["Metric"]["MetricName"] != "coreburst_publisher_heartbeat"
    ]
    stats = ROLLUP_PARTIAL_IDLE_STATS if partial_idle else ROLLUP_STATS
    k = len(stats)
    assert k == (3 if partial_idle else 2)
    assert len(util_q) == k * len(nodes)  # Maximum, SampleCount (+ Minimum) per instance
    assert sorted({q["MetricStat"]["Stat"] for q in util_q}) == sorted(stats)
    # a heartbeat only for the trn2 the rollup leaves blind (its publisher is alive, so the
    # reason stays the rollup's); the idle trn2's complete rollup already proves it alive
    beats = [q for q in rollup if q not in util_q]
    assert [q["MetricStat"]["Metric"]["Dimensions"][0]["Value"] for q in beats] == [ids["trn-63"]]
    assert len(queries) == k * len(nodes) + 1
    assert calls["GetMetricData"] <= math.ceil(k * len(nodes) / 500) + 1
    # explain still shows every GPU's own series
    rows = per_device_stats(aws, cfg, next(n for n in nodes if n.instance_id == ids["idle"]), now)
    assert sorted(r.device for r in rows) == [str(i) for i in range(8)]


def test_incremental_read_asks_only_recent_periods_and_decides_the_same(fleet: Any) -> None:
    _, ec2, cw = fleet
    iid = launch(ec2, "p5.48xlarge", {})[0]
    nodes = inventory(ec2, "us-east-1", ["p5.48xlarge"], load_catalog())
    now = nodes[0].launch_time.replace(second=0, microsecond=0) + timedelta(hours=1)
    publish(
        {"us-east-1": cw},
        [FleetNode(iid, "us-east-1", "nvidia", 8, "idle")],
        now - timedelta(minutes=12),
        now + timedelta(minutes=6),
        metric_defs=DEFS,
    )
    starts: list[datetime] = []
    cw.meta.events.register_first(
        "provide-client-params.cloudwatch.GetMetricData",
        lambda params, **_: starts.append(params["StartTime"]),
    )
    cfg = parse_config("idle: {window: 10m, max_gap: 2m, period: 1m, publish_delay: 1m}").idle
    cache = SeriesCache()
    fetch_rollups(cw, nodes, cfg, now, cache)
    later = now + timedelta(minutes=5)
    second, _ = fetch_rollups(cw, nodes, cfg, later, cache)
    full, _ = fetch_rollups(cw, nodes, cfg, later)
    # first read: the whole window; then from max_gap + publish_delay + period before the last
    # read (2 + 1 + 1 min: datapoints up to publish_delay late may have arrived since)
    assert starts[0] == now - timedelta(minutes=11)
    assert starts[1] == now - timedelta(minutes=4)
    assert starts[2] == later - timedelta(minutes=11)
    assert second[iid] == full[iid] and len(full[iid]) >= 11
    p = IdleParams(window=cfg.window, max_gap=cfg.max_gap, publish_delay=cfg.publish_delay)
    assert assess_rollup(second[iid], 8, later, p) == assess_rollup(full[iid], 8, later, p)


def test_a_sample_count_other_than_the_accelerator_count_is_never_idle() -> None:
    """Too few samples (a silent accelerator) or too many (a second publisher, or one faster
    than once a minute) in every period: blind. A short period inside max_gap is tolerated,
    as a hole in a per-device series is."""
    now = T0
    p = IdleParams(window=timedelta(minutes=10), max_gap=timedelta(minutes=2))

    def run(counts: list[float]) -> Any:
        pts = [
            PeriodStat(now - timedelta(minutes=10 - m), 1.0, 0.0, c) for m, c in enumerate(counts)
        ]
        return assess_rollup(pts, 8, now, p)

    assert run([8.0] * 11).state == "idle"
    assert run([16.0] * 11).state == "unknown"
    assert "SampleCount 16 where 8 were expected" in run([16.0] * 11).reason
    assert run([7.0] * 11).state == "unknown"
    assert run([8.0] * 5 + [7.0] + [8.0] * 5).state == "idle"  # one 1-minute hole
    assert run([8.0] * 4 + [7.0] * 3 + [8.0] * 4).state == "unknown"  # a 4-minute hole
    assert run([8.0] * 8 + [0.0] * 3).state == "unknown"  # stale
    # 5-minute periods: 5 samples per GPU
    five = [PeriodStat(now - timedelta(minutes=5 * k), 1.0, 0.0, 40.0) for k in range(3)]
    p5 = IdleParams(window=timedelta(minutes=10), max_gap=timedelta(minutes=5))
    assert assess_rollup(five, 8, now, p5, samples_per_period=5).state == "idle"
    assert assess_rollup(five, 8, now, p5, samples_per_period=1).state == "unknown"


# -- idle cadence -------------------------------------------------------------------------------
def test_idle_reads_every_idle_every_and_a_ripe_node_at_once(fleet: Any, tmp_path: Path) -> None:
    """Cycles every minute; utilization read at the first, not at the next ones, except that a
    node whose grace ran out is read fresh (and acted on) at once."""
    aws, ec2, cw = fleet
    iid = launch(ec2, "p5.48xlarge", {})[0]
    busy = launch(ec2, "p5.48xlarge", {})[0]
    nodes = inventory(ec2, "us-east-1", ["p5.48xlarge"], load_catalog())
    now = max(n.launch_time for n in nodes).replace(second=0, microsecond=0) + timedelta(hours=1)
    publish(
        {"us-east-1": cw},
        [
            FleetNode(iid, "us-east-1", "nvidia", 8, "idle"),
            FleetNode(busy, "us-east-1", "nvidia", 8, "busy"),
        ],
        now - timedelta(minutes=12),
        now + timedelta(minutes=8),
        metric_defs=DEFS,
    )
    cfg = parse_config(
        IDLE
        + f"""
dry_run: true
idle: {{window: 10m, max_gap: 2m, every: 10m}}
reclaim: {{grace: 5m}}
spend: {{cost_explorer: false, include_lustre: false, direct_connect_ports: [],
         spot_price: catalog-estimate}}
egress: {{enabled: false}}
state: {{path: "{tmp_path}/s.db", audit_log: "{tmp_path}/a.jsonl"}}
metrics_endpoint: {{enabled: false}}
"""
    )
    clock = FakeClock(now)
    state = State(cfg.state.path)
    d = Daemon(cfg, aws, state, clock=clock)
    sent = _queries(cw)

    def cycle() -> tuple[dict[str, str], int]:
        k = len(sent)
        r = d.run_cycle()
        clock.advance(timedelta(minutes=1))
        return {x.instance_id: x.step for x in r.decisions}, len(sent) - k

    steps, reads = cycle()
    assert steps == {iid: "mark", busy: "none"} and reads >= 1
    for _ in range(4):  # minutes 1-4: nothing read, nothing done
        steps, reads = cycle()
        assert reads == 0 and steps == {iid: "none", busy: "none"}
    steps, reads = cycle()  # minute 5: grace over; only the marked node is read, fresh
    assert steps[iid] == "act" and reads >= 1
    assert {
        q["MetricStat"]["Metric"]["Dimensions"][0]["Value"] for call in sent[-reads:] for q in call
    } == {iid}
    d.close()
    state.close()
