"""Stand-ins for Slurm's ``scontrol`` and ``squeue`` (no Slurm here; the integration suite
runs the same commands against a real slurmctld), one line of ``scontrol -o show nodes`` in the
recorded format, and ``squeue --json`` documents made from the real recordings of
tests/fixtures/slurm/ (squeue-jobs-<release>-recorded.json: README.md there says how)."""

from __future__ import annotations

import copy
import json
import stat
import sys
from functools import cache
from pathlib import Path
from typing import Any

SLURM_FIXTURES = Path(__file__).parents[1] / "fixtures" / "slurm"
# The releases whose ``squeue --json --states=all`` of the same three jobs is recorded.
RELEASES = ("22.05", "24.11", "26.05")
_KEEP: Any = object()


@cache
def _recorded(release: str) -> str:
    return (SLURM_FIXTURES / f"squeue-jobs-{release}-recorded.json").read_text()


def recorded_squeue(release: str) -> dict[str, Any]:
    """The release's recorded ``squeue --json --states=all`` document (a fresh copy)."""
    doc: dict[str, Any] = json.loads(_recorded(release))
    return doc


def squeue_job(
    job: str | int,
    *,
    release: str = "22.05",
    like: int = 2,
    admin_comment: str | None = _KEEP,
    comment: str = _KEEP,
    minutes: int | None = _KEEP,
    user: str = _KEEP,
    account: str = _KEEP,
) -> dict[str, Any]:
    """Job ``like`` of the release's recording (a real job object: 2 has no AdminComment and a
    90-minute limit) as job ``job``, the fields given replaced as that release prints them
    (``time_limit``: minutes or null on 22.05, ``{"set", "infinite", "number"}`` later).
    ``admin_comment=None`` leaves the key out."""
    (j,) = [x for x in recorded_squeue(release)["jobs"] if x["job_id"] == like]
    j = copy.deepcopy(j)
    j["job_id"] = int(job)
    if admin_comment is None:
        del j["admin_comment"]
    elif admin_comment is not _KEEP:
        j["admin_comment"] = admin_comment
    for key, value in (("comment", comment), ("user_name", user), ("account", account)):
        if value is not _KEEP:
            j[key] = value
    if minutes is not _KEEP:
        j["time_limit"] = (
            minutes
            if release == "22.05"
            else {"set": minutes is not None, "infinite": minutes is None, "number": minutes or 0}
        )
    return j


# What real slurmctlds listed for jobs they had just requeued, per release and step
# (tests/helpers/record_requeued_jobs.py says what each step is; README.md there).
REQUEUE_STEPS = ("requeued", "later", "lifted", "node-down")


def requeued_squeue(release: str, step: str) -> dict[str, Any]:
    """The recorded ``squeue --json --states=all`` of ``step`` (a fresh copy)."""
    path = SLURM_FIXTURES / f"squeue-requeued-{release}-{step}-recorded.json"
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def requeued_job(
    release: str, step: str, like: int, job: str | int, **fields: Any
) -> dict[str, Any]:
    """Job ``like`` (1: requeued by ``scontrol requeue``; 2: by its node set DOWN) of that
    recording as job ``job``, the fields given replaced."""
    (j,) = [x for x in requeued_squeue(release, step)["jobs"] if x["job_id"] == like]
    j.update(job_id=int(job), **fields)
    return j


def squeue_json(*jobs: dict[str, Any], release: str = "22.05") -> str:
    """The release's recorded ``squeue --json`` document with ``jobs`` as its job list."""
    doc = recorded_squeue(release)
    doc["jobs"] = list(jobs)
    return json.dumps(doc, indent=2)


class RecordingSlurm:
    """Records scontrol argv in ``calls`` and squeue argv in ``squeue_calls`` (no Slurm here;
    the integration suite runs these for real); squeue lists no job (``jobs``: the
    ``squeue --json`` it answers)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.squeue_calls: list[tuple[str, ...]] = []
        self.jobs = squeue_json()

    def scontrol(self, *args: str) -> str:
        self.calls.append(args)
        return ""

    def squeue(self, *args: str) -> str:
        self.squeue_calls.append(args)
        return self.jobs


def node_line(
    name: str, state: str, reason: str = "", boot: str = "None", addr: str | None = None
) -> str:
    """One line of ``scontrol -o show nodes`` on Slurm 22.05 (scontrol(1), --oneliner: one
    node per line, Key=Value fields in this order). Made up here from that format; the
    integration test parses the real scontrol's output with the same function."""
    line = (
        f"NodeName={name} Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=2 CPUTot=2 "
        f"CPULoad=0.00 AvailableFeatures=od ActiveFeatures=od Gres=gpu:h100:8 "
        f"NodeAddr={addr or name} NodeHostName={name} Port=21005 Version=22.05.8 "
        "OS=Linux 6.1.0-18-amd64 #1 SMP "
        f"PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01) RealMemory=1000 AllocMem=0 FreeMem=N/A "
        f"Sockets=2 Boards=1 State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A "
        f"MCS_label=N/A Partitions=burst BootTime={boot} SlurmdStartTime=None "
        f"LastBusyTime=2026-12-03T10:00:00 CfgTRES=cpu=2,mem=1000M,billing=2,gres/gpu=8 "
        f"AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s "
        f"ExtSensorsWatts=0 ExtSensorsTemp=n/s"
    )
    return line + (f" Reason={reason} [root@2026-12-03T10:00:00]" if reason else "")


FAKE_SCONTROL = """#!{python}
# A fake scontrol made for these tests (not Slurm): it records its argv and answers
# "-o show nodes" with nodes.<n>.txt for the n-th call (or nodes.txt), "-o show reservation"
# with reservations.txt, "update", "create" and "delete" with nothing (a job update with
# update-refused.txt's text on stderr and exit 1, once, when that file is there); "--json show
# nodes" with nodes.<n>.json / nodes.json, or, without one, as Slurm 22.05 does (its scontrol
# has no --json).
import json, pathlib, sys
here = pathlib.Path(__file__).parent
args = sys.argv[1:]
with open(here / "calls.jsonl", "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[:3] == ["-o", "show", "nodes"]:
    n = sum(1 for x in (here / "calls.jsonl").read_text().splitlines()
            if "show" in x and "--json" not in x)
    page = here / f"nodes.{{n}}.txt"
    print((page if page.exists() else here / "nodes.txt").read_text(), end="")
elif args[:3] == ["--json", "show", "nodes"]:
    n = sum(1 for x in (here / "calls.jsonl").read_text().splitlines() if "--json" in x)
    page = here / f"nodes.{{n}}.json"
    page = page if page.exists() else here / "nodes.json"
    if not page.exists():
        print("scontrol: unrecognized option '--json'", file=sys.stderr)
        print('Try "scontrol --help" for more information', file=sys.stderr)
        sys.exit(1)
    print(page.read_text(), end="")
elif args[:3] == ["-o", "show", "reservation"]:
    r = here / "reservations.txt"
    print(r.read_text() if r.exists() else "No reservations in the system")
elif args[:1] == ["update"] and args[1:2] != [] and args[1].startswith("jobid=") and (
    here / "update-refused.txt"
).exists():
    print((here / "update-refused.txt").read_text(), end="", file=sys.stderr)
    (here / "update-refused.txt").unlink()
    sys.exit(1)
elif args[:1] not in (["update"], ["create"], ["delete"]):
    print("scontrol: error: unexpected " + " ".join(args), file=sys.stderr)
    sys.exit(1)
"""


class FakeSlurm:
    def __init__(self, bin_dir: Path) -> None:
        self.dir = bin_dir
        bin_dir.mkdir(parents=True, exist_ok=True)
        exe = bin_dir / "scontrol"
        exe.write_text(FAKE_SCONTROL.format(python=sys.executable))
        exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
        self.set_nodes()

    def set_nodes(self, *lines: str, page: int | None = None) -> None:
        name = f"nodes.{page}.txt" if page else "nodes.txt"
        (self.dir / name).write_text("".join(f"{ln}\n" for ln in lines))

    def set_nodes_json(self, doc: str, page: int | None = None) -> None:
        """What ``scontrol --json show nodes`` prints (Slurm 23.02 on); without it the fake
        answers as 22.05 does."""
        (self.dir / (f"nodes.{page}.json" if page else "nodes.json")).write_text(doc)

    def calls(self) -> list[list[str]]:
        path = self.dir / "calls.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    def updates(self) -> list[list[str]]:
        return [c for c in self.calls() if c[:1] == ["update"]]

    def creates(self) -> list[list[str]]:
        return [c for c in self.calls() if c[:1] == ["create"]]

    def deletes(self) -> list[list[str]]:
        return [c for c in self.calls() if c[:1] == ["delete"]]
