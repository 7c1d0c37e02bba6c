"""Burst resume: submit → running on a burst node, and the resume program at 64 / 500 nodes.

Two parts, both against local stand-ins (a moto server for EC2); the figures are this machine's,
not EC2's or a real boot's.

1. ``lab``: a real Slurm (coreburst/sandbox/slurmlab.py: munged, slurmctld, slurmd per node; a
launched
   instance "boots" 2.5 s later by starting its slurmd). The core is filled, then a job
   ``-p core,burst`` is submitted ``--runs`` times (each after the node has suspended again).
   Split per run, from slurmctld's log (its ``power_save: pid N waking nodes ...`` line as it
   starts the ResumeProgram), the power programs' audit log and the boot watcher: submit →
   ResumeProgram started (Slurm's scheduling and power-save poll), the program's start-up
   (Python, imports, stack) and its own EC2 work (request → launched), launched → slurmd
   started (the emulated boot), and slurmd started → job RUNNING (Slurm's poll).
2. ``resume N``: the resume program for N nodes of one on-demand pool, twice per size:
   in-process (``coreburst.burst.power.Power``) with every EC2 call counted through botocore's
   ``before-call`` event hook, and as the real process (``python -m coreburst.burst.cli resume``)
   for
   its wall time including interpreter and import start-up. The target: CreateFleet calls
   <= ceil(N / 500) per pool; DescribeInstances, CreateTags (one per instance, 16 in
   parallel) are printed as they are. ``nodeAddress: registration`` (no scontrol call).
3. ``scale N`` (default 1,000): the resume program in-process for N nodes with EC2 behind
   coreburst/sandbox/ec2faults.py: every action throttled at the token-bucket sizes and refill
   rates the EC2 Developer Guide documents ("Request throttling for the Amazon EC2 API";
   CreateTags 100 + 10/s), each instance unknown for ``--hide-s`` seconds after launch and
   described without its private IP ``--no-ip-reads`` times ("Eventual consistency in the
   Amazon EC2 API"). ``nodeAddress: private-ip``; scontrol is recorded, not run (no
   slurmctld here). Prints, per operation, the client's API calls, the HTTP requests EC2 saw,
   how many were throttled (503 RequestLimitExceeded) or answered as not yet visible; the wall
   time; and how many nodes got their address (checked against moto's own view).

$ python benchmarks/burst_resume.py                      # lab (if root + Slurm), 64, 500, scale
$ python benchmarks/burst_resume.py --sizes 64,500,1000 --runs 3
$ python benchmarks/burst_resume.py --no-lab --sizes '' --scale 1000
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from coreburst.burst.config import load_burst_stack  # noqa: E402
from coreburst.burst.ec2io import client_config  # noqa: E402
from coreburst.burst.hostlist import expand  # noqa: E402
from coreburst.burst.launch import FLEET_BATCH  # noqa: E402
from coreburst.burst.power import Audit, Power  # noqa: E402
from coreburst.common.names import STACK_TAG_KEY  # noqa: E402
from coreburst.sandbox.ec2faults import Ec2Faults  # noqa: E402
from coreburst.sandbox.emulator import AMI, MotoProcess, fake_session  # noqa: E402
from coreburst.sandbox.slurmlab import BurstLab, missing_prerequisite, start_burst_lab  # noqa: E402
from guardrails.adapters.slurm import Scontrol  # noqa: E402

# Made up for this benchmark; keys follow infra/config.py (StackConfig) and
# coreburst/burst/config.py.
BENCH_STACK = """\
config:
  aws:region: us-east-1
  coreburst:availabilityZone: us-east-1a
  coreburst:tags: {{team: ml, project: bench, costCenter: cc-1, environment: dev}}
  coreburst:budget: {{monthlyUsd: 100000}}
  coreburst:clusters:
    - {{name: od, instanceType: p5.48xlarge, nodes: {nodes}, capacity: {{model: on-demand}}}}
  coreburst:burst:
    coreNodes: core[1-2]
    nodeAddress: registration
    logFile: {dir}/burst-power.log
    auditLog: {dir}/burst-audit.jsonl
"""


# -- part 1: the lab ------------------------------------------------------------------------
def _audit(lab: BurstLab) -> list[dict[str, Any]]:
    path = lab.slurm.lab / "log" / "burst-audit.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


# slurmctld 22.05 (power_save.c) logs "power_save: pid N waking nodes X" as it starts the
# ResumeProgram, with DebugFlags=Power at SlurmctldDebug=verbose (the lab's slurm.conf);
# timestamps are local ISO 8601 with milliseconds (LogTimeFormat's default, iso8601_ms).
_WAKING = re.compile(r"^\[(\S+)\] (?:POWER: )?power_save: pid \d+ waking nodes (\S+)$")


def waking_times(log_text: str, node: str) -> list[float]:
    """Epoch seconds at which slurmctld started the ResumeProgram for ``node``.

    >>> line = "[2026-12-03T15:47:44.619] POWER: power_save: pid 31249 waking nodes od-[1-2]"
    >>> len(waking_times(line, "od-2"))
    1
    """
    out = []
    for line in log_text.splitlines():
        m = _WAKING.match(line)
        if m and node in expand(m.group(2)):
            out.append(datetime.fromisoformat(m.group(1)).timestamp())
    return out


def _one_run(lab: BurstLab, n: int) -> dict[str, float]:
    slurm = lab.slurm
    before = len(_audit(lab))
    t_submit = time.time()
    job = slurm.run(
        "sbatch", "--parsable", "-o", "/dev/null", "-p", "core,burst", "--exclusive", "-N1",
        "-t", "10", "-J", f"bench-{n}", "--wrap", "sleep 1",
    ).stdout.strip().split(";")[0]  # fmt: skip
    lab.wait("job running", lambda: slurm.job_state(job)[0] == "RUNNING", 90, every=0.1)
    t_running = time.time()
    node = slurm.job_state(job)[1]
    new = _audit(lab)[before:]
    req = next(e for e in new if e["event"] == "resume.request")
    launched = next(e for e in new if e["event"] == "resume.launched")
    (iid,) = launched["instances"]
    boot = lab.watcher.boot_times[iid]
    log = (slurm.lab / "log" / "slurmctld.log").read_text(errors="replace")
    woke = [t for t in waking_times(log, node) if t <= req["ts"]]
    wake = woke[-1] if woke else float("nan")
    lab.wait("job done", lambda: slurm.job_state(job)[0] in ("COMPLETED", "GONE"), 30)
    # Suspended again (SuspendTime + SuspendTimeout), so the next run starts from idle~.
    lab.wait(
        f"{node} powered down",
        lambda: (
            "POWERED_DOWN" in slurm.node_state(node)
            and "POWERING_DOWN" not in slurm.node_state(node)
        ),
        60,
    )
    return {
        "submit→ResumeProgram (Slurm)": wake - t_submit,
        "program start-up (Python)": req["ts"] - wake,
        "program EC2 work": launched["ts"] - req["ts"],
        "launched→slurmd (boot)": boot - launched["ts"],
        "slurmd→RUNNING (Slurm poll)": t_running - boot,
        "submit→RUNNING": t_running - t_submit,
    }


def bench_lab(runs: int) -> None:
    why = missing_prerequisite()
    if why:
        print(f"lab: skipped ({why})")
        return
    with tempfile.TemporaryDirectory(prefix="coreburst-bench-lab-") as tmp:
        lab = start_burst_lab(Path(tmp), suspend_time=2, resume_timeout=40, suspend_timeout=2)
        try:
            slurm = lab.slurm
            fillers = [
                slurm.run(
                    "sbatch", "--parsable", "-o", "/dev/null", "-p", "core", "--exclusive",
                    "-N1", "--wrap", "sleep 900",
                ).stdout.strip() for _ in range(2)
            ]  # fmt: skip
            lab.wait(
                "core full", lambda: all(slurm.job_state(j)[0] == "RUNNING" for j in fillers), 20
            )
            rows = [_one_run(lab, i) for i in range(runs)]
        finally:
            lab.slurm.run("scancel", "--user=root", check=False)
            lab.stop()
    print(f"lab: submit → running on a burst node, {runs} run(s), seconds")
    for key in rows[0]:
        vals = [r[key] for r in rows]
        print(f"  {key:<34} " + "  ".join(f"{v:6.2f}" for v in vals))
    slurm_keys = ("submit→ResumeProgram (Slurm)", "slurmd→RUNNING (Slurm poll)")
    prog_keys = ("program start-up (Python)", "program EC2 work")
    poll = sum(r[k] for r in rows for k in slurm_keys)
    prog = sum(r[k] for r in rows for k in prog_keys)
    total = sum(r["submit→RUNNING"] for r in rows)
    print(
        f"  share of submit→RUNNING: Slurm (scheduling + polls) {poll / total:.0%}, "
        f"power programs (start-up + EC2 work) {prog / total:.0%}, "
        f"emulated boot {1 - (poll + prog) / total:.0%}"
    )


# -- part 2: the resume program at N nodes ----------------------------------------------
def _templates(ec2: Any) -> None:
    ec2.create_launch_template(
        LaunchTemplateName="od-lt-a1b2c3d",
        LaunchTemplateData={"ImageId": AMI, "InstanceType": "p5.48xlarge"},
        TagSpecifications=[
            {
                "ResourceType": "launch-template",
                "Tags": [{"Key": STACK_TAG_KEY, "Value": "bench"}],
            }
        ],
    )


def bench_resume(moto: MotoProcess, n: int, work: Path) -> dict[str, Any]:
    d = work / f"n{n}"
    d.mkdir()
    (d / "Pulumi.bench.yaml").write_text(BENCH_STACK.format(nodes=n, dir=d))
    stack = load_burst_stack("bench", d)
    hostlist = f"od-[1-{n}]"

    moto.reset()
    ec2 = fake_session().client("ec2", endpoint_url=moto.url)
    _templates(ec2)
    calls: Counter[str] = Counter()

    def count(model: Any, **_: Any) -> None:
        calls[model.name] += 1

    ec2.meta.events.register("before-call.ec2", count)
    power = Power(stack, ec2, Scontrol(), Audit(d / "audit-inprocess.jsonl"))
    t0 = time.perf_counter()
    result = power.resume(hostlist, None)
    in_process = time.perf_counter() - t0
    assert len(result.launched) == n and not result.failed, result.failed

    moto.reset()
    _templates(fake_session().client("ec2", endpoint_url=moto.url))
    # The in-process run's claims name instances the reset removed; a fresh EC2, fresh claims.
    power.claims.close()
    stack.settings.audit_log.with_name("burst-claims.sqlite").unlink()
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": moto.url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "PYTHONPATH": str(REPO),
    }
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "coreburst.burst.cli", "resume", hostlist, "--stack", "bench",
         "--stack-dir", str(d)],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    process = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"resume {hostlist} exited {proc.returncode}: {proc.stderr[-500:]}")
    audit = [json.loads(x) for x in (d / "burst-audit.jsonl").read_text().splitlines()]
    launched = next(e for e in audit if e["event"] == "resume.launched")
    return {
        "nodes": n,
        "in_process_s": in_process,
        "process_s": process,
        "process_instances": len(launched["instances"]),
        "calls": dict(calls),
        "fleet_target": math.ceil(n / FLEET_BATCH),
    }


# -- part 3: 1,000 nodes under throttling and delayed visibility --------------------------
ADDRESS_TARGET_S = 20.0


class RecordingSlurm:
    """Made up for this benchmark (no slurmctld here): records scontrol argv, and squeue
    (``--json``) lists no job; the integration suite runs these commands against a real
    slurmctld."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.at: list[float] = []  # perf_counter of each call

    def scontrol(self, *args: str) -> str:
        self.calls.append(args)
        self.at.append(time.perf_counter())
        return ""

    def last_address_at(self) -> float | None:
        told = [
            t
            for c, t in zip(self.calls, self.at, strict=True)
            if len(c) > 2 and c[2].startswith("nodeaddr=")
        ]
        return max(told, default=None)

    def squeue(self, *args: str) -> str:
        return '{"jobs": []}'

    def addresses(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for c in self.calls:
            if len(c) > 2 and c[2].startswith("nodeaddr="):
                names = c[1].removeprefix("nodename=").split(",")
                out.update(zip(names, c[2].removeprefix("nodeaddr=").split(","), strict=True))
        return out


def bench_scale(moto: MotoProcess, n: int, work: Path, hide_s: float, no_ip_reads: int) -> bool:
    d = work / f"scale{n}"
    d.mkdir()
    stack_yaml = BENCH_STACK.format(nodes=n, dir=d).replace(
        "nodeAddress: registration", "nodeAddress: private-ip"
    )
    (d / "Pulumi.bench.yaml").write_text(stack_yaml)
    stack = load_burst_stack("bench", d)
    moto.reset()
    _templates(fake_session().client("ec2", endpoint_url=moto.url))
    faults = Ec2Faults(moto.url, hide_s=hide_s, no_ip_reads=no_ip_reads).start()
    try:
        ec2 = fake_session().client("ec2", endpoint_url=faults.url, config=client_config())
        # The node tags' own client (coreburst/burst/cli.py makes one the same way).
        tagger = fake_session().client("ec2", endpoint_url=faults.url, config=client_config())
        api: Counter[str] = Counter()
        span: dict[str, list[float]] = {}  # operation -> [first call's start, last one's end]
        busy: Counter[str] = Counter()  # operation -> seconds in calls (threads overlap)
        failures: Counter[str] = Counter()  # calls that raised, by operation and error
        started = threading.local()

        def count(model: Any, **_: Any) -> None:
            api[model.name] += 1
            started.t = time.perf_counter()
            span.setdefault(model.name, [started.t, 0.0])

        def done(model: Any = None, event_name: str = "", **kw: Any) -> None:
            # after-call-error (the call raised, e.g. a connection error) names no model.
            name = model.name if model is not None else event_name.rsplit(".", 1)[-1]
            if "exception" in kw:
                failures[f"{name}: {type(kw['exception']).__name__}"] += 1
            now = time.perf_counter()
            span[name][1] = now
            busy[name] += now - started.t

        for client in (ec2, tagger):
            client.meta.events.register("before-call.ec2", count)
            client.meta.events.register("after-call.ec2", done)
            client.meta.events.register("after-call-error.ec2", done)
        slurm = RecordingSlurm()
        power = Power(stack, ec2, slurm, Audit(d / "audit.jsonl"), tag_client=lambda: tagger)
        t0 = time.perf_counter()
        result = power.resume(f"od-[1-{n}]", None)
        wall = time.perf_counter() - t0
    finally:
        faults.stop()
    truth_resp = fake_session().client("ec2", endpoint_url=moto.url).describe_instances()
    truth = {i["InstanceId"]: i for r in truth_resp["Reservations"] for i in r["Instances"]}
    told = slurm.addresses()
    right = sum(
        1
        for node, iid in result.launched.items()
        if told.get(node) == truth[iid].get("PrivateIpAddress")
    )
    tagged = sum(
        1
        for node, iid in result.launched.items()
        if {t["Key"]: t["Value"] for t in truth[iid].get("Tags", [])}.get(power.node_tag) == node
    )
    fleet_target = math.ceil(n / FLEET_BATCH)
    print(
        f"scale: {n} nodes, one on-demand pool, EC2 on moto server behind ec2faults "
        f"(documented buckets; unknown for {hide_s:g} s after launch; "
        f"no private IP in the first {no_ip_reads} descriptions)"
    )
    print(
        f"  {'operation':<24} {'API calls':>9} {'HTTP requests':>13} {'throttled':>9} "
        f"{'not visible':>11}  {'from s':>6}  {'to s':>6}  {'s/call':>6}"
    )
    for op in sorted(set(api) | set(faults.calls), key=lambda o: span.get(o, [0.0])[0]):
        first, last = span.get(op, [t0, t0])
        print(
            f"  {op:<24} {api[op]:>9} {faults.calls[op]:>13} {faults.throttled[op]:>9} "
            f"{faults.hidden[op]:>11}  {first - t0:>6.1f}  {last - t0:>6.1f}  "
            f"{busy[op] / max(1, api[op]):>6.2f}"
        )
    fleet = api["CreateFleet"]
    # Issue 33 item 5: every address in Slurm within 20 s of CreateFleet's (last) answer.
    last_told = slurm.last_address_at()
    since_fleet = (last_told - span["CreateFleet"][1]) if last_told is not None else math.inf
    ok = (
        fleet <= fleet_target
        and len(result.launched) == n
        and right == n
        and tagged == n
        and not result.failed
        and since_fleet <= ADDRESS_TARGET_S
    )
    print(
        f"  wall time {wall:.1f} s; CreateFleet {fleet} {'✓' if fleet <= fleet_target else '✗'} "
        f"(≤{fleet_target}); launched {len(result.launched)}/{n}; node tag set {tagged}/{n}; "
        f"address set (= moto's PrivateIpAddress) {right}/{n}; failed {len(result.failed)}"
    )
    if failures:
        print("  calls that raised: " + ", ".join(f"{k} {v}" for k, v in sorted(failures.items())))
    verdict = "meets" if since_fleet <= ADDRESS_TARGET_S else "MISSES"
    print(
        f"  every address in Slurm {since_fleet:.1f} s after CreateFleet's answer "
        f"({verdict} <= {ADDRESS_TARGET_S:g} s); node tags done "
        f"{span.get('CreateTags', [0.0, t0])[1] - span['CreateFleet'][1]:.1f} s after it"
    )
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--sizes", default="64,500", help="node counts for the resume program")
    ap.add_argument("--runs", type=int, default=2, help="lab runs (submit → running)")
    ap.add_argument("--no-lab", action="store_true", help="skip the real-Slurm part")
    ap.add_argument(
        "--scale", type=int, default=1000, help="nodes under throttling and delay (0: skip)"
    )
    ap.add_argument("--hide-s", type=float, default=5.0, help="seconds a new instance is unknown")
    ap.add_argument(
        "--no-ip-reads", type=int, default=2, help="descriptions of a new instance without its IP"
    )
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",") if x]
    if not args.no_lab:
        bench_lab(args.runs)
    moto = MotoProcess().start()
    ok = True
    try:
        with tempfile.TemporaryDirectory(prefix="coreburst-bench-resume-") as tmp:
            if sizes:
                print("resume program: one on-demand pool, EC2 on moto server")
                print(
                    f"  {'nodes':>5}  {'in-process s':>12}  {'process s':>9}  "
                    f"{'CreateFleet':>11}  {'DescribeInstances':>17}  {'CreateTags':>10}  "
                    "other calls"
                )
            for n in sizes:
                r = bench_resume(moto, n, Path(tmp))
                c = dict(r["calls"])
                fleet = c.pop("CreateFleet", 0)
                desc = c.pop("DescribeInstances", 0)
                tags = c.pop("CreateTags", 0)
                good = fleet <= r["fleet_target"] and r["process_instances"] == n
                ok &= good
                print(
                    f"  {n:>5}  {r['in_process_s']:>12.2f}  {r['process_s']:>9.2f}  "
                    f"{fleet:>7} {'✓' if good else '✗'} (≤{r['fleet_target']})"
                    f"  {desc:>17}  {tags:>10}  {c or '-'}"
                )
            if args.scale:
                ok &= bench_scale(moto, args.scale, Path(tmp), args.hide_s, args.no_ip_reads)
    finally:
        moto.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
