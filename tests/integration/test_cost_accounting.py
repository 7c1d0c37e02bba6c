"""``coreburst cost report`` on a real Slurm 22.05 whose accounting is slurmdbd on MariaDB.

One lab for the module (coreburst/sandbox/slurmlab.py with coreburst/sandbox/slurmdb.py:
MariaDB and slurmdbd on 127.0.0.1, the lab's munged). Accounts ``ml`` and ``research`` are
created with ``sacctmgr``; then real jobs run through ``sbatch``: one per team on the core
(8 and 4 GPUs), and two 4-GPU jobs, one per team, sharing one burst node (``od-1``), which
the resume program launches on the EC2 emulator and the suspend program ends after
SuspendTime. The jobs last seconds, not a week: their GPU-seconds are real ones from
slurmdbd, and the dollar checks hold at any length. The guardrails daemon never runs here:
every job is one "that ran while the daemon was down", and the report finds them all in
Slurm's database.

The report's figures are checked against what the test reads itself: GPU-seconds from
``sacct --parsable2`` (another layout than the report's ``--json``) x the owned rate,
exactly to the cent per team; instance-seconds from the burst audit log (cross-checked with
the emulator's launch time) x the catalog's p5.48xlarge on-demand price, within 1 cent.

Skipped only when not root or the binaries are missing (Debian: slurmctld slurmd
slurm-client munge slurmdbd mariadb-server).
"""

from __future__ import annotations

import calendar
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from coreburst.common.catalog import load_catalog
from coreburst.sandbox import slurmdb, slurmlab
from coreburst.sandbox.slurmlab import BurstLab, start_burst_lab

pytestmark = pytest.mark.integration

RATE = Decimal("2.35")  # owned $/GPU-hour given to the report


@dataclass
class Seeded:
    lab: BurstLab
    db: slurmdb.SlurmDB
    jobs: dict[str, tuple[str, str]]  # job id -> (account, where)
    since: str
    report_dir: Path
    until: int  # the report's window ends here (UTC epoch seconds)


def _sbatch(lab: BurstLab, *args: str) -> str:
    out = lab.slurm.run("sbatch", "--parsable", "-o", "/dev/null", *args)
    return out.stdout.strip().split(";")[0]


def _sacct_done(lab: BurstLab, ids: list[str]) -> bool:
    out = lab.slurm.run(
        "sacct", "-n", "-X", "-P", "-j", ",".join(ids), "--format=JobID,State", check=False
    ).stdout
    states = dict(line.split("|", 1) for line in out.splitlines() if "|" in line)
    return all(states.get(j) == "COMPLETED" for j in ids)


@pytest.fixture(scope="module", name="seeded")
def seeded_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    why = slurmlab.missing_prerequisite() or slurmdb.missing_prerequisite()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("costlab")
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 60))
    db = slurmdb.SlurmDB(root / "db").start()
    try:
        lab = start_burst_lab(root / "lab", accounting=db)
    except BaseException:
        db.stop()
        raise
    try:
        s = lab.slurm
        s.run("sacctmgr", "-i", "add", "account", "ml,research")
        s.run("sacctmgr", "-i", "add", "user", "root", "account=ml,research", "defaultaccount=ml")
        jobs = {
            _sbatch(lab, "-A", "ml", "-p", "core", "-w", "core1", "--gres=gpu:8",
                    "--wrap", "sleep 3"): ("ml", "core"),
            _sbatch(lab, "-A", "research", "-p", "core", "-w", "core2", "--gres=gpu:4",
                    "--wrap", "sleep 2"): ("research", "core"),
            _sbatch(lab, "-A", "ml", "-p", "burst", "-w", "od-1", "--gres=gpu:4",
                    "--wrap", "sleep 4"): ("ml", "burst"),
            _sbatch(lab, "-A", "research", "-p", "burst", "-w", "od-1", "--gres=gpu:4",
                    "--wrap", "sleep 2"): ("research", "burst"),
        }  # fmt: skip
        ids = list(jobs)
        lab.wait("jobs finished", lambda: all(s.job_state(j)[0] == "GONE" for j in ids), 120)
        lab.wait("od-1 suspended (instance terminated)", lambda: not lab.instances("od-1"), 60)
        audit = s.lab / "log" / "burst-audit.jsonl"
        lab.wait("suspend audited", lambda: '"event": "suspend"' in audit.read_text(), 30)
        lab.wait("jobs in slurmdbd", lambda: _sacct_done(lab, ids), 60)
        until = int(time.time())
        yield Seeded(lab, db, jobs, since, s.lab, until)
    finally:
        lab.stop()
        db.stop()


def _report(seeded: Seeded, *args: str) -> subprocess.CompletedProcess[str]:
    return seeded.lab.slurm.run(
        sys.executable,
        "-m",
        "coreburst",
        "cost",
        "report",
        "--since",
        seeded.since,
        "--until",
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seeded.until)),
        "--stack",
        "lab",
        "--stack-dir",
        str(seeded.report_dir),
        "--gpu-hour-usd",
        str(RATE),
        *args,
        check=False,
        timeout=120,
        env={"PYTHONPATH": str(slurmlab.REPO)},
    )


def _parsable_gpu_seconds(seeded: Seeded) -> dict[str, dict[str, int]]:
    """account -> {"core"|"burst": GPU-seconds}, from sacct --parsable2 (ElapsedRaw x gres/gpu)."""
    out = seeded.lab.slurm.run(
        "sacct", "-n", "-X", "-P", "-a", "-j", ",".join(seeded.jobs),
        "--format=JobID,Account,ElapsedRaw,AllocTRES,NodeList",
    ).stdout  # fmt: skip
    per: dict[str, dict[str, int]] = {}
    for line in out.splitlines():
        job, account, elapsed, tres, nodes = line.split("|")
        gpus = int(dict(p.split("=") for p in tres.split(","))["gres/gpu"])
        where = "burst" if nodes.startswith("od-") else "core"
        assert (account, where) == seeded.jobs[job]
        per.setdefault(account, {"core": 0, "burst": 0})[where] += gpus * int(elapsed)
    return per


def _idle_core_gpu_s(seeded: Seeded, core_job_gpu_s: int) -> int:
    """The test's own figure: sacctmgr's events read as sacctmgr(1) prints them by default
    (ISO times), no job overlapping an out-of-service span (none is drained while busy)."""
    out = seeded.lab.slurm.run(
        "sacctmgr", "-P", "-n", "list", "event", f"start={seeded.since}",
        "format=NodeName,Start,End,Event", env={"TZ": "UTC"},
    ).stdout  # fmt: skip
    epoch = lambda s: calendar.timegm(time.strptime(s, "%Y-%m-%dT%H:%M:%S"))  # noqa: E731
    since = epoch(seeded.since)
    registered = min(epoch(line.split("|")[1]) for line in out.splitlines() if "|Cluster" in line)
    lo = max(since, registered)
    down = 0
    for line in out.splitlines():
        node, start, end, kind = line.split("|")
        if kind == "Node" and node in ("core1", "core2"):
            stop = seeded.until if end == "Unknown" else epoch(end)
            down += 8 * max(0, min(stop, seeded.until) - max(epoch(start), lo))
    return 16 * (seeded.until - lo) - down - core_job_gpu_s


def test_report_reconciles_with_slurm_and_the_catalog(seeded: Seeded) -> None:
    done = _report(seeded, "--format", "json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["jobs_source"] == "sacct --json"
    rows = {r["group"]: r for r in doc["rows"]}
    assert set(rows) == {"ml", "research"}
    gpu_s = _parsable_gpu_seconds(seeded)

    # core: each team's dollars are its GPU-hours x the owned rate, to the cent
    for team, r in rows.items():
        exact = Decimal(gpu_s[team]["core"]) * RATE / 3600
        assert Decimal(str(r["core_usd"])) == exact.quantize(Decimal("0.01")), team
        assert r["jobs"] == 2

    # burst: instance-seconds of od-1 from the audit log x the catalog's price
    audit = seeded.report_dir / "log" / "burst-audit.jsonl"
    events = [json.loads(line) for line in audit.read_text().splitlines()]
    launched = [e for e in events if e["event"] == "resume.launched" and e["nodes"] == "od-1"]
    ended = [e for e in events if e["event"] == "suspend" and e["nodes"] == "od-1"]
    assert len(launched) == 1 and len(ended) == 1, events
    inst_s = int(ended[0]["ts"]) - int(launched[0]["ts"])
    # the audit's launch agrees with EC2's (the emulator's LaunchTime, to the second)
    resp = seeded.lab.ec2.describe_instances(InstanceIds=launched[0]["instances"])
    launch_time = resp["Reservations"][0]["Instances"][0]["LaunchTime"].timestamp()
    assert abs(launch_time - launched[0]["ts"]) < 5
    price = Decimal(repr(load_catalog().on_demand_price("p5.48xlarge", "us-east-1")))
    instance_usd = Decimal(inst_s) * price / 3600
    burst_total = Decimal(str(doc["total"]["burst_usd"]))
    assert abs(burst_total - instance_usd) <= Decimal("0.01")
    # each team's share: its GPU-seconds on the node x price / 8 GPUs, within 1 cent
    for team, r in rows.items():
        share = Decimal(gpu_s[team]["burst"]) * price / 8 / 3600
        assert abs(Decimal(str(r["burst_usd"])) - share) <= Decimal("0.01"), team
    idle_gpu_s = inst_s * 8 - sum(v["burst"] for v in gpu_s.values())
    assert idle_gpu_s > 0  # the node booted before and idled after its jobs
    assert doc["idle"]["burst_gpu_h"] == round(idle_gpu_s / 3600, 3)

    # idle core: 2 nodes x 8 GPUs (scontrol) x the time slurmdbd has the cluster in the
    # window, less the time the test finds them out of service, less the core jobs' GPU-seconds
    idle_core = doc["idle_core"]
    assert idle_core["unknown_nodes"] == {} and set(idle_core["nodes"]) == {"core1", "core2"}
    expected = _idle_core_gpu_s(seeded, sum(v["core"] for v in gpu_s.values()))
    assert idle_core["core_gpu_h"] == round(expected / 3600, 3)
    exact = Decimal(expected) * RATE / 3600
    assert Decimal(str(idle_core["core_usd"])) == exact.quantize(Decimal("0.01"))

    # rows add up to the totals, to the cent, in every money column
    for col in ("core_usd", "burst_usd", "total_usd"):
        cents = sum(round(r[col] * 100) for r in [*doc["rows"], idle_core, doc["idle"]])
        assert cents == round(doc["total"][col] * 100), col


def test_every_job_by_job_and_csv_and_plot(seeded: Seeded) -> None:
    """All four job runs (none seen by any daemon) are rows of --by job; the CSV's rows sum to
    its total; the PNG is written."""
    plot = seeded.report_dir / "cost.png"
    done = _report(seeded, "--by", "job", "--format", "csv", "--plot", str(plot))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = lines[0].split(",")
    assert header[0] == "job"
    body = {line.split(",")[0]: line.split(",") for line in lines[1:]}
    assert set(seeded.jobs) <= set(body)
    total = body.pop("total")
    col = header.index("total_usd")
    assert sum(Fraction(v[col]) for v in body.values()) == Fraction(total[col])
    # no --prometheus: every job's GPU active is n/a, never 0
    active = header.index("gpu_active")
    assert {body[j][active] for j in seeded.jobs} == {"n/a"}
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
