"""``coreburst burst demo``: the core fills, work bursts to EC2, idle burst nodes go away.

Runs on this machine only: a moto server stands in for EC2, and a real Slurm (munged,
slurmctld, one slurmd per node on 127.0.0.1, coreburst/sandbox/slurmlab.py) runs the burst side that
``coreburst burst slurm-conf`` renders, with the real power programs. A launched instance
"boots" 2.5 s later by starting its node's slurmd. Short Slurm timers (SuspendTime 4 s), so it
finishes in about a minute; everything it started is stopped at the end, on Ctrl-C and on
errors.

Needs root and Debian's ``slurmctld slurmd slurm-client munge``.

    $ sudo coreburst burst demo          # or: python -m coreburst.sandbox.burst_demo
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from rich.console import Console

from coreburst.common.names import NODE_TAG_KEY
from coreburst.sandbox.slurmlab import (
    BINARIES,
    CLOUD_NODES,
    DEBIAN_PACKAGES,
    BurstLab,
    start_burst_lab,
)

PROGRAMS = {"suspend": "SuspendProgram", "resume-fail": "ResumeFailProgram"}
TIMERS = {"suspend_time": 4, "resume_timeout": 40, "suspend_timeout": 4}


@dataclass
class Job:
    label: str
    job_id: str
    state: str = ""
    node: str = ""
    partition: str = ""
    reason: str = ""
    ran_on: str = ""  # the node it ran on (kept after it leaves squeue)


@dataclass
class Watch:
    """What the demo has seen so far, so each change is printed once."""

    lab: BurstLab
    say: Any
    jobs: dict[str, Job] = field(default_factory=dict)
    audit_pos: int = 0
    boots: int = 0
    nodes: dict[str, str] = field(default_factory=dict)
    instances: dict[str, tuple[str, str]] = field(default_factory=dict)  # id -> (node, state)
    launched: dict[str, str] = field(default_factory=dict)  # node -> instance id
    fleet_calls: int = 0
    suspended: set[str] = field(default_factory=set)

    def poll(self) -> None:
        self._audit()
        self._boots()
        self._jobs()
        self._instances()
        self._nodes()

    def _audit(self) -> None:
        path = self.lab.slurm.lab / "log" / "burst-audit.jsonl"
        try:
            with path.open(encoding="utf-8") as f:
                f.seek(self.audit_pos)
                chunk = f.read()
        except OSError:
            return
        # Only whole lines: the program may be writing the next one.
        chunk = chunk[: chunk.rfind("\n") + 1]
        self.audit_pos += len(chunk.encode())
        for line in chunk.splitlines():
            e = json.loads(line)
            ev = e["event"]
            at = float(e["ts"])  # when the program did it, not when the demo looked
            if ev == "resume.request":
                self.say(
                    at=at,
                    msg=f"slurmctld runs ResumeProgram [bold]{e['nodes']}[/] for job(s) "
                    f"{', '.join(map(str, e.get('jobs', []))) or '-'}",
                )
            elif ev == "resume.launched":
                self.fleet_calls += int(e.get("fleet_calls", 0))
                desc = self.lab.ec2.describe_instances(InstanceIds=e["instances"])
                for res in desc["Reservations"]:
                    for inst in res["Instances"]:
                        tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
                        node = tags.get(NODE_TAG_KEY, "?")
                        self.launched[node] = inst["InstanceId"]
                        market = inst.get("InstanceLifecycle", "on-demand")
                        self.say(
                            at=at,
                            msg=f"  CreateFleet → [bold]{inst['InstanceId']}[/] "
                            f"{inst['InstanceType']} ({market}) for node {node}",
                        )
                self.say(f"  CreateFleet calls in this resume: {e.get('fleet_calls')}", at=at)
            elif ev in ("suspend", "resume-fail"):
                self.suspended.update(_expand(self.lab, str(e["nodes"])))
                self.say(
                    at=at,
                    msg=f"slurmctld runs {PROGRAMS[ev]}"
                    f" [bold]{e['nodes']}[/]: terminate {', '.join(e['instances']) or 'nothing'}",
                )
            elif ev == "resume.failed":
                self.say(f"[red]resume failed[/] {e['nodes']}: {e.get('code')}", at=at)
            else:
                self.say(f"power program: {ev} {e.get('nodes', '')}", at=at)

    def _boots(self) -> None:
        for node, iid in self.lab.watcher.boots[self.boots :]:
            self.say(f"{iid} boots: slurmd -b -N {node} registers with slurmctld")
        self.boots = len(self.lab.watcher.boots)
        for err in self.lab.watcher.errors:
            self.say(f"[red]boot watcher: {err}[/]")
        self.lab.watcher.errors.clear()

    def _jobs(self) -> None:
        ids = ",".join(j.job_id for j in self.jobs.values())
        out = self.lab.slurm.run(
            "squeue", "-h", "-t", "all", "-j", ids, "-o", "%i|%T|%N|%P|%r", check=False
        ).stdout
        for line in out.splitlines():
            jid, state, node, part, reason = (line.split("|") + [""] * 5)[:5]
            job = self.jobs.get(jid)
            if job is None or (state, node) == (job.state, job.node):
                continue
            job.state, job.node, job.partition, job.reason = state, node, part, reason
            job.ran_on = node or job.ran_on
            where = f" on [bold]{node}[/] (partition {part})" if node else ""
            why = f" — reason {reason}" if state == "PENDING" and reason != "None" else ""
            self.say(f"job {jid} {job.label}: {state}{where}{why}")

    def _instances(self) -> None:
        resp = self.lab.ec2.describe_instances(
            Filters=[{"Name": "tag-key", "Values": [NODE_TAG_KEY]}]
        )
        for res in resp["Reservations"]:
            for inst in res["Instances"]:
                iid, state = inst["InstanceId"], inst["State"]["Name"]
                tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
                node = tags[NODE_TAG_KEY]
                if iid in self.instances and self.instances[iid][1] != state:
                    self.say(f"{iid} ({node}): {state}")
                self.instances[iid] = (node, state)

    def _nodes(self) -> None:
        out = self.lab.slurm.run("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout
        for line in out.splitlines():
            node, _, state = line.partition(" ")
            if node in CLOUD_NODES and node in self.launched and self.nodes.get(node) != state:
                self.say(f"node {node}: {state}")
            self.nodes[node] = state

    def terminated(self, node: str) -> bool:
        iid = self.launched.get(node)
        return iid is not None and self.instances.get(iid, ("", ""))[1] == "terminated"


def prerequisite_error() -> str | None:
    """One line saying what this machine lacks for the demo, or None."""
    missing = [b for b in BINARIES if shutil.which(b) is None]
    lacks = ([] if os.geteuid() == 0 else ["it must run as root"]) + (
        [f"{', '.join(missing)} not found"] if missing else []
    )
    if not lacks:
        return None
    return (
        f"error: the burst demo needs root and a local Slurm ({'; '.join(lacks)}): as root, "
        f"apt-get install -y {DEBIAN_PACKAGES}, then run it again as root"
    )


def _expand(lab: BurstLab, hostlist: str) -> list[str]:
    return lab.slurm.run("scontrol", "show", "hostnames", hostlist, check=False).stdout.split()


def _sbatch(lab: BurstLab, *args: str) -> str:
    out = lab.slurm.run("sbatch", "--parsable", "-o", "/dev/null", *args)
    return out.stdout.strip().split(";")[0]


def _run_scenario(lab: BurstLab, say: Any, deadline: float) -> list[tuple[bool, str]]:
    slurm = lab.slurm
    w = Watch(lab, say)
    fillers = [
        _sbatch(lab, "-p", "core", "--exclusive", "-N1", "-J", "fill", "--wrap", "sleep 600")
        for _ in range(2)
    ]
    for i, f in enumerate(fillers, 1):
        w.jobs[f] = Job(f"core filler {i}", f)
    lab.wait("core full", lambda: all(slurm.job_state(j)[0] == "RUNNING" for j in fillers), 20)
    w.poll()
    say("[bold]core full[/]: both core nodes run a job")
    week = _sbatch(lab, "-p", "core,burst", "--exclusive", "-N1", "-t", "8-00:00:00",
                   "-J", "week-long", "--wrap", "sleep 5")  # fmt: skip
    w.jobs[week] = Job("week-long (-p core,burst -t 8-00:00:00)", week)
    limit = slurm.run("sinfo", "-h", "-p", "burst", "-o", "%l").stdout.strip()
    say(
        f"week-long job {week}: over the burst partition's MaxTime {limit}: only the core "
        "may run it"
    )
    over = _sbatch(lab, "-p", "core,burst", "--exclusive", "-N1", "-t", "10",
                   "-J", "overflow", "--wrap", "sleep 5")  # fmt: skip
    w.jobs[over] = Job("overflow (-p core,burst -t 10)", over)
    low = _sbatch(lab, "-p", "core,spot", "--exclusive", "-N1", "-t", "10", "--nice=1000",
                  "-J", "low-prio", "--wrap", "sleep 5")  # fmt: skip
    w.jobs[low] = Job("low priority (-p core,spot --nice=1000)", low)
    say(f"submitted jobs {week} (week-long), {over} (overflow), {low} (low priority)")

    def done() -> bool:
        ran = [w.jobs[j].ran_on for j in (over, low)]
        return all(w.jobs[j].state == "COMPLETED" for j in (over, low)) and all(
            n and w.terminated(n) and w.nodes.get(n, "").rstrip("~*#!%") == "idle"
            and w.nodes.get(n, "").endswith("~")
            for n in ran
        )  # fmt: skip

    while time.monotonic() < deadline and not done():
        w.poll()
        time.sleep(0.5)
    w.poll()
    if not done():
        say("[red]gave up waiting (see the checks below)[/]")
    o, lo = w.jobs[over], w.jobs[low]
    return [
        (o.state == "COMPLETED" and o.ran_on.startswith("od-"), "overflow job ran on a burst node"),
        (bool(w.launched.get(o.ran_on)), f"its instance {w.launched.get(o.ran_on, '-')}"),
        (w.jobs[week].state == "PENDING", "week-long job still pending on the core"),
        (lo.state == "COMPLETED" and lo.ran_on.startswith("sp-"), "low priority ran on spot"),
        (
            w.fleet_calls <= len(w.launched),
            f"CreateFleet calls {w.fleet_calls} for {len(w.launched)} instance(s) (one per pool)",
        ),
        (
            all(w.terminated(n) for n in (o.ran_on, lo.ran_on) if n),
            "idle burst nodes suspended and their instances terminated",
        ),
    ]


def _on_term(signum: int, frame: FrameType | None) -> None:
    """SIGTERM ends the demo as Ctrl-C does, through the same clean-up."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def demo(
    timeout: Annotated[
        int, typer.Option(help="Seconds before the scenario gives up (the lab stops anyway).")
    ] = 110,
    keep_dir: Annotated[
        bool, typer.Option(help="Keep the lab directory (slurm.conf, logs, audit) afterwards.")
    ] = False,
) -> None:
    """Overflow a local Slurm's full core to EC2 (moto server) and back; needs root + Slurm."""
    why = prerequisite_error()
    if why:
        typer.echo(why, err=True)
        raise typer.Exit(2)
    console = Console(highlight=False, soft_wrap=True)
    t0, wall0 = time.monotonic(), time.time()

    def say(msg: str, at: float | None = None) -> None:
        t = time.monotonic() - t0 if at is None else at - wall0
        console.print(f"[dim]{t:6.1f}s[/]  {msg}")

    old = signal.signal(signal.SIGTERM, _on_term)
    # Ctrl-C ends the demo through the clean-up even when the shell that started it ignores
    # SIGINT (a background job of a non-interactive shell inherits SIG_IGN).
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    tmp = tempfile.mkdtemp(prefix="coreburst-burst-demo-")
    lab: BurstLab | None = None
    rc = 0
    try:
        say("starting moto server, munged, slurmctld, slurmd core1 core2 (SuspendTime 4 s)")
        lab = start_burst_lab(
            Path(tmp),
            suspend_time=TIMERS["suspend_time"],
            resume_timeout=TIMERS["resume_timeout"],
            suspend_timeout=TIMERS["suspend_timeout"],
        )
        say(f"lab up in {tmp}: core[1-2] idle; burst nodes {' '.join(CLOUD_NODES)} powered down")
        checks = _run_scenario(lab, say, t0 + timeout)
        console.print()
        for ok, what in checks:
            console.print(f"  {'[green]✓[/]' if ok else '[red]✗[/]'} {what}")
        rc = 0 if all(ok for ok, _ in checks) else 1
    except KeyboardInterrupt:
        say("[yellow]interrupted[/]")
        rc = 130
    except (TimeoutError, RuntimeError, OSError) as exc:
        say(f"[red]error: {exc}[/]")
        rc = 1
    finally:
        signal.signal(signal.SIGTERM, old)
        signal.signal(signal.SIGINT, old_int)
        if lab is not None:
            lab.slurm.run("scancel", "--user=root", check=False)
            lab.stop()
        say("stopped the boot watcher, slurmd, slurmctld, munged and moto server")
        if keep_dir:
            say(f"lab directory kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    raise typer.Exit(rc)


def main() -> None:
    typer.run(demo)


if __name__ == "__main__":
    main()
