"""One guardrail cycle at 100 / 1,000 / 5,000 instances against a local moto server process.

Every node gets what a real fleet sends: one datapoint per GPU per minute for the whole idle
window (85% of nodes busy, 10% idle, 5% sending nothing) and NetworkOut every 5 minutes.
The daemon runs in its default series-discovery mode (ListMetrics, then GetMetricData).

Printed per size:
- API calls by operation in the first and in the next cycle (the next one reuses the
  ListMetrics answer: ``idle.series_refresh``), checked against the targets: GetMetricData calls
  <= ceil(series/500)+1 per metric, DescribeInstances pages <= ceil(N/1000) per region;
- client CPU seconds (``time.process_time``) of the first cycle (cold: it also loads botocore
  service models and builds clients) and of the next one (warm: every later cycle), checked
  against <= 1 s per 1,000 instances for the warm cycle;
- peak Python memory of a third cycle (tracemalloc slows code, so it is off while CPU is
  measured), wall time, and the emulator's own CPU for the warm cycle, separately.

moto's CloudWatch scans every stored datapoint per query and per period; the server is
started through ``benchmarks/indexed_moto.py``, which answers the same queries from an index.

$ python benchmarks/guardrails_cycle.py --sizes 100,1000,5000
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
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]

from common.telemetry import UTILIZATION_METRICS
from guardrails.aws import Aws
from guardrails.cli import configure_logging
from guardrails.config import parse_config
from guardrails.daemon import Daemon
from guardrails.state import State
from sandbox.clocks import FakeClock
from sandbox.emulator import MotoProcess, fake_session, launch

WINDOW_MIN = 30
GPU = UTILIZATION_METRICS["nvidia"]


def _put_metric_data(url: str, namespace: str, data: list[dict[str, Any]]) -> None:
    """PutMetricData straight onto the emulator's JSON endpoint: seeding 1.4 M datapoints
    through botocore would take minutes and is not what is being measured."""
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
    return "missing" if i % 20 == 19 else "idle" if i % 10 == 3 else "busy"


def _datapoints(
    ids: list[str], start: datetime, minutes: int
) -> Iterator[tuple[str, dict[str, Any]]]:
    t0 = start.timestamp()
    for i, iid in enumerate(ids):
        prof = _profile(i)
        if prof == "missing":
            continue
        for m in range(minutes):
            ts = t0 + 60 * m
            for dev in range(8):
                v = 1.0 + m % 3 if prof == "idle" else 40.0 + (dev * 7 + m) % 50
                yield (
                    GPU.namespace,
                    {
                        "MetricName": GPU.metric_name,
                        "Dimensions": [
                            {"Name": "InstanceId", "Value": iid},
                            {"Name": GPU.device_dimension, "Value": str(dev)},
                        ],
                        "Timestamp": ts,
                        "Value": v,
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
idle: {{window: {WINDOW_MIN}m}}
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
        ids: list[str] = []
        for base in range(0, n, 1000):
            k = min(1000, n - base)
            spot = k // 10
            ids += launch(ec2, "p5.48xlarge", {"team": "ml"}, count=k - spot)
            if spot:
                ids += launch(ec2, "p5.48xlarge", {"team": "research"}, count=spot, spot=True)
        # data from before the window up to the third cycle
        points = seed(moto, ids, now - timedelta(minutes=WINDOW_MIN + 5), WINDOW_MIN + 8)
        setup_s = time.perf_counter() - t
        state = State(cfg.state.path)
        clock = FakeClock(now)
        d = Daemon(cfg, aws, state, clock=clock)

        def cycle() -> tuple[Any, dict[str, int], float, float, float, float]:
            before = dict(aws.counter.calls)
            e0 = _cpu(emulator)
            t0, c0, w0 = os.times(), time.process_time(), time.perf_counter()
            report = d.run_cycle()
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            sys_cpu = os.times().system - t0.system  # socket reads and writes, in the kernel
            calls = {k: v - before.get(k, 0) for k, v in aws.counter.calls.items()}
            clock.advance(timedelta(minutes=1))
            emu = _cpu(emulator) - e0
            return report, {k: v for k, v in calls.items() if v}, cpu, sys_cpu, wall, emu

        _, cold_calls, cold_cpu, _, cold_wall, _ = cycle()
        prof = cProfile.Profile() if profile else None
        if prof:
            prof.enable()
        report, calls, cpu, sys_cpu, wall, emu_cpu = cycle()
        if prof:
            prof.disable()
            prof.dump_stats(str(profile))
        tracemalloc.start()
        d.run_cycle()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        d.close()
        state.close()
    series = sum(1 for i in range(n) if _profile(i) != "missing") * 8
    # the worse of the two cycles
    di = max(c.get("DescribeInstances", 0) for c in (calls, cold_calls))
    gmd = max(c.get("GetMetricData", 0) for c in (calls, cold_calls))
    gmd_limit = (math.ceil(series / 500) + 1) + (math.ceil(n / 500) + 1)
    per_k = cpu * 1000 / n
    return {
        "n": n,
        "datapoints": points,
        "setup_s": setup_s,
        "states": dict(report.states),
        "calls": calls,
        "cold_calls": cold_calls,
        "cold_cpu_s": cold_cpu,
        "sys_cpu_s": sys_cpu,
        "cold_wall_s": cold_wall,
        "cpu_s": cpu,
        "wall_s": wall,
        "emulator_cpu_s": emu_cpu,
        "peak_mib": peak / 2**20,
        "checks": {
            f"GetMetricData {gmd} <= {gmd_limit} ({series} GPU series, {n} NetworkOut series)": (
                gmd <= gmd_limit
            ),
            f"DescribeInstances {di} <= {math.ceil(n / 1000)}": di <= math.ceil(n / 1000),
            f"client CPU {per_k:.2f} s per 1,000 instances <= 1.00 s": per_k <= 1.0,
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--sizes", default="100,1000,5000", help="comma-separated fleet sizes")
    ap.add_argument("--profile", type=Path, help="write a cProfile of the warm cycle here")
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
            print(f"  states: {r['states']}")
            for label, calls in (("cold", r["cold_calls"]), ("warm", r["calls"])):
                print(
                    f"  API calls ({label}): "
                    + ", ".join(f"{k}={v}" for k, v in sorted(calls.items()))
                )
            print(
                f"  client CPU: cold cycle {r['cold_cpu_s']:.3f}s, warm cycle {r['cpu_s']:.3f}s"
                f" (of which kernel {r['sys_cpu_s']:.3f}s)"
                f"   peak traced memory {r['peak_mib']:.1f} MiB"
            )
            print(
                f"  wall: cold {r['cold_wall_s']:.2f}s, warm {r['wall_s']:.2f}s"
                f"   emulator CPU (warm cycle) {r['emulator_cpu_s']:.2f}s"
            )
            for name, ok in r["checks"].items():
                missed += not ok
                print(f"  [{'ok ' if ok else 'MISS'}] {name}")
    finally:
        moto.stop()
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
