"""``coreburst burst status``: a burst as a whole, from where each fact lives.

One document answers "why is my job not starting" and "why is this node down":

* **nodes by state** per pool (Slurm's CLOUD nodes, ``scontrol --json show nodes`` / ``-o``
  on 22.05): ``idle~`` (powered down, ready), ``launching`` (POWERING_UP), ``up``,
  ``draining``, ``powering-down``, ``down``; every node not idle~ or up with Slurm's reason;
* **holds** per pool: the reservations coreburst places (``coreburst-backoff-*``,
  ``coreburst-protect-*``, ``coreburst-spend-*``; ``scontrol -o show reservation``) with the
  EC2 code and why (the burst audit log's ``resume.pool_held`` / ``resume.failed`` /
  ``resume.held``) and until when (the reservation's EndTime; none: until an operator lifts
  it); and the (instance type, zone) **back-offs** the resume program keeps (``resume.backoff``
  events not yet over and not released by ``coreburst burst release-hold``);
* **spend**: per spend scope, its limits, what the guardrails' latest snapshot says is spent,
  what approved burst nodes may still cost (coreburst/burst/commitments.py) and what is left;
  no snapshot is "unknown", never $0;
* **jobs** pending for a burst partition, with Slurm's reason and coreburst's note
  (AdminComment);
* the **last launches and failures** with their EC2 codes (audit log);
* **instances with no node** (EC2, by the stack's tag) and **nodes with no instance**.

A source that cannot be read (scontrol, squeue, EC2, the audit log, the spend state) is named
under ``unknown`` and its part is left out, never shown as empty.

The same document is what the guardrails daemon exports on its metrics endpoint: the
burst-reconcile rule reads it each pass with :func:`read` and sets :func:`families` of it on
the daemon's registry (guardrails/metrics.py ``Metrics.burst_status``), so ``--format json``
and ``/metrics`` come from one document.

    $ coreburst burst status --stack prod
    $ coreburst burst status --stack prod --format json
    $ coreburst burst status --stack prod --watch --interval 5
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from coreburst.burst.holds import pool_of, pools_of, read_events
from coreburst.common.names import (
    BACKOFF_PREFIX,
    NODE_TAG_KEY,
    PROTECT_PREFIX,
    SPEND_HOLD_PREFIX,
    STACK_TAG_KEY,
)
from coreburst.common.slurmcmd import SlurmError, slurm_number

# Node states as status names them, in the order shown.
STATES = ("idle~", "launching", "up", "draining", "powering-down", "down")
# Audit events shown as launches and failures (coreburst/burst/power.py, slurm_side.py,
# gate.py, node_check.py write them).
LAUNCH_EVENTS = ("resume.launched",)
FAILURE_EVENTS = (
    "resume.failed",
    "resume.refused",
    "resume.held",
    "resume-fail",
    "health.failed",
)
LAST_EVENTS = 10
# What counts as a recent event for the per-code counts.
RECENT = timedelta(hours=24)
LIVE_STATES = ("pending", "running")
HELD_STATES = ("pending", "running", "stopping", "stopped")
_FIELD = re.compile(r"(\w+)=(\S*)")


# -- pure: Slurm's answers, classified ------------------------------------------------------------
def node_state(states: frozenset[str]) -> str:
    """One of :data:`STATES` for a CLOUD node's Slurm state flags (``IDLE+CLOUD+POWERED_DOWN``
    is idle~; ``DOWN+CLOUD+POWERED_DOWN``, a failed node powered off, is down).

    >>> node_state(frozenset({"IDLE", "CLOUD", "POWERED_DOWN"}))
    'idle~'
    >>> node_state(frozenset({"ALLOCATED", "CLOUD", "POWERING_UP"}))
    'launching'
    """
    if states & {"DOWN", "FAIL", "FAILING", "NOT_RESPONDING"}:
        return "down"
    if states & {"DRAIN", "DRAINING", "DRAINED"}:
        return "draining"
    if "POWERING_DOWN" in states:
        return "powering-down"
    if "POWERING_UP" in states:
        return "launching"
    if "POWERED_DOWN" in states:
        return "idle~"
    return "up"


@dataclass(frozen=True)
class Reservation:
    name: str
    nodes: str
    end: datetime | None  # None: until deleted (Duration=UNLIMITED)


def slurm_local_time(text: str) -> datetime | None:
    """A time as scontrol prints it (controller's local time, ``%Y-%m-%dT%H:%M:%S``)."""
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return t if t.tzinfo else t.astimezone()


def parse_reservations(text: str) -> list[Reservation]:
    """coreburst's reservations in ``scontrol -o show reservation`` output (one per line,
    ``ReservationName= StartTime= EndTime= Duration= Nodes= ...``; scontrol(1)); others
    are left out.

    >>> parse_reservations("ReservationName=coreburst-protect-od StartTime=2026-01-01T00:00:00 "
    ...     "EndTime=2027-01-01T00:00:00 Duration=UNLIMITED Nodes=od-[1-2]")
    [Reservation(name='coreburst-protect-od', nodes='od-[1-2]', end=None)]
    """
    out = []
    for line in text.splitlines():
        f = dict(_FIELD.findall(line))
        name = f.get("ReservationName", "")
        if not name.startswith("coreburst-"):
            continue
        end = None if f.get("Duration") == "UNLIMITED" else slurm_local_time(f.get("EndTime", ""))
        out.append(Reservation(name, f.get("Nodes", ""), end))
    return out


def _iso(t: float | datetime | None) -> str | None:
    if t is None:
        return None
    dt = t if isinstance(t, datetime) else datetime.fromtimestamp(t, UTC)
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _hold_kind(name: str) -> tuple[str, set[str]]:
    if name.startswith(BACKOFF_PREFIX):
        return "backoff", {name[len(BACKOFF_PREFIX) :].rsplit("-", 1)[0]}
    if name.startswith(PROTECT_PREFIX):
        return "protect", {name[len(PROTECT_PREFIX) :]}
    if name.startswith(SPEND_HOLD_PREFIX):
        return "spend", set()
    return "other", set()


def _released(events: list[dict[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for e in events:
        if e.get("event") == "operator.released":
            pool = str(e.get("pool", ""))
            out[pool] = max(out.get(pool, 0.0), float(e["ts"]))
    return out


def _hold_cause(
    resv: Reservation, kind: str, pool: str, events: list[dict[str, Any]]
) -> tuple[str | None, str | None, str]:
    """(EC2 code, its class, why) of a hold, from the audit events that placed it."""
    for e in reversed(events):
        if e.get("reservation") == resv.name and e.get("event") == "resume.pool_held":
            code = str(e.get("code"))
            return code, str(e.get("error_class") or ""), f"{code} ({e.get('error_class')})"
        if e.get("reservation") == resv.name and e.get("event") == "resume.held":
            return None, None, f"spend gate: {e.get('reason')}"
    if kind == "backoff":  # placed by the daemon after a capacity error (holds.py)
        for e in reversed(events):
            if e.get("event") == "resume.failed" and pool in pools_of(str(e.get("nodes", ""))):
                code = str(e.get("code"))
                return code, str(e.get("error_class") or ""), f"{code} (capacity)"
        return None, None, "capacity back-off"
    if kind == "protect":
        return None, None, "protected mode: repeated boot failures or an error an operator lifts"
    if kind == "spend":
        return None, None, "spend gate: projected cost over what the scope has left"
    return None, None, "coreburst reservation"


def _backoffs(events: list[dict[str, Any]], now: float) -> dict[str, list[dict[str, Any]]]:
    """Per pool, the (type, zone) choices backed off now: ``resume.backoff`` events whose
    ``seconds`` have not run out and that no ``operator.released`` came after."""
    released = _released(events)
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for e in events:
        if e.get("event") != "resume.backoff":
            continue
        pool, ts = str(e.get("pool", "")), float(e["ts"])
        until = ts + float(e.get("seconds") or 0)
        if until <= now or ts <= released.get(pool, -1.0):
            continue
        for choice in e.get("choices") or []:
            itype, _, zone = str(choice).partition("@")
            latest[(pool, str(choice))] = {
                "instance_type": itype,
                "zone": zone,
                "code": str(e.get("code")),
                "until": _iso(until),
            }
    out: dict[str, list[dict[str, Any]]] = {}
    for (pool, _), b in sorted(latest.items()):
        out.setdefault(pool, []).append(b)
    return out


def _event_row(e: dict[str, Any]) -> dict[str, Any]:
    nodes = str(e.get("nodes") or e.get("node") or "")
    code = e.get("code")
    why = e.get("reason") or e.get("error")
    if e.get("event") == "resume-fail" and not why:
        why = "did not register within ResumeTimeout"
    return {
        "at": _iso(float(e["ts"])),
        "event": str(e.get("event")),
        "pools": sorted(pools_of(nodes)),
        "nodes": nodes,
        "code": str(code) if code else None,
        "instances": [
            str(i) for i in (e.get("instances") or ([e["instance"]] if e.get("instance") else []))
        ],
        "why": str(why) if why else None,
    }


def _event_counts(events: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """Per (event, pool, code): the last time and how many within :data:`RECENT`."""
    agg: dict[tuple[str, str, str], dict[str, Any]] = {}
    for e in events:
        if e.get("event") not in LAUNCH_EVENTS + FAILURE_EVENTS:
            continue
        ts = float(e["ts"])
        nodes = str(e.get("nodes") or e.get("node") or "")
        for pool in sorted(pools_of(nodes)) or [""]:
            key = (str(e["event"]), pool, str(e.get("code") or ""))
            row = agg.setdefault(key, {"last": 0.0, "recent": 0})
            row["last"] = max(row["last"], ts)
            if now - ts <= RECENT.total_seconds():
                row["recent"] += 1
    return [
        {
            "event": k[0],
            "pool": k[1],
            "code": k[2],
            "last": _iso(v["last"]),
            "last_24h": v["recent"],
        }
        for k, v in sorted(agg.items())
    ]


@dataclass(frozen=True)
class Instance:
    instance_id: str
    state: str
    launch_time: datetime
    node: str | None


@dataclass(frozen=True)
class PendingJob:
    job: str
    user: str
    partition: str
    reason: str
    note: str  # coreburst's segments of the AdminComment


@dataclass
class Inputs:
    """What :func:`build` reads; ``None`` where a source could not be read (``unknown``
    says why)."""

    stack: str
    now: datetime
    nodes: dict[str, Any] | None  # name -> guardrails.adapters.slurm.SlurmNode
    reservations: list[Reservation] | None
    instances: list[Instance] | None
    events: list[dict[str, Any]] | None
    jobs: list[PendingJob] | None
    spend: list[dict[str, Any]] | None
    unknown: dict[str, str]


_TEXT_FIELDS = (
    "event",
    "nodes",
    "node",
    "code",
    "error_class",
    "reason",
    "error",
    "pool",
    "reservation",
    "instance",
)


def _sane(e: dict[str, Any]) -> bool:
    """An audit event whose fields have the types the power programs write (anything else
    in the log, e.g. a hand-edited or foreign line, is not read)."""
    return (
        all(isinstance(e.get(k), str | None) for k in _TEXT_FIELDS)
        and isinstance(e.get("seconds"), int | float | None)
        and not isinstance(e.get("seconds"), bool)
        and all(
            isinstance(e.get(k), list | None) and all(isinstance(x, str) for x in e.get(k) or [])
            for k in ("choices", "instances")
        )
    )


def build(i: Inputs) -> dict[str, Any]:
    """The status document (plain JSON data) from what was read. Pure."""
    now = i.now.timestamp()
    events = [e for e in i.events or [] if _sane(e)]
    cloud = {n: sn for n, sn in (i.nodes or {}).items() if sn.cloud and pool_of(n)}
    live: dict[str, str] = {}
    for inst in i.instances or []:
        if inst.node and inst.state in LIVE_STATES:
            live.setdefault(inst.node, inst.instance_id)
    pools: dict[str, dict[str, Any]] = {}

    def pool(name: str) -> dict[str, Any]:
        return pools.setdefault(
            name, {"nodes": dict.fromkeys(STATES, 0), "holds": [], "backoffs": []}
        )

    node_rows = []
    for name in sorted(cloud, key=_natural):
        sn = cloud[name]
        st = node_state(sn.states)
        p = pool_of(name) or ""
        pool(p)["nodes"][st] += 1
        node_rows.append(
            {
                "node": name,
                "pool": p,
                "state": st,
                "slurm_state": sn.fields.get("State") or "+".join(sorted(sn.states)),
                "reason": sn.reason or None,
                # coreburst's last word on the node (a failed boot check, a failed resume)
                "note": sn.comment if sn.comment.startswith("coreburst:") else None,
                "instance": live.get(name),
            }
        )
    for r in i.reservations or []:
        kind, named = _hold_kind(r.name)
        targets = named or pools_of(r.nodes) or {""}
        for p in sorted(targets):
            code, cls, why = _hold_cause(r, kind, p, events)
            pool(p)["holds"].append(
                {
                    "reservation": r.name,
                    "kind": kind,
                    "nodes": r.nodes,
                    "code": code,
                    "error_class": cls or None,
                    "why": why,
                    "until": _iso(r.end),
                }
            )
    for p, rows in _backoffs(events, now).items():
        pool(p)["backoffs"] = rows
    doc: dict[str, Any] = {
        "stack": i.stack,
        "at": _iso(i.now),
        "pools": {k: pools[k] for k in sorted(pools)},
        "nodes": node_rows if i.nodes is not None else None,
        "jobs": [vars(j) for j in i.jobs] if i.jobs is not None else None,
        "spend": i.spend,
        "events": None,
        "event_counts": None,
        "orphan_instances": None,
        "nodes_without_instance": None,
        "unknown": dict(sorted(i.unknown.items())),
    }
    if i.events is not None:
        shown = [e for e in events if e.get("event") in LAUNCH_EVENTS + FAILURE_EVENTS]
        doc["events"] = [_event_row(e) for e in reversed(shown[-LAST_EVENTS:])]
        doc["event_counts"] = _event_counts(events, now)
    if i.instances is not None and i.nodes is not None:
        doc["orphan_instances"] = _orphans(i.instances, i.nodes, i.now)
        doc["nodes_without_instance"] = [
            {"node": n, "pool": pool_of(n), "state": node_state(sn.states)}
            for n, sn in sorted(cloud.items(), key=lambda kv: _natural(kv[0]))
            if not sn.powered_down and not sn.powering_up and n not in live
        ]
    return doc


def _natural(name: str) -> tuple[str, int]:
    head, _, tail = name.rpartition("-")
    return (head, int(tail)) if tail.isdigit() else (name, 0)


def _orphans(
    instances: list[Instance], nodes: dict[str, Any], now: datetime
) -> list[dict[str, Any]]:
    """The stack's instances Slurm has no powered-up node for (as the burst-reconcile rule
    judges them; it terminates them after its orphan_timeout)."""
    out = []
    for inst in sorted(instances, key=lambda x: x.instance_id):
        sn = nodes.get(inst.node) if inst.node else None
        if inst.node is None:
            why = "no Slurm node tag"
        elif sn is None:
            why = f"Slurm has no node {inst.node}"
        elif sn.powered_down:
            why = f"node {inst.node} is {node_state(sn.states)} ({'+'.join(sorted(sn.states))})"
        else:
            continue
        out.append(
            {
                "instance": inst.instance_id,
                "node": inst.node,
                "state": inst.state,
                "launched": _iso(inst.launch_time),
                "age_s": int((now - inst.launch_time).total_seconds()),
                "why": why,
            }
        )
    return out


# -- text -----------------------------------------------------------------------------------------
def _until(iso: str | None, now: datetime) -> str:
    if iso is None:
        return "until an operator lifts it"
    left = datetime.fromisoformat(iso.replace("Z", "+00:00")) - now
    mins = max(0, int(left.total_seconds() // 60))
    return f"until {iso} ({mins} min left)"


def render(doc: dict[str, Any]) -> str:
    """The status for people: one block per pool, then spend, jobs, events, mismatches."""
    now = datetime.fromisoformat(str(doc["at"]).replace("Z", "+00:00"))
    out = [f"burst status of stack {doc['stack']} at {doc['at']}"]
    for what, why in doc["unknown"].items():
        out.append(f"  UNKNOWN {what}: {why}")
    for name, p in doc["pools"].items():
        counts = ", ".join(f"{n} {s}" for s, n in p["nodes"].items() if n)
        out.append("")
        out.append(f"pool {name}: {counts or 'no nodes'}")
        for h in p["holds"]:
            code = f" {h['code']}" if h["code"] else ""
            out.append(
                f"  HELD ({h['kind']}{code}) by {h['reservation']} on {h['nodes']}: "
                f"{h['why']}, {_until(h['until'], now)}"
            )
        for b in p["backoffs"]:
            out.append(
                f"  backed off {b['instance_type']} in {b['zone']}: {b['code']}, "
                f"{_until(b['until'], now)}"
            )
        for n in doc["nodes"] or []:
            if n["pool"] != name:
                continue
            if n["state"] in ("idle~", "up") and not n["reason"] and not n["note"]:
                continue
            line = f"  {n['node']} {n['state']}"
            if n["reason"]:
                line += f": {n['reason']}"
            elif n["note"]:  # (a failed boot check leaves both; the reason says it)
                line += f", last: {n['note']}"
            out.append(line)
    out.append("")
    if doc["spend"] is None:
        out.append("spend: unknown (see above)")
    elif not doc["spend"]:
        out.append("spend: no spend gate (coreburst:burst.spendGate not set)")
    for s in doc["spend"] or []:
        if s["unknown"]:
            out.append(
                f"spend {s['scope']}: ${s['committed_usd']:,.2f} committed; spent unknown "
                f"({s['unknown']})"
            )
            continue
        parts = [
            f"{period} ${s['spent_usd'][period]:,.2f} spent + ${s['committed_usd']:,.2f} "
            f"committed of ${lim:,.2f} (${s['left_usd'][period]:,.2f} left)"
            for period, lim in s["limits_usd"].items()
        ]
        out.append(f"spend {s['scope']}: " + "; ".join(parts))
    jobs = doc["jobs"]
    if jobs:
        out.append("")
        out.append(f"jobs waiting for a burst partition: {len(jobs)}")
        for j in jobs:
            note = f"; {j['note']}" if j["note"] else ""
            out.append(f"  job {j['job']} ({j['user']}, {j['partition']}): {j['reason']}{note}")
    if doc["events"]:
        out.append("")
        out.append("last launches and failures:")
        for e in doc["events"]:
            code = f" {e['code']}" if e["code"] else ""
            inst = f" {','.join(e['instances'])}" if e["instances"] else ""
            why = f": {e['why']}" if e["why"] else ""
            out.append(f"  {e['at']} {e['event']}{code} {e['nodes']}{inst}{why}")
    orphans = doc["orphan_instances"] or []
    lost = doc["nodes_without_instance"] or []
    if orphans or lost:
        out.append("")
    for o in orphans:
        out.append(
            f"instance with no node: {o['instance']} ({o['state']}, {o['age_s'] // 60} min "
            f"old): {o['why']}"
        )
    for n in lost:
        out.append(f"node with no instance: {n['node']} ({n['state']})")
    return "\n".join(out) + "\n"


# -- metrics --------------------------------------------------------------------------------------
# Every family :func:`families` exports (the Grafana dashboard's test checks its panels
# against these).
METRICS = {
    "coreburst_burst_nodes": "Burst nodes by pool and state (idle~, launching, up, draining, "
    "powering-down, down)",
    "coreburst_burst_node_not_ready": "1 per burst node neither idle~ nor up, with Slurm's reason",
    "coreburst_burst_pool_hold": "1 per hold on a pool (reservation, kind, EC2 code)",
    "coreburst_burst_pool_hold_until_timestamp_seconds": "When a pool's hold ends (Unix time); "
    "absent: until an operator lifts it",
    "coreburst_burst_backoff_until_timestamp_seconds": "When a backed-off (instance type, zone) "
    "choice may be offered to EC2 again",
    "coreburst_burst_spend_limit_usd": "A spend scope's limit per period",
    "coreburst_burst_spend_spent_usd": "A spend scope's spend per period (latest snapshot)",
    "coreburst_burst_spend_committed_usd": "What approved burst nodes may still cost",
    "coreburst_burst_spend_left_usd": "Limit - spent - committed per period",
    "coreburst_burst_pending_jobs": "Jobs pending for a burst partition, by partition and reason",
    "coreburst_burst_events_last_24h": "Launches and failures in the last 24 h by event, "
    "pool, code",
    "coreburst_burst_event_last_timestamp_seconds": "The last launch or failure by event, "
    "pool, code",
    "coreburst_burst_orphan_instances": "Instances of the stack with no powered-up Slurm node",
    "coreburst_burst_orphan_instance_age_seconds": "Age of each instance with no node",
    "coreburst_burst_nodes_without_instance": "Powered-up burst nodes with no live instance",
    "coreburst_burst_status_unknown": "1 per source status could not read (scontrol, ec2, ...)",
    "coreburst_burst_status_timestamp_seconds": "When the status was read",
}


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def families(doc: dict[str, Any]) -> list[GaugeMetricFamily]:
    """The status document as Prometheus gauges (a family per :data:`METRICS` name)."""
    fam: dict[str, GaugeMetricFamily] = {}

    def g(name: str, labels: Iterable[str] = ()) -> GaugeMetricFamily:
        if name not in fam:
            fam[name] = GaugeMetricFamily(name, METRICS[name], labels=list(labels))
        return fam[name]

    st = g("coreburst_burst_nodes", ["pool", "state"])
    ready = g("coreburst_burst_node_not_ready", ["pool", "node", "state", "reason"])
    hold = g("coreburst_burst_pool_hold", ["pool", "reservation", "kind", "code"])
    hold_until = g(
        "coreburst_burst_pool_hold_until_timestamp_seconds", ["pool", "reservation", "kind", "code"]
    )
    back = g(
        "coreburst_burst_backoff_until_timestamp_seconds", ["pool", "instance_type", "zone", "code"]
    )
    for pname, p in doc["pools"].items():
        for s, n in p["nodes"].items():
            st.add_metric([pname, s], n)
        for h in p["holds"]:
            labels = [pname, h["reservation"], h["kind"], h["code"] or ""]
            hold.add_metric(labels, 1)
            if h["until"]:
                hold_until.add_metric(labels, _epoch(h["until"]))
        for b in p["backoffs"]:
            back.add_metric([pname, b["instance_type"], b["zone"], b["code"]], _epoch(b["until"]))
    for n in doc["nodes"] or []:
        if n["state"] not in ("idle~", "up"):
            ready.add_metric([n["pool"], n["node"], n["state"], n["reason"] or ""], 1)
    lim = g("coreburst_burst_spend_limit_usd", ["scope", "period"])
    spent = g("coreburst_burst_spend_spent_usd", ["scope", "period"])
    com = g("coreburst_burst_spend_committed_usd", ["scope"])
    left = g("coreburst_burst_spend_left_usd", ["scope", "period"])
    for s in doc["spend"] or []:
        com.add_metric([s["scope"]], s["committed_usd"])
        for period, usd in s["limits_usd"].items():
            lim.add_metric([s["scope"], period], usd)
            if not s["unknown"]:  # unknown is left out, never 0
                spent.add_metric([s["scope"], period], s["spent_usd"][period])
                left.add_metric([s["scope"], period], s["left_usd"][period])
    pj = g("coreburst_burst_pending_jobs", ["partition", "reason"])
    by: dict[tuple[str, str], int] = {}
    for j in doc["jobs"] or []:
        by[(j["partition"], j["reason"])] = by.get((j["partition"], j["reason"]), 0) + 1
    for (part, reason), n in sorted(by.items()):
        pj.add_metric([part, reason], n)
    recent = g("coreburst_burst_events_last_24h", ["event", "pool", "code"])
    last = g("coreburst_burst_event_last_timestamp_seconds", ["event", "pool", "code"])
    for c in doc["event_counts"] or []:
        recent.add_metric([c["event"], c["pool"], c["code"]], c["last_24h"])
        last.add_metric([c["event"], c["pool"], c["code"]], _epoch(c["last"]))
    orph = g("coreburst_burst_orphan_instances")
    age = g("coreburst_burst_orphan_instance_age_seconds", ["instance", "node", "why"])
    if doc["orphan_instances"] is not None:
        orph.add_metric([], len(doc["orphan_instances"]))
        for o in doc["orphan_instances"]:
            age.add_metric([o["instance"], o["node"] or "", o["why"]], o["age_s"])
    lost = g("coreburst_burst_nodes_without_instance", ["pool"])
    if doc["nodes_without_instance"] is not None:
        per: dict[str, int] = {p: 0 for p in doc["pools"]}
        for n in doc["nodes_without_instance"]:
            per[n["pool"]] = per.get(n["pool"], 0) + 1
        for pname, n in sorted(per.items()):
            lost.add_metric([pname], n)
    unk = g("coreburst_burst_status_unknown", ["source"])
    for source in doc["unknown"]:
        unk.add_metric([source], 1)
    g("coreburst_burst_status_timestamp_seconds").add_metric([], _epoch(doc["at"]))
    return list(fam.values())


# -- reading the sources --------------------------------------------------------------------------
@dataclass
class Sources:
    """Where :func:`read` finds each fact. ``slurm``: guardrails.adapters.slurm.Scontrol (with
    its deadline); ``ec2``: clients (each with its deadline) of the regions the stack runs in;
    ``spend``: ``(store, scope, daily limit, monthly limit)`` or None (no spend gate)."""

    stack: str
    slurm: Any
    ec2: list[Any]
    audit_log: Path | None
    spend: Callable[[], list[tuple[Any, str, float | None, float | None]]] | None = None
    stack_tag_key: str = STACK_TAG_KEY
    node_tag_key: str = NODE_TAG_KEY


def read_instances(ec2: Any, stack: str, stack_tag: str, node_tag: str) -> list[Instance]:
    out = []
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[
            {"Name": f"tag:{stack_tag}", "Values": [stack]},
            {"Name": "instance-state-name", "Values": list(HELD_STATES)},
        ]
    )
    for page in pages:
        for res in page["Reservations"]:
            for inst in res["Instances"]:
                tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
                out.append(
                    Instance(
                        inst["InstanceId"],
                        inst["State"]["Name"],
                        inst["LaunchTime"],
                        tags.get(node_tag),
                    )
                )
    return out


def _state_names(v: Any) -> list[str]:
    return [str(x) for x in v] if isinstance(v, list) else [str(v)] if v else []


def pending_jobs(squeue_json: str, partitions: set[str]) -> list[PendingJob]:
    """Jobs pending for one of ``partitions`` in ``squeue --json`` output (22.05's plain
    fields and 23.02+'s lists and wrapped numbers), with Slurm's reason and coreburst's
    AdminComment segments."""
    try:
        doc = json.loads(squeue_json)
    except ValueError:
        raise SlurmError("squeue --json: output is not JSON") from None
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        raise SlurmError("squeue --json: no 'jobs' list in the output")
    out = []
    for j in jobs:
        if not isinstance(j, dict) or "PENDING" not in _state_names(j.get("job_state")):
            continue
        parts = str(j.get("partition") or "")
        if not set(parts.split(",")) & partitions:
            continue
        comment = str(j.get("admin_comment") or "")
        note = " | ".join(
            s.strip() for s in comment.split("|") if s.strip().startswith("coreburst")
        )
        out.append(
            PendingJob(
                str(slurm_number(j.get("job_id"))),
                str(j.get("user_name") or ""),
                parts,
                str(j.get("state_reason") or ""),
                note,
            )
        )
    return sorted(out, key=lambda p: int(p.job) if p.job.isdigit() else 0)


def spend_rows(
    scopes: list[tuple[Any, str, float | None, float | None]], now: datetime
) -> list[dict[str, Any]]:
    """Per spend scope: limits, the latest snapshot's spend, what approved nodes may still cost
    (the gate's ledger), what is left. No snapshot: spent and left are unknown, not $0."""
    from coreburst.burst.commitments import SpendLedger

    out = []
    for store, scope, daily, monthly in scopes:
        committed = SpendLedger(store, scope).committed(now)
        limits = {k: v for k, v in (("today", daily), ("this month", monthly)) if v is not None}
        row = store.last_spend(scope)
        spent = left = None
        unknown = None
        if row is None:
            unknown = f"no spend snapshot for scope {scope} (is the guardrails daemon measuring?)"
        else:
            spent = {"today": float(row["today"]), "this month": float(row["mtd"])}
            spent = {k: spent[k] for k in limits}
            left = {k: round(limits[k] - spent[k] - committed, 2) for k in limits}
        out.append(
            {
                "scope": scope,
                "limits_usd": limits,
                "spent_usd": spent,
                "committed_usd": round(committed, 2),
                "left_usd": left,
                "snapshot_at": _iso(datetime.fromisoformat(str(row["ts"]))) if row else None,
                "unknown": unknown,
            }
        )
    return out


def _burst_partitions(nodes: dict[str, Any]) -> set[str]:
    parts: set[str] = set()
    for sn in nodes.values():
        if sn.cloud:
            parts.update(p for p in sn.fields.get("Partitions", "").split(",") if p)
    return parts


def read(src: Sources, now: datetime) -> dict[str, Any]:
    """Read every source (each call with its deadline) and :func:`build` the document; a
    source that fails is named under ``unknown``, one line each."""
    unknown: dict[str, str] = {}
    nodes: dict[str, Any] | None = None
    resv: list[Reservation] | None = None
    instances: list[Instance] | None = []
    events: list[dict[str, Any]] | None = []
    jobs: list[PendingJob] | None = None
    spend: list[dict[str, Any]] | None = None
    try:
        nodes = src.slurm.nodes()
    except SlurmError as exc:
        unknown["slurm nodes"] = str(exc)
    try:
        resv = parse_reservations(src.slurm.run("-o", "show", "reservation"))
    except SlurmError as exc:
        unknown["slurm reservations"] = str(exc)
    if nodes is not None:
        try:
            jobs = pending_jobs(src.slurm.squeue("--json"), _burst_partitions(nodes))
        except SlurmError as exc:
            unknown["slurm jobs"] = str(exc)
    try:
        found: list[Instance] = []
        for ec2 in src.ec2:
            found += read_instances(ec2, src.stack, src.stack_tag_key, src.node_tag_key)
        instances = found
    except Exception as exc:  # botocore's errors, endpoint unreachable, timeouts: one line
        instances = None
        unknown["ec2"] = f"DescribeInstances: {type(exc).__name__}: {exc}".splitlines()[0]
    if src.audit_log is not None:
        try:
            events = read_events(src.audit_log)
        except Exception as exc:  # TextFileError, OSError
            events = None
            unknown["audit log"] = f"{src.audit_log}: {exc}"
    try:
        spend = spend_rows(src.spend(), now) if src.spend is not None else []
    except Exception as exc:  # the guardrails state: missing file, locked, bad config
        unknown["spend"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return build(Inputs(src.stack, now, nodes, resv, instances, events, jobs, spend, unknown))


def watch(
    once: Callable[[], str],
    echo: Callable[[str], None],
    *,
    interval_s: float,
    count: int | None,
    sleep: Callable[[float], None] = time.sleep,
    clear: str = "",
) -> int:
    """Print ``once()`` every ``interval_s`` until ``count`` prints (None: until ^C); returns
    how many were printed. ``clear`` is written before each (a terminal's clear-screen)."""
    n = 0
    try:
        while count is None or n < count:
            if n:
                sleep(interval_s)
            echo(clear + once())
            n += 1
    except KeyboardInterrupt:
        pass
    return n
