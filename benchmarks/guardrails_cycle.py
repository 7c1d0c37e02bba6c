"""One guardrail cycle at 100 / 1,000 / 5,000 instances against a moto server process.

Prints API calls by operation, client CPU seconds (time.process_time: the emulator runs in
its own process, so its CPU is not counted), peak Python memory of a second cycle (tracemalloc
slows code down, so it is not on while CPU is measured) and wall time, and checks the targets:
GetMetricData calls <= ceil(series/500)+1 per metric, DescribeInstances pages <= ceil(N/1000)
per region, client CPU <= 1 s per 1,000 instances.

moto scans every stored datapoint for every query and period, so only the smallest fleet gets
in-window GPU data (3 nodes at N <= 100); the rest get one old datapoint per series, found by
ListMetrics and queried like any other series (they come out blind: stale). Emulator wall
time is not a figure of merit.

$ python benchmarks/guardrails_cycle.py --sizes 100,1000
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta

from guardrails.aws import Aws
from guardrails.cli import configure_logging
from guardrails.clock import FakeClock
from guardrails.config import parse_config
from guardrails.daemon import Daemon
from guardrails.emulator import FleetNode, MotoProcess, fake_session, launch, publish
from guardrails.state import State
from infra.telemetry import UTILIZATION_METRICS

FULL_DATA_NODES = 3  # nodes with in-window GPU data at the smallest size


def run_size(moto: MotoProcess, n: int) -> dict[str, object]:
    moto.reset()
    now = (datetime.now(UTC) - timedelta(hours=1)).replace(second=0, microsecond=0)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = parse_config(
            f"""
regions: [us-east-1]
dry_run: true
aws: {{endpoint_url: "{moto.url}", max_attempts: 2, read_timeout_s: 600}}
idle: {{window: 30m}}
spend: {{cost_explorer: true, spot_price: live}}
egress: {{enabled: true, include_nat: true}}
state: {{path: "{tmp}/s.db", audit_log: "{tmp}/a.jsonl"}}
metrics_endpoint: {{enabled: false}}
""",
            "<bench>",
        )
        aws = Aws(cfg.aws, session=fake_session())
        ec2 = aws.client("ec2", "us-east-1")
        ids: list[str] = []
        for base in range(0, n, 1000):
            k = min(1000, n - base)
            spot = k // 10
            ids += launch(ec2, "p5.48xlarge", {"team": "ml"}, count=k - spot)
            if spot:
                ids += launch(ec2, "p5.48xlarge", {"team": "research"}, count=spot, spot=True)
        fleet = [FleetNode(i, "us-east-1", "nvidia", 8, "idle") for i in ids]
        defs = {
            k: (m.namespace, m.metric_name, m.device_dimension)
            for k, m in UTILIZATION_METRICS.items()
        }
        cw = {"us-east-1": aws.client("cloudwatch", "us-east-1")}
        old = now - timedelta(hours=2)
        full = fleet[:FULL_DATA_NODES] if n <= 100 else []
        publish(cw, full, now - timedelta(minutes=35), now + timedelta(minutes=1), metric_defs=defs)
        publish(cw, fleet[len(full) :], old, old + timedelta(minutes=1), metric_defs=defs)
        series = n * 8
        state = State(cfg.state.path)
        clock = FakeClock(now)
        d = Daemon(cfg, aws, state, clock=clock)
        before = dict(aws.counter.calls)
        c0, w0 = time.process_time(), time.perf_counter()
        report = d.run_cycle()
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        calls = {
            k: v - before.get(k, 0) for k, v in aws.counter.calls.items() if v - before.get(k, 0)
        }
        clock.advance(timedelta(minutes=1))
        tracemalloc.start()
        d.run_cycle()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        d.close()
        state.close()
    di = calls.get("DescribeInstances", 0)
    gmd_gpu_limit = math.ceil(series / 500) + 1
    gmd_net_limit = math.ceil(n / 500) + 1
    return {
        "n": n,
        "states": dict(report.states),
        "calls": calls,
        "cpu_s": cpu,
        "wall_s": wall,
        "peak_mib": peak / 2**20,
        "checks": {
            f"GetMetricData {calls.get('GetMetricData', 0)} <= {gmd_gpu_limit} (GPU) + "
            f"{gmd_net_limit} (NetworkOut)": calls.get("GetMetricData", 0)
            <= gmd_gpu_limit + gmd_net_limit,
            f"DescribeInstances {di} <= {math.ceil(n / 1000)}": di <= math.ceil(n / 1000),
            f"client CPU {cpu * 1000 / n:.2f}s per 1,000 instances <= 1.00s": cpu * 1000 / n <= 1.0,
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100,1000,5000")
    sizes = [int(s) for s in ap.parse_args().sizes.split(",") if s]
    configure_logging("warning")
    moto = MotoProcess().start()
    try:
        for n in sizes:
            t = time.perf_counter()
            r = run_size(moto, n)
            print(f"\n== {n} instances (setup+2 cycles {time.perf_counter() - t:.1f}s wall)")
            print(f"  states: {r['states']}")
            print("  API calls: " + ", ".join(f"{k}={v}" for k, v in sorted(r["calls"].items())))  # type: ignore[attr-defined]
            print(
                f"  client CPU {r['cpu_s']:.3f}s   cycle wall {r['wall_s']:.2f}s   "
                f"peak traced memory {r['peak_mib']:.1f} MiB"
            )
            for name, ok in r["checks"].items():  # type: ignore[attr-defined]
                print(f"  [{'ok ' if ok else 'MISS'}] {name}")
    finally:
        moto.stop()


if __name__ == "__main__":
    main()
