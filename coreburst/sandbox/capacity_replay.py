"""24 hours of EC2 capacity answers replayed through the resume program on a fake clock.

Issue 33 item 1: a capacity answer never holds a pool until an operator lifts it, and jobs
start within one backoff of capacity returning. The resume program (coreburst/burst/power.py)
runs unchanged; around it:

* **EC2** is :class:`CapacityEc2`, made up here and answering as the EC2 API reference says
  (CreateFleet, https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateFleet.html:
  an ``instant`` fleet it cannot fill answers with what it launched plus one
  ``CreateFleetError`` per launch specification it could not use; the codes and messages of
  https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html). The capacity
  each (type, zone) has at each hour is :data:`SCENARIO`: a shortage with partial fills, spot
  answered by a lone ``UnfulfillableCapacity``, a type EC2 does not offer in a zone
  (``Unsupported``), a full outage, a trickle, recovery. moto cannot play this (it has no
  capacity, and launches only the first override).
* **Slurm** is :class:`ReplaySlurm`, made up here after scontrol(1): it keeps the MAINT
  reservations the resume program and the reconciler place (``Duration`` minutes, or
  ``UNLIMITED``), sets failed nodes DOWN then back to idle~ (POWER_DOWN_FORCE), and every
  ``poll_s`` starts the power programs as slurmctld's power saving would: resume for nodes a
  pending job can use (free, not reserved), suspend once a job ends.
* **The reconciler's pool holds** (coreburst/burst/holds.py ``holds``, as the
  burst-reconcile rule runs it each cycle) over the same audit log: what it would hold, and
  whether any of that waits for an operator.

Printed (benchmarks/capacity_replay.py): operator holds (must be 0), timed backoff holds and
their minutes, backoffs by code, alerts, and job waits: submit to start, and capacity back to
start (must be <= capacityBackoffS + one poll).

    >>> report = replay(Path("/tmp/replay"))  # doctest: +SKIP
    >>> report.operator_holds, report.worst_after_return_s <= report.bound_s  # doctest: +SKIP
    (0, True)
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from coreburst.burst.claims import Claims
from coreburst.burst.config import BurstStack, parse_burst
from coreburst.burst.holds import _backoff_s, holds, read_events
from coreburst.burst.hostlist import compress, expand
from coreburst.burst.power import Audit, Power
from coreburst.common.names import BACKOFF_PREFIX, PROTECT_PREFIX, STACK_TAG_KEY

START = datetime(2026, 12, 1, tzinfo=UTC)
ZONES = ("us-east-1a", "us-east-1b")
TYPES = ("p5.48xlarge", "p5e.48xlarge")
NODES = 8
# EC2 does not offer p5e in us-east-1b here: CreateFleet answers Unsupported for it, always.
UNSUPPORTED = {("p5e.48xlarge", "us-east-1b")}
# (from hour, pool) -> {(type, zone): instances EC2 can give}; each holds until the next.
SCENARIO: dict[tuple[int, str], dict[tuple[str, str], int]] = {
    (0, "od"): {("p5.48xlarge", "us-east-1a"): 8, ("p5e.48xlarge", "us-east-1a"): 4},
    (3, "od"): {("p5.48xlarge", "us-east-1b"): 2},  # shortage: partial fills
    (9, "od"): {},  # a full outage
    (10, "od"): {("p5.48xlarge", "us-east-1a"): 8},  # recovery
    (0, "sp"): {("p5.48xlarge", "us-east-1a"): 8, ("p5.48xlarge", "us-east-1b"): 8},
    (2, "sp"): {},  # no spot at all: a lone UnfulfillableCapacity
    (8, "sp"): {("p5.48xlarge", "us-east-1b"): 1},  # a trickle
    (12, "sp"): {},
    (16, "sp"): {("p5.48xlarge", "us-east-1a"): 8, ("p5e.48xlarge", "us-east-1a"): 8},
}
# The audit events coreburst/burst/holds.py reads.
HOLD_EVENTS = frozenset({"resume.failed", "resume-fail", "resume.pool_held", "operator.released"})
NO_SPOT = "There is no Spot capacity available that matches your request."
ICE_MSG = (
    "We currently do not have sufficient {t} capacity in the Availability Zone you requested "
    "({z}). Our system will be working on provisioning additional capacity."
)
UNSUPPORTED_MSG = (
    "Your requested instance type ({t}) is not supported in your requested Availability Zone ({z})."
)
# Made up for the replay; keys as in infra/config.py and coreburst/burst/config.py.
STACK = {
    "aws:region": "us-east-1",
    "coreburst:availabilityZone": "us-east-1a",
    "coreburst:tags": {
        "team": "ml",
        "project": "replay",
        "costCenter": "cc-1",
        "environment": "dev",
    },
    "coreburst:budget": {"monthlyUsd": 1000000},
    "coreburst:vpc": {
        "extraZones": [{"availabilityZone": "us-east-1b", "privateSubnetCidr": "10.64.64.0/18"}]
    },
}


def capacity_at(t_s: float, pool: str) -> dict[tuple[str, str], int]:
    hour = t_s / 3600
    current: dict[tuple[str, str], int] = {}
    for (h, p), cap in sorted(SCENARIO.items()):
        if p == pool and h <= hour:
            current = cap
    return current


class CapacityEc2:
    """The EC2 calls the resume and suspend programs make, answered in EC2's documented shapes
    from :data:`SCENARIO` (made up: see the module docstring). ``clock`` is the replay's."""

    def __init__(self, stack: str, clock: Any) -> None:
        self.stack = stack
        self.clock = clock
        self.instances: dict[str, dict[str, Any]] = {}
        self.subnet = {z: f"subnet-{i:017x}" for i, z in enumerate(ZONES, 1)}
        self.calls: Counter[str] = Counter()
        self._ids = itertools.count(1)

    # -- paginated reads ------------------------------------------------------------------
    def get_paginator(self, name: str) -> Any:
        outer = self

        class Pages:
            def paginate(self, **kw: Any) -> list[dict[str, Any]]:
                return [getattr(outer, name)(**kw)]

        return Pages()

    def describe_launch_templates(self, **_: Any) -> dict[str, Any]:
        self.calls["DescribeLaunchTemplates"] += 1
        tags = [{"Key": STACK_TAG_KEY, "Value": self.stack}]
        return {
            "LaunchTemplates": [
                {
                    "LaunchTemplateId": f"lt-{p}",
                    "LaunchTemplateName": f"{p}-lt-0a1b2c3",
                    "Tags": tags,
                }
                for p in ("od", "sp")
            ]
        }

    def describe_subnets(self, **_: Any) -> dict[str, Any]:
        self.calls["DescribeSubnets"] += 1
        return {"Subnets": [{"SubnetId": s, "AvailabilityZone": z} for z, s in self.subnet.items()]}

    def describe_instances(self, Filters: list[dict[str, Any]], **_: Any) -> dict[str, Any]:  # noqa: N803 (EC2's name)
        self.calls["DescribeInstances"] += 1
        out = []
        for inst in self.instances.values():
            tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
            ok = True
            for f in Filters:
                name, values = f["Name"], f["Values"]
                if name == "instance-id":
                    ok &= inst["InstanceId"] in values
                elif name == "instance-state-name":
                    ok &= inst["State"]["Name"] in values
                elif name.startswith("tag:"):
                    ok &= tags.get(name[4:]) in values
            if ok:
                out.append(inst)
        return {"Reservations": [{"Instances": out}] if out else []}

    # -- writes ---------------------------------------------------------------------------
    def create_tags(self, Resources: list[str], Tags: list[dict[str, str]]) -> dict[str, Any]:  # noqa: N803
        self.calls["CreateTags"] += 1
        for iid in Resources:
            inst = self.instances[iid]
            keep = {t["Key"]: t["Value"] for t in inst["Tags"]}
            keep.update({t["Key"]: t["Value"] for t in Tags})
            inst["Tags"] = [{"Key": k, "Value": v} for k, v in keep.items()]
        return {}

    def terminate_instances(self, InstanceIds: list[str]) -> dict[str, Any]:  # noqa: N803
        self.calls["TerminateInstances"] += 1
        for iid in InstanceIds:
            if iid in self.instances:
                self.instances[iid]["State"] = {"Name": "terminated"}
        return {"TerminatingInstances": []}

    def in_use(self, pool: str) -> Counter[tuple[str, str]]:
        return Counter(
            (i["InstanceType"], i["Placement"]["AvailabilityZone"])
            for i in self.instances.values()
            if i["pool"] == pool and i["State"]["Name"] == "running"
        )

    def free(self, pool: str) -> dict[tuple[str, str], int]:
        used = self.in_use(pool)
        cap = capacity_at(self.clock(), pool)
        return {c: n - used[c] for c, n in cap.items() if n > used[c]}

    def create_fleet(self, **req: Any) -> dict[str, Any]:
        self.calls["CreateFleet"] += 1
        spec = req["LaunchTemplateConfigs"][0]
        pool = spec["LaunchTemplateSpecification"]["LaunchTemplateId"].removeprefix("lt-")
        zone_of = {s: z for z, s in self.subnet.items()}
        spot = "SpotOptions" in req
        want = int(req["TargetCapacitySpecification"]["TotalTargetCapacity"])
        free = self.free(pool)
        order = list(spec["Overrides"])
        if spot:  # price-capacity-optimized: the deepest pools first
            order.sort(key=lambda o: -free.get((o["InstanceType"], zone_of[o["SubnetId"]]), 0))
        instances: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        tags = req["TagSpecifications"][0]["Tags"]
        for o in order:
            t, z = o["InstanceType"], zone_of[o["SubnetId"]]
            named = {
                "LaunchTemplateSpecification": spec["LaunchTemplateSpecification"],
                "Overrides": {"InstanceType": t, "SubnetId": o["SubnetId"]},
            }
            if want == 0:
                break
            if (t, z) in UNSUPPORTED:
                errors.append(
                    {
                        "LaunchTemplateAndOverrides": named,
                        "Lifecycle": "spot" if spot else "on-demand",
                        "ErrorCode": "Unsupported",
                        "ErrorMessage": UNSUPPORTED_MSG.format(t=t, z=z),
                    }
                )
                continue
            n = min(want, free.get((t, z), 0))
            if n:
                ids = [f"i-{next(self._ids):017x}" for _ in range(n)]
                for iid in ids:
                    self.instances[iid] = {
                        "InstanceId": iid,
                        "InstanceType": t,
                        "Placement": {"AvailabilityZone": z},
                        "State": {"Name": "running"},
                        "PrivateIpAddress": "10.64.0.1",
                        "Tags": list(tags),
                        "pool": pool,
                    }
                instances.append(
                    {
                        "LaunchTemplateAndOverrides": named,
                        "Lifecycle": "spot" if spot else "on-demand",
                        "InstanceIds": ids,
                        "InstanceType": t,
                    }
                )
                want -= n
            if want and not spot:
                errors.append(
                    {
                        "LaunchTemplateAndOverrides": named,
                        "Lifecycle": "on-demand",
                        "ErrorCode": "InsufficientInstanceCapacity",
                        "ErrorMessage": ICE_MSG.format(t=t, z=z),
                    }
                )
        if want:
            # The pointer: first for on-demand (the real reasons follow); for spot with nothing
            # to give, EC2 often answers it alone.
            pointer = {
                "ErrorCode": "UnfulfillableCapacity",
                "Lifecycle": "spot" if spot else "on-demand",
            }
            if spot and not [e for e in errors if e["ErrorCode"] != "Unsupported"]:
                errors = [{**pointer, "ErrorMessage": NO_SPOT}]
            else:
                msg = "Unable to fulfill capacity due to your request configuration."
                errors.insert(0, {**pointer, "ErrorMessage": msg})
        return {"FleetId": f"fleet-{next(self._ids)}", "Errors": errors, "Instances": instances}


@dataclass
class Resv:
    name: str
    nodes: set[str]
    until: float | None  # None: until an operator deletes it


class ReplaySlurm:
    """scontrol as the power programs use it, over the replay's node and reservation table
    (made up: see the module docstring)."""

    def __init__(self, clock: Any) -> None:
        self.clock = clock
        self.reservations: list[Resv] = []
        self.placed: list[Resv] = []
        self.down: set[str] = set()

    def scontrol(self, *args: str) -> str:
        if args[:2] == ("create", "reservation"):
            kv = dict(a.split("=", 1) for a in args[2:])
            minutes = kv["Duration"]
            until = None if minutes == "UNLIMITED" else self.clock() + 60 * int(minutes)
            r = Resv(kv["ReservationName"], set(expand(kv["Nodes"])), until)
            if any(x.name == r.name for x in self.active()):
                raise RuntimeError(f"Reservation {r.name} exists")
            self.reservations.append(r)
            self.placed.append(r)
        elif args[:1] == ("update",) and "state=down" in args:
            self.down.update(expand(args[1].removeprefix("nodename=")))
        elif args[:1] == ("update",) and "state=power_down_force" in args:
            self.down.difference_update(expand(args[1].removeprefix("nodename=")))
        return ""

    def squeue(self, *args: str) -> str:
        return '{"jobs": []}'

    def active(self) -> list[Resv]:
        now = self.clock()
        return [r for r in self.reservations if r.until is None or r.until > now]

    def reserved(self) -> set[str]:
        return {n for r in self.active() for n in r.nodes}


@dataclass
class Job:
    id: int
    pool: str
    submit: float
    runs_s: float
    start: float | None = None
    node: str | None = None
    end: float | None = None


@dataclass
class Report:
    hours: int
    jobs: list[Job]
    backoff_s: int
    poll_s: int
    operator_holds: int  # reservations without an end, by the resume program or the reconciler
    timed_holds: list[Resv]
    reconciler_holds: int
    backoffs: Counter[str]
    alerts: list[dict[str, Any]]
    after_return: list[float] = field(default_factory=list)
    ec2_calls: Counter[str] = field(default_factory=Counter)

    @property
    def bound_s(self) -> int:
        return self.backoff_s + self.poll_s

    @property
    def worst_after_return_s(self) -> float:
        return max(self.after_return, default=0.0)

    def lines(self) -> list[str]:
        started = [j for j in self.jobs if j.start is not None]
        waits = [j.start - j.submit for j in started if j.start is not None]
        by_pool = Counter(
            r.name.removeprefix(BACKOFF_PREFIX).rsplit("-", 1)[0] for r in self.timed_holds
        )
        out = [
            f"capacity replay: {self.hours} h of EC2 answers on a fake clock, pools od (on-demand) "
            f"and sp (spot), {NODES} nodes each, capacityBackoffS {self.backoff_s} s, "
            f"power-save poll {self.poll_s} s",
            f"  operator holds (no end):        {self.operator_holds}",
            f"  timed backoff holds:            {len(self.timed_holds)} "
            f"({', '.join(f'{p} {n}' for p, n in sorted(by_pool.items())) or '-'}), "
            f"{sum(self._minutes(r) for r in self.timed_holds)} min in all",
            f"  reconciler pool holds (timed):  {self.reconciler_holds}",
            "  choice backoffs by code:        "
            + (", ".join(f"{c} {n}" for c, n in sorted(self.backoffs.items())) or "-"),
            f"  alerts (unknown codes, once):   {len(self.alerts)}",
            f"  jobs: {len(self.jobs)} submitted, {len(started)} started, "
            f"{len(self.jobs) - len(started)} still pending at the end",
        ]
        if waits:
            out.append(
                f"  submit -> start:                median "
                f"{statistics.median(waits) / 60:.1f} min, max {max(waits) / 60:.1f} min"
            )
        verdict = "meets" if self.worst_after_return_s <= self.bound_s else "MISSES"
        out.append(
            f"  capacity back -> start:         max {self.worst_after_return_s / 60:.1f} min "
            f"({verdict} <= one backoff + one poll, {self.bound_s / 60:.0f} min)"
        )
        out.append(
            "  EC2 calls:                      "
            + ", ".join(f"{k} {v}" for k, v in sorted(self.ec2_calls.items()))
        )
        return out

    def _minutes(self, r: Resv) -> int:
        start = int(r.name.rsplit("-", 1)[1]) / 1000
        return math.ceil(((r.until or start) - start) / 60)


def _keep_s(e: dict[str, Any], rc: Any) -> float:
    """How long holds() looks back at an event of this kind (coreburst/burst/holds.py)."""
    if e["event"] == "resume.failed":
        return _backoff_s(e)
    if e["event"] == "resume-fail":
        return float(rc.bootstrap_window.total_seconds())
    if e["event"] == "resume.pool_held" and isinstance(e.get("minutes"), int):
        return 60.0 * e["minutes"]
    return math.inf  # a hold with no end, an operator's release


def _stack(work: Path, backoff_s: int) -> BurstStack:
    def pool(name: str, market: str) -> dict[str, Any]:
        return {
            "name": name,
            "instanceType": TYPES[0],
            "fallbackInstanceTypes": list(TYPES[1:]),
            "zones": list(ZONES),
            "nodes": NODES,
            "capacity": {"model": market},
        }

    cfg = {
        **STACK,
        "coreburst:clusters": [pool("od", "on-demand"), pool("sp", "spot")],
        "coreburst:burst": {
            "logFile": str(work / "burst-power.log"),
            "auditLog": str(work / "burst-audit.jsonl"),
            "capacityBackoffS": backoff_s,
            "nodeAddress": "registration",
        },
    }
    return parse_burst("replay", cfg)


def replay(
    work: Path,
    *,
    hours: int = 24,
    backoff_s: int = 600,
    poll_s: int = 60,
    every_s: int = 1200,
    runs_s: int = 2700,
) -> Report:
    """Run the replay in ``work`` (logs, claims); one job per pool every ``every_s``, each one
    node for ``runs_s``."""
    work.mkdir(parents=True, exist_ok=True)
    # The power programs log to their file, as under slurmctld (nothing on stderr).
    logger = logging.getLogger("coreburst.burst")
    saved = logger.handlers[:], logger.propagate
    logger.handlers[:] = [logging.FileHandler(work / "burst-power.log", encoding="utf-8")]
    logger.propagate = False
    try:
        return _replay(
            work, hours=hours, backoff_s=backoff_s, poll_s=poll_s, every_s=every_s, runs_s=runs_s
        )
    finally:
        for h in logger.handlers:
            h.close()
        logger.handlers[:], logger.propagate = saved


def _replay(
    work: Path, *, hours: int, backoff_s: int, poll_s: int, every_s: int, runs_s: int
) -> Report:
    from coreburst.burst.reconcile import BurstReconcileConfig

    t = [0.0]

    def clock() -> float:
        return START.timestamp() + t[0]

    def now() -> datetime:
        return START + timedelta(seconds=t[0])

    stack = _stack(work, backoff_s)
    ec2 = CapacityEc2(stack.name, lambda: t[0])
    slurm = ReplaySlurm(clock)
    audit = Audit(stack.settings.audit_log, clock=clock)
    claims = Claims(work / "burst-claims.sqlite", clock=clock)
    # A replay needs no durability: no fsync per claim (the claims logic is the same).
    claims.db.execute("PRAGMA synchronous=OFF")
    claims.db.execute("PRAGMA journal_mode=MEMORY")
    power = Power(stack, ec2, slurm, audit, claims=claims, now=now)
    # the back-off is the stack's capacityBackoffS, which the resume program writes on each
    # failure (holds.py reads it from the event)
    rc = BurstReconcileConfig.model_validate({})
    ids = itertools.count(1)
    jobs: list[Job] = []
    free_since: dict[str, float | None] = {"od": 0.0, "sp": 0.0}
    after_return: list[float] = []
    reconciler: list[Resv] = []
    told: set[str] = set()
    recent: list[dict[str, Any]] = []
    seen = 0
    pools = {
        "od": [f"od-{i}" for i in range(1, NODES + 1)],
        "sp": [f"sp-{i}" for i in range(1, NODES + 1)],
    }
    while t[0] < hours * 3600:
        if t[0] % every_s == 0:
            jobs += [Job(next(ids), p, t[0], runs_s) for p in pools]
        ended = [j for j in jobs if j.end is not None and j.end <= t[0] and j.node]
        for j in ended:  # SuspendProgram after the job (SuspendTime 0 here)
            power.terminate(str(j.node), "suspend")
            j.node = None
        busy = {j.node for j in jobs if j.node}
        for p, names in pools.items():
            # The pool could start a job: EC2 has capacity and a node is not running one.
            has = bool(ec2.free(p)) and any(n not in busy for n in names)
            if not has:
                free_since[p] = None
            elif free_since[p] is None:
                free_since[p] = t[0]
        busy = {j.node for j in jobs if j.node}
        blocked = slurm.reserved() | slurm.down | busy
        for p, names in pools.items():
            waiting = [j for j in jobs if j.pool == p and j.start is None]
            idle = [n for n in names if n not in blocked]
            pairs = list(zip(waiting, idle, strict=False))
            if not pairs:
                continue
            res = power.resume(compress([n for _, n in pairs]), None)
            for j, n in pairs:
                if n in res.launched:
                    j.start, j.node, j.end = t[0], n, t[0] + j.runs_s
                    since = free_since[p]
                    back = max(j.submit, since if since is not None else t[0])
                    after_return.append(t[0] - back)
        # The reconciler's cycle over the same audit log.
        # (Only the events holds() reads; those older than its windows change nothing, so
        # only the recent ones, and holds with no end, are kept between cycles.)
        with stack.settings.audit_log.open("rb") as f:  # only what was appended since
            f.seek(seen)
            new = f.read()
        seen += len(new)
        recent += [e for e in map(json.loads, new.splitlines()) if e["event"] in HOLD_EVENTS]
        recent = [e for e in recent if clock() - e["ts"] < _keep_s(e, rc)]
        for h in holds(recent, now(), rc):
            if h.key.startswith("burst-held:"):
                told.add(h.key)
                continue
            active = {r.name for r in slurm.active()}
            prefix = h.reservation if h.minutes is None else f"{BACKOFF_PREFIX}{h.pool}-"
            if any(n.startswith(prefix) for n in active):
                continue
            r = Resv(
                h.reservation,
                set(pools[h.pool]) - busy,
                None if h.minutes is None else clock() + 60 * h.minutes,
            )
            slurm.reservations.append(r)
            reconciler.append(r)
        t[0] += poll_s
    events = read_events(stack.settings.audit_log)
    placed = slurm.placed + reconciler
    claims.close()
    return Report(
        hours=hours,
        jobs=jobs,
        backoff_s=backoff_s,
        poll_s=poll_s,
        operator_holds=sum(
            1 for r in placed if r.until is None or r.name.startswith(PROTECT_PREFIX)
        ),
        timed_holds=[r for r in slurm.placed if r.until is not None],
        reconciler_holds=len(reconciler),
        backoffs=Counter(str(e.get("code")) for e in events if e["event"] == "resume.backoff"),
        alerts=[e for e in events if e["event"] == "resume.alert"],
        after_return=after_return,
        ec2_calls=ec2.calls,
    )
