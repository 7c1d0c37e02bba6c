"""The spend-limit, egress-spike and budget-relay wording."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta
from typing import Any

from guardrails.adapters.budget_queue import BudgetNotice
from guardrails.adapters.slack import (
    PRIORITY_URGENT,
    Alert,
    clip,
)
from guardrails.spend import gpu_h_text
from guardrails.timefmt import iso


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
