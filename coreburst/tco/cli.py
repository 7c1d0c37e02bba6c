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

from coreburst.common.catalog import CatalogError
from coreburst.common.console import console as make_console
from coreburst.common.textio import read_text
from coreburst.tco.demand import DemandError, load_demand
from coreburst.tco.model import Scenario, TcoError, TcoResult, analyse, one_line

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
                "-" if o.kind in ("owned", "hybrid") else str(o.break_even_month or "never"),
                "-"
                if o.crossover_utilization_pct is None
                else f"{o.crossover_utilization_pct:.1f}%",
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
            "(where each line of the cumulative-cash chart ends)"
        ),
    )
    t.add_column("option")
    t.add_column("$/month", justify="right")
    for col in horizon_columns(result.horizon_months):
        t.add_column(col, justify="right")
    t.add_column("$/used GPU-h", justify="right")
    t.add_column("payback month", justify="right")
    t.add_column("crossover util", justify="right")
    for row in option_rows(result):
        name = f"[bold]{row[0]}[/bold]" if row[0] == rec.cheapest_option else row[0]
        t.add_row(name, *row[1:])
    console.print(t)
    for o in result.options:
        if o.note:
            console.print(f"  {o.name}: {o.note}", highlight=False)
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
    be = (
        "never within the horizon"
        if result.break_even_month is None
        else (f"month {result.break_even_month}")
    )
    cross = result.crossover_utilization_pct
    console.print(
        f"[bold]Recommendation: {rec.verdict.upper()}[/bold] (cheapest: {rec.cheapest_option}). "
        f"{rec.explanation}",
        highlight=False,
    )
    console.print(
        f"Owning pays back vs {result.break_even_vs}: {be}. Owning beats {result.crossover_vs} "
        f"above {'-' if cross is None else f'{cross:.1f}%'} utilization. Node draw "
        f"{result.node_power_kw:g} kW; spot needs x{result.spot_hours_factor:.3f} GPU-hours.",
        highlight=False,
    )
    console.print(f"Rule of thumb: {rec.rule_verdict}", highlight=False)
    for reason in rec.rule_reasons:
        console.print(f"  - {reason}", highlight=False)
    for w in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}", highlight=False)
    if result.unverified_figures:
        console.print(
            f"{len(result.unverified_figures)} unverified figure(s) used: "
            + "; ".join(result.unverified_figures),
            highlight=False,
        )


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
