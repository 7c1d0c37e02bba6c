"""``coreburst tco``: build-vs-rent advice from flags or a YAML scenario.

    $ coreburst tco --scenario coreburst/tco/examples/team8_85pct.yaml --plot tco.png
    $ coreburst tco --gpus 8 --utilization 25 --utilization-basis measured --format json
    $ coreburst tco --demand history.csv --utilization-basis allocated --burst-market spot

Flags override the scenario file. A bad input ends in one ``error:`` line and exit status 2.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from coreburst.common.catalog import CatalogError, load_catalog
from coreburst.common.console import console as make_console
from coreburst.common.pricing import merge_sources, sources_legend
from coreburst.common.textio import read_text
from coreburst.tco.demand import DemandError, load_demand
from coreburst.tco.model import (
    Scenario,
    TcoError,
    TcoResult,
    analyse,
    load_defaults,
    one_line,
)

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


class OutputFormat(StrEnum):
    table = "table"
    json = "json"


class Basis(StrEnum):
    measured = "measured"
    allocated = "allocated"


class Market(StrEnum):
    on_demand = "on-demand"
    spot = "spot"
    capacity_block = "capacity-block"


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def _read_scenario(path: Path) -> dict[str, Any]:
    text = read_text(path, "scenario", TcoError)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise TcoError(f"{path}:{where} not valid YAML") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise TcoError(f"{path}: a scenario is a mapping of keys (name, gpus, ...)")
    demand = data.get("demand_file")
    if isinstance(demand, str) and not Path(demand).is_absolute():
        # A scenario's demand file is found next to the scenario, wherever it is run from.
        data["demand_file"] = str(path.parent / demand)
    return data


def build_scenario(base: dict[str, Any], flags: dict[str, Any]) -> Scenario:
    """Scenario from file data with flag overrides (``cloud.x`` / ``owned.x`` keys nest)."""
    data: dict[str, Any] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    if flags.get("demand_file") is not None:
        for key in ("gpus", "utilization_pct"):
            if flags.get(key) is None:
                data.pop(key, None)
    for key, value in flags.items():
        if value is None:
            continue
        if "." in key:
            section, sub = key.split(".", 1)
            data.setdefault(section, {})
            if not isinstance(data[section], dict):
                raise TcoError(f"{section}: must be a mapping")
            data[section][sub] = value
        else:
            data[key] = value
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise TcoError(one_line(exc)) from None


def _money(v: float | None) -> str:
    return "-" if v is None else f"${v:,.0f}"


def _rate(v: float | None) -> str:
    return "-" if v is None else f"${v:,.2f}"


def horizon_columns(horizon: int) -> tuple[str, ...]:
    """Headers of the horizon columns, each naming what it holds."""
    return (
        f"cash mo 1-{horizon}",
        f"+ owed after mo {horizon}",
        f"- book value mo {horizon}",
        f"= net {horizon} mo",
    )


def payback_cell(result: TcoResult, month: int | None) -> str:
    """The table's payback month: ``15``, ``41 (after mo 36)`` past the horizon, or
    ``not by mo 48`` when owning has not paid back in cash within the search."""
    if month is None:
        return f"not by mo {result.payback_search_months}"
    if month > result.horizon_months:
        return f"{month} (after mo {result.horizon_months})"
    return str(month)


def payback_sentence(result: TcoResult) -> str:
    """The payback line under the table, in terms the table's columns show: past the horizon,
    why owning's net is already lower (the book value left); not at all, what the nets are.

    The payback is a cash measure (months until owning has paid no more cash than renting);
    the table's net subtracts the hardware's book value left at the horizon, so owning can be
    cheaper net over the horizon and pay back in cash only after it.
    """
    h, vs = result.horizon_months, result.break_even_vs
    owned = next(o for o in result.options if o.kind == "owned")
    rent = next(o for o in result.options if o.name == vs)
    be = result.break_even_month
    if be is not None and be <= h:
        return (
            f"Owning pays back vs {vs} in month {be}: from then on owning has paid no more cash "
            f"than {vs}."
        )
    lower = owned.total_usd < rent.total_usd
    nets = (
        f"owning's net over {h} months, ${owned.total_usd:,.0f}, is "
        f"{'lower' if lower else 'not lower'} than {vs}'s ${rent.total_usd:,.0f}"
    )
    if be is not None:
        return (
            f"Owning pays back vs {vs} in month {be}, after the {h}-month horizon: by month {h} "
            f"owning has paid ${owned.cash_usd:,.0f} in cash to {vs}'s ${rent.cash_usd:,.0f}, "
            f"but ${owned.book_value_usd:,.0f} of the hardware's value is left then, so {nets}."
        )
    text = (
        f"Owning does not pay back vs {vs} in cash within {result.payback_search_months} "
        f"months (the horizon or the {result.hardware_life_months:g}-month hardware life, "
        f"whichever is longer): {nets}"
    )
    if lower and rent.committed_after_usd > 0:
        return (
            f"{text} only because {vs} still owes ${rent.committed_after_usd:,.0f} after month {h}."
        )
    return text + "."


def option_rows(result: TcoResult) -> list[tuple[str, ...]]:
    """The option table's rows as printed (the chart ends each line on the net column)."""
    rows: list[tuple[str, ...]] = []
    for o in result.options:
        rows.append(
            (
                o.name,
                _money(o.monthly_usd),
                _money(o.cash_usd),
                _money(o.committed_after_usd) if o.kind == "commitment" else "-",
                _money(o.book_value_usd) if o.kind in ("owned", "hybrid") else "-",
                _money(o.total_usd),
                _rate(o.usd_per_used_gpu_hour),
                "-" if o.kind in ("owned", "hybrid") else payback_cell(result, o.break_even_month),
                "-"
                if o.crossover_utilization_pct is None
                else f"{o.crossover_utilization_pct:.1f}%",
                "unverified" if o.unverified else "",
            )
        )
    return rows


def print_table(result: TcoResult, console: Console) -> None:
    rec = result.recommendation
    t = Table(
        title=(
            f"{result.scenario}: {result.nodes} x {result.instance_type} ({result.region}), "
            f"{result.utilization_basis} utilization {result.utilization_pct:.1f}%, "
            f"{result.horizon_months} months"
        ),
        caption=(
            f"net = cash paid in months 1-{result.horizon_months} + commitment still owed "
            f"after month {result.horizon_months} - book value of owned hardware then "
            "(where each line of the cumulative-cash chart ends); payback month = first month "
            "whose end owning has paid no more cash than the option, looked for over "
            f"{result.payback_search_months} months (the horizon or the hardware life); "
            "price: unverified where a figure it rests on is (each option's figures below)"
        ),
    )
    t.add_column("option")
    t.add_column("$/month", justify="right")
    for col in horizon_columns(result.horizon_months):
        t.add_column(col, justify="right")
    t.add_column("$/used GPU-h", justify="right")
    t.add_column("payback month", justify="right")
    t.add_column("crossover util", justify="right")
    t.add_column("price")
    for row in option_rows(result):
        name = f"[bold]{row[0]}[/bold]" if row[0] == rec.cheapest_option else row[0]
        t.add_row(name, *row[1:])
    console.print(t)
    for o in result.options:
        note = f"{o.note}; " if o.note else ""
        console.print(f"  {o.name}: {note}priced from {o.price_source}", highlight=False)
    if result.core is not None:
        c = result.core
        ct = Table(title=f"owned core sized from {c.history_hours} h of demand")
        for col in ("core", "core util", "burst share", "owned/mo", "burst/mo", "total/mo"):
            ct.add_column(col, justify="right")
        ct.add_column("$/used GPU-h", justify="right")
        ct.add_column("all-cloud/mo", justify="right")
        ct.add_column("all-owned/mo", justify="right")
        ct.add_row(
            f"{c.nodes} of {c.peak_nodes} nodes ({c.gpus} GPUs)",
            f"{c.core_utilization_pct:.1f}%",
            f"{c.burst_share_pct:.1f}% ({c.burst_market})",
            _money(c.owned_usd_per_month),
            _money(c.burst_usd_per_month),
            _money(c.total_usd_per_month),
            _rate(c.usd_per_used_gpu_hour),
            _money(c.all_cloud_usd_per_month),
            _money(c.all_owned_usd_per_month),
        )
        console.print(ct)
        cite = {o.name: o.price_source for o in result.options}
        console.print(
            f"  core: owned priced from {cite['owned']}; burst ({c.burst_market}) from "
            f"{cite.get(c.burst_market, 'the scenario')}",
            highlight=False,
        )
    cross = result.crossover_utilization_pct
    console.print(
        f"[bold]Recommendation: {rec.verdict.upper()}[/bold] (cheapest: {rec.cheapest_option}). "
        f"{rec.explanation}",
        highlight=False,
    )
    console.print(payback_sentence(result), highlight=False)
    console.print(
        f"Owning beats {result.crossover_vs} above {'-' if cross is None else f'{cross:.1f}%'} "
        f"utilization. Node draw {result.node_power_kw:g} kW; spot needs "
        f"x{result.spot_hours_factor:.3f} GPU-hours.",
        highlight=False,
    )
    console.print(f"Rule of thumb: {rec.rule_verdict}", highlight=False)
    for reason in rec.rule_reasons:
        console.print(f"  - {reason}", highlight=False)
    for w in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}", highlight=False)
    n = len(result.unverified_figures)
    console.print(
        f"figures used ({n} of {len(result.figures)} unverified): "
        + "; ".join(f.text for f in result.figures),
        highlight=False,
        markup=False,
    )
    console.print(figure_sources(result), highlight=False, markup=False)


def figure_sources(result: TcoResult) -> str:
    """Where each source key the figures cite can be checked: the catalog's and the TCO
    defaults' ``sources`` tables (docs/sources.md explains them)."""
    tables = {**load_defaults().sources, **load_catalog().sources}
    return sources_legend(tables, merge_sources(*(f.cited for f in result.figures)))


@app.command("tco")
def tco(
    *,
    scenario: Annotated[
        Path | None, typer.Option("--scenario", help="YAML scenario file; flags override it")
    ] = None,
    gpus: Annotated[int | None, typer.Option(help="GPUs the team needs")] = None,
    utilization: Annotated[
        float | None, typer.Option(help="utilization of those GPUs, percent 0-100")
    ] = None,
    utilization_basis: Annotated[
        Basis | None, typer.Option(help="measured GPU activity or allocated/running hours")
    ] = None,
    demand: Annotated[
        Path | None,
        typer.Option(help="demand history CSV (timestamp,gpus) or fleet-utilization CSV"),
    ] = None,
    horizon_months: Annotated[int | None, typer.Option(help="months to compare over")] = None,
    instance_type: Annotated[str | None, typer.Option(help="comparable AWS instance")] = None,
    region: Annotated[str | None, typer.Option(help="AWS region for prices")] = None,
    steady: Annotated[
        bool | None, typer.Option("--steady/--bursty", help="is demand steady?")
    ] = None,
    longest_run_hours: Annotated[
        float | None, typer.Option(help="longest continuous training run, hours")
    ] = None,
    burst_market: Annotated[
        Market | None, typer.Option(help="where overflow beyond the owned core goes")
    ] = None,
    on_demand_price: Annotated[
        float | None, typer.Option(help="override on-demand $/node-hour")
    ] = None,
    hardware_usd_per_node: Annotated[
        float | None, typer.Option(help="purchase price of one owned node")
    ] = None,
    power_kw: Annotated[float | None, typer.Option(help="owned node draw at full load")] = None,
    pue: Annotated[float | None, typer.Option(help="data-center PUE")] = None,
    usd_per_kwh: Annotated[float | None, typer.Option(help="electricity price")] = None,
    plot: Annotated[Path | None, typer.Option(help="write a PNG of the cost curves")] = None,
    output_format: Annotated[OutputFormat, typer.Option("--format")] = OutputFormat.table,
) -> None:
    """Compare owning on-prem nodes with AWS on-demand, spot, commitments and Capacity Blocks."""
    try:
        base = _read_scenario(scenario) if scenario is not None else {}
        s = build_scenario(
            base,
            {
                "gpus": gpus,
                "utilization_pct": utilization,
                "utilization_basis": None if utilization_basis is None else utilization_basis.value,
                "demand_file": None if demand is None else str(demand),
                "horizon_months": horizon_months,
                "steady": steady,
                "longest_run_hours": longest_run_hours,
                "cloud.instance_type": instance_type,
                "cloud.region": region,
                "cloud.burst_market": None if burst_market is None else burst_market.value,
                "cloud.on_demand_usd_per_node_hour": on_demand_price,
                "owned.hardware_usd_per_node": hardware_usd_per_node,
                "owned.power_kw": power_kw,
                "owned.pue": pue,
                "owned.usd_per_kwh": usd_per_kwh,
            },
        )
        history = load_demand(s.demand_file) if s.demand_file is not None else None
        result = analyse(s, history)
        if plot is not None:
            from coreburst.tco.plot import render_plot

            try:
                render_plot(result, plot)
            except OSError as exc:
                raise TcoError(f"cannot write plot {plot}: {exc.strerror}") from None
    except (TcoError, DemandError, CatalogError) as exc:
        raise _fail(str(exc)) from None
    if output_format is OutputFormat.json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        # Wide enough for the table when piped or captured (rich falls back to 80 columns).
        console = make_console()
        print_table(result, console)
        if plot is not None:
            console.print(f"plot written to {plot}", highlight=False)
