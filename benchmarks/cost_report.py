"""``coreburst cost report`` over a 30-day window of 100,000 and 1,000,000 job runs.

The report runs as it does for a user (``python -m coreburst cost report``, default path:
``sacct --json`` read in time slices), against stand-ins on PATH:

- ``sacct``: :mod:`coreburst.sandbox.sacctgen` answering each ``--starttime/--endtime`` as
  slurmdbd selects (eligible before the end, ended at or after the start or not at all)
  from **generated** records in a **recorded** layout: every record is a job of
  tests/fixtures/slurm/sacct-22.05-recorded.json (Slurm 22.05.8, dbv0.0.38) with its id,
  user, account, nodes, GPUs, state and times replaced; ``--layout 23.11`` uses
  sacct-23.11-v0.0.40.json instead (made up from SchedMD's data_parser v0.0.40; no 24.11 or
  26.05 ``sacct --json`` is recorded in tests/fixtures/slurm). Runs last 1 min to 36 h, take
  1-8 GPUs on core nodes (``core1..``, 8 GPUs each) and a few on the lab stack's od-1/od-2,
  whose instances the generated audit log launches and ends around them.
- ``scontrol``: the recorded core1 line of tests/unit/cost/scontrol-show-node-22.05-recorded.txt
  once per core node (renamed); ``sacctmgr``: the cluster's registration a day before.

Printed per size: wall seconds, CPU seconds of the report process (and of the sacct
stand-in, which does slurmdbd's part), the report's peak RSS, how many sacct calls, and
the totals. ``--check`` also runs the report on one whole-window ``sacct --json`` saved to a
file (the read before time slices) and says whether the totals agree to the cent.

    $ python benchmarks/cost_report.py --sizes 100000,1000000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from coreburst.cost.accounting import slurm_time  # noqa: E402
from coreburst.sandbox.sacctgen import FORMAT, Generated, answer  # noqa: E402
from coreburst.sandbox.slurmlab import STACK_YAML  # noqa: E402

FIXTURES = {
    "22.05": REPO / "tests" / "fixtures" / "slurm" / "sacct-22.05-recorded.json",
    "23.11": REPO / "tests" / "fixtures" / "slurm" / "sacct-23.11-v0.0.40.json",
}
NODES = REPO / "tests" / "unit" / "cost" / "scontrol-show-node-22.05-recorded.txt"
DAYS = 30
UNTIL = 1796342400  # 2026-12-04 00:00 UTC: the window's end, fixed so the records can be kept

# Runs the report in this process and prints its own peak RSS and CPU, and its children's
# CPU (the sacct stand-in), on the last line of stderr.
WRAPPER = """\
import os, resource, runpy, sys, time
sys.argv = ["coreburst"] + sys.argv[1:]
if os.environ.get("SACCTGEN_NOW"):  # --check: both reads at one clock (running jobs' elapsed)
    time.time = lambda: float(os.environ["SACCTGEN_NOW"])
try:
    runpy.run_module("coreburst", run_name="__main__")
except SystemExit as exc:
    code = exc.code
else:
    code = 0
me = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
# VmHWM: this process's own peak since its exec (ru_maxrss keeps the forking parent's)
hwm = next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM:"))
sys.stderr.write(f"\\nRUSAGE {hwm} {me.ru_utime + me.ru_stime} "
                 f"{kids.ru_utime + kids.ru_stime}\\n")
sys.exit(code)
"""


def records(layout: str, n: int, cache: Path) -> Generated:
    root = cache / f"{layout}-{n}"
    meta = root / "meta.json"
    kept = json.loads(meta.read_text()) if meta.exists() else {}
    if (kept.get("n"), kept.get("format")) == (n, FORMAT):
        return Generated(root)
    t = time.monotonic()
    # in a process of its own: the generator's memory is not this one's (nor the report's)
    subprocess.run(
        [sys.executable, "-m", "coreburst.sandbox.sacctgen", "generate", str(root),
         str(FIXTURES[layout]), str(n), str(DAYS), str(UNTIL)],
        check=True, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    gen = Generated(root)
    print(f"  generated {n:,} records ({layout} layout) in {time.monotonic() - t:.0f} s: {root}")
    return gen


def stand_ins(where: Path, gen: Generated) -> dict[str, str]:
    meta = gen.meta
    bin_dir = where / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    core1 = next(x for x in NODES.read_text().splitlines() if x.startswith("NodeName=core1 "))
    nodes = where / "nodes.txt"
    nodes.write_text(
        "".join(
            core1.replace("NodeName=core1 ", f"NodeName=core{i} ") + "\n"
            for i in range(1, meta["core_nodes"] + 1)
        )
    )
    events = where / "events.txt"
    events.write_text(
        f"burstlab||{meta['since'] - 86400}|Unknown||Cluster|Cluster Registered TRES\n"
    )
    scripts = {
        "sacct": f'exec "{sys.executable}" -m coreburst.sandbox.sacctgen "{gen.root}" "$@"\n',
        "scontrol": '[ "$1" = --json ] && { echo "scontrol: unrecognized option \'--json\'" >&2;'
        f' exit 1; }}\ncat "{nodes}"\n',
        "sacctmgr": f'cat "{events}"\n',
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    (where / "Pulumi.lab.yaml").write_text(
        STACK_YAML.format(
            lab=where, burst_port_base=30000, suspend_time=4, resume_timeout=40, suspend_timeout=4
        )
    )
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
        "COLUMNS": "200",
    }


def report(where: Path, gen: Generated, env: dict[str, str], *extra: str) -> dict[str, object]:
    meta = gen.meta
    iso = lambda t: datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S")  # noqa: E731
    args = [
        sys.executable, "-c", WRAPPER, "cost", "report",
        "--since", iso(meta["since"]), "--until", iso(meta["until"]),
        "--stack", "lab", "--stack-dir", str(where), "--gpu-hour-usd", "2.35",
        "--audit-log", meta["audit_log"], "--format", "json", *extra,
    ]  # fmt: skip
    t = time.monotonic()
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - t
    if done.returncode != 0:
        raise SystemExit(f"the report failed: {done.stderr.strip().splitlines()[-2:]}")
    rss_kb, cpu, kids = done.stderr.strip().splitlines()[-1].split()[1:]
    doc = json.loads(done.stdout)
    return {"wall": wall, "cpu": float(cpu), "sacct_cpu": float(kids), "rss_mb": int(rss_kb) / 1024,
            "doc": doc}  # fmt: skip


def totals(doc: dict) -> str:  # type: ignore[type-arg]
    t = doc["total"]
    idle, idle_core = doc["idle"]["burst_usd"], doc["idle_core"]["core_usd"]
    return (
        f"core ${t['core_usd']:,.2f} + burst ${t['burst_usd']:,.2f} = ${t['total_usd']:,.2f} "
        f"({len(doc['rows'])} teams, {t['jobs']:,} jobs; idle core ${idle_core:,.2f}, "
        f"idle burst {'unknown' if idle is None else f'${idle:,.2f}'})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--layout", choices=sorted(FIXTURES), default="22.05")
    ap.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / "coreburst-bench-cost"
    )
    ap.add_argument("--check", action="store_true", help="compare with one whole-window read")
    args = ap.parse_args()
    print(f"cost report, {DAYS}-day window, sacct --json ({args.layout} layout), "
          f"{os.cpu_count()} CPUs")  # fmt: skip
    for n in (int(s) for s in args.sizes.split(",")):
        gen = records(args.layout, n, args.cache)
        with tempfile.TemporaryDirectory() as tmp:
            where = Path(tmp)
            env = stand_ins(where, gen)
            r = report(where, gen, env)
            print(
                f"{n:>9,} job runs: wall {r['wall']:.1f} s, CPU {r['cpu']:.1f} s (sacct stand-in "
                f"{r['sacct_cpu']:.1f} s), peak RSS {r['rss_mb']:.0f} MB"
            )
            print(f"           totals: {totals(r['doc'])}")  # type: ignore[arg-type]
            if args.check:
                # one clock for both reads, the report's and sacct's, so that a running job's
                # elapsed (and so its start) is the same in both
                meta, fixed = gen.meta, int(time.time())
                env = {**env, "SACCTGEN_NOW": str(fixed)}
                r = report(where, gen, env)
                whole = where / "whole.json"
                with whole.open("wb") as f:
                    window = [f"--starttime={slurm_time(meta['since'])}",
                              f"--endtime={slurm_time(meta['until'])}"]  # fmt: skip
                    answer(gen.root, ["--json", *window], f, now=fixed)
                w = report(where, gen, env, "--sacct-json", str(whole))
                same = {k: v for k, v in r["doc"].items() if k != "jobs_source"} == {  # type: ignore[union-attr]
                    k: v
                    for k, v in w["doc"].items()
                    if k != "jobs_source"  # type: ignore[union-attr]
                }
                print(
                    f"           one whole-window read: wall {w['wall']:.1f} s, peak RSS "
                    f"{w['rss_mb']:.0f} MB; same report: {'yes' if same else 'NO'}"
                )


if __name__ == "__main__":
    main()
