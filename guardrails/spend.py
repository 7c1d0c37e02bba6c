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
from typing import Any

from coreburst.common import pricing


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
    """The run rate of a Lustre file system: :func:`coreburst.common.pricing.lustre_usd_per_hour`,
    the
    same arithmetic `coreburst plan` and the budget policy use."""
    return pricing.lustre_usd_per_hour(capacity_gib, usd_per_gb_month, hours_per_month)


# -- the on-prem core beside cloud spend -----------------------------------------------------
def core_run_hours(row: Any, since: datetime) -> tuple[float, float | None]:
    """(allocated, used) GPU-hours of one Slurm job run recorded by the core-idle rule
    (``core_usage``) that fall at or after ``since``.

    The rule records allocated = GPUs x (last seen - start) and used = allocated x the run's
    DCGM efficiency (None: not every GPU measured). The part before ``since`` is cut off; used
    is cut pro rata (the run's efficiency taken as even over the run).

    >>> row = {"start": "2026-04-01T00:00:00+00:00", "last_seen": "2026-04-11T00:00:00+00:00",
    ...        "gpus": 2, "allocated_gpu_h": 480.0, "used_gpu_h": 120.0}
    >>> core_run_hours(row, datetime(2026, 4, 9, tzinfo=UTC))
    (96.0, 24.0)
    >>> core_run_hours(row, datetime(2026, 3, 1, tzinfo=UTC))
    (480.0, 120.0)
    """
    alloc = float(row["allocated_gpu_h"])
    used = None if row["used_gpu_h"] is None else min(float(row["used_gpu_h"]), alloc)
    start = datetime.fromisoformat(str(row["start"]))
    last = datetime.fromisoformat(str(row["last_seen"]))
    if start >= since or alloc <= 0:
        return alloc, used
    inside = min(alloc, int(row["gpus"]) * max(0.0, (last - since).total_seconds()) / 3600)
    return inside, None if used is None else used * inside / alloc


@dataclass(frozen=True)
class CoreSpend:
    """A spend scope's Slurm accounts on the core over a period: GPU-hours allocated, of them
    measured (every GPU had DCGM data) and used, and their owned price (None: no
    ``core_idle.gpu_hour_usd``). Sunk cost: shown beside cloud spend, never against a limit."""

    accounts: tuple[str, ...]
    jobs: int
    gpu_h: float
    measured_gpu_h: float
    used_gpu_h: float
    usd_per_gpu_hour: float | None

    @property
    def usd(self) -> float | None:
        return None if self.usd_per_gpu_hour is None else self.gpu_h * self.usd_per_gpu_hour

    @property
    def idle_pct(self) -> float | None:
        """Idle share of the measured GPU-hours (blind runs are never counted idle)."""
        if self.measured_gpu_h <= 0:
            return None
        return 100 * (self.measured_gpu_h - self.used_gpu_h) / self.measured_gpu_h

    def as_dict(self) -> dict[str, Any]:
        return {
            "accounts": list(self.accounts),
            "jobs": self.jobs,
            "gpu_h": round(self.gpu_h, 3),
            "measured_gpu_h": round(self.measured_gpu_h, 3),
            "used_gpu_h": round(self.used_gpu_h, 3),
            "idle_pct": None if self.idle_pct is None else round(self.idle_pct, 1),
            "usd_per_gpu_hour": self.usd_per_gpu_hour,
            "usd": None if self.usd is None else round(self.usd, 2),
        }


def core_spend(
    rows: Iterable[Any],
    accounts: Iterable[str],
    since: datetime,
    usd_per_gpu_hour: float | None,
) -> CoreSpend:
    """GPU-hours since ``since`` of the job runs of ``accounts`` (see :func:`core_run_hours`).

    >>> rows = [{"account": "ml", "start": "2026-04-10T00:00:00+00:00",
    ...          "last_seen": "2026-04-10T10:00:00+00:00", "gpus": 8,
    ...          "allocated_gpu_h": 80.0, "used_gpu_h": 20.0},
    ...         {"account": "cv", "start": "2026-04-10T00:00:00+00:00",
    ...          "last_seen": "2026-04-10T10:00:00+00:00", "gpus": 1,
    ...          "allocated_gpu_h": 10.0, "used_gpu_h": 10.0}]
    >>> c = core_spend(rows, ["ml"], datetime(2026, 4, 1, tzinfo=UTC), 1.9)
    >>> (c.gpu_h, c.usd, c.idle_pct)
    (80.0, 152.0, 75.0)
    """
    want = set(accounts)
    jobs, alloc, measured, used = 0, 0.0, 0.0, 0.0
    for r in rows:
        if r["account"] not in want or datetime.fromisoformat(str(r["last_seen"])) < since:
            continue
        a, u = core_run_hours(r, since)
        jobs += 1
        alloc += a
        if u is not None:
            measured += a
            used += u
    return CoreSpend(tuple(sorted(want)), jobs, alloc, measured, used, usd_per_gpu_hour)


def gpu_h_text(gpu_h: float) -> str:
    """GPU-hours as a message says them: whole from 10 up, else one decimal (a 3.5 GPU-h job is
    not "4").

    >>> gpu_h_text(412.4), gpu_h_text(1234.0), gpu_h_text(8.8), gpu_h_text(0.0)
    ('412', '1,234', '8.8', '0.0')
    """
    return f"{gpu_h:,.0f}" if round(gpu_h, 1) >= 10 else f"{gpu_h:.1f}"
