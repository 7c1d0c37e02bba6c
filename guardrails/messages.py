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
from collections.abc import Iterable, Sequence
from datetime import date, datetime, timedelta

from guardrails.budget_relay import BudgetNotice
from guardrails.idle import Decision
from guardrails.model import Node
from guardrails.slack import ELLIPSIS, Alert, clip
from guardrails.state import iso

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
    )


# -- spend-limit -----------------------------------------------------------------------------
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
) -> Alert:
    key = f"spend:{scope}:{period}:{percent:g}"
    return Alert(
        key,
        key,
        f"Spend {scope}: {percent:g}% of the {period.split(':', maxsplit=1)[0]} limit",
        [
            f"Spent ${spent:,.2f} of ${limit:,.2f} ({period}); burn "
            f"${burn:,.2f}/h; projected month ${projected_month:,.2f}.",
            "Enforcement " + ("is ON for this scope." if enforce else "is off (alert only)."),
        ],
        severity="critical" if spent >= limit else "warning",
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
    )
