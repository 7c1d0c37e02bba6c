"""A small adapter over Slurm's ``scontrol`` for the daemon (the ``burst-reconcile`` rule).

It reads ``scontrol -o show nodes`` (one line per node, ``Key=Value`` fields; scontrol(1),
"-o, --oneliner") and sets nodes' states with ``scontrol update nodename=... state=...``
(scontrol(1), "NODES - SPECIFICATIONS FOR UPDATE COMMAND": ``State=POWER_DOWN_FORCE``,
``State=POWER_DOWN_ASAP``, ``State=DOWN Reason=...``). The commands run through
:mod:`coreburst.common.slurmcmd`: every call has a timeout; any failure is one ``SlurmError``
line.

Node states as scontrol prints them: a base state (IDLE, ALLOCATED, MIXED, DOWN, ...) joined
with ``+`` to flags (CLOUD, POWERED_DOWN, POWERING_UP, POWERING_DOWN, POWER_DOWN, DRAIN,
NOT_RESPONDING, ...), e.g. ``IDLE+CLOUD+POWERED_DOWN`` (slurm.conf(5) / scontrol(1) on Slurm
22.05; REFERENCE.md "Slurm power saving").

    >>> n = parse_nodes("NodeName=od-1 Arch=x86_64 State=ALLOCATED+CLOUD BootTime=None")["od-1"]
    >>> n.cloud, n.busy, n.powered_down
    (True, True, False)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from coreburst.common.slurmcmd import SlurmError, SlurmTools, slurm_minutes, slurm_number

# A field starts at a word followed by '=' after whitespace; its value runs to the next one
# (values such as Reason= and OS= contain spaces).
_FIELD = re.compile(r"(?:^|\s)([A-Za-z_]+)=(.*?)(?=\s+[A-Za-z_]+=|\s*$)")
BUSY = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})
POWERED_DOWN = frozenset({"POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN"})


@dataclass(frozen=True)
class SlurmNode:
    name: str
    states: frozenset[str]
    reason: str = ""
    boot_time: str = ""
    fields: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def cloud(self) -> bool:
        return "CLOUD" in self.states

    @property
    def busy(self) -> bool:
        """Running (or finishing) a job: never take its instance away."""
        return bool(self.states & BUSY)

    @property
    def powered_down(self) -> bool:
        """Powered down, powering down, or queued to: Slurm wants no instance under it."""
        return bool(self.states & POWERED_DOWN)

    @property
    def powering_up(self) -> bool:
        return "POWERING_UP" in self.states


def parse_nodes(text: str) -> dict[str, SlurmNode]:
    """node name -> node, from ``scontrol -o show nodes`` output."""
    out: dict[str, SlurmNode] = {}
    for line in text.splitlines():
        fields = {m.group(1): m.group(2) for m in _FIELD.finditer(line.strip())}
        name = fields.get("NodeName")
        if not name:
            continue
        # scontrol may mark states with a suffix (*, ~, #, %, !, $, @, ^, -) in some views.
        states = frozenset(
            s.strip("*~#%!$@^-") for s in fields.get("State", "").upper().split("+") if s
        )
        out[name] = SlurmNode(
            name, states, fields.get("Reason", ""), fields.get("BootTime", ""), fields
        )
    return out


class Scontrol(SlurmTools):
    """``scontrol`` from ``bin_dir`` (or PATH), reading ``conf`` (or SLURM_CONF), and the node
    and reservation verbs the daemon's rules use.

        >>> Scontrol(conf=Path("/etc/slurm/slurm.conf"), timeout_s=10).nodes()  # doctest: +SKIP
    """

    def run(self, *args: str) -> str:
        return self.scontrol(*args)

    def nodes(self) -> dict[str, SlurmNode]:
        return parse_nodes(self.run("-o", "show", "nodes"))

    def power_down(self, nodes: list[str]) -> str:
        """Forced power-down (jobs on the node are requeued; SuspendProgram runs)."""
        self.run("update", "nodename=" + ",".join(nodes), "state=power_down_force")
        return "scontrol update state=power_down_force"

    def reservations(self) -> list[str]:
        """Names of the current reservations (``scontrol -o show reservation``)."""
        out = self.run("-o", "show", "reservation")
        return re.findall(r"^ReservationName=(\S+)", out, flags=re.M)

    def reserve(self, name: str, nodes: list[str], minutes: int | None) -> str:
        """A MAINT reservation: Slurm neither gives the nodes to pending jobs nor powers them
        up (scontrol(1), "RESERVATIONS"; REFERENCE.md "Slurm power saving"). OVERLAP: the
        nodes may already be in another reservation (the spend gate's). ``minutes``: it ends by
        itself after that long; None: until deleted."""
        self.run(
            "create", "reservation", f"ReservationName={name}", "Nodes=" + ",".join(nodes),
            "Users=root", "Flags=MAINT,IGNORE_JOBS,OVERLAP", "StartTime=now",
            f"Duration={minutes if minutes is not None else 'UNLIMITED'}",
        )  # fmt: skip
        return "scontrol create reservation"

    def down(self, nodes: list[str], reason: str) -> str:
        self.run("update", "nodename=" + ",".join(nodes), "state=down", f"reason={reason}")
        return "scontrol update state=down"


# -- the burst spend gate's holds ------------------------------------------------------------


def power_down_when_idle(sc: Scontrol, nodes: list[str]) -> str:
    """``State=POWER_DOWN_ASAP`` (Slurm 21.08+): Slurm drains the nodes, so no new job lands
    on them, lets running jobs finish (none is killed), then powers them down and its
    SuspendProgram ends the instances (scontrol(1), "NODES - SPECIFICATIONS FOR UPDATE
    COMMAND"). Plain ``POWER_DOWN`` would leave a busy node schedulable until it is idle. Slurm
    clears the drain (reason ``POWER_DOWN_ASAP``) when it powers the node down
    (src/slurmctld/power_save.c), so the node can be resumed for later jobs.

        >>> power_down_when_idle(Scontrol(), ["od-1"])  # doctest: +SKIP
        'scontrol update state=power_down_asap'
    """
    sc.run("update", "nodename=" + ",".join(nodes), "state=power_down_asap")
    return "scontrol update state=power_down_asap"


def delete_reservation(sc: Scontrol, name: str) -> str:
    sc.run("delete", f"ReservationName={name}")
    return "scontrol delete reservation"


# -- jobs and the GPUs they hold (the ``core-idle`` rule) ---------------------------------------
# Read from ``squeue --json`` (Slurm's OpenAPI data parser; 22.05 prints plugin openapi/v0.0.38):
# per job ``job_id``, ``user_name``, ``account``, ``partition``, ``start_time`` (Unix seconds),
# ``time_limit`` (minutes), ``batch_flag`` (false for salloc/srun: interactive), ``comment``,
# ``restart_cnt``, the job's nodes and ``gres_detail``, one entry per allocated node in the
# nodes' order, e.g. ``gpu:h100:2(IDX:0-1)`` (the same text as ``scontrol -d show job``'s
# ``GRES=``). The nodes are ``job_resources.allocated_nodes[].nodename`` up to Slurm 23.11
# (data_parser v0.0.38-v0.0.40) and ``job_resources.nodes.allocation[]`` (``index``, ``name``)
# from 24.05 (v0.0.41+; src/plugins/data_parser/v0.0.41/parsers.c, ``JOB_RES_NODE``). Slurm
# 23.02+ wraps numbers as ``{"set": true, "number": N}`` and makes ``job_state`` a list. Every
# form is read; tests/fixtures/slurm/ has one output per layout.
_GPU_IDX = re.compile(r"gpu(?::[^:(,]+)?(?::\d+)?\(IDX:([^)]*)\)")


@dataclass(frozen=True)
class SlurmJob:
    """A running job and the GPUs it holds: node name -> GPU indices (gres.conf order)."""

    job_id: str
    user: str
    account: str
    partition: str
    start: datetime
    time_limit: timedelta | None  # None: no limit
    gpus: dict[str, tuple[int, ...]]
    interactive: bool
    comment: str = ""
    restarts: int = 0
    name: str = ""

    @property
    def gpu_count(self) -> int:
        return sum(len(v) for v in self.gpus.values())


def gpu_indices(gres: str) -> tuple[int, ...]:
    """GPU indices in one node's GRES detail.

    >>> gpu_indices("gpu:h100:3(IDX:0,2-3)"), gpu_indices("gpu:2(IDX:4-5)"), gpu_indices("")
    ((0, 2, 3), (4, 5), ())
    """
    out: list[int] = []
    for m in _GPU_IDX.finditer(gres):
        for raw in m.group(1).split(","):
            part = raw.strip()
            if not part or part.upper() == "N/A":
                continue
            lo, _, hi = part.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise SlurmError(f"GRES detail {gres!r}: index {part!r} is not a number or range")
            out.extend(range(int(lo), int(hi or lo) + 1))
    return tuple(out)


def _running(job: dict[str, Any]) -> bool:
    st = job.get("job_state")
    states = st if isinstance(st, list) else [st]
    return "RUNNING" in states


def _job_nodes(res: Any) -> list[object] | None:
    """A job's node names in allocation order, from either ``job_resources`` layout; None when
    it has neither (a pending job, or a layout this code does not know)."""
    if not isinstance(res, dict):
        return None
    nodes = res.get("nodes")
    if isinstance(nodes, dict) and isinstance(nodes.get("allocation"), list):
        # 24.05+: listed by node ``index``, the order gres_detail follows (_dump_node_res).
        return [n.get("name") for n in nodes["allocation"] if isinstance(n, dict)]
    if isinstance(res.get("allocated_nodes"), list):
        return [n.get("nodename") for n in res["allocated_nodes"] if isinstance(n, dict)]
    return None


def parse_jobs(text: str) -> list[SlurmJob]:
    """The running jobs in ``squeue --json`` output. Malformed output raises ``SlurmError``
    (one line): a partly read job list is never acted on."""
    try:
        doc = json.loads(text)
    except ValueError:
        raise SlurmError("squeue --json: output is not JSON") from None
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        raise SlurmError("squeue --json: no 'jobs' list in the output")
    out: list[SlurmJob] = []
    for j in jobs:
        if not isinstance(j, dict) or not _running(j):
            continue
        jid = slurm_number(j.get("job_id"))
        start = slurm_number(j.get("start_time"))
        if jid is None or start is None:
            raise SlurmError(f"squeue --json: a running job lacks job_id or start_time: {j!r:.80}")
        names = _job_nodes(j.get("job_resources"))
        detail = j.get("gres_detail") or []
        if not isinstance(detail, list) or not all(isinstance(d, str) for d in detail):
            raise SlurmError(f"squeue --json: job {jid}: gres_detail is not a list of strings")
        if detail and names is None:
            raise SlurmError(
                f"squeue --json: job {jid}: holds GRES but lists no nodes (neither "
                "job_resources.allocated_nodes, Slurm <= 23.11, nor "
                "job_resources.nodes.allocation, 24.05+)"
            )
        names = names or []
        if not all(isinstance(n, str) and n for n in names):
            raise SlurmError(f"squeue --json: job {jid}: an allocated node has no name")
        if detail and len(detail) != len(names):
            raise SlurmError(
                f"squeue --json: job {jid}: {len(detail)} gres_detail entries for "
                f"{len(names)} allocated nodes"
            )
        gpus = {str(n): gpu_indices(d) for n, d in zip(names, detail, strict=False)}
        limit = slurm_minutes(j.get("time_limit"))
        out.append(
            SlurmJob(
                job_id=str(jid),
                user=str(j.get("user_name") or j.get("user_id") or ""),
                account=str(j.get("account") or ""),
                partition=str(j.get("partition") or ""),
                start=datetime.fromtimestamp(start, UTC),
                time_limit=None if limit is None else timedelta(minutes=limit),
                gpus={n: ix for n, ix in gpus.items() if ix},
                interactive=j.get("batch_flag") is False,
                comment=str(j.get("comment") or ""),
                restarts=slurm_number(j.get("restart_cnt")) or 0,
                name=str(j.get("name") or ""),
            )
        )
    return out


def run_tool(
    tool: str, *args: str, bin_dir: Path | None, conf: Path | None, timeout_s: float
) -> str:
    """Run a Slurm client (``squeue``, ``scontrol``, ``scancel``); any failure is one
    ``SlurmError`` line (:class:`coreburst.common.slurmcmd.SlurmTools`)."""
    return SlurmTools(bin_dir, conf, timeout_s).tool(tool, *args)


class SlurmJobs(SlurmTools):
    """Running jobs, and requeue / cancel (scontrol(1) "requeue", scancel(1))."""

    def running(self) -> list[SlurmJob]:
        return parse_jobs(self.squeue("--json", "--states=RUNNING"))

    def requeue(self, job_id: str) -> str:
        """Back to pending (the job must be requeueable; batch jobs are by default)."""
        self.scontrol("requeue", job_id)
        return f"scontrol requeue {job_id}"

    def cancel(self, job_id: str) -> str:
        self.tool("scancel", job_id)
        return f"scancel {job_id}"
