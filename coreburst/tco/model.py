"""Build-vs-rent cost model (pure): typed scenario in, priced options and a recommendation out.

Every AWS figure comes from the catalog (``coreburst/common/data/catalog.yaml``); on-prem figures
and
commitment discounts come from ``coreburst/tco/data/onprem_defaults.yaml`` unless the scenario
gives its own. Conventions, stated once:

* A month is ``catalog.hours_per_month`` hours. Renting bills whole nodes for the hours they run;
  owning bills every hour whether busy or not.
* Owned hardware (node + its fabric share) is paid in cash at month 0 and bought again when its
  depreciation life runs out; per-month and per-GPU-hour figures use straight-line amortisation.
* Commitments bill every hour of the term; a horizon shorter than the term still pays the term.
* Spot needs more GPU-hours than the work: ``(1 + checkpoint overhead) / (1 - lost fraction)``,
  where each interruption loses half a checkpoint interval plus the restart time.

    >>> r = analyse(Scenario(gpus=8, utilization_pct=85, utilization_basis="measured"))
    >>> [o.name for o in r.options][:2]
    ['on-demand', 'spot']
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from coreburst.common.catalog import Catalog, CatalogError, Figure, Source, load_catalog
from coreburst.common.errors import one_line as _one_line
from coreburst.common.pricing import cites_unverified, merge_sources, owned_gpu_hour_usd
from coreburst.common.textio import read_text
from coreburst.tco.demand import CoreCosts, DemandHistory, size_core
from coreburst.tco.rules import RuleAdvice, Verdict, rule_of_thumb

DEFAULTS_PATH = Path(__file__).parent / "data" / "onprem_defaults.yaml"
# Demand whose hourly coefficient of variation is at or below this counts as "steady".
STEADY_MAX_VARIATION = 0.25
SWEEP_UTILIZATION_PCT = tuple(range(5, 101, 5))


class TcoError(ValueError):
    """A scenario cannot be priced as given (missing figure, impossible combination)."""


class _Strict(BaseModel):
    # allow_inf_nan=False: flags and YAML (.inf, nan) must not turn a price or a duration into
    # infinity; every float field of a scenario is finite.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


Money = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Percent = Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]


# -- defaults file --------------------------------------------------------------------------
class OnpremDefaults(_Strict):
    schema_: int = Field(alias="schema")
    sources: dict[str, Source]
    hardware_usd_per_node: Figure
    networking_usd_per_node: Figure
    depreciation_years: Figure
    maintenance_fraction_per_year: Figure
    pue: Figure
    usd_per_kwh: Figure
    idle_power_fraction: Figure
    colo_usd_per_kw_month: Figure
    staff_usd_per_fte_year: Figure
    staff_fte_per_node: Figure
    commitment_discount: dict[Literal["1", "3"], Figure]
    spot_interruptions_per_node_day: Figure
    checkpoint_interval_minutes: Figure
    restart_minutes: Figure
    checkpoint_overhead_fraction: Figure

    def figures(self) -> list[tuple[str, Figure]]:
        """Every figure with its name (``commitment_discount.1`` for a discount)."""
        out: list[tuple[str, Figure]] = []
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, Figure):
                out.append((name, value))
            elif name == "commitment_discount":
                out += [(f"{name}.{k}", v) for k, v in value.items()]
        return out

    @model_validator(mode="after")
    def _every_source_listed(self) -> OnpremDefaults:
        for name, fig in self.figures():
            if fig.source not in self.sources:
                raise ValueError(
                    f"{name} cites {fig.source!r}, which sources does not list (add it under "
                    "sources: with a url or a file)"
                )
        return self


@functools.cache
def load_defaults(path: Path = DEFAULTS_PATH) -> OnpremDefaults:
    text = read_text(path, "on-prem defaults", TcoError)
    try:
        return OnpremDefaults.model_validate(yaml.safe_load(text))
    except yaml.YAMLError as exc:
        raise TcoError(f"{path}: not valid YAML ({exc})") from None
    except ValidationError as exc:
        raise TcoError(f"{path}: {one_line(exc)}") from None


def one_line(exc: ValidationError) -> str:
    """First validation error as ``key.path: message (got value)``; the caller adds where."""
    return _one_line(exc, root="scenario")


# -- scenario (input) -----------------------------------------------------------------------
class OwnedInputs(_Strict):
    """Owned-node figures; anything left out comes from the defaults file."""

    hardware_usd_per_node: Money | None = None
    networking_usd_per_node: Money | None = None
    depreciation_years: Annotated[float, Field(gt=0, le=15)] | None = None
    maintenance_fraction_per_year: Fraction | None = None
    # Real draw of one node at full load; None → catalog power_kw of the comparable instance.
    power_kw: Positive | None = None
    pue: Annotated[float, Field(ge=1, le=3)] | None = None
    usd_per_kwh: Money | None = None
    idle_power_fraction: Fraction | None = None
    colo_usd_per_kw_month: Money | None = None
    staff_usd_per_fte_year: Money | None = None
    staff_fte_per_node: Annotated[float, Field(ge=0, le=5)] | None = None


class CloudInputs(_Strict):
    """AWS side; prices left out come from the catalog, discounts from the defaults file."""

    instance_type: str = "p5.48xlarge"
    region: str = "us-east-1"
    on_demand_usd_per_node_hour: Money | None = None
    spot_usd_per_node_hour: Money | None = None
    capacity_block_usd_per_node_hour: Money | None = None
    commitment_discount_1y: Fraction | None = None
    commitment_discount_3y: Fraction | None = None
    spot_interruptions_per_node_day: Annotated[float, Field(ge=0, le=48)] | None = None
    checkpoint_interval_minutes: Positive | None = None
    restart_minutes: Annotated[float, Field(ge=0)] | None = None
    checkpoint_overhead_fraction: Annotated[float, Field(ge=0, lt=1)] | None = None
    # Where a demand history's overflow goes when an owned core is full.
    burst_market: Literal["on-demand", "spot", "capacity-block"] = "on-demand"


class Scenario(_Strict):
    """One build-vs-rent question. Give ``gpus`` + ``utilization_pct``, or a ``demand_file``.

    >>> Scenario(gpus=8, utilization_pct=25, utilization_basis="allocated").horizon_months
    36
    """

    name: str = "scenario"
    gpus: Annotated[int, Field(ge=1, le=100_000)] | None = None
    utilization_pct: Percent | None = None
    # measured: real accelerator activity (DCGM / nvidia-smi); allocated: hours jobs held GPUs.
    utilization_basis: Literal["measured", "allocated"] | None = None
    demand_file: Path | None = None
    # None: derived from the demand history, else assumed steady (and the output says so).
    steady: bool | None = None
    longest_run_hours: Annotated[float, Field(ge=0)] = 0.0
    horizon_months: Annotated[int, Field(ge=1, le=240)] = 36
    cloud: CloudInputs = CloudInputs()
    owned: OwnedInputs = OwnedInputs()

    @model_validator(mode="after")
    def _one_source_of_demand(self) -> Scenario:
        if self.demand_file is not None:
            if self.gpus is not None or self.utilization_pct is not None:
                raise ValueError(
                    "give either demand_file or gpus + utilization_pct, not both "
                    "(the demand history sets both)"
                )
        elif self.gpus is None or self.utilization_pct is None:
            raise ValueError("gpus and utilization_pct are required unless demand_file is given")
        return self


# -- provenance -----------------------------------------------------------------------------
# A figure the scenario (or a flag) gave: its source is the scenario, it has no catalog date.
SCENARIO_SOURCE = "scenario"
_GIVEN = Figure(
    value=0, as_of="", source=SCENARIO_SOURCE
)  # stands in when only the scenario has it


class UsedFigure(_Strict):
    """One input a result rests on, and where it came from: a catalog or defaults figure (its
    source key, date and ``unverified``) or the scenario itself (``source: scenario``)."""

    name: str
    value: float
    source: str
    as_of: str = ""
    unverified: bool = False

    @property
    def cited(self) -> str:
        """``source as_of[ unverified]`` as every output cites a figure; ``scenario`` for the
        scenario's own."""
        if self.source == SCENARIO_SOURCE:
            return SCENARIO_SOURCE
        return f"{self.source} {self.as_of}" + (" unverified" if self.unverified else "")

    @property
    def text(self) -> str:
        """``hardware_usd_per_node=350000 (reseller-quotes, 2026-11, unverified)``."""
        if self.source == SCENARIO_SOURCE:
            return f"{self.name}={self.value:g} (scenario)"
        flag = ", unverified" if self.unverified else ""
        return f"{self.name}={self.value:g} ({self.source}, {self.as_of}{flag})"


OWNED_FIGURES = (
    "hardware_usd_per_node",
    "networking_usd_per_node",
    "depreciation_years",
    "maintenance_fraction_per_year",
    "colo_usd_per_kw_month",
    "staff_usd_per_fte_year",
    "staff_fte_per_node",
    "power_kw",
    "pue",
    "usd_per_kwh",
    "idle_power_fraction",
)
SPOT_FIGURES = (
    "on_demand",
    "spot",
    "spot_fraction_of_on_demand",
    "spot_interruptions_per_node_day",
    "checkpoint_interval_minutes",
    "restart_minutes",
    "checkpoint_overhead_fraction",
)


def figure_keys(option: str, burst_market: str | None = None) -> tuple[str, ...]:
    """The inputs an option's dollars are computed from (keys of ``Rates.figures``; a key the
    scenario made unnecessary, such as ``spot`` when the catalog's fraction is used, is absent
    there and skipped).

    >>> figure_keys("commit-3y")
    ('on_demand', 'commitment_3y')
    """
    if option == "on-demand":
        return ("on_demand",)
    if option == "spot":
        return SPOT_FIGURES
    if option == "capacity-block":
        return ("capacity_block",)
    if option.startswith("commit-"):
        return ("on_demand", f"commitment_{option.removeprefix('commit-')}")
    if option == "owned":
        return OWNED_FIGURES
    if option.startswith("hybrid"):
        return OWNED_FIGURES + figure_keys(burst_market or "on-demand")
    raise TcoError(f"unknown option {option!r}")


# -- result (output) ------------------------------------------------------------------------
class OptionCost(_Strict):
    """One option over the horizon. Its net total is one sum, stated in its parts:
    ``total_usd = cash_usd + committed_after_usd - book_value_usd``; the table prints the parts
    and the chart's cumulative-cash line ends with the same settlement (:meth:`cost_path`).
    """

    name: str
    kind: Literal["pay-per-use", "commitment", "owned", "hybrid"]
    monthly_usd: float  # steady-state: amortised capex for owned, committed hours for commits
    # Net over the horizon: cash_usd + committed_after_usd - book_value_usd.
    total_usd: float
    usd_per_used_gpu_hour: float | None
    cumulative_usd: list[float]  # cash at the end of month 0..horizon
    # Cash paid by the end of the horizon (cumulative_usd[-1]).
    cash_usd: float
    # Commitment: the months of the term still billed after the horizon ends.
    committed_after_usd: float = 0.0
    # Owned hardware: its straight-line book value left at the end of the horizon.
    book_value_usd: float = 0.0
    # Cash payback: first month at whose end owning all nodes has cost no more cash than this
    # option, looked for over the horizon or the hardware's life, whichever is longer (both
    # paths go on at their monthly rates past the horizon): a payback after the horizon is
    # one the table's net already shows, through the hardware's book value left at the end.
    break_even_month: int | None = None
    crossover_utilization_pct: float | None = None  # owning beats this above it
    note: str = ""
    # The figures its dollars are computed from, as every output cites them
    # (``ref 2025-06; estimate 2026-11 unverified``; ``scenario`` for the scenario's own).
    price_source: str = ""
    unverified: bool = False

    @model_validator(mode="after")
    def _parts_add_up(self) -> OptionCost:
        if self.cumulative_usd and not math.isclose(
            self.cash_usd, self.cumulative_usd[-1], rel_tol=1e-12, abs_tol=1e-6
        ):
            raise ValueError(f"{self.name}: cash_usd is not the last cumulative cash value")
        net = self.cash_usd + self.committed_after_usd - self.book_value_usd
        if not math.isclose(self.total_usd, net, rel_tol=1e-12, abs_tol=1e-6):
            raise ValueError(f"{self.name}: total_usd is not cash + committed after - book value")
        return self

    def cost_path(self) -> tuple[list[float], list[float]]:
        """(months, dollars) the chart draws: cash at the end of each month 0..horizon, then
        the settlement at the horizon (unexpired commitment added, book value taken off), so
        the line ends on ``total_usd``."""
        horizon = len(self.cumulative_usd) - 1
        months = [float(m) for m in range(horizon + 1)] + [float(horizon)]
        return months, [*self.cumulative_usd, self.total_usd]


class CoreResult(_Strict):
    nodes: int
    gpus: int
    peak_nodes: int
    core_utilization_pct: float
    burst_share_pct: float
    owned_usd_per_month: float
    burst_usd_per_month: float
    total_usd_per_month: float
    usd_per_used_gpu_hour: float | None
    all_cloud_usd_per_month: float
    all_owned_usd_per_month: float
    burst_market: str
    history_hours: int
    cost_by_core_nodes: list[float]  # $/month for core sizes 0..peak_nodes


class Recommendation(_Strict):
    verdict: Verdict  # what to do: the computed answer
    computed_verdict: Verdict
    cheapest_option: str
    rule_verdict: Verdict
    rule_reasons: list[str]
    numbers_override_rule: bool
    explanation: str


class TcoResult(_Strict):
    scenario: str
    instance_type: str
    region: str
    nodes: int
    gpus_per_node: int
    horizon_months: int
    utilization_pct: float
    utilization_basis: Literal["measured", "allocated"]
    steady: bool
    used_gpu_hours_per_month: float
    node_power_kw: float
    spot_hours_factor: float
    options: list[OptionCost]
    break_even_month: int | None
    break_even_vs: str
    # How far payback is looked for: max(horizon, hardware life), months.
    payback_search_months: int
    hardware_life_months: float
    crossover_utilization_pct: float | None
    crossover_vs: str
    core: CoreResult | None
    recommendation: Recommendation
    warnings: list[str]
    unverified_figures: list[str]
    # Every input used, with its source, date and whether it is unverified.
    figures: list[UsedFigure]
    sweep_utilization_pct: list[float]
    sweep_usd_per_used_gpu_hour: dict[str, list[float | None]]


# -- resolved figures (plain numbers) -------------------------------------------------------
@dataclass(frozen=True)
class OwnedRates:
    capex_per_node: float  # hardware + fabric share, paid when bought
    depreciation_months: float
    fixed_per_node_month: float  # maintenance + colo + staff, busy or not
    power_kw: float
    pue: float
    usd_per_kwh: float
    idle_power_fraction: float

    @property
    def amortised_per_node_month(self) -> float:
        return self.capex_per_node / self.depreciation_months

    def power_per_node_month(self, gpu_util: float, hours: float) -> float:
        full = self.power_kw * self.pue * self.usd_per_kwh * hours
        return full * (self.idle_power_fraction + (1 - self.idle_power_fraction) * gpu_util)


@dataclass(frozen=True)
class Rates:
    gpus_per_node: int
    hours_per_month: float
    on_demand: float  # $/node-hour
    spot: float
    capacity_block: float | None
    commitment_discount: dict[int, float]  # term years -> fraction off on-demand
    spot_hours_factor: float
    owned: OwnedRates
    # every input used, by key (``on_demand``, ``hardware_usd_per_node``, ...)
    figures: dict[str, UsedFigure] = field(default_factory=dict)

    @property
    def unverified(self) -> list[str]:
        """``name=value (source, as_of)`` of each unverified figure used."""
        return [
            f"{f.name}={f.value:g} ({f.source}, {f.as_of})"
            for f in self.figures.values()
            if f.unverified
        ]

    def cite(self, option: str, burst_market: str | None = None) -> str:
        """The ``source as_of[ unverified]`` citation of the figures an option is priced from
        (``owned``, a market, ``commit-1y``, ``hybrid`` with its burst market)."""
        keys = figure_keys(option, burst_market)
        return merge_sources(*(self.figures[k].cited for k in keys if k in self.figures))


def spot_hours_factor(
    interruptions_per_node_day: float,
    checkpoint_interval_minutes: float,
    restart_minutes: float,
    checkpoint_overhead_fraction: float,
) -> float:
    """GPU-hours bought on spot per GPU-hour of work (>= 1)."""
    lost_per_interruption_h = (checkpoint_interval_minutes / 2 + restart_minutes) / 60
    lost = interruptions_per_node_day / 24 * lost_per_interruption_h
    if lost >= 1:
        raise TcoError(
            "spot: interruptions x (checkpoint_interval/2 + restart) lose all the run time; "
            "checkpoint more often or lower spot_interruptions_per_node_day"
        )
    return (1 + checkpoint_overhead_fraction) / (1 - lost)


def resolve_rates(s: Scenario, catalog: Catalog, defaults: OnpremDefaults) -> Rates:
    used: dict[str, UsedFigure] = {}

    def pick(given: float | None, fig: Figure, key: str, label: str | None = None) -> float:
        name = label or key
        if given is not None:
            used[key] = UsedFigure(name=name, value=given, source=SCENARIO_SOURCE)
            return given
        used[key] = UsedFigure(
            name=name,
            value=fig.value,
            source=fig.source,
            as_of=fig.as_of,
            unverified=fig.unverified,
        )
        return fig.value

    c, o = s.cloud, s.owned
    inst = catalog.instance(c.instance_type)
    where = f"[{c.instance_type},{c.region}]"
    od_fig = inst.on_demand_usd_per_hour.get(c.region)
    if c.on_demand_usd_per_node_hour is None and od_fig is None:
        catalog.on_demand_price(c.instance_type, c.region)  # raises, naming the regions it has
    on_demand = pick(
        c.on_demand_usd_per_node_hour, od_fig or _GIVEN, "on_demand", f"on_demand{where}"
    )
    if c.spot_usd_per_node_hour is not None:
        spot = pick(c.spot_usd_per_node_hour, _GIVEN, "spot", f"spot{where}")
    else:
        frac = catalog.spot_fraction_of_on_demand
        spot = on_demand * pick(None, frac, "spot_fraction_of_on_demand")
    cb_fig = inst.capacity_block_usd_per_hour.get(c.region)
    capacity_block: float | None = None
    if c.capacity_block_usd_per_node_hour is not None or cb_fig is not None:
        capacity_block = pick(
            c.capacity_block_usd_per_node_hour,
            cb_fig or _GIVEN,
            "capacity_block",
            f"capacity_block{where}",
        )
    disc = {
        1: pick(c.commitment_discount_1y, defaults.commitment_discount["1"], "commitment_1y"),
        3: pick(c.commitment_discount_3y, defaults.commitment_discount["3"], "commitment_3y"),
    }
    factor = spot_hours_factor(
        pick(
            c.spot_interruptions_per_node_day,
            defaults.spot_interruptions_per_node_day,
            "spot_interruptions_per_node_day",
        ),
        pick(
            c.checkpoint_interval_minutes,
            defaults.checkpoint_interval_minutes,
            "checkpoint_interval_minutes",
        ),
        pick(c.restart_minutes, defaults.restart_minutes, "restart_minutes"),
        pick(
            c.checkpoint_overhead_fraction,
            defaults.checkpoint_overhead_fraction,
            "checkpoint_overhead_fraction",
        ),
    )
    power_kw = pick(o.power_kw, inst.power_kw, "power_kw", f"power_kw[{c.instance_type}]")
    hw = pick(o.hardware_usd_per_node, defaults.hardware_usd_per_node, "hardware_usd_per_node")
    net = pick(
        o.networking_usd_per_node, defaults.networking_usd_per_node, "networking_usd_per_node"
    )
    maint = pick(
        o.maintenance_fraction_per_year,
        defaults.maintenance_fraction_per_year,
        "maintenance_fraction_per_year",
    )
    colo = pick(o.colo_usd_per_kw_month, defaults.colo_usd_per_kw_month, "colo_usd_per_kw_month")
    staff = pick(
        o.staff_usd_per_fte_year, defaults.staff_usd_per_fte_year, "staff_usd_per_fte_year"
    )
    fte = pick(o.staff_fte_per_node, defaults.staff_fte_per_node, "staff_fte_per_node")
    owned = OwnedRates(
        capex_per_node=hw + net,
        depreciation_months=12
        * pick(o.depreciation_years, defaults.depreciation_years, "depreciation_years"),
        fixed_per_node_month=(hw + net) * maint / 12 + colo * power_kw + fte * staff / 12,
        power_kw=power_kw,
        pue=pick(o.pue, defaults.pue, "pue"),
        usd_per_kwh=pick(o.usd_per_kwh, defaults.usd_per_kwh, "usd_per_kwh"),
        idle_power_fraction=pick(
            o.idle_power_fraction, defaults.idle_power_fraction, "idle_power_fraction"
        ),
    )
    return Rates(
        gpus_per_node=inst.accelerator.count,
        hours_per_month=catalog.hours_per_month,
        on_demand=on_demand,
        spot=spot,
        capacity_block=capacity_block,
        commitment_discount=disc,
        spot_hours_factor=factor,
        owned=owned,
        figures=used,
    )


# -- pure cost functions --------------------------------------------------------------------
def capex_cumulative(r: Rates, nodes: int, horizon: int) -> list[float]:
    """Hardware cash spent on ``nodes`` by the end of each month 0..horizon."""
    dep = r.owned.depreciation_months
    out = []
    for m in range(horizon + 1):
        # Bought before month 1 starts, again at the start of each new depreciation life.
        purchases = 1 + (math.floor((m - 1) / dep + 1e-9) if m >= 1 else 0)
        out.append(nodes * r.owned.capex_per_node * purchases)
    return out


def residual_book_value(r: Rates, nodes: int, horizon: int) -> float:
    """Straight-line book value of the nodes still in service at the end of the horizon."""
    dep = r.owned.depreciation_months
    used_in_life = horizon - dep * math.floor((horizon - 1) / dep + 1e-9)
    return nodes * r.owned.capex_per_node * max(0.0, 1 - used_in_life / dep)


def owned_cumulative(r: Rates, nodes: int, gpu_util: float, horizon: int) -> list[float]:
    """Cash spent owning ``nodes`` by the end of each month 0..horizon (capex up front)."""
    o = r.owned
    opex = nodes * (o.fixed_per_node_month + o.power_per_node_month(gpu_util, r.hours_per_month))
    return [cap + opex * m for m, cap in enumerate(capex_cumulative(r, nodes, horizon))]


def owned_monthly(r: Rates, nodes: int, gpu_util: float) -> float:
    o = r.owned
    per_node = (
        o.amortised_per_node_month
        + o.fixed_per_node_month
        + o.power_per_node_month(gpu_util, r.hours_per_month)
    )
    return nodes * per_node


def owned_usd_per_gpu_hour(r: Rates, gpu_util: float) -> float:
    """$ per allocated GPU-hour of one owned node at ``gpu_util`` (0..1, for its power draw):
    ``coreburst.common.pricing.owned_gpu_hour_usd`` over ``owned_monthly``. The price the core
    reports
    use (``coreburst core price``)."""
    return owned_gpu_hour_usd(owned_monthly(r, 1, gpu_util), r.gpus_per_node, r.hours_per_month)


def scenario_gpu_hour_price(s: Scenario, catalog: Catalog | None = None) -> float:
    """``owned_usd_per_gpu_hour`` for a scenario's owned node at its stated utilization."""
    return scenario_gpu_hour_quote(s, catalog)[0]


def scenario_gpu_hour_quote(
    s: Scenario, catalog: Catalog | None = None
) -> tuple[float, list[UsedFigure]]:
    """The owned $/GPU-hour of :func:`scenario_gpu_hour_price` and the figures it rests on
    (each with its source, date and ``unverified``), for a report to cite.

    >>> price, figures = scenario_gpu_hour_quote(
    ...     Scenario(gpus=8, utilization_pct=85, utilization_basis="measured"))
    >>> figures[0].text
    'hardware_usd_per_node=350000 (reseller-quotes, 2026-11, unverified)'
    """
    if s.utilization_pct is None:
        raise TcoError(
            "the owned GPU-hour price needs utilization_pct (the nodes' power draw depends on "
            "it); give gpus + utilization_pct rather than a demand_file"
        )
    r = resolve_rates(s, catalog or load_catalog(), load_defaults())
    used = [r.figures[k] for k in OWNED_FIGURES]
    return owned_usd_per_gpu_hour(r, s.utilization_pct / 100), used


def rent_rate(r: Rates, market: str) -> float | None:
    """$ per node-hour of *work* on a pay-per-use market (spot re-run overhead included)."""
    if market == "on-demand":
        return r.on_demand
    if market == "spot":
        return r.spot * r.spot_hours_factor
    if market == "capacity-block":
        return r.capacity_block
    raise TcoError(f"unknown market {market!r}")


def crossover_utilization(r: Rates, rate_per_node_hour: float) -> float | None:
    """Utilization (0..1) above which one owned node costs less per month than renting it.

    owned(u) = A + P·H·(i + (1 - i)·u) and rent(u) = rate·H·u, so
    u* = (A + P·H·i) / (H·(rate - P·(1 - i))); None when owning never wins at ≤ 100%.
    """
    o, h = r.owned, r.hours_per_month
    fixed = o.amortised_per_node_month + o.fixed_per_node_month
    p = o.power_kw * o.pue * o.usd_per_kwh
    denom = h * (rate_per_node_hour - p * (1 - o.idle_power_fraction))
    if denom <= 0:
        return None
    u = (fixed + p * h * o.idle_power_fraction) / denom
    return u if u <= 1 else None


def payback_search_months(r: Rates, horizon: int) -> int:
    """How far a cash payback is looked for: the horizon or the hardware's life, whichever is
    longer. Over one life, owning pays back in cash exactly when its amortised monthly cost
    is at most the alternative's, which is when its net (cash less book value) is lower at
    any horizon inside that life: so a payback is never "never" while the table's net says
    owning is cheaper (unless a commitment's unexpired months are what make it dearer)."""
    return max(horizon, math.ceil(r.owned.depreciation_months - 1e-9))


def break_even_month(owned: Sequence[float], other: Sequence[float]) -> int | None:
    """First month (1..) at whose end owning has cost no more cash than the alternative."""
    for m in range(1, len(owned)):
        if other[m] >= owned[m]:
            return m
    return None


def _per_gpu_hour(monthly: float, used_gpu_hours: float) -> float | None:
    return monthly / used_gpu_hours if used_gpu_hours > 0 else None


def price_options(
    r: Rates, nodes: int, node_util: float, gpu_util: float, horizon: int
) -> list[OptionCost]:
    """Every way to get ``nodes`` nodes' worth of work, priced over ``horizon`` months."""
    h = r.hours_per_month
    used = nodes * r.gpus_per_node * gpu_util * h
    opts: list[OptionCost] = []
    for market in ("on-demand", "spot", "capacity-block"):
        rate = rent_rate(r, market)
        if rate is None:
            continue
        monthly = rate * nodes * node_util * h
        note = ""
        if market == "spot":
            note = f"x{r.spot_hours_factor:.3f} GPU-hours for interruptions and checkpoints"
        if market == "capacity-block":
            note = "assumes blocks booked exactly for the hours used"
        cross = crossover_utilization(r, rate)
        cum = [monthly * m for m in range(horizon + 1)]
        opts.append(
            OptionCost(
                name=market,
                kind="pay-per-use",
                monthly_usd=monthly,
                total_usd=cum[-1],
                usd_per_used_gpu_hour=_per_gpu_hour(monthly, used),
                cumulative_usd=cum,
                cash_usd=cum[-1],
                crossover_utilization_pct=None if cross is None else 100 * cross,
                note=note,
            )
        )
    for years, disc in sorted(r.commitment_discount.items()):
        term = 12 * years
        monthly = r.on_demand * (1 - disc) * nodes * h
        billed = math.ceil(horizon / term) * term
        cum = [monthly * m for m in range(horizon + 1)]
        after = monthly * (billed - horizon)
        opts.append(
            OptionCost(
                name=f"commit-{years}y",
                kind="commitment",
                monthly_usd=monthly,
                total_usd=cum[-1] + after,
                usd_per_used_gpu_hour=_per_gpu_hour(monthly, used),
                cumulative_usd=cum,
                cash_usd=cum[-1],
                committed_after_usd=after,
                note=f"{disc:.0%} off on-demand, every hour of {billed} months billed"
                + (f" ({billed - horizon} after the horizon)" if billed > horizon else ""),
            )
        )
    owned_cum = owned_cumulative(r, nodes, gpu_util, horizon)
    owned_m = owned_monthly(r, nodes, gpu_util)
    book = residual_book_value(r, nodes, horizon)
    search = payback_search_months(r, horizon)
    owned_far = owned_cumulative(r, nodes, gpu_util, search)
    opts = [
        o.model_copy(
            update={
                # both paths go on at their monthly rates past the horizon
                "break_even_month": break_even_month(
                    owned_far, [o.monthly_usd * m for m in range(search + 1)]
                ),
                "price_source": r.cite(o.name),
                "unverified": cites_unverified(r.cite(o.name)),
            }
        )
        for o in opts
    ]
    opts.append(
        OptionCost(
            name="owned",
            kind="owned",
            monthly_usd=owned_m,
            total_usd=owned_cum[-1] - book,
            usd_per_used_gpu_hour=_per_gpu_hour(owned_m, used),
            cumulative_usd=owned_cum,
            cash_usd=owned_cum[-1],
            book_value_usd=book,
            note=f"{nodes} node(s) bought up front, {r.owned.depreciation_months:g}-month life; "
            "total net of book value left at the horizon",
            price_source=r.cite("owned"),
            unverified=cites_unverified(r.cite("owned")),
        )
    )
    return opts


def per_gpu_hour_sweep(r: Rates, nodes: int) -> dict[str, list[float | None]]:
    """$ per used GPU-hour for each option across SWEEP_UTILIZATION_PCT (for the plot)."""
    out: dict[str, list[float | None]] = {}
    for pct in SWEEP_UTILIZATION_PCT:
        u = pct / 100
        for o in price_options(r, nodes, u, u, 1):
            out.setdefault(o.name, []).append(o.usd_per_used_gpu_hour)
    return out


def _core_costs(r: Rates, market: str) -> CoreCosts:
    o, h = r.owned, r.hours_per_month
    rate = rent_rate(r, market)
    if rate is None:
        raise TcoError(
            f"burst_market {market!r} has no price for this instance and region; "
            "set cloud.capacity_block_usd_per_node_hour or pick on-demand or spot"
        )
    return CoreCosts(
        gpus_per_node=r.gpus_per_node,
        # the shared per-GPU-hour formula, times the node's GPUs
        owned_fixed_per_node_hour=owned_gpu_hour_usd(
            o.amortised_per_node_month + o.fixed_per_node_month, r.gpus_per_node, h
        )
        * r.gpus_per_node,
        owned_power_per_node_hour=o.power_kw * o.pue * o.usd_per_kwh,
        idle_power_fraction=o.idle_power_fraction,
        burst_per_node_hour=rate,
    )


def _verdict_of(option: OptionCost) -> Verdict:
    return {"owned": "own", "hybrid": "hybrid"}.get(option.kind, "cloud")  # type: ignore[return-value]


def analyse(
    s: Scenario,
    demand: DemandHistory | None = None,
    catalog: Catalog | None = None,
    defaults: OnpremDefaults | None = None,
) -> TcoResult:
    """Price every option for the scenario and recommend one.

    >>> analyse(Scenario(gpus=8, utilization_pct=25, utilization_basis="allocated")).warnings[0]
    ... # doctest: +ELLIPSIS
    'utilization is allocated...'
    """
    catalog = catalog or load_catalog()
    defaults = defaults or load_defaults()
    try:
        r = resolve_rates(s, catalog, defaults)
    except CatalogError as exc:
        raise TcoError(str(exc)) from None
    g, h, horizon = r.gpus_per_node, r.hours_per_month, s.horizon_months
    warnings: list[str] = []
    core: CoreResult | None = None
    hybrid: OptionCost | None = None

    if s.demand_file is not None and demand is None:
        raise TcoError("scenario names a demand_file but no demand history was loaded")
    basis = s.utilization_basis
    if demand is not None:
        if demand.basis == "measured":
            if basis == "allocated":
                raise TcoError(
                    f"{demand.origin} is a measured fleet-utilization file but the scenario says "
                    "utilization_basis: allocated"
                )
            basis = "measured"
        if demand.missing_hours:
            warnings.append(
                f"{demand.missing_hours} hour(s) missing from {demand.origin}: left out, "
                "not counted as zero demand"
            )
        if demand.peak <= 0:
            raise TcoError(f"{demand.origin}: demand is zero in every hour; nothing to size")
        nodes = math.ceil(demand.peak / g - 1e-9)
        hours_n = len(demand.gpus)
        node_hours = sum(math.ceil(d / g - 1e-9) for d in demand.gpus if d > 1e-9)
        node_util = node_hours / (nodes * hours_n)
        gpu_util = sum(demand.gpus) / (nodes * g * hours_n)
        steady = s.steady if s.steady is not None else demand.variation <= STEADY_MAX_VARIATION
        sizing = size_core(demand.gpus, _core_costs(r, s.cloud.burst_market))
        best, scale = sizing.best, h / hours_n
        k = best.nodes
        used_month = sizing.demand_gpu_hours * scale
        core = CoreResult(
            nodes=k,
            gpus=k * g,
            peak_nodes=nodes,
            core_utilization_pct=100 * sizing.core_utilization(),
            burst_share_pct=100 * sizing.burst_share(),
            owned_usd_per_month=best.owned_usd * scale,
            burst_usd_per_month=best.burst_usd * scale,
            total_usd_per_month=best.total_usd * scale,
            usd_per_used_gpu_hour=_per_gpu_hour(best.total_usd * scale, used_month),
            all_cloud_usd_per_month=sizing.options[0].total_usd * scale,
            all_owned_usd_per_month=sizing.options[-1].total_usd * scale,
            burst_market=s.cloud.burst_market,
            history_hours=hours_n,
            cost_by_core_nodes=[o.total_usd * scale for o in sizing.options],
        )
        if 0 < k < nodes:
            # Cash opex of core + burst: the sized monthly cost less the core's amortisation.
            opex = core.total_usd_per_month - k * r.owned.amortised_per_node_month
            hybrid_cum = [cap + opex * m for m, cap in enumerate(capex_cumulative(r, k, horizon))]
            hybrid_book = residual_book_value(r, k, horizon)
            hybrid = OptionCost(
                name=f"hybrid-{k}n",
                kind="hybrid",
                monthly_usd=core.total_usd_per_month,
                total_usd=hybrid_cum[-1] - hybrid_book,
                usd_per_used_gpu_hour=core.usd_per_used_gpu_hour,
                cumulative_usd=hybrid_cum,
                cash_usd=hybrid_cum[-1],
                book_value_usd=hybrid_book,
                note=f"{k} owned node(s) + {s.cloud.burst_market} burst "
                f"({core.burst_share_pct:.1f}% of GPU-hours)",
                price_source=r.cite("hybrid", s.cloud.burst_market),
                unverified=cites_unverified(r.cite("hybrid", s.cloud.burst_market)),
            )
    else:
        assert s.gpus is not None and s.utilization_pct is not None  # validator guarantees
        nodes = math.ceil(s.gpus / g)
        if nodes * g != s.gpus:
            warnings.append(
                f"{s.gpus} GPUs rounded up to {nodes} node(s) of {g}: both renting and owning "
                "come in whole nodes"
            )
        # The team's jobs take whole nodes: rented node-hours and busy GPU-hours share one dial.
        node_util = gpu_util = s.utilization_pct / 100
        steady = True if s.steady is None else s.steady
        if s.steady is None:
            warnings.append("demand assumed steady (set steady: false for bursty demand)")

    if basis is None:
        raise TcoError(
            "utilization_basis is required: measured (GPU activity from DCGM/nvidia-smi) or "
            "allocated (hours jobs held the GPUs)"
        )
    if basis == "allocated":
        warnings.insert(
            0,
            "utilization is allocated/running hours, not measured GPU activity: real activity "
            "is often far lower (one team counted 60%, measured 23%); measure with DCGM before "
            "buying hardware",
        )

    options = price_options(r, nodes, node_util, gpu_util, horizon)
    if hybrid is not None:
        options.insert(len(options) - 1, hybrid)
    used_month = nodes * g * gpu_util * h
    rentals = [o for o in options if o.kind in ("pay-per-use", "commitment")]
    cheapest_rental = min(rentals, key=lambda o: o.total_usd)
    cheapest = min(options, key=lambda o: o.total_usd)
    on_demand = options[0]

    if any(o.kind == "commitment" and horizon % (12 * int(o.name[7])) for o in options):
        warnings.append(
            f"horizon {horizon} months is not a whole number of commitment terms: the unexpired "
            "committed months are in the commitment totals"
        )
    if horizon > r.owned.depreciation_months:
        warnings.append(
            f"horizon {horizon} months outlives the {r.owned.depreciation_months:g}-month "
            "hardware life: owned totals include buying the nodes again"
        )

    util_pct = 100 * gpu_util
    rule: RuleAdvice = rule_of_thumb(util_pct, steady, s.longest_run_hours)
    computed = _verdict_of(cheapest)
    override = computed != rule.verdict
    be = cheapest_rental.break_even_month
    if override:
        explanation = (
            f"The rule of thumb says {rule.verdict}, but the computed costs say {computed}: "
            f"{cheapest.name} is cheapest over {horizon} months "
            f"(${cheapest.total_usd:,.0f} vs ${_second(options, cheapest).total_usd:,.0f} for "
            f"{_second(options, cheapest).name}). The numbers win."
        )
    else:
        explanation = (
            f"The computed costs agree with the rule of thumb: {computed}. {cheapest.name} is "
            f"cheapest over {horizon} months (${cheapest.total_usd:,.0f})."
        )
    return TcoResult(
        scenario=s.name,
        instance_type=s.cloud.instance_type,
        region=s.cloud.region,
        nodes=nodes,
        gpus_per_node=g,
        horizon_months=horizon,
        utilization_pct=util_pct,
        utilization_basis=basis,
        steady=steady,
        used_gpu_hours_per_month=used_month,
        node_power_kw=r.owned.power_kw,
        spot_hours_factor=r.spot_hours_factor,
        options=options,
        break_even_month=be,
        break_even_vs=cheapest_rental.name,
        payback_search_months=payback_search_months(r, horizon),
        hardware_life_months=r.owned.depreciation_months,
        crossover_utilization_pct=on_demand.crossover_utilization_pct,
        crossover_vs=on_demand.name,
        core=core,
        recommendation=Recommendation(
            verdict=computed,
            computed_verdict=computed,
            cheapest_option=cheapest.name,
            rule_verdict=rule.verdict,
            rule_reasons=rule.reasons,
            numbers_override_rule=override,
            explanation=explanation,
        ),
        warnings=warnings,
        unverified_figures=r.unverified,
        figures=list(r.figures.values()),
        sweep_utilization_pct=[float(p) for p in SWEEP_UTILIZATION_PCT],
        sweep_usd_per_used_gpu_hour=per_gpu_hour_sweep(r, nodes),
    )


def _second(options: Sequence[OptionCost], best: OptionCost) -> OptionCost:
    rest = [o for o in options if o.name != best.name]
    return min(rest, key=lambda o: o.total_usd)
