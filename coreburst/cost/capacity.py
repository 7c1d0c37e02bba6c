"""What the core could have run: each core node's GPUs and the time Slurm had it in service.

Idle core GPU-hours are ``GPUs x in-service time - GPU-seconds jobs held`` per node
(:func:`coreburst.cost.ledger.build_ledger`). The parts come from Slurm itself:

* **GPUs per node**: ``scontrol --json show node`` (23.02 on: ``nodes[].name``, ``tres``,
  ``gres``), else ``scontrol -o show node`` (22.05 has no ``--json`` there: one line per node,
  ``NodeName=``, ``Gres=gpu:h100:8``, ``CfgTRES=...,gres/gpu=8``). The count is the node's
  ``gres/gpu`` TRES where Slurm lists it, else the sum of its ``gpu`` GRES. A node whose count
  cannot be read is *unknown* (``None``), never idle.
* **Out of service**: Slurm's node events in slurmdbd (``sacctmgr list event``), which slurmctld
  opens when a node goes down, drains, fails or powers down and closes when it returns; an event
  still open runs to the end of the window. The cluster's own events (``Cluster Registered
  TRES``) say since when slurmdbd has the cluster at all: before that there is no record, so
  no capacity is counted there (missing data is never idle).

    >>> nodes, why = parse_scontrol_nodes(
    ...     "NodeName=core1 Arch=x86_64 Gres=gpu:h100:8 CfgTRES=cpu=2,gres/gpu=8\\n")
    >>> nodes
    {'core1': 8}
    >>> ev = parse_events("burstlab||100|Unknown||Cluster|Cluster Registered TRES\\n"
    ...                   "burstlab|core1|150|170|DRAIN|Node|fan swap [root@x]\\n", until=200)
    >>> ev.recorded_from, ev.out_of_service
    (100, {'core1': [(150, 170)]})
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from coreburst.common.slurmcmd import Runner, SlurmError, call
from coreburst.cost.accounting import (
    AccountingError,
    decode_output,
    gpu_count,
    slurm_time,
)

# sacctmgr(1) "list event" fields, in this order; Reason last: it is free text and may hold
# the delimiter.
EVENT_FIELDS = ("Cluster", "NodeName", "TimeStart", "TimeEnd", "State", "Event", "Reason")

_FIELD = re.compile(r"(?:^|\s)(NodeName|Gres|CfgTRES)=(\S*)")
_GRES = re.compile(r"^gpu(?::([A-Za-z0-9_.-]+))?(?::(\d+))?(?:\(.*\))?$")


@dataclass(frozen=True)
class CoreCapacity:
    """The core nodes' GPUs (``None``: unreadable, with ``unknown[node]`` saying why), their
    out-of-service spans, and since when slurmdbd has records (``None``: it has none)."""

    gpus: dict[str, int | None]
    unknown: dict[str, str]
    out_of_service: dict[str, list[tuple[int, int]]]
    recorded_from: int | None
    source: str


@dataclass
class Events:
    out_of_service: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    recorded_from: int | None = None


def gpus_from_tres(tres: str) -> int | None:
    """``gres/gpu`` of a TRES string (``cpu=2,mem=1000M,gres/gpu=8``), by the same rule as a
    job's TRES (:func:`coreburst.cost.accounting.gpu_count`); None if not listed."""
    pairs = [
        (name, int(count))
        for name, _, count in (part.partition("=") for part in tres.split(","))
        if (name == "gres/gpu" or name.startswith("gres/gpu:")) and count.isdigit()
    ]
    return gpu_count(pairs) if pairs else None


def gpus_from_gres(gres: str) -> int | None:
    """GPUs of a node's ``Gres`` (``gpu:h100:8(S:0-1)``, ``gpu:8``, ``gpu:a100:2,gpu:h100:4``,
    ``(null)``: 0); None if an entry naming gpu cannot be read."""
    text = gres.strip()
    if text in ("", "(null)", "N/A"):
        return 0
    total = 0
    # split at commas outside parentheses: ``gpu:h100:8(S:0,1)`` is one entry
    for entry in re.split(r",(?![^()]*\))", text):
        if not entry.startswith("gpu"):
            continue
        m = _GRES.match(entry)
        if not m:
            return None
        kind, count = m.group(1), m.group(2)
        if count is None and kind is not None and kind.isdigit():  # gpu:8
            kind, count = None, kind
        total += int(count) if count is not None else 1
    return total


def _node_gpus(name: str, tres: str, gres: str) -> tuple[int | None, str]:
    from_tres = gpus_from_tres(tres)
    if from_tres is not None:
        return from_tres, ""
    from_gres = gpus_from_gres(gres)
    if from_gres is None:
        return None, f"node {name}: GRES {gres!r} unreadable"
    return from_gres, ""


def parse_scontrol_nodes(raw: bytes | str) -> tuple[dict[str, int | None], dict[str, str]]:
    """``node -> GPUs`` (None: unreadable) and ``node -> why`` from ``scontrol -o show node``.
    Raises :class:`AccountingError` when the output is not that."""
    text = decode_output(raw, "scontrol show node")
    nodes: dict[str, int | None] = {}
    why: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields: dict[str, str] = {}
        for key, value in _FIELD.findall(line):
            fields.setdefault(key, value)
        name = fields.get("NodeName", "")
        if not line.startswith("NodeName=") or not name:
            raise AccountingError(
                f"scontrol -o show node line {n}: not 'NodeName=... Gres=...' (one node a line)"
            )
        nodes[name], reason = _node_gpus(name, fields.get("CfgTRES", ""), fields.get("Gres", ""))
        if reason:
            why[name] = reason
    if not nodes:
        raise AccountingError("scontrol -o show node printed no nodes")
    return nodes, why


def parse_scontrol_json(raw: bytes | str) -> tuple[dict[str, int | None], dict[str, str]]:
    """As :func:`parse_scontrol_nodes`, from ``scontrol --json show node`` (23.02 on)."""
    try:
        doc = json.loads(decode_output(raw, "scontrol --json show node"))
    except json.JSONDecodeError as exc:
        raise AccountingError(
            f"scontrol --json show node: not JSON ({exc.msg} at line {exc.lineno})"
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        raise AccountingError("scontrol --json show node: no 'nodes' list in its output")
    nodes: dict[str, int | None] = {}
    why: dict[str, str] = {}
    for item in doc["nodes"]:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise AccountingError("scontrol --json show node: a node entry without a name")
        name = item["name"]
        tres, gres = item.get("tres"), item.get("gres")
        nodes[name], reason = _node_gpus(
            name, tres if isinstance(tres, str) else "", gres if isinstance(gres, str) else ""
        )
        if reason:
            why[name] = reason
    return nodes, why


def _epoch(value: str, n: int, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise AccountingError(
            f"sacctmgr list event line {n}: {what} {value!r} is not epoch seconds; run it with "
            "SLURM_TIME_FORMAT=%s"
        ) from None


def parse_events(raw: bytes | str, until: int) -> Events:
    """Node spans out of service and the cluster's first record, from ``sacctmgr -P -n list
    event format=`` :data:`EVENT_FIELDS` run with ``SLURM_TIME_FORMAT=%s``. An event still
    open (``Unknown`` end) runs to ``until``."""
    out = Events()
    for n, line in enumerate(decode_output(raw, "sacctmgr list event").splitlines(), 1):
        if not line.strip():
            continue
        cols = line.split("|")
        if len(cols) < len(EVENT_FIELDS):
            raise AccountingError(
                f"sacctmgr list event line {n}: {len(cols)} fields, expected "
                f"{len(EVENT_FIELDS)} ({','.join(EVENT_FIELDS)})"
            )
        _cluster, node, start_s, end_s, _state, kind = cols[:6]
        start = _epoch(start_s, n, "TimeStart")
        end = until if end_s in ("Unknown", "None", "") else _epoch(end_s, n, "TimeEnd")
        if kind == "Cluster":
            if out.recorded_from is None or start < out.recorded_from:
                out.recorded_from = start
        elif kind == "Node" and node:
            out.out_of_service.setdefault(node, []).append((start, max(start, end)))
        else:
            raise AccountingError(
                f"sacctmgr list event line {n}: event {kind!r} for node {node!r} is neither a "
                "Cluster nor a Node event"
            )
    return out


def events_args(since: int, until: int) -> list[str]:
    """sacctmgr's node and cluster events overlapping [since, until] (UTC)."""
    return [
        "sacctmgr", "--parsable2", "--noheader", "list", "event",
        f"start={slurm_time(since)}", f"end={slurm_time(until)}",
        f"format={','.join(EVENT_FIELDS)}",
    ]  # fmt: skip


class CapacityUnavailableError(RuntimeError):
    """scontrol or sacctmgr could not be run or refused: idle core GPU-hours are unknown."""


def _run(run: Runner, cmd: list[str], env: Mapping[str, str], timeout_s: float) -> bytes:
    """stdout of ``cmd``; :class:`CapacityUnavailableError` (one line) when it cannot answer."""
    try:
        return call(*cmd, env=env, timeout_s=timeout_s, run=run).check().stdout
    except SlurmError as exc:
        raise CapacityUnavailableError(str(exc)) from None


def read_core_capacity(
    core_of: Any,
    since: int,
    until: int,
    *,
    env: Mapping[str, str] | None = None,
    run: Runner = subprocess.run,
    timeout_s: float = 60,
) -> CoreCapacity:
    """GPUs of the nodes ``core_of(node)`` says are core, and their events, from Slurm.
    Raises :class:`AccountingError` for output that cannot be read (one line), and
    :class:`CapacityUnavailableError` when scontrol or sacctmgr cannot be asked."""
    base = dict(env if env is not None else os.environ)
    base.pop("SLURM_TIME_FORMAT", None)
    base["TZ"] = "UTC"
    try:
        raw = _run(run, ["scontrol", "--json", "show", "node"], base, timeout_s)
        gpus, why = parse_scontrol_json(raw)
        source = "scontrol --json show node"
    except CapacityUnavailableError:  # 22.05: no --json for scontrol
        raw = _run(run, ["scontrol", "-o", "show", "node"], base, timeout_s)
        gpus, why = parse_scontrol_nodes(raw)
        source = "scontrol -o show node"
    events = parse_events(
        _run(run, events_args(since, until), {**base, "SLURM_TIME_FORMAT": "%s"}, timeout_s),
        until,
    )
    core = {n: g for n, g in gpus.items() if core_of(n)}
    return CoreCapacity(
        gpus=core,
        unknown={n: w for n, w in why.items() if n in core},
        out_of_service={n: s for n, s in events.out_of_service.items() if n in core},
        recorded_from=events.recorded_from,
        source=f"{source}, sacctmgr list event",
    )
