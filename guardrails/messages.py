"""What guardrails says in Slack: one pure builder per alert kind.

Each builder takes plain values and returns the ``Alert`` the outbox stores (dedupe key,
cooldown subject, title, lines, fields). No clock, no I/O, no state: the rules and the actuator
decide *when* to alert and pass in what they saw; the wording lives here, in one place.

    >>> from datetime import UTC, datetime
    >>> a = kill_switch(datetime(2026, 1, 5, tzinfo=UTC).date(), "kill switch: $X is set")
    >>> (a.dedupe_key, a.title)
    ('killswitch:2026-01-05', 'Guardrails kill switch engaged')
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from guardrails.adapters.budget_queue import BudgetNotice
from guardrails.adapters.slack import (
    BLOCKS_MAX,
    ELLIPSIS,
    FALLBACK_TEXT_MAX,
    PRIORITY_URGENT,
    Alert,
    clip,
)
from guardrails.idle import Decision
from guardrails.model import Node
from guardrails.spend import gpu_h_text
from guardrails.timefmt import iso

VERBS = {
    "stop": "stopped",
    "terminate": "terminated",
    "scale-in": "scaled in from its ASG",
    "report-only": "reported only",
}


def verb(action: str) -> str:
    """The past participle a message uses for an action (``stop`` -> ``stopped``)."""
    return VERBS.get(action, action)


def owner(node: Node, owner_tags: Iterable[str]) -> str:
    """Who a node belongs to, from its owner tags (``team=ml, owner=bob``)."""
    parts = [f"{k}={node.tags[k]}" for k in owner_tags if k in node.tags]
    return ", ".join(parts) or "no owner tags"


def price_text(usd_per_hour: float | None) -> str:
    return f"${usd_per_hour:,.2f}/h" if usd_per_hour is not None else "price unknown"


# -- safety ----------------------------------------------------------------------------------
def kill_switch(day: date, why: str) -> Alert:
    return Alert(
        f"killswitch:{day}",
        "killswitch",
        "Guardrails kill switch engaged",
        [why + "; observing only."],
        severity="info",
        priority=PRIORITY_URGENT,
    )


def breaker_open(failures: int, opened_at: str, what: str, error: str, reset: str) -> Alert:
    return Alert(
        f"breaker:{opened_at}",
        "breaker",
        "Guardrails stopped acting (circuit breaker open)",
        [
            f"{failures} consecutive AWS API failures; last: {what}: {error}. No actions "
            f"until {reset} has passed or the cause is fixed."
        ],
        severity="critical",
        priority=PRIORITY_URGENT,
    )


def confirmed_after_restart(key: str, instance_id: str, kind: str) -> Alert:
    return Alert(
        f"act:{key}",
        f"act:{instance_id}",
        f"Idle node {instance_id} {verb(kind)}",
        [f"*{instance_id}*: {kind} confirmed after a restart."],
    )


# -- idle-reclaim ----------------------------------------------------------------------------
def idle_marked(
    node: Node,
    d: Decision,
    *,
    now: datetime,
    price: str,
    who: str,
    exempt_tag: str,
    max_exemption_days: int,
    dry_run: bool,
) -> Alert:
    exempt_until = (now + timedelta(days=7)).date().isoformat()
    return Alert(
        f"mark:{node.instance_id}:{iso(now)}",
        f"idle:{node.instance_id}",
        f"{'[dry-run] ' if dry_run else ''}Idle node {node.instance_id} will be {verb(d.action)}",
        [
            f"*{node.instance_id}* ({node.instance_type}, {node.market}, {node.region}) "
            f"costs {price}. {d.reason}.",
            f"It will be *{verb(d.action)}* at or after "
            f"{iso(d.act_after) if d.act_after else '?'} unless it becomes busy.",
            f"To exempt it: tag `{exempt_tag}={exempt_until}` (at most {max_exemption_days} days).",
        ],
        fields={"Owner": who, "Idle since": iso(now), "Action": d.action, "Cost": price},
    )


def idle_unmarked(node: Node, d: Decision, *, who: str) -> Alert:
    return Alert(
        f"unmark:{node.instance_id}:{iso(d.marked_at) if d.marked_at else ''}",
        f"idle:{node.instance_id}",
        f"Node {node.instance_id} is no longer scheduled for reclaim",
        [d.reason],
        severity="info",
        fields={"Owner": who},
    )


def reclaimed(key: str, node: Node, d: Decision, *, price: str, who: str) -> Alert:
    return Alert(
        f"act:{key}",
        f"act:{node.instance_id}",
        f"Idle node {node.instance_id} {verb(d.action)}",
        [f"*{node.instance_id}* ({node.instance_type}, {price}): {d.reason}."],
        fields={"Owner": who, "Action": d.action},
    )


# One owner's idle events in one cycle, for ``idle_digest``: (node, decision, $/h or None).
Marked = tuple[Node, Decision, float | None]
# (action key, node, decision, $/h or None): the key is the actuator's, as in ``reclaimed``.
Reclaimed = tuple[str, Node, Decision, float | None]

# How many nodes a digest names; the rest are counted ("and N more"). Ten lines of at most
# DIGEST_LINE_MAX characters, plus the summary lines, stay well inside a section's 3,000
# characters (https://api.slack.com/reference/block-kit/blocks#section), so the payload never
# has to cut a line the counts depend on.
DIGEST_LIST_MAX = 10
DIGEST_IDS_MAX = 10
DIGEST_LINE_MAX = 160


def _usd(total: float, unpriced: int) -> str:
    return f"${total:,.2f}/h" + (f" (+{unpriced} unpriced)" if unpriced else "")


def _ids(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:DIGEST_IDS_MAX])
    more = len(ids) - DIGEST_IDS_MAX
    return shown + (f" {ELLIPSIS} and {more} more" if more > 0 else "")


def idle_digest(
    who: str,
    marked: Sequence[Marked],
    reclaimed_: Sequence[Reclaimed],
    unmarked: Sequence[tuple[Node, Decision]],
    *,
    now: datetime,
    exempt_tag: str,
    max_exemption_days: int,
    dry_run: bool,
) -> Alert:
    """One owner's (or team's: whatever ``reclaim.owner_tags`` resolves) idle events of one
    cycle in one message, instead of one message per node: at 1,000 nodes with 400 idle a cycle
    sends one message per owner, not 400 (incoming webhooks allow about "1 message per second
    per channel": https://api.slack.com/docs/rate-limits).

    It gives the marked nodes (count, up to ``DIGEST_LIST_MAX`` named with $/h each, "and N
    more" for the rest), the total $/h at stake, the earliest and latest reclaim time, how to
    exempt, the nodes reclaimed and those busy again; per-node detail stays in
    ``coreburst guardrails status`` and ``explain``.

    Dedupe: the key is a digest of the owner and the exact events (node, step, mark time), and
    a node is marked, reclaimed or released once per idle episode, so an identical digest is
    never sent twice and an owner whose nodes did not change this cycle gets nothing. A digest
    of a single event is the per-node message it replaces (``idle_marked``, ``reclaimed`` or
    ``idle_unmarked``: same wording and dedupe key as before digests)."""
    marked = sorted(marked, key=lambda m: m[0].instance_id)
    reclaimed_ = sorted(reclaimed_, key=lambda r: r[1].instance_id)
    unmarked = sorted(unmarked, key=lambda u: u[0].instance_id)
    dry = "[dry-run] " if dry_run else ""
    who_short = clip(who, 200)
    lines: list[str] = []
    fields: dict[str, str] = {"Owner": who_short}
    if marked:
        at_stake = sum(p for _, _, p in marked if p is not None)
        unpriced = sum(1 for _, _, p in marked if p is None)
        afters = sorted(d.act_after for _, d, _ in marked if d.act_after is not None)
        actions = sorted({d.action for _, d, _ in marked})
        when = (
            (
                f"at or after {iso(afters[0])}"
                if afters[0] == afters[-1]
                else f"between {iso(afters[0])} and {iso(afters[-1])}"
            )
            if afters
            else "after the grace period"
        )
        lines.append(
            f"*{len(marked)} idle node(s) marked*, {_usd(at_stake, unpriced)} at stake: they "
            f"will be *{' / '.join(verb(a) for a in actions)}* {when} unless they become busy."
        )
        for n, d, p in marked[:DIGEST_LIST_MAX]:
            lines.append(
                clip(
                    f"• {n.instance_id} ({n.instance_type}, {n.market}, {n.region}) "
                    f"{price_text(p)}, {verb(d.action)} at or after "
                    f"{iso(d.act_after) if d.act_after else '?'}",
                    DIGEST_LINE_MAX,
                )
            )
        if len(marked) > DIGEST_LIST_MAX:
            rest = marked[DIGEST_LIST_MAX:]
            rest_usd = sum(p for _, _, p in rest if p is not None)
            rest_unpriced = sum(1 for _, _, p in rest if p is None)
            lines.append(
                f"{ELLIPSIS} and {len(rest)} more marked ({_usd(rest_usd, rest_unpriced)})"
            )
        exempt_until = (now + timedelta(days=7)).date().isoformat()
        lines.append(
            f"To exempt a node: tag `{exempt_tag}={exempt_until}` "
            f"(at most {max_exemption_days} days)."
        )
        fields["Marked"] = str(len(marked))
        fields["At stake"] = _usd(at_stake, unpriced)
        if afters:
            fields["Reclaim from"] = iso(afters[0])
            fields["Reclaim until"] = iso(afters[-1])
    if reclaimed_:
        saved = sum(p for _, _, _, p in reclaimed_ if p is not None)
        unpriced = sum(1 for *_, p in reclaimed_ if p is None)
        lines.append(
            f"*{len(reclaimed_)} idle node(s) reclaimed* ({_usd(saved, unpriced)} saved): "
            + _ids([f"{n.instance_id} {verb(d.action)}" for _, n, d, _ in reclaimed_])
        )
        fields["Reclaimed"] = str(len(reclaimed_))
    if unmarked:
        lines.append(
            f"{len(unmarked)} node(s) busy again, no longer scheduled for reclaim: "
            + _ids([n.instance_id for n, _ in unmarked])
        )
    lines.append(
        "Per-node detail: `coreburst guardrails status` and "
        "`coreburst guardrails explain <instance-id>`."
    )
    events = sorted(
        [f"mark:{n.instance_id}:{iso(now)}" for n, _, _ in marked]
        + [f"act:{k}" for k, *_ in reclaimed_]
        + [f"unmark:{n.instance_id}:{iso(d.marked_at) if d.marked_at else ''}" for n, d in unmarked]
    )
    if len(events) == 1:  # one event: the per-node message, as before digests
        if marked:
            n, d, p = marked[0]
            return idle_marked(
                n,
                d,
                now=now,
                price=price_text(p),
                who=who,
                exempt_tag=exempt_tag,
                max_exemption_days=max_exemption_days,
                dry_run=dry_run,
            )
        if reclaimed_:
            k, n, d, p = reclaimed_[0]
            return reclaimed(k, n, d, price=price_text(p), who=who)
        return idle_unmarked(unmarked[0][0], unmarked[0][1], who=who)
    key = "idle-digest:" + hashlib.sha1((who + "\n" + "\n".join(events)).encode()).hexdigest()
    parts = [
        f"{len(marked)} marked" if marked else "",
        f"{len(reclaimed_)} reclaimed" if reclaimed_ else "",
        f"{len(unmarked)} busy again" if unmarked else "",
    ]
    title = f"{dry}Idle nodes of {who_short}: " + ", ".join(x for x in parts if x)
    return Alert(key, f"idle-digest:{who_short}", title, lines, fields=fields)


def blind(decisions: Sequence[Decision]) -> Alert:
    """Nodes without usable utilization data (never reclaimed while blind)."""
    ids_sorted = sorted(d.instance_id for d in decisions)
    ids = ", ".join(ids_sorted[:20]) + (
        f" {ELLIPSIS} and {len(decisions) - 20} more" if len(decisions) > 20 else ""
    )
    return Alert(
        "blind:" + hashlib.sha1(",".join(ids_sorted).encode()).hexdigest()[:16],
        "blind",
        f"{len(decisions)} GPU node(s) without usable utilization data",
        [
            f"Never reclaimed while blind: {ids}",
            # all of them: the payload keeps what fits and says how many more
            *(f"• {d.instance_id}: {d.utilization.reason}" for d in decisions),
        ],
        severity="info",
        # never queued behind routine idle digests: a blind node is one we cannot judge
        priority=PRIORITY_URGENT,
    )


# -- spend-limit -----------------------------------------------------------------------------
def unpriced_text(unpriced: Mapping[str, int]) -> str:
    """What a spend total leaves out: items (instances, Lustre, Direct Connect ports) the
    catalog has no price for.

    >>> unpriced_text({"trn2.48xlarge in eu-west-1 (on-demand)": 3})
    '3 unpriced item(s) not in these totals: 3 trn2.48xlarge in eu-west-1 (on-demand)'
    """
    n = sum(unpriced.values())
    kinds = ", ".join(f"{c} {k}" for k, c in sorted(unpriced.items()))
    return f"{n} unpriced item(s) not in these totals: {kinds}"


def breach_text(kind: str, at: datetime | None, burn: float, now: datetime) -> str:
    """The projected breach at the current burn, e.g. "daily limit reached at 14:20 UTC at
    $412/h" (``kind``: daily or monthly).

    >>> from datetime import UTC, datetime
    >>> now = datetime(2026, 12, 3, 9, tzinfo=UTC)
    >>> breach_text("daily", datetime(2026, 12, 3, 14, 20, tzinfo=UTC), 412.0, now)
    'daily limit reached at 14:20 UTC at $412/h'
    >>> breach_text("monthly", datetime(2026, 12, 19, 8, 5, tzinfo=UTC), 412.0, now)
    'monthly limit reached on 2026-12-19 at 08:05 UTC at $412/h'
    >>> breach_text("daily", None, 12.5, now)
    'daily limit not reached this day at $12.50/h'
    """
    rate = f"${burn:,.0f}/h" if burn >= 100 else f"${burn:,.2f}/h"
    if at is None:
        return f"{kind} limit not reached this {'day' if kind == 'daily' else 'month'} at {rate}"
    if at <= now:
        return f"{kind} limit reached (burning {rate})"
    when = (
        f"at {at:%H:%M} UTC" if at.date() == now.date() else f"on {at:%Y-%m-%d} at {at:%H:%M} UTC"
    )
    return f"{kind} limit reached {when} at {rate}"


def core_spend_text(core: Mapping[str, Any], period: str = "this month") -> str:
    """A spend scope's Slurm accounts on the owned core (``guardrails.spend.CoreSpend.as_dict``),
    said beside its cloud spend; sunk cost, never counted against a limit.

    >>> t = core_spend_text({"accounts": ["ml"], "jobs": 3, "gpu_h": 412.0, "usd": 782.8,
    ...                      "usd_per_gpu_hour": 1.9, "idle_pct": 38.2, "measured_gpu_h": 400.0})
    >>> for part in t.replace(", ", "; ").split("; "):
    ...     print(part)
    core (Slurm ml) 412 GPU-h this month at $1.90 = $783
    38 % of measured GPU-hours idle (12 GPU-h unmeasured)
    owned
    not counted against cloud limits
    """
    who = ", ".join(core.get("accounts") or [])
    text = f"core (Slurm {who}) {gpu_h_text(core['gpu_h'])} GPU-h {period}"
    if core.get("usd") is not None:
        text += f" at ${core['usd_per_gpu_hour']:,.2f} = ${core['usd']:,.0f}"
    else:
        text += " (no core_idle.gpu_hour_usd: no $ figure)"
    if core.get("idle_pct") is not None:
        text += f", {core['idle_pct']:.0f} % of measured GPU-hours idle"
    elif core.get("gpu_h"):
        text += ", idle share unknown (no DCGM data)"
    unmeasured = float(core["gpu_h"]) - float(core.get("measured_gpu_h") or 0.0)
    if core.get("idle_pct") is not None and unmeasured >= 0.05:
        text += f" ({gpu_h_text(unmeasured)} GPU-h unmeasured)"
    return text + "; owned, not counted against cloud limits"


def spend_threshold(
    scope: str,
    period: str,
    percent: float,
    *,
    spent: float,
    limit: float,
    burn: float,
    projected_month: float,
    enforce: bool,
    now: datetime | None = None,
    breach_at: datetime | None = None,
    unpriced: Mapping[str, int] | None = None,
    core: Mapping[str, Any] | None = None,
) -> Alert:
    key = f"spend:{scope}:{period}:{percent:g}"
    kind = period.split(":", maxsplit=1)[0]
    excl = f" (excluding {sum(unpriced.values())} unpriced item(s))" if unpriced else ""
    lines = [
        f"Spent ${spent:,.2f} of ${limit:,.2f} ({period}); burn "
        f"${burn:,.2f}/h; projected month ${projected_month:,.2f}{excl}.",
    ]
    if now is not None:
        lines.append(f"Forecast: {breach_text(kind, breach_at, burn, now)}.")
    if unpriced:
        lines.append(
            unpriced_text(unpriced) + " (add their prices to coreburst/common/data/catalog.yaml)."
        )
    if core:
        lines.append("Also " + core_spend_text(core) + ".")
    lines.append("Enforcement " + ("is ON for this scope." if enforce else "is off (alert only)."))
    return Alert(
        key,
        key,
        f"Spend {scope}: {percent:g}% of the {kind} limit",
        lines,
        severity="critical" if spent >= limit else "warning",
        priority=PRIORITY_URGENT,
    )


def spend_forecast(
    scope: str,
    period: str,
    *,
    now: datetime,
    breach_at: datetime,
    spent: float,
    limit: float,
    burn: float,
    unpriced: Mapping[str, int] | None = None,
    core: Mapping[str, Any] | None = None,
) -> Alert:
    """A limit the current burn will reach before the period ends (computed from this cycle's
    burn, so it moves minutes after the burn does; AWS Budgets' forecast lags hours). Each
    projected breach time is its own event; the rule decides which are worth sending."""
    kind = period.split(":", maxsplit=1)[0]
    key = f"forecast:{scope}:{period}:{breach_at:%Y-%m-%dT%H:%M}"
    excl = f" (excluding {sum(unpriced.values())} unpriced item(s))" if unpriced else ""
    lines = [
        f"Forecast: {breach_text(kind, breach_at, burn, now)}.",
        f"Spent ${spent:,.2f} of ${limit:,.2f} ({period}){excl}.",
    ]
    if unpriced:
        lines.append(unpriced_text(unpriced) + ".")
    if core:
        lines.append("Also " + core_spend_text(core) + ".")
    return Alert(
        key,
        key,
        f"Spend {scope}: {kind} limit reached at {breach_at:%H:%M} UTC at the current burn"
        if kind == "daily"
        else f"Spend {scope}: monthly limit reached on {breach_at:%Y-%m-%d} at the current burn",
        lines,
        priority=PRIORITY_URGENT,
    )


def spend_unpriced(scope: str, day: date, unpriced: Mapping[str, int]) -> Alert:
    """Instances in a scope the catalog has no price for: its totals are low by their cost."""
    kinds = ",".join(sorted(unpriced))
    return Alert(
        f"unpriced:{scope}:{day}:" + hashlib.sha1(kinds.encode()).hexdigest()[:12],
        f"unpriced:{scope}",
        f"Spend {scope}: {sum(unpriced.values())} item(s) without a price",
        [
            unpriced_text(unpriced) + ".",
            "Spend totals, limits and forecasts for this scope are low by their cost until "
            "their prices are in coreburst/common/data/catalog.yaml.",
        ],
    )


# -- egress-spike ----------------------------------------------------------------------------
def egress_spike(
    now: datetime, why: str, top_talkers: Sequence[tuple[str, float, str | None]], window: timedelta
) -> Alert:
    """``top_talkers``: (instance or NAT id, GB in the window, owner or None)."""
    minutes = int(window.total_seconds() // 60)
    talkers = [
        f"• {k}: {gb:,.1f} GB in {minutes} min" + (f" ({clip(who, 200)})" if who else "")
        for k, gb, who in top_talkers
    ]
    return Alert(f"egress:{iso(now)}", "egress", "Egress spike", [why, *talkers])


# -- budget-relay ----------------------------------------------------------------------------
def budget_notice_lines(
    notice: BudgetNotice, burn_usd_per_hour: float, top: Sequence[tuple[str, float]]
) -> list[str]:
    """What Budgets said, plus what it cannot know: the live burn and the top spenders."""
    if notice.parsed:
        head = (
            f"AWS Budgets: *{notice.budget_name}* {notice.alert_type.lower()} cost "
            f"{notice.amount} crossed {notice.threshold} (budget {notice.budgeted})."
        )
    else:
        head = (
            "AWS Budgets sent a notification coreburst could not parse: "
            + (notice.raw.strip().splitlines() or ["(empty)"])[0][:200]
        )
    lines = [
        head,
        "Budgets data lags 8-24 h; right now the fleet burns "
        f"*${burn_usd_per_hour:,.2f}/h* (${burn_usd_per_hour * 24:,.0f}/day).",
    ]
    if top:
        lines.append("Top spenders now: " + ", ".join(f"{who} ${rate:,.2f}/h" for who, rate in top))
    return lines


def budget_notice(
    notice: BudgetNotice, burn_usd_per_hour: float, top: Sequence[tuple[str, float]]
) -> Alert:
    """One Budgets notification (deduplicated on its SNS message id)."""
    return Alert(
        dedupe_key=f"budget:{notice.message_id}",
        alert_key=f"budget:{notice.budget_name}:{notice.alert_type}:{notice.threshold}",
        title=f"Budget alert: {notice.budget_name}",
        lines=budget_notice_lines(notice, burn_usd_per_hour, top),
        severity="critical" if notice.alert_type == "ACTUAL" else "warning",
        priority=PRIORITY_URGENT,
    )


# -- burst-reconcile -------------------------------------------------------------------------
BURST_JOBS_MAX = 50  # job ids listed in one message; the rest are counted


def _jobs_text(jobs: Sequence[str]) -> str:
    shown = ", ".join(clip(str(j), 40) for j in jobs[:BURST_JOBS_MAX])
    more = len(jobs) - BURST_JOBS_MAX
    return (shown or "none named") + (f" {ELLIPSIS} and {more} more" if more > 0 else "")


def burst_spend_held(
    reservation: str, nodes: str, jobs: Sequence[str], reason: str, *, cost_usd: float, scope: str
) -> Alert:
    """The resume program's spend gate held burst nodes: which jobs wait and why."""
    return Alert(
        f"burst-held:{reservation or nodes}",
        f"burst-held:{reservation or nodes}",
        f"Burst held by the spend gate: {len(jobs)} job(s) wait",
        [
            f"Jobs waiting: {_jobs_text(jobs)}.",
            f"Why: {clip(reason, 500)}.",
            f"Burst nodes held: {clip(nodes, 500)} (projected ${cost_usd:,.2f}); reservation "
            f"`{clip(reservation, 200) or 'none'}`.",
            f"The hold lifts by itself when spend scope *{clip(scope, 100)}* has room; the "
            "jobs stay queued (on the core if it frees up).",
        ],
        fields={"Scope": clip(scope, 100), "Projected": f"${cost_usd:,.2f}"},
    )


def burst_spend_released(reservation: str, nodes: str, left: Mapping[str, float]) -> Alert:
    room = ", ".join(f"${usd:,.0f} left {period}" for period, usd in left.items())
    return Alert(
        f"burst-released:{reservation}",
        f"burst-released:{reservation}",
        "Burst spend hold lifted",
        [
            f"Burst nodes {clip(nodes, 500)} are released ({room or 'no limit'}); Slurm may "
            "resume them for the waiting jobs again.",
        ],
        severity="info",
    )


def burst_pool_held(
    pool: str, reservation: str, nodes: Sequence[str], why: str, minutes: int | None
) -> Alert:
    """A pool backed off after InsufficientInstanceCapacity (``minutes``), or protected after
    repeated bootstrap failures (``minutes`` None: until an operator lifts it)."""
    until = (
        f"for {minutes} min (the reservation ends by itself)"
        if minutes is not None
        else f"until an operator runs `scontrol delete ReservationName={clip(reservation, 200)}`"
    )
    shown = ", ".join(nodes[:BURST_JOBS_MAX]) + (
        f" {ELLIPSIS} and {len(nodes) - BURST_JOBS_MAX} more" if len(nodes) > BURST_JOBS_MAX else ""
    )
    kind = "backed off" if minutes is not None else "in protected mode"
    return Alert(
        f"burst-pool:{reservation}",
        f"burst-pool:{pool}",
        f"Burst pool {clip(pool, 100)} {kind}",
        [
            f"Why: {clip(why, 500)}.",
            f"No launches in pool *{clip(pool, 100)}* {until}; jobs for it wait in the queue.",
            f"Nodes held: {clip(shown, 1500)}.",
        ],
        severity="critical" if minutes is None else "warning",
    )


# -- core-idle (Slurm jobs on the on-prem core) -----------------------------------------------
# A Slack member id (https://api.slack.com/reference/surfaces/formatting#mentioning-users):
# only these become a real ``<@U...>`` mention; anything else is text (escaped).
SLACK_MEMBER_ID = re.compile(r"^[UW][A-Z0-9]{2,20}$")
CORE_GPUS_MAX = 16  # GPU names listed in one message; the rest are counted
CORE_ACTIONS = {"warn": "left running", "requeue": "requeued", "cancel": "cancelled"}


@dataclass(frozen=True)
class MentionAlert(Alert):
    """An alert that pings Slack members: ``mentions`` (validated member ids, at most 10) go
    into a section of their own as ``<@U...>``, the one markup the other text never carries
    (it is escaped, so a job name like ``<!channel>`` is shown, not acted on)."""

    mentions: tuple[str, ...] = ()

    def payload(self) -> dict[str, Any]:
        p = super().payload()
        ids = [m for m in dict.fromkeys(self.mentions) if SLACK_MEMBER_ID.match(m)][:10]
        if ids:
            text = " ".join(f"<@{m}>" for m in ids)
            p["blocks"].insert(1, {"type": "section", "text": {"type": "mrkdwn", "text": text}})
            p["blocks"] = p["blocks"][:BLOCKS_MAX]
            p["text"] = clip(f"{text} {p['text']}", FALLBACK_TEXT_MAX)
        return p


def _gpus_text(gpus: Sequence[str]) -> str:
    shown = ", ".join(clip(g, 60) for g in gpus[:CORE_GPUS_MAX])
    more = len(gpus) - CORE_GPUS_MAX
    return (shown or "none") + (f" {ELLIPSIS} and {more} more" if more > 0 else "")


def _gpu_usd(gpus: int, usd_per_gpu_hour: float | None) -> str:
    if usd_per_gpu_hour is None:
        return ""
    return f" (${gpus * usd_per_gpu_hour:,.2f}/h of owned GPUs at ${usd_per_gpu_hour:,.2f}/GPU-h)"


def core_idle_warning(
    *,
    job_id: str,
    job_name: str,
    user: str,
    account: str,
    partition: str,
    kind: str,
    gpus: int,
    idle_gpus: Sequence[str],
    efficiency_pct: float | None,
    window: str,
    threshold_pct: float,
    policy: str,
    act_after: datetime | None,
    member: str | None,
    usd_per_gpu_hour: float | None,
    exempt_comment_key: str,
    exempt_until: date,
    max_exemption_days: int,
    run_key: str,
    dry_run: bool,
) -> MentionAlert:
    """A job holds GPUs it does not use: tell its owner what happens next and how to keep it.
    ``act_after`` None: every GPU is not idle (some are), so nothing will be done to it."""
    all_idle = len(idle_gpus) == gpus
    eff = f"{efficiency_pct:.0f} %" if efficiency_pct is not None else "unknown"
    if all_idle and act_after is not None and policy != "warn":
        then = (
            f"It will be *{CORE_ACTIONS.get(policy, policy)}* at or after {iso(act_after)} unless "
            "its GPUs become busy."
        )
    elif all_idle:
        then = "Policy here is to warn only: nothing will be done to it."
    else:
        then = "Only some of its GPUs are idle, so nothing will be done to it; please free them."
    return MentionAlert(
        f"core-idle:{run_key}:{'all' if all_idle else 'some'}{':dry-run' if dry_run else ''}",
        f"core-idle:{job_id}",
        f"{'[dry-run] ' if dry_run else ''}Slurm job {clip(job_id, 20)} holds "
        f"{len(idle_gpus)} of {gpus} GPU(s) idle",
        [
            f"Job *{clip(job_id, 20)}* ({clip(job_name, 100)}, {kind}, partition "
            f"{clip(partition, 60)}): GPUs {_gpus_text(idle_gpus)} stayed below "
            f"{threshold_pct:g} % activity for {window}"
            f"{_gpu_usd(len(idle_gpus), usd_per_gpu_hour)}.",
            f"GPU efficiency over its run so far: {eff}.",
            then,
            f"To keep it: `scontrol update job={clip(job_id, 20)} "
            f"comment={exempt_comment_key}={exempt_until.isoformat()}` (at most "
            f"{max_exemption_days} days ahead), or ask an operator for an exemption.",
        ],
        fields={
            "User": clip(user, 100),
            "Account": clip(account or "-", 100),
            "Idle GPUs": f"{len(idle_gpus)} of {gpus}",
            "Policy": policy,
        },
        mentions=(member,) if member else (),
    )


def core_idle_acted(
    key: str, *, job_id: str, user: str, policy: str, reason: str, member: str | None
) -> MentionAlert:
    return MentionAlert(
        f"act:{key}",
        f"act:slurm-job-{job_id}",
        f"Idle Slurm job {clip(job_id, 20)} {CORE_ACTIONS.get(policy, policy)}",
        [
            f"Job *{clip(job_id, 20)}* of {clip(user, 100)}: {clip(reason, 500)}.",
            "A requeued job waits in the queue and starts again from its beginning (or its "
            "last checkpoint)."
            if policy == "requeue"
            else "Its GPUs are free for others.",
        ],
        fields={"User": clip(user, 100), "Action": policy},
        mentions=(member,) if member else (),
    )


def core_blind(jobs: Sequence[tuple[str, str]]) -> Alert:
    """Jobs whose GPUs have no usable DCGM data: (job id, reason). Never acted on."""
    ids_sorted = sorted(j for j, _ in jobs)
    return Alert(
        "core-blind:" + hashlib.sha1(",".join(ids_sorted).encode()).hexdigest()[:16],
        "core-blind",
        f"{len(jobs)} Slurm job(s) on the core without usable GPU data",
        [
            f"Never requeued or cancelled while blind: {_jobs_text(ids_sorted)}",
            *(f"• job {clip(j, 20)}: {why}" for j, why in jobs),
        ],
        severity="info",
        priority=PRIORITY_URGENT,
    )
