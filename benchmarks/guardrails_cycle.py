"""Guardrail cycles at 1,000 / 5,000 / 10,000 instances against a local moto server process.

Every node sends what a real p5 sends under ``coreburst.common.telemetry``: each minute, the
per-instance rollup of its 8 GPUs' utilization (one statistic set: Maximum, Minimum,
SampleCount 8) for the whole idle window and the span measured (85% of nodes busy, 10% idle, 3%
with one GPU silent, 2% sending nothing), and NetworkOut every 5 minutes. The per-GPU series
(for ``explain`` only) are left out: the daemon never reads them. All of it is there from the
start (no flush delay: each read sees data up to the minute before, the least delay, so busy
nodes are read as rarely as they can be; the model's bound assumes the most). The daemon runs
with its defaults: cycle every 60 s (spend), idle read every ``idle.every`` (5 min) of the
rollup's Maximum and SampleCount, only for the nodes that could be idle by then (a busy node
once the busy minute it was last read with has left the window, a marked node at its reclaim
time, a blind one at every read), NetworkOut read every ``egress.every`` (15 min) over the span
since its last read.

The fake clock runs over a span of 2 x ``idle.window`` (60 min) in ``idle.every`` steps, plus a
cycle between two reads; what every cycle of the span requested is scaled to a day. Named
cycles:
- cold: the first (loads botocore models, builds clients, reads every node's whole idle window
  and the egress window);
- between: one minute later, neither idle nor egress due (what most cycles cost);
- warm: the read in the span that requests the most utilization metrics after the cold one
  (the busy nodes read again); its client CPU is checked against <= 0.25 s per 1,000 instances
  and its GetMetricData calls for utilization, with the cold one's, against
  ceil(2 x instances / 500) + 1;
- egress: ``egress.every`` after the cold one, idle and egress both due.

Printed per size: API calls by operation, metrics requested (GetMetricData queries: what it
bills), client CPU (``time.process_time``), peak traced Python memory of the read one span
after the cold one (the busy nodes read again, as in the warm one; tracemalloc slows code,
so it is off while CPU is measured), wall time, the emulator's CPU, the reads of each kind of
node over the span, and the CloudWatch API dollars per day at the default cadence from the
catalog's price (``cloudwatch`` in coreburst/common/data/catalog.yaml, with its date and
source), checked against <= $10 per 1,000 instances per day. Then the guardrails' whole
CloudWatch bill a day, term by term: custom metrics (what the shipped agent config publishes
per p5, on the tiered price), PutMetricData (the agent's flushes every 5 min) and
GetMetricData (the metrics this run requested over the span, scaled to a day; checked <=
coreburst/common/cloudwatch_cost.py's bound, which assumes every node busy and the most
delay), against the goal of <= $15 per 1,000 p5 instances per day; and the model's own terms.

moto's CloudWatch scans every stored datapoint per query and per period; the server is
started through ``benchmarks/indexed_moto.py``, which answers the same queries from an index.

$ python benchmarks/guardrails_cycle.py --sizes 1000,5000,10000
$ python benchmarks/guardrails_cycle.py --sizes 1000 --profile /tmp/cycle.prof
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import os
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]

from coreburst.common.catalog import load_catalog
from coreburst.common.cloudwatch_cost import FleetGroup
from coreburst.common.cloudwatch_cost import bill as cloudwatch_bill
from coreburst.common.telemetry import ROLLUP_STATS, UTILIZATION_METRICS
from coreburst.sandbox.clocks import FakeClock
from coreburst.sandbox.emulator import MotoProcess, fake_session, launch
from guardrails.adapters.aws import Aws
from guardrails.cli import configure_logging
from guardrails.configfile import cloudwatch_cadence, parse_config
from guardrails.daemon import Daemon
from guardrails.stores.sqlite import State

WINDOW_MIN = 30
GPU = UTILIZATION_METRICS["nvidia"]
GPUS = 8
IDLE_EVERY_MIN = 5  # the default idle.every
EGRESS_EVERY_MIN = 15  # the default egress.every
SPAN_MIN = 2 * WINDOW_MIN  # the span measured and scaled to a day
SEEDED_AFTER_MIN = SPAN_MIN + 2  # data published past "now": the span and the memory read


def _put_metric_data(url: str, namespace: str, data: list[dict[str, Any]]) -> None:
    """PutMetricData straight onto the emulator's JSON endpoint: seeding hundreds of thousands
    of datapoints through botocore would take minutes and is not what is being measured."""
    req = urllib.request.Request(
        url,
        data=json.dumps({"Namespace": namespace, "MetricData": data}).encode(),
        headers={
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": "GraniteServiceVersion20100801.PutMetricData",
            "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/"
            "monitoring/aws4_request, SignedHeaders=host, Signature=0",
        },
        method="POST",
    )
    urllib.request.urlopen(req, timeout=600).read()


def _profile(i: int) -> str:
    if i % 50 == 49:
        return "missing"
    if i % 50 == 24:
        return "one-silent"  # 7 of 8 GPUs report: blind, never idle
    return "idle" if i % 10 == 3 else "busy"


def _datapoints(
    ids: list[str], start: datetime, minutes: int
) -> Iterator[tuple[str, dict[str, Any]]]:
    t0 = start.timestamp()
    for i, iid in enumerate(ids):
        prof = _profile(i)
        if prof == "missing":
            continue
        gpus = GPUS - 1 if prof == "one-silent" else GPUS
        for m in range(minutes):
            ts = t0 + 60 * m
            if prof == "idle":
                vals = [1.0 + (m + dev) % 3 for dev in range(gpus)]
            else:
                vals = [40.0 + (dev * 7 + m) % 50 for dev in range(gpus)]
            yield (
                GPU.namespace,
                {
                    "MetricName": GPU.metric_name,
                    "Dimensions": [{"Name": "InstanceId", "Value": iid}],
                    "Timestamp": ts,
                    "StatisticValues": {
                        "SampleCount": float(gpus),
                        "Sum": sum(vals),
                        "Minimum": min(vals),
                        "Maximum": max(vals),
                    },
                    "Unit": "Percent",
                },
            )
            if m % 5 == 0:
                yield (
                    "AWS/EC2",
                    {
                        "MetricName": "NetworkOut",
                        "Dimensions": [{"Name": "InstanceId", "Value": iid}],
                        "Timestamp": ts,
                        "Value": float(2**28 * (1 + i % 4)),
                        "Unit": "Bytes",
                    },
                )


def seed(moto: MotoProcess, ids: list[str], start: datetime, minutes: int) -> int:
    batches: dict[str, list[dict[str, Any]]] = {}
    n = 0
    for ns, d in _datapoints(ids, start, minutes):
        b = batches.setdefault(ns, [])
        b.append(d)
        n += 1
        if len(b) == 1000:  # the API's limit per call
            _put_metric_data(moto.url, ns, b)
            batches[ns] = []
    for ns, b in batches.items():
        if b:
            _put_metric_data(moto.url, ns, b)
    return n


class MetricsRequested:
    """Counts GetMetricData queries (each one metric requested, as billed) and calls, per
    namespace of the call's queries, through botocore's ``provide-client-params`` event (before
    ``guardrails.fastpath`` takes the queries out of the parameters)."""

    def __init__(self) -> None:
        self.metrics: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()

    def attach(self, client: Any) -> None:
        client.meta.events.register_first(
            "provide-client-params.cloudwatch.GetMetricData", self._count
        )

    def _count(self, params: dict[str, Any], **_: Any) -> None:
        qs = params.get("MetricDataQueries") or []
        for ns in {q["MetricStat"]["Metric"]["Namespace"] for q in qs}:
            self.calls[ns] += 1
        for q in qs:
            self.metrics[q["MetricStat"]["Metric"]["Namespace"]] += 1

    def snapshot(self) -> tuple[dict[str, int], dict[str, int]]:
        return dict(self.metrics), dict(self.calls)


def _diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


def run_size(moto: MotoProcess, n: int, profile: Path | None = None) -> dict[str, Any]:
    moto.reset()
    emulator = psutil.Process(moto.pid)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = parse_config(
            f"""
regions: [us-east-1]
dry_run: true
aws: {{endpoint_url: "{moto.url}", max_attempts: 2, read_timeout_s: 600}}
idle: {{window: {WINDOW_MIN}m, every: {IDLE_EVERY_MIN}m}}
spend: {{cost_explorer: true, spot_price: live}}
egress: {{enabled: true, include_nat: true}}
state: {{path: "{tmp}/s.db", audit_log: "{tmp}/a.jsonl"}}
metrics_endpoint: {{enabled: false}}
""",
            "<bench>",
        )
        t = time.perf_counter()
        aws = Aws(cfg.aws, session=fake_session())
        ec2 = aws.client("ec2", "us-east-1")
        requested = MetricsRequested()
        requested.attach(aws.client("cloudwatch", "us-east-1"))
        ids: list[str] = []
        for base in range(0, n, 1000):
            k = min(1000, n - base)
            spot = k // 10
            ids += launch(ec2, "p5.48xlarge", {"team": "ml"}, count=k - spot)
            if spot:
                ids += launch(ec2, "p5.48xlarge", {"team": "research"}, count=spot, spot=True)
        # data from before the window up to the last measured cycle
        points = seed(
            moto,
            ids,
            now - timedelta(minutes=WINDOW_MIN + 5),
            WINDOW_MIN + 5 + SEEDED_AFTER_MIN,
        )
        setup_s = time.perf_counter() - t
        state = State(cfg.state.path)
        clock = FakeClock(now)
        d = Daemon(cfg, aws, state, clock=clock)

        def cycle(prof: cProfile.Profile | None = None) -> dict[str, Any]:
            before = dict(aws.counter.calls)
            m0, c0 = requested.snapshot()
            e0 = _cpu(emulator)
            t0, p0, w0 = os.times(), time.process_time(), time.perf_counter()
            if prof:
                prof.enable()
            report = d.run_cycle()
            if prof:
                prof.disable()
            cpu, wall = time.process_time() - p0, time.perf_counter() - w0
            sys_cpu = os.times().system - t0.system  # socket reads and writes, in the kernel
            m1, c1 = requested.snapshot()
            return {
                "report": report,
                "calls": _diff(dict(aws.counter.calls), before),
                "metrics": _diff(m1, m0),
                "gmd_calls": _diff(c1, c0),
                "cpu_s": cpu,
                "sys_cpu_s": sys_cpu,
                "wall_s": wall,
                "emulator_cpu_s": _cpu(emulator) - e0,
            }

        # the span: a read every idle.every from the cold one, and one cycle between reads
        span: dict[int, dict[str, Any]] = {}
        reads: dict[str, Counter[int]] = {}  # node profile -> node reads per minute
        profile_of = {iid: _profile(i) for i, iid in enumerate(ids)}
        read_ids: set[str] = set()

        def _seen(params: dict[str, Any], **_: Any) -> None:
            for q in params.get("MetricDataQueries") or []:
                m = q["MetricStat"]["Metric"]
                if m["MetricName"] == GPU.metric_name:
                    read_ids.add(m["Dimensions"][0]["Value"])

        aws.client("cloudwatch", "us-east-1").meta.events.register_first(
            "provide-client-params.cloudwatch.GetMetricData", _seen
        )
        prof = cProfile.Profile(time.process_time) if profile else None
        for minute in (0, 1, *range(IDLE_EVERY_MIN, SPAN_MIN, IDLE_EVERY_MIN)):
            clock.set(now + timedelta(minutes=minute))
            read_ids.clear()
            span[minute] = cycle()
            for iid in read_ids:
                reads.setdefault(profile_of[iid], Counter())[minute] += 1
        cold, between = span[0], span[1]
        idle_ns = {m.namespace for m in cfg.idle.metrics.values()}

        def idle_metrics_of(c: dict[str, Any]) -> int:
            return sum(v for k, v in c["metrics"].items() if k in idle_ns)

        warm_at = max(
            (m for m in span if m >= IDLE_EVERY_MIN), key=lambda m: (idle_metrics_of(span[m]), -m)
        )
        warm = span[warm_at]
        egress = span[EGRESS_EVERY_MIN]
        # the read one span after the cold one: the busy nodes again, as at the warm one;
        # profiled with --profile, else its peak traced memory (each slows the other)
        clock.set(now + timedelta(minutes=SPAN_MIN))
        peak = 0
        if prof:
            prof.enable()
            d.run_cycle()
            prof.disable()
            prof.dump_stats(str(profile))
        else:
            tracemalloc.start()
            d.run_cycle()
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        d.close()
        state.close()
    cat = load_catalog()
    assert cat.cloudwatch is not None, "coreburst/common/data/catalog.yaml has no cloudwatch prices"
    price = cat.cloudwatch.get_metric_data_usd_per_1000_metrics
    req_price = cat.cloudwatch.api_usd_per_1000_requests
    egress_ns = {"AWS/EC2", "AWS/NATGateway"}
    per_day = 1440 / SPAN_MIN  # spans a day
    totals: Counter[str] = Counter()
    other_requests = 0
    for c in span.values():
        totals.update(c["metrics"])
        other_requests += sum(
            v for k, v in c["calls"].items() if k in ("ListMetrics", "GetMetricStatistics")
        )
    # every minute of the span is a cycle: the 12 reads above and 48 like "between"
    between_cycles = SPAN_MIN - len(span)
    for k, v in between["metrics"].items():
        totals[k] += v * between_cycles
    other_requests += between_cycles * sum(
        v for k, v in between["calls"].items() if k in ("ListMetrics", "GetMetricStatistics")
    )
    idle_day = sum(v for k, v in totals.items() if k in idle_ns) * per_day
    egress_day = sum(v for k, v in totals.items() if k in egress_ns) * per_day
    other_day = sum(v for k, v in totals.items() if k not in idle_ns | egress_ns) * per_day
    usd_idle = idle_day * price.value / 1000
    usd_egress = egress_day * price.value / 1000
    usd_other = other_day * price.value / 1000
    usd_req = other_requests * per_day * req_price.value / 1000
    usd_day = usd_idle + usd_egress + usd_other + usd_req
    idle_calls = sum(v for k, v in warm["gmd_calls"].items() if k in idle_ns)
    idle_calls_cold = sum(v for k, v in cold["gmd_calls"].items() if k in idle_ns)
    gmd_limit = math.ceil(len(ROLLUP_STATS) * n / 500) + 1
    di = max(c["calls"].get("DescribeInstances", 0) for c in span.values())
    per_k = warm["cpu_s"] * 1000 / n
    per_k_usd = usd_day * 1000 / n
    # the whole bill: what the nodes publish (model of the shipped config) + what was read
    model = cloudwatch_bill([FleetGroup("p5.48xlarge", n)], cat, cloudwatch_cadence(cfg))
    read_day = idle_day + egress_day + other_day
    all_in = model.custom_usd_day + model.put_usd_day + usd_day
    per_k_all_in = all_in * 1000 / n
    per_k_model = model.total_usd_day * 1000 / n
    return {
        "n": n,
        "datapoints": points,
        "setup_s": setup_s,
        "states": dict(warm["report"].states),
        "cycles": {
            "cold": cold,
            "between": between,
            f"warm (+{warm_at}m)": warm,
            f"egress (+{EGRESS_EVERY_MIN}m)": egress,
        },
        "reads": {k: sorted(v.items()) for k, v in sorted(reads.items())},
        "peak_mib": peak / 2**20,
        "usd": (usd_idle, usd_egress, usd_other, usd_req, usd_day),
        "metrics_day": (idle_day, egress_day, other_day),
        "price": price,
        "model": model,
        "all_in": all_in,
        "checks": {
            f"GetMetricData metrics/day measured {read_day:,.0f} <= model "
            f"{model.get_metrics_day:,.0f} (coreburst/common/cloudwatch_cost.py: every node "
            "busy, data the most late)": (read_day <= model.get_metrics_day),
            f"GetMetricData calls for utilization {idle_calls} (cold {idle_calls_cold}) <= "
            f"ceil({len(ROLLUP_STATS)} x {n} / 500) + 1 = {gmd_limit}": max(
                idle_calls, idle_calls_cold
            )
            <= gmd_limit,
            f"DescribeInstances {di} <= {math.ceil(n / 1000)}": di <= math.ceil(n / 1000),
            f"client CPU (warm) {per_k:.3f} s per 1,000 instances <= 0.25 s": per_k <= 0.25,
            f"CloudWatch API ${per_k_usd:.2f} per 1,000 instances per day <= $10.00": per_k_usd
            <= 10.0,
            f"CloudWatch all-in ${per_k_all_in:.2f} per 1,000 p5 instances per day <= $15.00 "
            f"(model ${per_k_model:.2f})": (per_k_all_in <= 15.0 and per_k_model <= 15.0),
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--sizes", default="1000,5000,10000", help="comma-separated fleet sizes")
    ap.add_argument(
        "--profile", type=Path, help="write a cProfile of a read like the warm one here"
    )
    args = ap.parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s]
    except ValueError:
        print(f"--sizes: expected comma-separated integers, got {args.sizes!r}", file=sys.stderr)
        return 2
    if not sizes or min(sizes) < 1:
        print("--sizes: give at least one size >= 1", file=sys.stderr)
        return 2
    configure_logging("warning")
    here = Path(__file__).parent
    moto = MotoProcess(launcher=[sys.executable, str(here / "indexed_moto.py")]).start()
    missed = 0
    try:
        for n in sizes:
            r = run_size(moto, n, args.profile)
            print(f"\n== {n} instances ({r['datapoints']:,} datapoints, setup {r['setup_s']:.0f}s)")
            print(f"  states (warm): {r['states']}")
            for label, c in r["cycles"].items():
                print(
                    f"  {label:13} API calls: "
                    + ", ".join(f"{k}={v}" for k, v in sorted(c["calls"].items()))
                    + "; metrics requested: "
                    + (", ".join(f"{k}={v}" for k, v in sorted(c["metrics"].items())) or "0")
                )
                print(
                    f"  {label:13} client CPU {c['cpu_s']:.3f}s (kernel {c['sys_cpu_s']:.3f}s), "
                    f"wall {c['wall_s']:.2f}s, emulator CPU {c['emulator_cpu_s']:.2f}s"
                )
            print(f"  peak traced memory (idle read, +{SPAN_MIN}m): {r['peak_mib']:.1f} MiB")
            for kind, per_minute in r["reads"].items():
                print(
                    f"  {kind:10} nodes read over {SPAN_MIN} min: "
                    + ", ".join(f"+{m}m {k}" for m, k in per_minute)
                )
            usd_idle, usd_egress, usd_other, usd_req, usd_day = r["usd"]
            m_idle, m_egress, m_other = r["metrics_day"]
            p = r["price"]
            print(
                f"  CloudWatch API per day at the default cadence: ${usd_day:,.2f} "
                f"(idle {m_idle:,.0f} metrics ${usd_idle:,.2f}; egress {m_egress:,.0f} metrics "
                f"${usd_egress:,.2f}; every cycle {m_other:,.0f} metrics ${usd_other:,.2f}; "
                f"other requests ${usd_req:,.2f}) at ${p.value} per 1,000 metrics requested "
                f"({p.source}, {p.as_of}{', unverified' if p.unverified else ''})"
            )
            b = r["model"]
            print(f"  CloudWatch all-in per day at the default cadence ({n:,} p5 instances):")
            rows = [
                (
                    "custom metrics",
                    f"{b.custom_metrics:,} metrics (shipped agent config)",
                    b.custom_usd_day,
                ),
                (
                    "PutMetricData",
                    f"{b.put_requests_day:,.0f} requests (agent flushes every 5 min)",
                    b.put_usd_day,
                ),
                (
                    "GetMetricData",
                    f"{m_idle + m_egress + m_other:,.0f} metrics (measured: idle {m_idle:,.0f},"
                    f" egress {m_egress:,.0f})",
                    usd_idle + usd_egress + usd_other,
                ),
                ("other requests", "ListMetrics, GetMetricStatistics (measured)", usd_req),
                ("all-in", f"${r['all_in'] * 1000 / n:,.2f} per 1,000 instances", r["all_in"]),
            ]
            for term, what, usd in rows:
                print(f"    {term:15} {what:62} ${usd:>9,.2f}")
            print("  model (coreburst/common/cloudwatch_cost.py; every node busy):")
            for term, what, usd in b.lines():
                print(f"    {term:15} {what:62} ${usd:>9,.2f}")
            print(f"    prices: {b.source}{', unverified' if b.unverified else ''}")
            for name, ok in r["checks"].items():
                missed += not ok
                print(f"  [{'ok ' if ok else 'MISS'}] {name}")
    finally:
        moto.stop()
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
