"""A small adapter over Slurm's ``scontrol`` for the daemon (the ``burst-reconcile`` rule).

It reads the nodes with ``scontrol --json show nodes`` (Slurm 23.02 on) and, only where scontrol
has no ``--json`` (22.05 answers "unrecognized option '--json'"), ``scontrol -o show nodes``
(one line per node, ``Key=Value`` fields; scontrol(1), "-o, --oneliner"), and sets nodes' states
with ``scontrol update nodename=... state=...`` (scontrol(1), "NODES - SPECIFICATIONS FOR UPDATE
COMMAND": ``State=POWER_DOWN_FORCE``, ``State=POWER_DOWN_ASAP``, ``State=DOWN Reason=...``). The
commands run through :mod:`coreburst.common.slurmcmd`: every call has a timeout; any failure is
one ``SlurmError`` line.

Node states as scontrol prints them: a base state (IDLE, ALLOCATED, MIXED, DOWN, ...) joined
with ``+`` to flags (CLOUD, POWERED_DOWN, POWERING_UP, POWERING_DOWN, POWER_DOWN, DRAIN,
NOT_RESPONDING, ...), e.g. ``IDLE+CLOUD+POWERED_DOWN`` (slurm.conf(5) / scontrol(1) on Slurm
22.05; REFERENCE.md "Slurm power saving"); ``--json`` gives the same names as a list.

    >>> n = parse_nodes("NodeName=od-1 Arch=x86_64 State=ALLOCATED+CLOUD BootTime=None")["od-1"]
    >>> n.cloud, n.busy, n.powered_down
    (True, True, False)
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from coreburst.common.slurmcmd import (
    INSTALL_HINT,
    SlurmError,
    SlurmTools,
    call,
    slurm_minutes,
    slurm_number,
)

# A field starts at a word followed by '=' after whitespace; its value runs to the next one
# (values such as OS= contain spaces).
_FIELD = re.compile(r"(?:^|\s)([A-Za-z_]+)=(.*?)(?=\s+[A-Za-z_]+=|\s*$)")
# ``scontrol -o show node`` prints the fields it fills itself first and the free text that
# operators (and coreburst) write last, in this order, each only when set: ``Reason=<first line>
# [<user>@<time>]`` (further lines after eight spaces), ``Comment=``, ``Extra=``
# (src/api/node_info.c, ``slurm_sprint_node_table``, tag slurm-22-05-8-1; 24.11 and 26.05 keep
# that order and add InstanceId=, InstanceType= and Topology= after Extra=). The free text may
# hold `` State=IDLE`` or any other ``Key=``: it is never read as a field of its own.
_FREE_TEXT = ("Reason", "Comment", "Extra")
_TAIL = re.compile(r"\s(?=(?:Reason|Comment|Extra)=)")
# The stamp after a Reason's first line (``slurm_make_time_str``: %FT%T by default).
_STAMP = re.compile(r" \[[^\s\[\]]*@[^\s\[\]]*\]")
# What 22.05's scontrol says to --json (Slurm 23.02 added it): the one answer that means "read
# the text instead"; any other failure is an error.
NO_JSON = "unrecognized option '--json'"
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

    @property
    def comment(self) -> str:
        return self.fields.get("Comment", "")


def _free_text(tail: str) -> dict[str, str]:
    """Reason, Comment and Extra from the end of a ``-o`` line (``tail`` starts at the first
    of them). Each value runs to the next of the later keys; a Reason runs at least past its
    ``[user@time]`` stamp, so a Reason holding `` Comment=`` before its stamp stays whole. What
    stays ambiguous (text only: 22.05): a Reason holding `` Comment=`` or `` Extra=`` after
    its first line or with no stamp, a Comment holding `` Extra=``: the value is cut there."""
    out: dict[str, str] = {}
    rest = tail
    for i, key in enumerate(_FREE_TEXT):
        if not rest.startswith(f"{key}="):
            continue
        body = rest[len(key) + 1 :]
        start = 0
        if key == "Reason" and (stamp := _STAMP.search(body)):
            start = stamp.end()
        cuts = [body.find(f" {k}=", start) for k in _FREE_TEXT[i + 1 :]]
        end = min((c for c in cuts if c >= 0), default=len(body))
        out[key] = body[:end].rstrip()
        rest = body[end + 1 :]
    return out


def _states(text: str) -> frozenset[str]:
    # scontrol may mark states with a suffix (*, ~, #, %, !, $, @, ^, -) in some views.
    return frozenset(s.strip("*~#%!$@^-") for s in text.upper().split("+") if s)


def parse_nodes(text: str) -> dict[str, SlurmNode]:
    """node name -> node, from ``scontrol -o show nodes`` output (Slurm 22.05: it has no
    ``--json``). The fields scontrol fills come from before the first Reason=, Comment= or
    Extra=; those three from the rest (:func:`_free_text`), so their text cannot stand for
    State, NodeAddr or BootTime."""
    out: dict[str, SlurmNode] = {}
    for raw in text.splitlines():
        line = raw.strip()
        tail = _TAIL.search(line)
        head = line[: tail.start()] if tail else line
        fields = {m.group(1): m.group(2) for m in _FIELD.finditer(head)}
        if tail:
            fields.update(_free_text(line[tail.end() :]))
        name = fields.get("NodeName")
        if not name:
            continue
        out[name] = SlurmNode(
            name,
            _states(fields.get("State", "")),
            fields.get("Reason", ""),
            fields.get("BootTime", ""),
            fields,
        )
    return out


def _slurm_time(epoch: int) -> str:
    """A time as scontrol prints it: local time, ``%Y-%m-%dT%H:%M:%S`` (slurm_make_time_str's
    default), so a node read from JSON has the BootTime and Reason stamp the text gives."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


def _reason(reason: str, when: int | None, user: str) -> str:
    """A node's Reason as ``scontrol -o show node`` prints it: the first line, `` [user@time]``
    when Slurm recorded when it was set, the other lines after eight spaces (node_info.c, tag
    slurm-22-05-8-1). Callers key on it (a new stamp is a new failure)."""
    lines = [x for x in reason.split("\n") if x]
    if not lines:
        return ""
    stamp = f" [{user}@{_slurm_time(when)}]" if when else ""
    return lines[0] + stamp + "".join(f"        {x}" for x in lines[1:])


def _text(v: Any) -> str:
    """A JSON value as the text form prints it (lists comma-joined)."""
    if v is None:
        return ""
    if isinstance(v, list):
        return ",".join(_text(x) for x in v)
    return str(v)


# The text form's field names of what ``scontrol --json show nodes`` gives (data_parser NODE;
# the same keys from v0.0.39, Slurm 23.02, to v0.0.45, 26.05).
_JSON_FIELDS = {
    "NodeAddr": "address",
    "NodeHostName": "hostname",
    "Arch": "architecture",
    "OS": "operating_system",
    "Version": "version",
    "Gres": "gres",
    "CfgTRES": "tres",
    "AvailableFeatures": "features",
    "ActiveFeatures": "active_features",
    "Partitions": "partitions",
}


def parse_nodes_json(text: str) -> dict[str, SlurmNode]:
    """node name -> node, from ``scontrol --json show nodes`` (Slurm 23.02 on): ``nodes[]``
    with ``name``, ``state`` (the base state then its flags: ``["IDLE", "CLOUD",
    "POWERED_DOWN"]``), ``reason``, ``reason_changed_at``, ``reason_set_by_user``, ``comment``,
    ``extra``, ``boot_time`` (Unix seconds; 23.11 on as ``{"set", "infinite", "number"}``),
    ``address``. ``fields`` holds them under the text form's names (NodeAddr, Reason,
    Comment, BootTime, State, ...), with Reason and BootTime as the text prints them. Malformed
    output, or a document listing errors, raises ``SlurmError`` (one line): a partial node list
    is never acted on."""
    try:
        doc = json.loads(text)
    except ValueError:
        raise SlurmError("scontrol --json show nodes: output is not JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        raise SlurmError("scontrol --json show nodes: no 'nodes' list in the output")
    errors = doc.get("errors") or []
    if errors:
        first = errors[0] if isinstance(errors, list) else errors
        said = (
            (first.get("error") or first.get("description")) if isinstance(first, dict) else first
        )
        raise SlurmError(f"scontrol --json show nodes: Slurm reported an error: {said}")
    out: dict[str, SlurmNode] = {}
    for item in doc["nodes"]:
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or not name:
            raise SlurmError("scontrol --json show nodes: a node entry without a name")
        raw = item.get("state")
        if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
            raise SlurmError(f"scontrol --json show nodes: node {name}: 'state' is not a list")
        boot = slurm_number(item.get("boot_time"))
        reason = _reason(
            _text(item.get("reason")),
            slurm_number(item.get("reason_changed_at")),
            _text(item.get("reason_set_by_user")),
        )
        fields = {"NodeName": name, "State": "+".join(raw)}
        fields |= {k: _text(item.get(j)) for k, j in _JSON_FIELDS.items()}
        fields["BootTime"] = _slurm_time(boot) if boot else "None"
        # As in the text, Reason=, Comment= and Extra= only when set.
        free = {"Reason": reason, "Comment": _text(item.get("comment"))}
        free["Extra"] = _text(item.get("extra"))
        fields |= {k: v for k, v in free.items() if v}
        out[name] = SlurmNode(name, _states(fields["State"]), reason, fields["BootTime"], fields)
    return out


@dataclass
class Scontrol(SlurmTools):
    """``scontrol`` from ``bin_dir`` (or PATH), reading ``conf`` (or SLURM_CONF), and the node
    and reservation verbs the daemon's rules use.

        >>> Scontrol(conf=Path("/etc/slurm/slurm.conf"), timeout_s=10).nodes()  # doctest: +SKIP
    """

    # False once scontrol answered --json with NO_JSON (22.05): asked once per instance.
    has_json: bool | None = field(default=None, init=False, repr=False, compare=False)

    def run(self, *args: str) -> str:
        return self.scontrol(*args)

    def nodes(self) -> dict[str, SlurmNode]:
        """Every node: ``scontrol --json show nodes`` where scontrol has it (23.02 on), else
        ``scontrol -o show nodes``. Only scontrol's own "unrecognized option '--json'" sends
        it to the text; a timeout, a controller that does not answer or anything else is a
        ``SlurmError``, as before."""
        if self.has_json is not False:
            done = call(
                "scontrol", "--json", "show", "nodes", bin_dir=self.bin_dir, conf=self.conf,
                timeout_s=self.timeout_s, hint=f"{INSTALL_HINT} or set slurm_bin_dir",
            )  # fmt: skip
            if done.returncode != 0 and NO_JSON in done.said:
                self.has_json = False
            else:
                nodes = parse_nodes_json(done.check().text())
                self.has_json = True
                return nodes
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
