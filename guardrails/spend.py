"""Spend arithmetic: burn rate, month-to-date, projections, threshold crossings (pure).

    >>> from datetime import UTC, datetime
    >>> p = project(ce_actual_usd=1000.0, accrued_today_usd=48.0, burn_usd_per_hour=4.0,
    ...             now=datetime(2026, 4, 10, 12, tzinfo=UTC))
    >>> p.month_to_date_usd, p.projected_today_usd
    (1048.0, 96.0)

Cost Explorer lags by up to a day, so month-to-date = its actuals up to the last complete day
plus what the live burn rate accrued since.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from common import pricing


def month_start(now: datetime) -> datetime:
    return now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def day_start(now: datetime) -> datetime:
    return now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def month_end(now: datetime) -> datetime:
    start = month_start(now)
    days = calendar.monthrange(start.year, start.month)[1]
    return start + timedelta(days=days)


@dataclass(frozen=True)
class Projection:
    burn_usd_per_hour: float
    today_usd: float
    projected_today_usd: float
    month_to_date_usd: float
    projected_month_usd: float


def project(
    ce_actual_usd: float, accrued_today_usd: float, burn_usd_per_hour: float, now: datetime
) -> Projection:
    """Month-to-date and end-of-day / end-of-month projections at the current burn rate."""
    hours_left_today = (day_start(now) + timedelta(days=1) - now).total_seconds() / 3600
    hours_left_month = (month_end(now) - now).total_seconds() / 3600
    mtd = ce_actual_usd + accrued_today_usd
    return Projection(
        burn_usd_per_hour=burn_usd_per_hour,
        today_usd=accrued_today_usd,
        projected_today_usd=accrued_today_usd + burn_usd_per_hour * hours_left_today,
        month_to_date_usd=mtd,
        projected_month_usd=mtd + burn_usd_per_hour * hours_left_month,
    )


def accrue(
    previous_usd: float,
    previous_at: datetime | None,
    burn_usd_per_hour: float,
    now: datetime,
) -> float:
    """Spend accrued since midnight UTC, integrated cycle by cycle.

    With no earlier sample today (first cycle, or the daemon was down) the current rate is
    assumed to have run since midnight or since the last sample: an over- rather than an
    under-estimate, which is the safe side for a spend guardrail.
    """
    midnight = day_start(now)
    if previous_at is None or previous_at < midnight:
        return burn_usd_per_hour * (now - midnight).total_seconds() / 3600
    dt_h = max(0.0, (now - previous_at).total_seconds() / 3600)
    return previous_usd + burn_usd_per_hour * dt_h


def accrue_since_launch(
    previous_usd: float,
    previous_at: datetime | None,
    items: Iterable[tuple[float, datetime | None]],
    now: datetime,
) -> float:
    """Spend accrued since midnight UTC, each item ($/h, running since) counted from when it
    started running, not from midnight.

    With an earlier sample today, what accrued then plus each item's rate since
    ``max(sample, its start)``; with none (the scope's first cycle, a new day, a clock that went
    back) from ``max(midnight, its start)``: an instance launched at 09:00 has cost nothing
    before 09:00. An item whose start is unknown (None) runs since midnight or the sample, the
    over-estimate, which is the safe side for a spend guardrail; so does one that starts after
    ``now`` (this clock is behind EC2's).

    >>> from datetime import UTC, datetime
    >>> now = datetime(2026, 4, 10, 12, tzinfo=UTC)
    >>> accrue_since_launch(0.0, None, [(10.0, datetime(2026, 4, 10, 9, tzinfo=UTC))], now)
    30.0
    """
    midnight = day_start(now)
    if previous_at is None or previous_at < midnight or previous_at > now:
        total, since = 0.0, midnight
    else:
        total, since = previous_usd, previous_at
    for rate, start in items:
        # a start after "now" means this clock is behind EC2's: count the safe way
        begin = since if start is None or start > now else max(since, start)
        total += rate * max(0.0, (now - begin).total_seconds()) / 3600
    return total


def breach_time(
    spent_usd: float,
    limit_usd: float,
    burn_usd_per_hour: float,
    now: datetime,
    period_end: datetime,
) -> datetime | None:
    """When spending reaches ``limit_usd`` at the current burn: ``now`` if it already has, None
    if it will not before ``period_end`` (or nothing burns).

    >>> from datetime import UTC, datetime
    >>> breach_time(800.0, 1000.0, 100.0, datetime(2026, 4, 10, 12, tzinfo=UTC),
    ...             datetime(2026, 4, 11, tzinfo=UTC)).strftime("%H:%M")
    '14:00'
    """
    if spent_usd >= limit_usd:
        return now
    if burn_usd_per_hour <= 0:
        return None
    at = now + timedelta(hours=(limit_usd - spent_usd) / burn_usd_per_hour)
    return at if at < period_end else None


def crossed(spent_usd: float, limit_usd: float, thresholds_percent: list[float]) -> list[float]:
    """Thresholds (percent of the limit) that ``spent_usd`` has reached."""
    return [t for t in sorted(thresholds_percent) if spent_usd >= limit_usd * t / 100.0]


def lustre_usd_per_hour(
    capacity_gib: float, usd_per_gb_month: float, hours_per_month: float
) -> float:
    """The run rate of a Lustre file system: :func:`common.pricing.lustre_usd_per_hour`, the
    same arithmetic `coreburst plan` and the budget policy use."""
    return pricing.lustre_usd_per_hour(capacity_gib, usd_per_gb_month, hours_per_month)
