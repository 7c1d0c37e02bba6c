"""The burst spend gate (``coreburst:burst.spendGate``): check, commit, hold, release.

Before the resume program launches, the projected cost (nodes x $/h x each job's time limit)
is checked against what the guardrails' spend scope has left today and this month, less what
earlier approvals may still cost (scope, limits and state from the guardrails config:
:func:`coreburst.burst.config.gate_limits`). The path from the stack's ``spendGate`` to the
decision::

    config.gate_limits          which scope, its limits, where its snapshots are
    gate.Gate.check             $/h (coreburst.common.pricing) x hours, per node
      gate.Gate.left            the scope's latest snapshot (the guardrails state store)
      gate.spend_left           limit - spent, per period; no fresh snapshot: why not
    commitments.SpendLedger.reserve   limit - spent - committed must hold it; commit it

* **Approved**: the cost is committed in the scope's ledger (coreburst/burst/commitments.py)
  atomically with the check, so two resumes racing cannot both spend the same room; the
  commitment goes when the nodes power down, fail or are held (:meth:`Gate.release`).
* **Over it** (or with no fresh spend snapshot, or a gate that cannot be read): nothing
  launches; :meth:`Gate.hold` puts the nodes in a maintenance reservation
  ``coreburst-spend-<USD>usd-...`` (so Slurm stops asking for them), sets them DOWN (the
  jobs requeue now) and powers them down; each waiting job says why.
* **Released**: the guardrails daemon's burst-reconcile rule deletes each hold that fits what
  the scope has left again (:func:`release_holds`, under its lease, kill switch and audit);
  the next resume checks again.

    >>> gate = Gate(stack, Scontrol(), audit, now=now, nodes_of=node_set_of(stack),
    ...             side=side)  # doctest: +SKIP
    >>> gate.check(["od-1"], [("42", ["od-1"])])  # doctest: +SKIP
    (110.08, None)
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coreburst.burst.commitments import SpendLedger
from coreburst.burst.hostlist import compress
from coreburst.common.catalog import CatalogError, load_catalog
from coreburst.common.names import SPEND_HOLD_PREFIX
from guardrails.adapters.slurm import SlurmError, delete_reservation

if TYPE_CHECKING:  # the stack's config (and infra's) only where a gate checks a launch
    from coreburst.burst.config import BurstStack, GateLimits
    from coreburst.burst.slurm_side import Slurm, SlurmSide
    from coreburst.burst.slurmconf import NodeSet
    from guardrails.adapters.slurm import Scontrol as RuleScontrol
    from guardrails.rules.base import RuleContext
    from guardrails.stores.base import StateStore

# The power programs' one logger (its name is the log file's, set up by coreburst/burst/cli.py).
log = logging.getLogger("coreburst.burst.power")

# The reason on nodes the spend gate holds, and the prefix of its reservations (the only ones
# the burst-reconcile rule deletes). A reservation, not drain: slurmctld 22.05 clears DRAIN when the
# forced power-down completes (measured in tests/integration/burst/test_spend_gate.py).
SPEND_HOLD_REASON = "coreburst: spend gate"
SPEND_HOLD_RESERVATION = SPEND_HOLD_PREFIX
# The holds' names carry the projected cost (Slurm 22.05 reservations have no comment field):
# ``coreburst-spend-<ceil USD>usd-<epoch ms>-<pid>``.
_SPEND_HOLD = re.compile(rf"^ReservationName=({re.escape(SPEND_HOLD_PREFIX)}(?:(\d+)usd-)?\S*)")
_RESV_NODES = re.compile(r"\bNodes=(\S+)")


# -- the arithmetic (plain functions over plain data) -----------------------------------------
@dataclass(frozen=True)
class SpendHold:
    """One spend-gate reservation as ``scontrol -o show reservation`` prints it."""

    name: str
    cost_usd: float
    nodes: str  # a Slurm hostlist, as scontrol prints it


def parse_spend_holds(text: str) -> list[SpendHold]:
    """The spend gate's reservations in ``scontrol -o show reservation`` output (one line per
    reservation, ``ReservationName=... Nodes=...``; others are ignored).

    >>> parse_spend_holds("ReservationName=coreburst-spend-98usd-1-2 StartTime=x Nodes=od-[1-2]")
    [SpendHold(name='coreburst-spend-98usd-1-2', cost_usd=98.0, nodes='od-[1-2]')]
    """
    out = []
    for line in text.splitlines():
        m = _SPEND_HOLD.match(line.strip())
        on = _RESV_NODES.search(line)
        if m and on:
            out.append(SpendHold(m.group(1), float(m.group(2) or 0), on.group(1)))
    return out


def spend_left(
    daily_limit_usd: float | None,
    monthly_limit_usd: float | None,
    snapshot: Any,
    *,
    now: datetime,
    max_age: timedelta,
    scope: str,
) -> dict[str, float] | str:
    """USD a spend scope has left per period (``today``, ``this month``), or why that cannot
    be known: no snapshot, or one older than ``max_age`` (fail closed: the daemon is not
    measuring). ``snapshot``: the guardrails state's ``last_spend(scope)`` row (``ts``,
    ``today``, ``mtd``). The resume program's gate and the rule's release both use this."""
    if snapshot is None:
        return f"no spend snapshot for scope {scope}"
    age = now - datetime.fromisoformat(str(snapshot["ts"]))
    if age > max_age:
        return f"spend snapshot for {scope} is {age.total_seconds() / 60:.0f} min old"
    left: dict[str, float] = {}
    if daily_limit_usd is not None:
        left["today"] = daily_limit_usd - float(snapshot["today"])
    if monthly_limit_usd is not None:
        left["this month"] = monthly_limit_usd - float(snapshot["mtd"])
    return left


def releasable(
    holds: list[SpendHold], left: dict[str, float]
) -> tuple[list[SpendHold], list[tuple[SpendHold, str]]]:
    """Which holds fit what is left (cheapest first, each counted against the rest), and
    which stay and why. The next resume checks the jobs' cost again."""
    room = min(left.values(), default=math.inf)
    release: list[SpendHold] = []
    keep: list[tuple[SpendHold, str]] = []
    for h in sorted(holds, key=lambda h: (h.cost_usd, h.name)):
        if room <= 0 or h.cost_usd > room:
            keep.append((h, f"${h.cost_usd:,.0f} projected > ${max(room, 0):,.0f} left"))
            continue
        release.append(h)
        room -= h.cost_usd
    return release, keep


def open_spend_state(path: Path) -> StateStore:
    """The guardrails daemon's SQLite state, for reading its spend snapshots. A missing file
    is an error here (opening it would create an empty one the daemon never writes)."""
    if not path.is_file():
        raise FileNotFoundError(f"no guardrails state at {path}")
    from guardrails.stores.sqlite import State  # only when a gate is configured

    return State(path)


# -- the resume program's side: check and commit, hold, release the commitments ----------------
class Gate:
    """The spend gate for one run of a power program. ``side`` reads the jobs' time limits
    and notes on the jobs (coreburst/burst/slurm_side.py); ``store``: the guardrails' state,
    opened on first use when not given."""

    def __init__(
        self,
        stack: BurstStack,
        slurm: Slurm,
        audit: Callable[..., None],
        *,
        now: Callable[[], datetime],
        nodes_of: dict[str, NodeSet],
        side: SlurmSide,
        store: StateStore | None = None,
    ) -> None:
        self.stack = stack
        self.slurm = slurm
        self.audit = audit
        self.now = now
        self.nodes_of = nodes_of
        self.side = side
        self.store = store

    def left(self, limits: GateLimits) -> dict[str, float] | str:
        """USD the scope has left per period, or why that cannot be known (fail closed)."""
        try:
            if self.store is None:
                self.store = open_spend_state(limits.state_path)
            row = self.store.last_spend(limits.scope)
        except Exception as exc:  # any store failure holds, it never launches blind
            log.error("spend gate: cannot read the guardrails state: %s", exc)
            return f"guardrails spend state unreadable ({type(exc).__name__})"
        return spend_left(
            limits.daily_limit_usd,
            limits.monthly_limit_usd,
            row,
            now=self.now(),
            max_age=limits.max_snapshot_age,
            scope=limits.scope,
        )

    def check(
        self, names: list[str], jobs: list[tuple[str, list[str]]]
    ) -> tuple[float, str | None]:
        """(projected USD, why it may not launch or None). Each node costs its instance's
        $/h (coreburst.common.pricing) times the longest time limit of the jobs it is resumed
        for. An approval commits that cost in the scope's ledger
        (coreburst/burst/commitments.py) atomically with the check: limit - accrued -
        committed must hold it."""
        from coreburst.burst.config import gate_limits
        from coreburst.burst.cost import node_rate
        from infra.config import StackConfigError

        gate = self.stack.settings.spend_gate
        assert gate is not None
        wanted = set(names)
        hours: dict[str, float] = {}
        for job_id, job_nodes in jobs:
            mine = [n for n in job_nodes if n in wanted]
            if mine:
                h = self.side.job_hours(job_id)
                for n in mine:
                    hours[n] = max(hours.get(n, 0.0), h)
        cat = load_catalog()
        asks: dict[str, tuple[float, float]] = {}
        for n in names:
            ns = self.nodes_of[n]
            try:  # the dearest type the node may launch as (fallbacks included), as plan prices it
                rate = node_rate(cat, ns, self.stack.config.region)[0]
            except CatalogError as exc:
                cost = sum(r * h for r, h in asks.values())
                return cost, f"no price for {ns.instance_type} {ns.market} ({exc})"
            asks[n] = (rate, hours.get(n, gate.default_hours))
        cost = sum(r * h for r, h in asks.values())
        try:
            limits = gate_limits(gate)
        except StackConfigError as exc:  # a broken gate holds: it never launches unchecked
            log.error("spend gate: %s", exc)
            return cost, str(exc)
        left = self.left(limits)
        if isinstance(left, str):
            return cost, left
        assert self.store is not None
        try:
            r = SpendLedger(self.store, limits.scope).reserve(
                asks, left, self.now(), jobs=[j for j, jn in jobs if wanted.intersection(jn)]
            )
        except Exception as exc:  # LedgerBusyError or any store failure holds
            log.error("spend gate: cannot commit: %s", exc)
            return cost, f"spend ledger unavailable ({type(exc).__name__})"
        if not r.ok:
            return cost, r.why
        self.audit(
            "spend.committed",
            nodes=compress(names),
            usd=round(cost, 2),
            committed_before_usd=round(r.committed_usd, 2),
            scope=limits.scope,
        )
        return cost, None

    def hold(
        self, names: list[str], why: str, cost: float, jobs: list[tuple[str, list[str]]]
    ) -> None:
        """A MAINT reservation on the nodes (Slurm neither gives them to pending jobs nor
        powers them up, REFERENCE.md "Slurm power saving"), then DOWN with the gate's reason
        (the jobs requeue now) and a forced power-down (the nodes are idle~ again). Each
        waiting job says why, with its projected cost. The caller then drops the nodes'
        claims and commitments (the resume program's ``release``)."""
        hl = compress(names)
        # The projected cost goes into the name (22.05 reservations carry no comment), so the
        # release knows whether this hold fits what is left.
        stamp = f"{int(self.now().timestamp() * 1000)}-{os.getpid()}"
        resv = f"{SPEND_HOLD_RESERVATION}{math.ceil(cost)}usd-{stamp}"
        try:
            self.slurm.scontrol(
                "create", "reservation", f"ReservationName={resv}", f"Nodes={hl}",
                "Users=root", "Flags=MAINT,IGNORE_JOBS", "StartTime=now", "Duration=UNLIMITED",
            )  # fmt: skip
        except RuntimeError as exc:  # still requeue and power down; Slurm asks again later
            log.error("spend gate: cannot reserve %s: %s", hl, exc)
            resv = ""
        reason = f"reason={SPEND_HOLD_REASON}: {why}"
        self.slurm.scontrol("update", f"nodename={hl}", "state=down", reason)
        self.slurm.scontrol("update", f"nodename={hl}", "state=power_down_force")
        wanted = set(names)
        held_jobs = [j for j, jn in jobs if wanted.intersection(jn)]
        log.warning("spend gate holds %s (jobs %s): %s", hl, ",".join(held_jobs) or "-", why)
        self.audit(
            "resume.held",
            nodes=hl,
            jobs=held_jobs or [j for j, _ in jobs],
            cost_usd=round(cost, 2),
            reason=why,
            reservation=resv,
        )
        self.side.note_jobs(
            held_jobs,
            "burst",
            f"coreburst: held by the burst spend gate, projected ${cost:,.2f} for {hl}: {why}"
            + (f"; waits for reservation {resv} to lift" if resv else ""),
        )

    def release(self, nodes: list[str]) -> None:
        """Drop the nodes' spend commitments (powered down, failed, held). Never stops a
        terminate or a power-down: a failure here is logged."""
        from coreburst.burst.config import gate_limits

        gate = self.stack.settings.spend_gate
        if gate is None:
            return
        try:
            limits = gate_limits(gate)
            if self.store is None:
                self.store = open_spend_state(limits.state_path)
            freed = SpendLedger(self.store, limits.scope).release(nodes, self.now())
        except Exception as exc:
            log.error("spend gate: cannot release the commitments of %s: %s", compress(nodes), exc)
            return
        if freed:
            self.audit("spend.released", nodes=compress(nodes), usd=round(freed, 2))


# -- the reconciler's side: tell about the holds, lift those that fit ------------------------
# burst-reconcile (coreburst/burst/reconcile.py) calls these each cycle with ``scontrol -o show
# reservation``. guardrails.messages is imported in them, not at the top: the resume program
# imports this module and never sends Slack.
def release_holds(ctx: RuleContext, slurm: RuleScontrol, text: str) -> None:
    """Delete each spend-gate hold that fits what the scope has left (through the actuator:
    dry-run, lease, kill switch, cap, audit). ``text``: ``scontrol -o show reservation``."""
    from guardrails import messages

    p = ctx.cfg.burst_reconcile
    holds = parse_spend_holds(text)
    if p.spend_scope is None or not holds:
        return
    scope = next(s for s in ctx.cfg.spend.scopes if s.name == p.spend_scope)  # validated
    now = ctx.clock.now()
    left = spend_left(
        scope.daily_limit_usd,
        scope.monthly_limit_usd,
        ctx.state.last_spend(scope.name),
        now=now,
        max_age=p.spend_snapshot_max_age,
        scope=scope.name,
    )
    if isinstance(left, str):
        for h in holds:
            ctx.actuator.audit("burst.spend-kept", reservation=h.name, nodes=h.nodes, why=left)
        return
    # What running bursts may still cost is not free to give away (the gate's commitments).
    committed = SpendLedger(ctx.state, scope.name).committed(now)
    left = {period: usd - committed for period, usd in left.items()}
    release, keep = releasable(holds, left)
    for h, why in keep:
        ctx.actuator.audit("burst.spend-kept", reservation=h.name, nodes=h.nodes, why=why)
    for h in release:
        key = f"burst-spend-release:{h.name}"
        try:
            done = ctx.actuator.execute(
                key,
                h.name,
                "slurm",
                "release",
                reason=f"spend scope {scope.name} has room for ${h.cost_usd:,.0f}: "
                + ", ".join(f"${v:,.0f} left {k}" for k, v in left.items()),
                call=lambda h=h: delete_reservation(slurm, h.name),  # type: ignore[misc]
            )
        except SlurmError as exc:
            ctx.state.drop_intent(key)
            ctx.actuator.audit("action.failed", key=key, instance_id=h.name, error=str(exc))
            ctx.report.errors.append(f"burst-reconcile: {exc}")
            continue
        if done:
            ctx.alert(messages.burst_spend_released(h.name, h.nodes, left), timedelta(0))


def alert_holds(ctx: RuleContext, events: list[dict[str, Any]], text: str) -> None:
    """Slack for each spend hold the resume program placed that is still in place: which
    jobs wait and why (deduplicated on the reservation)."""
    from guardrails import messages

    current = {h.name for h in parse_spend_holds(text)}
    scope = ctx.cfg.burst_reconcile.spend_scope or "?"
    for e in events:
        resv = str(e.get("reservation") or "")
        if e.get("event") != "resume.held" or resv not in current:
            continue
        jobs = [str(j) for j in e.get("jobs") or [] if isinstance(j, int | str)]
        ctx.alert(
            messages.burst_spend_held(
                resv,
                str(e.get("nodes", "")),
                jobs,
                str(e.get("reason", "")),
                cost_usd=float(e.get("cost_usd") or 0.0),
                scope=scope,
            ),
            timedelta(0),
        )
