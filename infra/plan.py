"""``coreburst plan``: evaluate a stack offline and print its resources and estimated cost."""

from __future__ import annotations

import collections

import typer
from rich.console import Console
from rich.table import Table

from infra.catalog import CatalogError, load_catalog
from infra.config import StackConfigError
from infra.cost import estimate_stack, totals
from infra.offline import evaluate_stack

app = typer.Typer(add_completion=False)


@app.command()
def plan(
    stack: str = typer.Option("dev", "--stack", "-s", help="Stack name (Pulumi.<stack>.yaml)"),
) -> None:
    """Evaluate STACK under Pulumi mocks: list the resources it declares and their cost."""
    out = Console()
    try:
        evaluation = evaluate_stack(stack)
    except (StackConfigError, CatalogError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    counts = collections.Counter(r.typ for r in evaluation.resources if r.custom)
    res = Table(title=f"stack {stack}: {sum(counts.values())} resources")
    res.add_column("resource type")
    res.add_column("count", justify="right")
    for typ, n in sorted(counts.items()):
        res.add_row(typ, str(n))
    out.print(res)
    lines = estimate_stack(evaluation.config, load_catalog())
    cost = Table(title=f"estimated cost, {evaluation.config.region}")
    for col in ("item", "detail", "$/hour", "$/month"):
        cost.add_column(col, justify="right" if col.startswith("$") else "left")
    for line in lines:
        cost.add_row(line.item, line.detail, f"{line.hourly_usd:,.2f}", f"{line.monthly_usd:,.2f}")
    hourly, monthly = totals(lines)
    cost.add_row("total", "", f"{hourly:,.2f}", f"{monthly:,.2f}", style="bold")
    out.print(cost)
