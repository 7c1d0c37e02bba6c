"""A real Slurm on 127.0.0.1 for the burst demo, tests and benchmark: munged, slurmctld, one
slurmd per node, with EC2 on a moto server.

Adapted from the approach of shared/slurm-lab (lab.sh): a private munged socket, ``slurmd -N
<node>`` with its own ``Port=`` per node, fake GPUs as character devices 1:3 (``mknod``),
proctrack/linuxproc and task/none (no cgroups in a container), config_overrides so nodes may
declare more CPUs and memory than this machine has. The burst side (cloud nodes, partitions,
power programs) is what ``python -m coreburst.burst.cli slurm-conf`` renders, included at the end.

A "boot" is :class:`BootWatcher`: it sees a new running instance tagged with a node name in
the EC2 emulator and starts that node's slurmd at least ``boot_delay`` seconds later (a slurmd
registering in the same second as the resume request can be ignored until ResumeTimeout);
when the instance is gone it stops that slurmd, as a terminated instance would.

Needs root and Debian's ``slurmctld slurmd slurm-client munge``: Debian 12's 22.05 on the host;
24.11 (Debian 13) and 26.05 (sid) in a chroot (.ci/slurm-chroot.sh, ``make test-slurm``). What a
release needs beyond 22.05 is written by release (:func:`slurm_release`): from 24.05 on, slurmd
stops at start (``No filesystem mounted on /sys/fs/cgroup``, ``Unable to initialize cgroup
plugin``) where there is neither systemd nor a cgroup v2 mount, as here, unless ``cgroup.conf``
says ``CgroupPlugin=disabled``, a value 22.05 does not know (22.05 needs no ``cgroup.conf`` with
proctrack/linuxproc and task/none).

    >>> with burst_lab(Path("/tmp/lab")) as lab:   # doctest: +SKIP
    ...     lab.slurm.run("sbatch", "-p", "core,burst", "--wrap", "true")
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import psutil  # type: ignore[import-untyped]

from coreburst.common.names import NODE_TAG_KEY, PRIVATE_SUBNET_TAG, STACK_TAG_KEY
from coreburst.sandbox.emulator import AMI, MotoProcess, fake_session, free_ports

# The repository (sandbox/ is installed editable from it): the power programs run its
# coreburst.burst.cli.
REPO = Path(__file__).resolve().parents[2]
BINARIES = ("munged", "munge", "slurmctld", "slurmd", "scontrol", "sinfo", "squeue", "sbatch")
DEBIAN_PACKAGES = "slurmctld slurmd slurm-client munge"
CORE_NODES = ("core1", "core2")
# How long the lab waits for each daemon it starts: a few seconds on an idle machine, but test
# workers running side by side on two cores can hold slurmctld's start-up far longer.
START_WAIT_S = 90


def missing_prerequisite() -> str | None:
    """Why this machine cannot run the lab, or None."""
    if os.geteuid() != 0:
        return "the Slurm lab needs root (slurmd runs jobs as any user)"
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        return (
            f"Slurm binaries missing ({', '.join(missing)}): apt-get install -y {DEBIAN_PACKAGES}"
        )
    return None


# cgroup.conf(5) of 24.05 and later lists CgroupPlugin=disabled ("completely disable any
# interaction with the cgroups"); 22.05's lists cgroup/v1, cgroup/v2 and autodetect only.
CGROUP_DISABLED_SINCE = (24, 5)
CGROUP_CONF = """\
# No systemd and no cgroup v2 mount in the lab (proctrack/linuxproc, task/none).
CgroupPlugin=disabled
"""


@functools.cache
def slurm_release() -> tuple[int, int]:
    """The release of the ``slurmctld`` on PATH: ``slurm 24.11.5`` -> (24, 11)."""
    out = subprocess.run(
        ["slurmctld", "-V"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    match = re.search(r"(\d+)\.(\d+)", out)
    if match is None:
        raise RuntimeError(f"slurmctld -V printed no release: {out!r}")
    return int(match[1]), int(match[2])


def wait_until(what: str, check: Callable[[], bool], timeout_s: float, every: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, subprocess.SubprocessError):
            pass
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")


BASE_CONF = """\
# Site part of the lab's slurm.conf (the core); the burst part is Include'd at the end.
ClusterName=burstlab
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={lab}/munge/munge.socket,cred_expire=70
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={lab}/state
SlurmdSpoolDir={lab}/spool/%n
SlurmctldPidFile={lab}/run/slurmctld.pid
SlurmdPidFile={lab}/run/slurmd-%n.pid
SlurmctldLogFile={lab}/log/slurmctld.log
SlurmdLogFile={lab}/log/slurmd-%n.log
# verbose + Power: slurmctld logs each ResumeProgram start (benchmarks/burst_resume.py reads it).
SlurmctldDebug=verbose
DebugFlags=Power
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=2
SlurmdParameters=config_overrides
GresTypes=gpu
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
MailProg=/bin/true
NodeName=DEFAULT CPUs=2 RealMemory=1000 Gres=gpu:h100:8 Feature=core State=UNKNOWN
NodeName=core1 NodeHostname=localhost NodeAddr=127.0.0.1 Port={core1_port}
NodeName=core2 NodeHostname=localhost NodeAddr=127.0.0.1 Port={core2_port}
PartitionName=core Nodes=core[1-2] Default=YES MaxTime=INFINITE PriorityTier=10 State=UP
Include {lab}/etc/burst.conf
"""

GRES_BASE = """\
AutoDetect=off
NodeName=core[1-2] Name=gpu Type=h100 File={lab}/dev/nvidia[0-7]
"""

# Made up for these tests; keys follow infra/config.py (StackConfig) and coreburst/burst/config.py.
STACK_YAML = """\
config:
  aws:region: us-east-1
  coreburst:availabilityZone: us-east-1a
  coreburst:tags: {{team: ml, project: lab, costCenter: cc-1, environment: dev}}
  coreburst:budget: {{monthlyUsd: 100000}}
  coreburst:vpc:
    extraZones: [{{availabilityZone: us-east-1b, privateSubnetCidr: 10.64.64.0/18}}]
  coreburst:clusters:
    - name: od
      instanceType: p5.48xlarge
      fallbackInstanceTypes: [p5e.48xlarge]
      zones: [us-east-1a, us-east-1b]
      nodes: 2
      capacity: {{model: on-demand}}
    - {{name: sp, instanceType: p5.48xlarge, nodes: 1, capacity: {{model: spot}}}}
    - name: cb
      instanceType: p5.48xlarge
      nodes: 1
      capacity: {{model: capacity-block, reservationId: cr-0123456789abcdef0}}
  coreburst:burst:
    coreNodes: core[1-2]
    resumeProgram: {lab}/etc/coreburst-burst-resume
    suspendProgram: {lab}/etc/coreburst-burst-suspend
    resumeFailProgram: {lab}/etc/coreburst-burst-resume-fail
    suspendTime: {suspend_time}
    resumeTimeout: {resume_timeout}
    suspendTimeout: {suspend_timeout}
    powerSaveInterval: 1
    gpuDevicePrefix: {lab}/dev/nvidia
    nodeAddress: registration
    slurmdPortBase: {burst_port_base}
    logFile: {lab}/log/burst-power.log
    auditLog: {lab}/log/burst-audit.jsonl
"""
CLOUD_NODES = ("od-1", "od-2", "sp-1", "cb-1")


class SlurmLab:
    def __init__(
        self,
        lab: Path,
        aws_env: dict[str, str],
        *,
        suspend_time: int = 4,
        resume_timeout: int = 40,
        suspend_timeout: int = 4,
        accounting: Any = None,
    ) -> None:
        self.lab = lab
        # coreburst.sandbox.slurmdb.SlurmDB: accounting through its slurmdbd (default: none).
        self.accounting = accounting
        self.aws_env = aws_env
        self.timers = dict(
            suspend_time=suspend_time,
            resume_timeout=resume_timeout,
            suspend_timeout=suspend_timeout,
        )
        self.conf = lab / "etc" / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.started: list[str] = []

    # -- commands -------------------------------------------------------------------------
    def run(
        self, *args: str, timeout: float = 30, check: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args),
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
        )

    def burst_cli(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return self.run(
            sys.executable,
            "-m",
            "coreburst.burst.cli",
            *args,
            check=False,
            timeout=timeout,
            env={"PYTHONPATH": str(REPO), **(env or {})},
        )

    def node(self, name: str) -> dict[str, str]:
        out = self.run("scontrol", "-o", "show", "node", name).stdout
        fields: dict[str, str] = {}
        for tok in out.split():
            k, _, v = tok.partition("=")
            fields.setdefault(k, v)
        return fields

    def node_state(self, name: str) -> str:
        return self.node(name).get("State", "")

    def job_state(self, job_id: str) -> tuple[str, str]:
        out = self.run("squeue", "-h", "-j", job_id, "-o", "%T %N", check=False).stdout.split()
        return (out[0], out[1] if len(out) > 1 else "") if out else ("GONE", "")

    # -- lifecycle ------------------------------------------------------------------------
    def render(self) -> None:
        for d in ("etc", "state", "run", "log", "munge", "dev", "jobs"):
            (self.lab / d).mkdir(parents=True, exist_ok=True)
        for n in (*CORE_NODES, *CLOUD_NODES):
            (self.lab / "spool" / n).mkdir(parents=True, exist_ok=True)
        for i in range(8):
            dev = self.lab / "dev" / f"nvidia{i}"
            if not dev.exists():
                os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))  # char device 1:3
        ports = free_ports(4 + len(CLOUD_NODES))
        self.ports = ports
        (self.lab / "Pulumi.lab.yaml").write_text(
            STACK_YAML.format(lab=self.lab, burst_port_base=ports[4], **self.timers)
        )
        conf = BASE_CONF.format(
            lab=self.lab,
            ctld_port=ports[0],
            slurmd_port=ports[1],
            core1_port=ports[2],
            core2_port=ports[3],
        )
        if self.accounting is not None:
            off = "JobAcctGatherType=jobacct_gather/none\n"
            off += "AccountingStorageType=accounting_storage/none\n"
            conf = conf.replace(off, self.accounting.slurm_conf(self.lab / "munge"))
        self.conf.write_text(conf)
        env_file = self.lab / "etc" / "burst.env"
        env_lines = {
            **self.aws_env,
            "PYTHONPATH": str(REPO),
            "SLURM_CONF": str(self.conf),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        }
        env_file.write_text("".join(f"export {k}='{v}'\n" for k, v in env_lines.items()))
        out = self.burst_cli(
            "slurm-conf",
            "--stack",
            "lab",
            "--stack-dir",
            str(self.lab),
            "--out",
            str(self.lab / "etc"),
            "--cli",
            f"{sys.executable} -m coreburst.burst.cli",
            "--env-file",
            str(env_file),
        )
        if out.returncode != 0:
            raise RuntimeError(f"slurm-conf failed: {out.stderr}")
        gres = GRES_BASE.format(lab=self.lab) + (self.lab / "etc" / "gres-burst.conf").read_text()
        (self.lab / "etc" / "gres.conf").write_text(gres)
        if slurm_release() >= CGROUP_DISABLED_SINCE:
            (self.lab / "etc" / "cgroup.conf").write_text(CGROUP_CONF)

    def start(self) -> SlurmLab:
        self.render()
        key = self.lab / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
            key.chmod(0o400)
        (self.lab / "munge").chmod(0o700)
        sock = self.lab / "munge" / "munge.socket"
        self.run(
            "munged",
            "--force",
            f"--socket={sock}",
            f"--key-file={key}",
            f"--pid-file={self.lab}/munge/munged.pid",
            f"--log-file={self.lab}/log/munged.log",
            f"--seed-file={self.lab}/munge/munged.seed",
        )
        self.started.append("munged")
        wait_until(
            "munged",
            lambda: self.run("munge", "-S", str(sock), "-n", check=False).returncode == 0,
            START_WAIT_S,
        )
        if self.accounting is not None:  # slurmdbd needs munged; slurmctld registers with it
            self.accounting.start_dbd(self)
        self.run("slurmctld", "-f", str(self.conf), "-i")
        self.started.append("slurmctld")
        wait_until(
            "slurmctld",
            lambda: self.run("scontrol", "ping", check=False, timeout=5).returncode == 0,
            START_WAIT_S,
        )
        for n in CORE_NODES:
            self.start_slurmd(n)
        wait_until(
            "core nodes idle",
            lambda: (
                self.run("sinfo", "-h", "-n", "core[1-2]", "-t", "idle", "-o", "%D").stdout.strip()
                == "2"
            ),
            START_WAIT_S,
        )
        return self

    def start_slurmd(self, node: str, booted: bool = False) -> None:
        """``booted``: ``slurmd -b`` reports the node as just booted, so slurmctld takes this
        start as the boot it waits for after a resume (it compares boot time with the
        request; the container's own uptime is far older)."""
        self.run("slurmd", "-f", str(self.conf), *(["-b"] if booted else []), "-N", node)

    def stop_slurmd(self, node: str) -> None:
        self._stop_pidfile(self.lab / "run" / f"slurmd-{node}.pid")

    def _stop_pidfile(self, pidfile: Path) -> None:
        self._stop_pidfiles([pidfile])

    @staticmethod
    def _stop_pidfiles(pidfiles: list[Path]) -> None:
        """SIGTERM to every daemon at once, then wait for all of them together (5 s, then
        SIGKILL): one slurmd takes about a second to exit, and the lab has up to six."""
        alive: dict[int, Path] = {}
        for pidfile in pidfiles:
            try:
                pid = int(pidfile.read_text().strip())
            except (OSError, ValueError):
                continue
            try:
                os.kill(pid, signal.SIGTERM)
                alive[pid] = pidfile
            except ProcessLookupError:
                pidfile.unlink(missing_ok=True)
        deadline = time.monotonic() + 5
        while alive and time.monotonic() < deadline:
            for pid in list(alive):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    alive.pop(pid).unlink(missing_ok=True)
            if alive:
                time.sleep(0.05)
        for pid, pidfile in alive.items():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            pidfile.unlink(missing_ok=True)

    def job_steps(self) -> list[psutil.Process]:
        """The lab's job steps still alive: each ``slurmstepd`` started by one of its slurmds
        (it inherits the lab's SLURM_CONF) and the job's processes under it. A slurmstepd
        outlives its slurmd: stopping the daemons alone leaves it (and the job) running."""
        # slurmstepd writes its title over the start of its environment, so psutil's
        # environ() sees none of it; on 22.05 the variables are still further on in
        # /proc/PID/environ. 24.11's slurmstepd blanks all of it: there its working directory,
        # inherited from its slurmd (the directory of SlurmdLogFile, under the lab), tells.
        mine = b"SLURM_CONF=" + os.fsencode(self.conf)
        found: list[psutil.Process] = []
        for p in psutil.process_iter(["name"]):
            if p.info["name"] != "slurmstepd":
                continue
            try:
                environ = Path(f"/proc/{p.pid}/environ").read_bytes().split(b"\0")
                if mine not in environ and not Path(p.cwd()).is_relative_to(self.lab):
                    continue
                found += [p, *p.children(recursive=True)]
            except (OSError, psutil.Error):
                continue
        return found

    def stop(self) -> None:
        """Stop every daemon this lab started and the job steps still running under them
        (bounded: 5 s each, then SIGKILL)."""
        daemons = [
            *sorted((self.lab / "run").glob("slurmd-*.pid")),
            self.lab / "run" / "slurmctld.pid",
        ]
        munged = self.lab / "munge" / "munged.pid"
        if self.accounting is None:  # nothing left to authenticate: all at once (about 2 s)
            self._stop_pidfiles([*daemons, munged])
        else:  # slurmctld reports its end to slurmdbd, both through munged
            self._stop_pidfiles(daemons)
            self.accounting.stop_dbd()
            self._stop_pidfile(munged)
        # slurmstepd ignores SIGTERM; with its daemons gone nothing is left to end it cleanly.
        steps = self.job_steps()
        for p in steps:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(steps, timeout=5)

    def log_tail(self, name: str, lines: int = 40) -> str:
        try:
            return "\n".join((self.lab / "log" / name).read_text().splitlines()[-lines:])
        except OSError:
            return f"({name}: none)"


# EC2 API reference, CreateFleet, "Response Elements" (errorSet of CreateFleetError:
# errorCode, errorMessage, lifecycle; fleetInstanceSet) and "Error codes for the Amazon EC2
# API" (InsufficientInstanceCapacity: "There is not enough capacity to fulfill your request").
# Made up here in that shape: moto has no notion of capacity.
_ICE_RESPONSE = """<?xml version="1.0" encoding="UTF-8"?>
<CreateFleetResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <requestId>{request_id}</requestId>
  <fleetId>fleet-{fleet}</fleetId>
  <errorSet>
    <item>
      <errorCode>InsufficientInstanceCapacity</errorCode>
      <errorMessage>We currently do not have sufficient capacity in the Availability Zone you
 requested.</errorMessage>
      <lifecycle>{lifecycle}</lifecycle>
    </item>
  </errorSet>
  <fleetInstanceSet/>
</CreateFleetResponse>
"""

# The same answer when an instant fleet's Overrides were all tried: EC2 reports one error
# per launch specification it could not use (``launchTemplateAndOverrides``: the override's
# instance type, subnet and zone) and may put UnfulfillableCapacity first (EC2 API reference,
# CreateFleet "Response Elements", CreateFleetError and LaunchTemplateAndOverridesResponse;
# "Error codes for the Amazon EC2 API"). Made up here in that shape.
_ERROR_ITEM = """    <item>
      <errorCode>{code}</errorCode>
      <errorMessage>{message}</errorMessage>
      <lifecycle>{lifecycle}</lifecycle>{where}
    </item>
"""
_WHERE = """
      <launchTemplateAndOverrides>
        <launchTemplateSpecification><launchTemplateId>{lt}</launchTemplateId>
          <version>$Latest</version></launchTemplateSpecification>
        <overrides><instanceType>{itype}</instanceType>{subnet}
          <availabilityZone>{zone}</availabilityZone></overrides>
      </launchTemplateAndOverrides>"""
_FLEET_ERRORS = """<?xml version="1.0" encoding="UTF-8"?>
<CreateFleetResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <requestId>{request_id}</requestId>
  <fleetId>fleet-{fleet}</fleetId>
  <errorSet>
{items}  </errorSet>
  <fleetInstanceSet/>
</CreateFleetResponse>
"""
_OVERRIDE = re.compile(r"^LaunchTemplateConfigs\.1\.Overrides\.(\d+)\.(\w+)$")


def fleet_choices(
    form: dict[str, list[str]], subnet_zones: dict[str, str], zone: str
) -> list[tuple[str, str, str | None]]:
    """(instance type, zone, subnet id) of a CreateFleet form's Overrides in the order EC2
    tries them (by Priority, then as listed); a request without Overrides is one choice."""
    rows: dict[int, dict[str, str]] = {}
    for key, values in form.items():
        m = _OVERRIDE.match(key)
        if m:
            rows.setdefault(int(m.group(1)), {})[m.group(2)] = values[0]
    out = []
    for i in sorted(rows, key=lambda i: (float(rows[i].get("Priority", "inf")), i)):
        r = rows[i]
        subnet = r.get("SubnetId")
        z = r.get("AvailabilityZone") or (subnet_zones.get(subnet, zone) if subnet else zone)
        out.append((r.get("InstanceType", "p5.48xlarge"), z, subnet))
    return out or [("p5.48xlarge", zone, None)]


# EC2 API reference, "Ensuring idempotency in Amazon EC2 API requests": a repeated request
# with the same client token and the same parameters gets the first request's response and
# launches nothing; the same token with other parameters is refused with
# IdempotentParameterMismatch (HTTP 400). moto ignores ClientToken, so the proxy answers so.
_MISMATCH_RESPONSE = """<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>IdempotentParameterMismatch</Code><Message>The client token
 was used with different parameters.</Message></Error></Errors><RequestID>{request_id}</RequestID>
</Response>
"""


def _only_override(form: dict[str, list[str]], choice: tuple[str, str, str | None]) -> bytes:
    """The form with one Override (``choice``), url-encoded again."""
    kept = {k: v for k, v in form.items() if not _OVERRIDE.match(k)}
    itype, _zone, subnet = choice
    kept["LaunchTemplateConfigs.1.Overrides.1.InstanceType"] = [itype]
    if subnet:
        kept["LaunchTemplateConfigs.1.Overrides.1.SubnetId"] = [subnet]
    return urlencode(kept, doseq=True).encode()


class CapacityProxy:
    """An HTTP proxy in front of moto server that answers as EC2's documentation says where
    moto does not:

    * out of capacity: a CreateFleet on a launch template in ``out_of_capacity`` (ids) gets
      no instance and an InsufficientInstanceCapacity error, as EC2 answers an ``instant``
      fleet it cannot fill (HTTP 200, the error in ``errorSet``);
    * idempotency: a CreateFleet whose ``ClientToken`` was seen before gets the first answer
      again (same parameters) or IdempotentParameterMismatch (others), launching nothing;
    * ``hold_fleets`` (tests): while set to an Event that is not set, a CreateFleet that
      reached moto waits for it before answering, so a test can kill the caller between
      the launch and its answer.

    Every other request goes to moto unchanged."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.out_of_capacity: set[str] = set()
        # (instance type, zone) with no capacity: an Override naming one is skipped, as EC2
        # skips a launch specification it cannot fill, and the next is tried; none left is
        # the documented error answer, one entry per Override.
        self.no_capacity: set[tuple[str, str]] = set()
        # Overrides' SubnetId -> zone (the lab's subnets); no SubnetId: ``zone``.
        self.subnet_zones: dict[str, str] = {}
        self.zone = "us-east-1a"
        self.choices_seen: list[list[tuple[str, str]]] = []  # per CreateFleet, tried order
        self.refused = 0
        self.fleets_launched = 0  # CreateFleet calls that reached moto
        self.replayed = 0  # answered from a ClientToken seen before
        self.hold_fleets: threading.Event | None = None
        # Seconds each CreateFleet answer takes (EC2 may take seconds for an instant fleet):
        # the window in which a second resume run for the same nodes starts.
        self.fleet_delay_s = 0.0
        self._tokens: dict[str, tuple[list[tuple[str, list[str]]], bytes]] = {}
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                form = parse_qs(body.decode("utf-8", "replace")) if body else {}
                lt = form.get(
                    "LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateId"
                )
                if (
                    form.get("Action") == ["CreateFleet"]
                    and body
                    and not (lt and lt[0] in proxy.out_of_capacity)
                ):
                    choices = fleet_choices(form, proxy.subnet_zones, proxy.zone)
                    proxy.choices_seen.append([(t, z) for t, z, _ in choices])
                    free = [c for c in choices if (c[0], c[1]) not in proxy.no_capacity]
                    if not free:
                        proxy.refused += 1
                        self._no_capacity(form, choices, (lt or ["lt-?"])[0])
                        return
                    if len(choices) > 1 or free[0] != choices[0]:
                        # moto launches the first Override only: give it the one EC2 would
                        # use (the first in order with capacity).
                        body = _only_override(form, free[0])
                if form.get("Action") == ["CreateFleet"] and lt and lt[0] in proxy.out_of_capacity:
                    proxy.refused += 1
                    life = form.get("TargetCapacitySpecification.DefaultTargetCapacityType")
                    doc = _ICE_RESPONSE.format(
                        request_id=uuid.uuid4(),
                        fleet=uuid.uuid4(),
                        lifecycle=(life or ["on-demand"])[0],
                    ).encode()
                    self._reply(200, {"Content-Type": "text/xml"}, doc)
                    return
                token = (form.get("ClientToken") or [""])[0]
                if form.get("Action") == ["CreateFleet"] and token and body:
                    with proxy._lock:  # one request per token at a time, as EC2 serialises
                        self._idempotent(token, form, body)
                    return
                self._upstream(body)

            def _no_capacity(
                self, form: dict[str, list[str]], choices: list[tuple[str, str, str | None]],
                lt: str,
            ) -> None:  # fmt: skip
                life = (
                    form.get("TargetCapacitySpecification.DefaultTargetCapacityType")
                    or ["on-demand"]
                )[0]
                items = _ERROR_ITEM.format(
                    code="UnfulfillableCapacity",
                    message="Unable to fulfill capacity due to your request configuration. "
                    "Please adjust your request and try again.",
                    lifecycle=life,
                    where="",
                )
                for itype, zone, subnet in choices:
                    where = _WHERE.format(
                        lt=lt,
                        itype=itype,
                        zone=zone,
                        subnet=f"<subnetId>{subnet}</subnetId>" if subnet else "",
                    )
                    items += _ERROR_ITEM.format(
                        code="InsufficientInstanceCapacity",
                        message="We currently do not have sufficient capacity in the "
                        "Availability Zone you requested.",
                        lifecycle=life,
                        where=where,
                    )
                doc = _FLEET_ERRORS.format(
                    request_id=uuid.uuid4(), fleet=uuid.uuid4(), items=items
                ).encode()
                self._reply(200, {"Content-Type": "text/xml"}, doc)

            def _idempotent(self, token: str, form: dict[str, list[str]], body: bytes) -> None:
                params = sorted((k, v) for k, v in form.items() if k != "ClientToken")
                seen = proxy._tokens.get(token)
                if seen is not None:
                    if seen[0] != params:
                        doc = _MISMATCH_RESPONSE.format(request_id=uuid.uuid4()).encode()
                        self._reply(400, {"Content-Type": "text/xml"}, doc)
                        return
                    proxy.replayed += 1
                    self._reply(200, {"Content-Type": "text/xml"}, seen[1])
                    return
                status, headers, answer = self._fetch(body)
                if status == 200:
                    proxy._tokens[token] = (params, answer)
                    proxy.fleets_launched += 1
                hold = proxy.hold_fleets
                if hold is not None:
                    hold.wait(60)
                time.sleep(proxy.fleet_delay_s)
                self._reply(status, headers, answer)

            def _upstream(self, body: bytes | None) -> None:
                self._reply(*self._fetch(body))

            def _fetch(self, body: bytes | None) -> tuple[int, dict[str, str], bytes]:
                req = urllib.request.Request(
                    proxy.upstream + self.path, data=body, method=self.command
                )
                for k, v in self.headers.items():
                    if k.lower() not in ("host", "content-length", "connection"):
                        req.add_header(k, v)
                try:
                    with urllib.request.urlopen(req, timeout=60) as resp:
                        return resp.status, dict(resp.headers), resp.read()
                except urllib.error.HTTPError as err:
                    return err.code, dict(err.headers), err.read()

            def _reply(self, status: int, headers: dict[str, str], body: bytes) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                self._forward()

            def do_GET(self) -> None:
                self._forward()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> CapacityProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class BootWatcher:
    """Plays the part of instance boot: start a node's slurmd when its tagged instance runs
    (``boot_delay`` s after first seen), stop it when the instance is gone."""

    def __init__(
        self,
        lab: SlurmLab,
        ec2: Any,
        node_tag: str = NODE_TAG_KEY,
        boot_delay: float = 2.5,
        every: float = 0.5,
    ) -> None:
        self.lab, self.ec2, self.node_tag = lab, ec2, node_tag
        self.boot_delay, self.every = boot_delay, every
        # Nodes whose instances never register (a broken image): their slurmd is not started.
        self.never_boot: set[str] = set()
        # Health gate (coreburst/burst/node_check.py): a node listed here runs ``coreburst burst
        # node-check --gate`` on the recorded outputs in these directories (one per boot, the
        # last repeating) before its slurmd starts; on failure slurmd is never started. Nodes
        # not listed boot as before.
        self.health: dict[str, list[Path]] = {}
        self.checks: list[tuple[str, str, int, str]] = []  # node, instance, exit, output
        self.seen: dict[str, tuple[str, float]] = {}  # node -> (instance, first seen)
        self.booted: dict[str, str] = {}  # node -> instance whose slurmd runs
        self.boots: list[tuple[str, str]] = []
        self.boot_times: dict[str, float] = {}  # instance -> time.time() its slurmd started
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> BootWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _live(self) -> dict[str, str]:
        resp = self.ec2.describe_instances(
            Filters=[
                {"Name": "tag-key", "Values": [self.node_tag]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ]
        )
        live = {}
        for res in resp["Reservations"]:
            for inst in res["Instances"]:
                tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
                live[tags[self.node_tag]] = inst["InstanceId"]
        return live

    def _health_passed(self, node: str, iid: str) -> bool:
        fixtures = self.health.get(node)
        if not fixtures:
            return True
        replay = fixtures.pop(0) if len(fixtures) > 1 else fixtures[0]
        out = self.lab.burst_cli(
            "node-check", "--node", node, "--stack", "lab", "--stack-dir", str(self.lab.lab),
            "--replay", str(replay), "--gate", "--instance-id", iid,
        )  # fmt: skip
        self.checks.append((node, iid, out.returncode, out.stdout + out.stderr))
        return out.returncode == 0

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                live = self._live()
                now = time.monotonic()
                for node, iid in live.items():
                    if self.seen.get(node, ("", 0.0))[0] != iid:
                        self.seen[node] = (iid, now)
                    if node in self.never_boot:
                        continue
                    if self.booted.get(node) != iid and now - self.seen[node][1] >= self.boot_delay:
                        if not self._health_passed(node, iid):
                            self.booted[node] = iid  # never started; the gate replaces it
                            continue
                        self.lab.stop_slurmd(node)
                        self.lab.start_slurmd(node, booted=True)
                        self.booted[node] = iid
                        self.boot_times[iid] = time.time()
                        self.boots.append((node, iid))
                for node in [n for n in self.booted if n not in live]:
                    self.lab.stop_slurmd(node)
                    del self.booted[node]
            except Exception as exc:  # keep watching; the test reports what went wrong
                self.errors.append(repr(exc))


def lab_subnets(ec2: Any, stack: str = "lab") -> dict[str, str]:
    """The stack's private subnets as infra/components/network.py tags them (one per zone of
    the lab stack); subnet id -> zone."""
    vpc = ec2.create_vpc(CidrBlock="10.64.0.0/16")["Vpc"]["VpcId"]
    out = {}
    for zone, cidr in (("us-east-1a", "10.64.0.0/18"), ("us-east-1b", "10.64.64.0/18")):
        sn = ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=zone)["Subnet"]
        ec2.create_tags(
            Resources=[sn["SubnetId"]],
            Tags=[
                {"Key": STACK_TAG_KEY, "Value": stack},
                {"Key": PRIVATE_SUBNET_TAG, "Value": "private"},
            ],
        )
        out[sn["SubnetId"]] = zone
    return out


def launch_templates(ec2: Any, stack: str = "lab") -> None:
    """What infra declares per cluster, as moto needs it: ``<cluster>-lt-<7 chars>`` (Pulumi's
    auto-name), tagged with the stack by the provider's default tags."""
    for cluster, suffix in (("od", "a1b2c3d"), ("sp", "e4f5a6b"), ("cb", "c7d8e9f")):
        ec2.create_launch_template(
            LaunchTemplateName=f"{cluster}-lt-{suffix}",
            LaunchTemplateData={"ImageId": AMI, "InstanceType": "p5.48xlarge"},
            TagSpecifications=[
                {
                    "ResourceType": "launch-template",
                    "Tags": [{"Key": STACK_TAG_KEY, "Value": stack}],
                }
            ],
        )


@dataclass
class BurstLab:
    """The running lab: Slurm, an EC2 client on the moto server, and the boot watcher."""

    slurm: SlurmLab
    ec2: Any
    moto: MotoProcess
    watcher: BootWatcher
    wait: Callable[..., None] = wait_until
    # Between the power programs and moto when started with capacity_proxy=True.
    proxy: CapacityProxy | None = None

    def power_down(self, nodes: list[str], timeout_s: float = 60) -> None:
        """Force ``nodes`` down through Slurm (its SuspendProgram terminates their instances)
        and wait until every instance is gone and every node is powered down (bounded)."""
        hostlist = ",".join(nodes)
        self.slurm.run(
            "scontrol", "update", f"nodename={hostlist}", "state=power_down_force", check=False
        )
        self.wait(
            f"{hostlist} instances gone",
            lambda: not any(self.instances(n) for n in nodes),
            timeout_s,
        )

        def powered_down(n: str) -> bool:  # idle~ or down~: no instance, nothing in flight
            st = self.slurm.node_state(n)
            return "POWERED_DOWN" in st and "POWERING" not in st

        self.wait(
            f"{hostlist} powered down", lambda: all(powered_down(n) for n in nodes), timeout_s
        )

    def instances(self, node: str, states: tuple[str, ...] = ("pending", "running")) -> list[str]:
        resp = self.ec2.describe_instances(
            Filters=[
                {"Name": f"tag:{NODE_TAG_KEY}", "Values": [node]},
                {"Name": "instance-state-name", "Values": list(states)},
            ]
        )
        return [i["InstanceId"] for r in resp["Reservations"] for i in r["Instances"]]

    def stop(self) -> None:
        """Watcher, then every Slurm daemon, then the proxy and moto (each wait bounded)."""
        self.watcher.stop()
        self.slurm.stop()
        if self.proxy is not None:
            self.proxy.stop()
        self.moto.stop()


def start_burst_lab(
    lab_dir: Path,
    *,
    boot_delay: float = 2.5,
    capacity_proxy: bool = True,
    accounting: Any = None,
    **timers: int,
) -> BurstLab:
    """Start moto, munged, slurmctld, the core slurmds and the boot watcher. On any failure
    whatever was started is stopped again before the error propagates. ``timers``:
    suspend_time, resume_timeout, suspend_timeout (seconds). ``capacity_proxy``: the power
    programs reach moto through a :class:`CapacityProxy` (``lab.proxy``). ``accounting``: a
    started ``coreburst.sandbox.slurmdb.SlurmDB`` whose slurmdbd keeps the jobs."""
    moto = MotoProcess().start()
    proxy = CapacityProxy(moto.url).start() if capacity_proxy else None
    aws_env = {
        "AWS_ENDPOINT_URL": proxy.url if proxy is not None else moto.url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    slurm = SlurmLab(lab_dir, aws_env, accounting=accounting, **timers)
    ec2 = fake_session().client("ec2", endpoint_url=moto.url)
    watcher = BootWatcher(slurm, ec2, boot_delay=boot_delay)
    lab = BurstLab(slurm, ec2, moto, watcher, proxy=proxy)
    try:
        launch_templates(ec2)
        zones = lab_subnets(ec2)
        if proxy is not None:
            proxy.subnet_zones = zones
        slurm.start()
        watcher.start()
    except BaseException:
        lab.stop()
        raise
    return lab


@contextlib.contextmanager
def burst_lab(lab_dir: Path, **kwargs: Any) -> Iterator[BurstLab]:
    lab = start_burst_lab(lab_dir, **kwargs)
    try:
        yield lab
    finally:
        lab.stop()
