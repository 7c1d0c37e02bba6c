"""Egress projection and spike detection (pure; prices come from the catalog object passed in).

    >>> from datetime import timedelta
    >>> from coreburst.common.catalog import load_catalog
    >>> e = project_egress({"i-1": 10 * 2**30}, {}, timedelta(hours=1), 0.0, load_catalog())
    >>> round(e.projected_day_gb)
    240

Instance NetworkOut counts every byte leaving the instance (intra-VPC too), so it is an upper
bound on internet egress; Cost Explorer data-transfer usage is the lagging truth.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from coreburst.common.catalog import Catalog

GB = 2**30
# Byte counters are read in whole periods of this length
# (``guardrails.adapters.cloudwatch.BYTES_PERIOD_S``).
PERIOD = timedelta(seconds=300)
# A read ends this long before now, on a period boundary: EC2 publishes a period's datapoint
# after the period ends, and a read never goes back over a span it has read (UNVERIFIED: the
# EC2 guide gives no publishing delay; one basic-monitoring period is our allowance).
SETTLE = timedelta(minutes=5)


def _floor(t: datetime, step: timedelta) -> datetime:
    s = int(step.total_seconds())
    return datetime.fromtimestamp(int(t.timestamp()) // s * s, t.tzinfo)


def read_span(
    now: datetime, last_end: datetime | None, window: timedelta
) -> tuple[datetime, datetime] | None:
    """The span [start, end) the next byte read covers: from where the last read ended (no
    gap, no byte twice) to the last period boundary ``SETTLE`` before now. The first read, or
    one after a gap longer than the window, covers the window. None: nothing new to read.

    >>> from datetime import UTC
    >>> t = datetime(2026, 1, 1, 12, 17, 30, tzinfo=UTC)
    >>> [x.strftime("%H:%M") for x in read_span(t, None, timedelta(hours=1))]
    ['11:10', '12:10']
    >>> noon = t.replace(minute=0, second=0)
    >>> [x.strftime("%H:%M") for x in read_span(t, noon, timedelta(hours=1))]
    ['12:00', '12:10']
    """
    end = _floor(now - SETTLE, PERIOD)
    first = _floor(end - window, PERIOD)
    fresh = last_end is None or last_end > end or last_end < first
    start = first if fresh or last_end is None else last_end
    return (start, end) if start < end else None


@dataclass(frozen=True)
class EgressRead:
    """Bytes one read found in [start, end): instances and NAT gateways, totals only."""

    start: datetime
    end: datetime
    instance_bytes: float
    nat_bytes: float

    def to_json(self) -> list[Any]:
        return [self.start.isoformat(), self.end.isoformat(), self.instance_bytes, self.nat_bytes]

    @classmethod
    def from_json(cls, row: list[Any]) -> EgressRead:
        return cls(datetime.fromisoformat(row[0]), datetime.fromisoformat(row[1]), row[2], row[3])


def window_reads(reads: list[EgressRead], window: timedelta) -> list[EgressRead]:
    """The latest reads that follow each other without a gap and start within ``window`` of
    the last one's end (rounded out to a period), oldest first."""
    if not reads:
        return []
    first = _floor(reads[-1].end - window, PERIOD)
    kept = [reads[-1]]
    for r in reversed(reads[:-1]):
        if r.end != kept[0].start or r.start < first:
            break
        kept.insert(0, r)
    return kept


@dataclass(frozen=True)
class EgressProjection:
    projected_day_gb: float
    projected_day_usd: float
    top_talkers: list[tuple[str, float]]  # (source id, GB in the window)


def project_egress(
    instance_bytes: dict[str, float],
    nat_bytes: dict[str, float],
    window: timedelta,
    month_to_date_gb: float,
    catalog: Catalog,
    *,
    top: int = 5,
) -> EgressProjection:
    """Scale the window's bytes to a day and price them on this month's remaining tiers.

    NAT traffic also pays the NAT per-GB processing charge on top of the egress tiers.
    """
    scale = timedelta(days=1) / window
    inst_gb = sum(instance_bytes.values()) / GB
    nat_gb = sum(nat_bytes.values()) / GB
    day_gb = (inst_gb + nat_gb) * scale
    usd = catalog.internet_egress_cost(day_gb, already_gb=month_to_date_gb)
    usd += nat_gb * scale * catalog.nat_gateway.usd_per_gb.value
    talkers = sorted(
        ((k, v / GB) for k, v in {**instance_bytes, **nat_bytes}.items()),
        key=lambda kv: (-kv[1], kv[0]),
    )
    return EgressProjection(day_gb, usd, talkers[:top])


def spike(
    projected_usd: float,
    history_usd: list[float],
    threshold_usd: float,
    factor: float,
    min_samples: int,
) -> str | None:
    """Why this projection deserves an alert, or None."""
    if projected_usd > threshold_usd:
        return f"projected ${projected_usd:,.2f}/day exceeds the ${threshold_usd:,.2f} threshold"
    if len(history_usd) >= min_samples:
        base = statistics.median(history_usd)
        if base > 0 and projected_usd > factor * base:
            return (
                f"projected ${projected_usd:,.2f}/day is {projected_usd / base:.1f}x the trailing "
                f"baseline ${base:,.2f}/day (alert above {factor:g}x)"
            )
    return None
