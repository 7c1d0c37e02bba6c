"""Demand histories (GPUs wanted per hour) and the owned core size they call for (pure).

Two file shapes are read, told apart by their header:

* ``timestamp,gpus`` — GPUs wanted (allocated or busy) each hour; sub-hourly rows are averaged
  into their hour.
* ``timestamp,instance_id,gpu_index,utilization_pct`` — a recorded fleet-utilization file
  (one row per GPU per sample, as nvidia-smi/DCGM report it); each hour's demand is the sum over
  GPUs of their mean utilization, so it is *measured* activity.

    >>> h = parse_demand_csv("timestamp,gpus\\n2026-01-01T00:00Z,8\\n2026-01-01T01:00Z,16\\n")
    >>> h.gpus, h.basis
    ((8.0, 16.0), None)
"""

from __future__ import annotations

import bisect
import csv
import io
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from coreburst.common.textio import read_text

# Bounds on a demand file, so a typo fails in one line instead of running for minutes or out of
# memory: GPUs wanted in one hour (the same bound as a scenario's ``gpus``), data rows in one
# file (a fleet-utilization file has one row per GPU per sample: 1,000,000 rows is a year of
# hourly samples for 114 GPUs), and the span from the first to the last hour (ten years).
MAX_GPUS_PER_ROW = 100_000
MAX_ROWS = 1_000_000
MAX_SPAN_HOURS = 10 * 8_784
SERIES_HEADER = ("timestamp", "gpus")
FLEET_HEADER = ("timestamp", "instance_id", "gpu_index", "utilization_pct")
# Float noise (e.g. 16.000000001 GPUs of overflow) must not rent a whole extra node.
_EPS = 1e-9


class DemandError(ValueError):
    """A demand file is empty, malformed or holds impossible values."""


@dataclass(frozen=True)
class DemandHistory:
    hours: tuple[datetime, ...]
    gpus: tuple[float, ...]
    # "measured" for a fleet-utilization file; None when the file does not say (series shape).
    basis: Literal["measured"] | None
    # Hours between the first and last that have no row: left out, not counted as zero demand.
    missing_hours: int
    origin: str

    @property
    def mean(self) -> float:
        return sum(self.gpus) / len(self.gpus)

    @property
    def peak(self) -> float:
        return max(self.gpus)

    @property
    def variation(self) -> float:
        """Coefficient of variation of hourly demand (0 for a flat line)."""
        m = self.mean
        if m == 0:
            return 0.0
        var = sum((g - m) ** 2 for g in self.gpus) / len(self.gpus)
        return math.sqrt(var) / m


def _parse_time(raw: str, where: str) -> datetime:
    text = raw.strip()
    try:
        ts = datetime.fromisoformat(text)
    except ValueError:
        raise DemandError(f"{where}: timestamp {raw!r} is not ISO 8601") from None
    # Naive timestamps are taken as UTC so that mixed files still bucket into the same hours.
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def _parse_number(raw: str, what: str, where: str, lo: float, hi: float = math.inf) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise DemandError(f"{where}: {what} {raw!r} is not a number") from None
    if not math.isfinite(value) or not lo <= value <= hi:
        bound = f"between {lo:g} and {hi:g}" if math.isfinite(hi) else f">= {lo:g}"
        raise DemandError(f"{where}: {what} {raw!r} must be {bound}")
    return value


def _hour(ts: datetime) -> datetime:
    return ts.replace(minute=0, second=0, microsecond=0)


def parse_demand_csv(text: str, origin: str = "<demand>") -> DemandHistory:
    """Parse either file shape into hourly demand; raises DemandError with file:line on error."""
    numbered: list[tuple[int, list[str]]] = []
    i = 0
    try:
        for i, r in enumerate(csv.reader(io.StringIO(text)), start=1):
            if any(c.strip() for c in r):
                numbered.append((i, r))
                if len(numbered) > MAX_ROWS + 1:
                    raise DemandError(
                        f"{origin}: more than {MAX_ROWS:,} data rows; aggregate to hourly rows "
                        "(timestamp,gpus) or split the history"
                    )
    except csv.Error as exc:
        raise DemandError(f"{origin}: line {i}: not valid CSV ({exc})") from None
    if not numbered:
        raise DemandError(f"{origin}: demand file is empty (want header {','.join(SERIES_HEADER)})")
    header = tuple(c.strip().lower() for c in numbered[0][1])
    if header not in (SERIES_HEADER, FLEET_HEADER):
        raise DemandError(
            f"{origin}: line {numbered[0][0]}: header {','.join(header)!r} is neither "
            f"{','.join(SERIES_HEADER)!r} nor {','.join(FLEET_HEADER)!r}"
        )
    if len(numbered) == 1:
        raise DemandError(f"{origin}: demand file has a header but no rows")
    width = len(header)
    buckets: dict[datetime, list[float]] = defaultdict(list)
    per_gpu: dict[tuple[datetime, str, str], list[float]] = defaultdict(list)
    for lineno, row in numbered[1:]:
        where = f"{origin}: line {lineno}"
        if len(row) != width:
            raise DemandError(f"{where}: expected {width} columns, got {len(row)}")
        hour = _hour(_parse_time(row[0], where))
        if header == SERIES_HEADER:
            buckets[hour].append(_parse_number(row[1], "gpus", where, 0.0, MAX_GPUS_PER_ROW))
        else:
            util = _parse_number(row[3], "utilization_pct", where, 0.0, 100.0)
            per_gpu[(hour, row[1].strip(), row[2].strip())].append(util)
    if header == FLEET_HEADER:
        busy: dict[datetime, float] = defaultdict(float)
        for (hour, _inst, _idx), samples in per_gpu.items():
            busy[hour] += sum(samples) / len(samples) / 100.0
        series = dict(busy)
    else:
        series = {h: sum(v) / len(v) for h, v in buckets.items()}
    hours = tuple(sorted(series))
    span = int((hours[-1] - hours[0]) / timedelta(hours=1)) + 1
    if span > MAX_SPAN_HOURS:
        raise DemandError(
            f"{origin}: rows span {span:,} hours ({hours[0]:%Y-%m-%d} to {hours[-1]:%Y-%m-%d}); "
            f"at most {MAX_SPAN_HOURS:,} (ten years): check the timestamps"
        )
    return DemandHistory(
        hours=hours,
        gpus=tuple(series[h] for h in hours),
        basis="measured" if header == FLEET_HEADER else None,
        missing_hours=span - len(hours),
        origin=origin,
    )


def load_demand(path: Path) -> DemandHistory:
    text = read_text(path, "demand file", DemandError)
    return parse_demand_csv(text, str(path))


@dataclass(frozen=True)
class CoreCosts:
    """Per-node figures the core sizing needs, all per hour."""

    gpus_per_node: int
    # Owned: everything that does not depend on load (amortised capex, maintenance, colo, staff).
    owned_fixed_per_node_hour: float
    # Owned energy at full draw ($/h incl. PUE) and the share still drawn when idle.
    owned_power_per_node_hour: float
    idle_power_fraction: float
    # Cloud overflow: $ per rented node-hour, spot re-run overhead already folded in.
    burst_per_node_hour: float


@dataclass(frozen=True)
class CoreOption:
    nodes: int
    owned_usd: float
    burst_usd: float
    core_busy_gpu_hours: float
    burst_gpu_hours: float

    @property
    def total_usd(self) -> float:
        return self.owned_usd + self.burst_usd


@dataclass(frozen=True)
class CoreSizing:
    best: CoreOption
    options: tuple[CoreOption, ...]  # one per core size 0..peak nodes
    demand_gpu_hours: float
    history_hours: int
    gpus_per_node: int

    def core_utilization(self, option: CoreOption | None = None) -> float:
        o = option or self.best
        capacity = o.nodes * self.gpus_per_node * self.history_hours
        return o.core_busy_gpu_hours / capacity if capacity else 0.0

    def burst_share(self, option: CoreOption | None = None) -> float:
        o = option or self.best
        return o.burst_gpu_hours / self.demand_gpu_hours if self.demand_gpu_hours else 0.0


def cost_of_core(demand: Sequence[float], nodes: int, c: CoreCosts) -> CoreOption:
    """Cost over the history of owning ``nodes`` and renting whole nodes for the overflow."""
    g = c.gpus_per_node
    capacity = nodes * g
    owned = burst = busy_total = over_total = 0.0
    for d in demand:
        busy = min(d, capacity)
        over = max(0.0, d - capacity)
        owned += nodes * c.owned_fixed_per_node_hour
        owned += c.owned_power_per_node_hour * (
            nodes * c.idle_power_fraction + (1 - c.idle_power_fraction) * busy / g
        )
        burst += math.ceil(over / g - _EPS) * c.burst_per_node_hour if over > _EPS else 0.0
        busy_total += busy
        over_total += over
    return CoreOption(nodes, owned, burst, busy_total, over_total)


def size_core(demand: Sequence[float], c: CoreCosts) -> CoreSizing:
    """Try every core size from 0 to the peak in nodes; keep the cheapest (smaller on ties).

    Same figures as :func:`cost_of_core` for each size, from sorted demand and prefix sums, so
    the work grows with hours x log(hours) + peak nodes, not hours x peak nodes (a year of
    hourly rows at the 100,000-GPU bound would otherwise take minutes).
    """
    if not demand:
        raise DemandError("demand history is empty")
    g = c.gpus_per_node
    hours = len(demand)
    gpus = sorted(demand)
    # Whole nodes each hour needs; an hour over a k-node core rents max(0, need - k) nodes.
    need = sorted(math.ceil(d / g - _EPS) if d > _EPS else 0 for d in gpus)
    gpus_sum, need_sum = [0.0], [0]
    for d in gpus:
        gpus_sum.append(gpus_sum[-1] + d)
    for n in need:
        need_sum.append(need_sum[-1] + n)
    peak_nodes = max(need[-1], 0)
    options = []
    for k in range(peak_nodes + 1):
        cap = k * g
        below = bisect.bisect_right(gpus, cap)  # hours whose demand fits in the core
        busy = gpus_sum[below] + cap * (hours - below)
        over = gpus_sum[-1] - busy
        owned = hours * k * c.owned_fixed_per_node_hour + c.owned_power_per_node_hour * (
            hours * k * c.idle_power_fraction + (1 - c.idle_power_fraction) * busy / g
        )
        fits = bisect.bisect_right(need, k)
        rented = (need_sum[-1] - need_sum[fits]) - k * (hours - fits)
        options.append(CoreOption(k, owned, rented * c.burst_per_node_hour, busy, max(over, 0.0)))
    best = min(options, key=lambda o: (round(o.total_usd, 6), o.nodes))
    return CoreSizing(best, tuple(options), gpus_sum[-1], hours, g)
