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
from collections.abc import Iterable, Mapping, Sequence
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
def unpriced_text(unpriced: Mapping[str, int]) -> str:
    """What a spend total leaves out: instances the catalog has no price for.

    >>> unpriced_text({"trn2.48xlarge in eu-west-1 (on-demand)": 3})
    '3 unpriced instance(s) not in these totals: 3 trn2.48xlarge in eu-west-1 (on-demand)'
    """
    n = sum(unpriced.values())
    kinds = ", ".join(f"{c} {k}" for k, c in sorted(unpriced.items()))
    return f"{n} unpriced instance(s) not in these totals: {kinds}"


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
) -> Alert:
    key = f"spend:{scope}:{period}:{percent:g}"
    kind = period.split(":", maxsplit=1)[0]
    excl = f" (excluding {sum(unpriced.values())} unpriced instance(s))" if unpriced else ""
    lines = [
        f"Spent ${spent:,.2f} of ${limit:,.2f} ({period}); burn "
        f"${burn:,.2f}/h; projected month ${projected_month:,.2f}{excl}.",
    ]
    if now is not None:
        lines.append(f"Forecast: {breach_text(kind, breach_at, burn, now)}.")
    if unpriced:
        lines.append(unpriced_text(unpriced) + " (add their prices to common/data/catalog.yaml).")
    lines.append("Enforcement " + ("is ON for this scope." if enforce else "is off (alert only)."))
    return Alert(
        key,
        key,
        f"Spend {scope}: {percent:g}% of the {kind} limit",
        lines,
        severity="critical" if spent >= limit else "warning",
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
) -> Alert:
    """A limit the current burn will reach before the period ends (computed from this cycle's
    burn, so it moves minutes after the burn does; AWS Budgets' forecast lags hours). Each
    projected breach time is its own event; the rule decides which are worth sending."""
    kind = period.split(":", maxsplit=1)[0]
    key = f"forecast:{scope}:{period}:{breach_at:%Y-%m-%dT%H:%M}"
    excl = f" (excluding {sum(unpriced.values())} unpriced instance(s))" if unpriced else ""
    lines = [
        f"Forecast: {breach_text(kind, breach_at, burn, now)}.",
        f"Spent ${spent:,.2f} of ${limit:,.2f} ({period}){excl}.",
    ]
    if unpriced:
        lines.append(unpriced_text(unpriced) + ".")
    return Alert(
        key,
        key,
        f"Spend {scope}: {kind} limit reached at {breach_at:%H:%M} UTC at the current burn"
        if kind == "daily"
        else f"Spend {scope}: monthly limit reached on {breach_at:%Y-%m-%d} at the current burn",
        lines,
    )


def spend_unpriced(scope: str, day: date, unpriced: Mapping[str, int]) -> Alert:
    """Instances in a scope the catalog has no price for: its totals are low by their cost."""
    kinds = ",".join(sorted(unpriced))
    return Alert(
        f"unpriced:{scope}:{day}:" + hashlib.sha1(kinds.encode()).hexdigest()[:12],
        f"unpriced:{scope}",
        f"Spend {scope}: {sum(unpriced.values())} instance(s) without a price",
        [
            unpriced_text(unpriced) + ".",
            "Spend totals, limits and forecasts for this scope are low by their cost until "
            "their prices are in common/data/catalog.yaml.",
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
    )
