"""Egress projection and spike detection (pure; prices come from the catalog object passed in).

    >>> from datetime import timedelta
    >>> from common.catalog import load_catalog
    >>> e = project_egress({"i-1": 10 * 2**30}, {}, timedelta(hours=1), 0.0, load_catalog())
    >>> round(e.projected_day_gb)
    240

Instance NetworkOut counts every byte leaving the instance (intra-VPC too), so it is an upper
bound on internet egress; Cost Explorer data-transfer usage is the lagging truth.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import timedelta

from common.catalog import Catalog

GB = 2**30


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
