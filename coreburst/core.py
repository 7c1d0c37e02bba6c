"""``coreburst core``: what the on-prem core's GPUs were allocated for, and what they did.

$ coreburst core report --config guardrails.yaml --since 7d
$ coreburst core report --config guardrails.yaml --state-table guardrails-state
$ coreburst core report --since 7d --format json --plot core.png \
    --scenario tco/examples/team8_85pct.yaml
$ coreburst core price --scenario tco/examples/team8_85pct.yaml

**Source.** The ``core-idle`` rule of the guardrails daemon records, every cycle, each Slurm job
run's allocated GPU-hours and its measured GPU-hours (allocated x its DCGM efficiency so far) in
the daemon's state (``record_core_usage``; SQLite at ``state.path``, or the DynamoDB table of
the scheduled Lambda, read with ``--state-table`` or ``COREBURST_STATE_TABLE``, as
``guardrails.cli.open_store`` opens it). The report reads that store: no second reading of
Prometheus, and the same numbers the rule decided on. A run counts
whole when it was seen within ``--since``. A run whose GPUs were not all measured (blind) counts
as allocated but *unmeasured*, never as idle.

**Price.** One $/GPU-hour for owned nodes: ``--gpu-hour-usd``, else the TCO model's amortised
cost of a ``--scenario`` (``common.pricing.owned_gpu_hour_usd`` over ``tco.model``), else the
config's ``core_idle.gpu_hour_usd`` (which ``coreburst core price`` prints); with none, GPU-hours
only. Burst spend is the daemon's latest month-to-date figure for the spend scope named like the
team (Slurm account), by scope name or tag value.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="The on-prem core: allocated versus measured GPU-hours, and their price.",
)


class Format(StrEnum):
    table = "table"
    json = "json"


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


@dataclass
class Usage:
    """GPU-hours of a set of job runs. ``measured`` is the allocated GPU-hours of the runs whose
    every GPU had data; ``used`` their measured GPU-hours; the rest of ``allocated`` is
    ``unmeasured``."""

    jobs: int = 0
    allocated: float = 0.0
    measured: float = 0.0
    used: float = 0.0

    def add(self, row: Any) -> None:
        self.jobs += 1
        alloc = float(row["allocated_gpu_h"])
        self.allocated += alloc
        if row["used_gpu_h"] is not None:
            self.measured += alloc
            self.used += min(float(row["used_gpu_h"]), alloc)

    @property
    def idle(self) -> float:
        return self.measured - self.used

    @property
    def unmeasured(self) -> float:
        return self.allocated - self.measured

    @property
    def idle_pct(self) -> float | None:
        return 100 * self.idle / self.measured if self.measured > 0 else None


@dataclass(frozen=True)
class Line:
    """One team's or user's figures, as printed and as JSON."""

    team: str
    user: str | None
    jobs: int
    allocated_gpu_h: float
    used_gpu_h: float
    idle_gpu_h: float
    unmeasured_gpu_h: float
    idle_pct: float | None
    core_usd: float | None
    idle_usd: float | None
    burst_usd_mtd: float | None = None


def _line(team: str, user: str | None, u: Usage, price: float | None) -> Line:
    return Line(
        team=team,
        user=user,
        jobs=u.jobs,
        allocated_gpu_h=round(u.allocated, 3),
        used_gpu_h=round(u.used, 3),
        idle_gpu_h=round(u.idle, 3),
        unmeasured_gpu_h=round(u.unmeasured, 3),
        idle_pct=None if u.idle_pct is None else round(u.idle_pct, 1),
        core_usd=None if price is None else round(u.allocated * price, 2),
        idle_usd=None if price is None else round(u.idle * price, 2),
    )


def summarize(
    rows: list[Any], price: float | None, burst: dict[str, float] | None = None
) -> dict[str, Any]:
    """Per team (Slurm account), per user and in total (pure).

    >>> rows = [{"account": "ml", "user": "ann", "allocated_gpu_h": 10.0, "used_gpu_h": 4.0},
    ...         {"account": "ml", "user": "bob", "allocated_gpu_h": 6.0, "used_gpu_h": None}]
    >>> s = summarize(rows, 2.0)
    >>> t = s["teams"][0]
    >>> (t.allocated_gpu_h, t.used_gpu_h, t.idle_gpu_h, t.unmeasured_gpu_h, t.idle_pct, t.idle_usd)
    (16.0, 4.0, 6.0, 6.0, 60.0, 12.0)
    """
    teams: dict[str, Usage] = {}
    users: dict[tuple[str, str], Usage] = {}
    total = Usage()
    for r in rows:
        team = str(r["account"] or "(no account)")
        teams.setdefault(team, Usage()).add(r)
        users.setdefault((team, str(r["user"])), Usage()).add(r)
        total.add(r)
    burst = burst or {}
    return {
        "teams": [
            Line(**{**asdict(_line(t, None, u, price)), "burst_usd_mtd": burst.get(t)})
            for t, u in sorted(teams.items(), key=lambda kv: -kv[1].allocated)
        ],
        "users": [
            _line(t, user, u, price)
            for (t, user), u in sorted(users.items(), key=lambda kv: -kv[1].allocated)
        ],
        "total": _line("all", None, total, price),
    }


def sentence(line: Line, price: float | None) -> str:
    """``team ml: core 412 GPU-h at $1.90 = $783, burst $4,210 month-to-date; 38 % of
    allocated GPU-hours idle``."""
    core = f"core {line.allocated_gpu_h:,.0f} GPU-h"
    if price is not None and line.core_usd is not None:
        core += f" at ${price:,.2f} = ${line.core_usd:,.0f}"
    burst = (
        f", burst ${line.burst_usd_mtd:,.0f} month-to-date"
        if line.burst_usd_mtd is not None
        else ""
    )
    idle = (
        f"{line.idle_pct:.0f} % of allocated GPU-hours idle"
        if line.idle_pct is not None
        else "idle share unknown (no measured GPU-hours)"
    )
    if line.unmeasured_gpu_h > 0:
        idle += f" ({line.unmeasured_gpu_h:,.0f} GPU-h unmeasured)"
    return f"team {line.team}: {core}{burst}; {idle}"


def _price(
    gpu_hour_usd: float | None, scenario: Path | None, configured: float | None
) -> tuple[float | None, str]:
    if gpu_hour_usd is not None:
        if not 0 <= gpu_hour_usd < 1e6:
            raise _fail("--gpu-hour-usd: give a price from 0 to 1,000,000 $ per GPU-hour")
        return gpu_hour_usd, "--gpu-hour-usd"
    if scenario is not None:
        return scenario_price(scenario), f"TCO scenario {scenario}"
    if configured is not None:
        return configured, "core_idle.gpu_hour_usd"
    return None, "none (give --scenario or --gpu-hour-usd for dollar figures)"


def scenario_price(path: Path) -> float:
    """$/allocated GPU-hour of the owned node of a TCO scenario file; one line on error."""
    from common.textio import read_text
    from tco.cli import build_scenario
    from tco.model import TcoError, scenario_gpu_hour_price

    try:
        data = yaml.safe_load(read_text(path, "scenario", TcoError)) or {}
        if not isinstance(data, dict):
            raise TcoError(f"{path}: a scenario is a mapping of keys (name, gpus, ...)")
        return scenario_gpu_hour_price(build_scenario(data, {}))
    except yaml.YAMLError:
        raise _fail(f"{path}: not valid YAML") from None
    except TcoError as exc:
        raise _fail(f"{path}: {exc}") from None


def _burst(state: Any, cfg: Any, teams: list[str]) -> dict[str, float]:
    """Month-to-date burst spend per team, from the spend scope named like it."""
    out: dict[str, float] = {}
    for team in teams:
        for s in cfg.spend.scopes:
            if team in (s.name, s.tag_value):
                row = state.last_spend(s.name)
                if row is not None:
                    out[team] = float(row["mtd"])
                break
    return out


def _since(value: str) -> timedelta:
    from guardrails.config import parse_duration

    try:
        td: timedelta = parse_duration(value)
    except ValueError as exc:
        raise _fail(f"--since: {exc}") from None
    if td <= timedelta(0):
        raise _fail("--since: give a positive duration such as 7d or 12h")
    return td


@app.command()
def report(  # noqa: PLR0917 (one parameter per CLI option)
    config: Annotated[
        Path | None, typer.Option(help="guardrails config (its state.path and spend scopes)")
    ] = None,
    since: Annotated[str, typer.Option(help="how far back: 7d, 12h, 30m")] = "7d",
    fmt: Annotated[Format, typer.Option("--format", help="table or json")] = Format.table,
    plot: Annotated[Path | None, typer.Option(help="write a PNG chart here")] = None,
    gpu_hour_usd: Annotated[
        float | None, typer.Option(help="$ per owned GPU-hour (overrides the rest)")
    ] = None,
    scenario: Annotated[
        Path | None, typer.Option(help="TCO scenario whose owned node sets the price")
    ] = None,
    state_table: Annotated[
        str | None,
        typer.Option(
            envvar="COREBURST_STATE_TABLE",
            help="read the scheduled Lambda's DynamoDB state table instead of state.path",
        ),
    ] = None,
) -> None:
    """Allocated versus measured GPU-hours per team and user, their idle cost and burst spend.

    Teams are Slurm accounts; the figures are those the daemon's core-idle rule recorded.

    Read from the config's state.path, or with --state-table from the Lambda's DynamoDB table.
    """
    from guardrails.cli import _load, open_store

    span = _since(since)
    cfg = _load(config)
    if state_table is None and not cfg.state.path.exists():
        raise _fail(
            f"no daemon state at {cfg.state.path}: run the guardrails daemon with core_idle "
            "enabled, or give --config with the daemon's state.path (or --state-table for the "
            "scheduled Lambda's DynamoDB table)"
        )
    price, source = _price(gpu_hour_usd, scenario, cfg.core_idle.gpu_hour_usd)
    now = datetime.now(UTC)
    state = open_store(cfg, state_table)
    try:
        rows = list(state.core_usage(now - span))
        teams = sorted({str(r["account"] or "(no account)") for r in rows})
        summary = summarize(rows, price, _burst(state, cfg, teams))
    finally:
        state.close()
    if plot is not None:
        from tco.core_plot import render_core_usage

        try:
            render_core_usage(summary["teams"], summary["users"], plot, f"last {since}")
        except OSError as exc:
            raise _fail(f"--plot {plot}: cannot write ({exc.strerror or exc})") from None
    if fmt == Format.json:
        doc = {
            "since": (now - span).isoformat(),
            "until": now.isoformat(),
            "usd_per_gpu_hour": price,
            "price_source": source,
            "teams": [asdict(x) for x in summary["teams"]],
            "users": [asdict(x) for x in summary["users"]],
            "total": asdict(summary["total"]),
        }
        typer.echo(json.dumps(doc, indent=2))
        return
    _print_table(summary, price, source, since)
    if plot is not None:
        typer.echo(f"plot: {plot}")


def _print_table(summary: dict[str, Any], price: float | None, source: str, since: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    usd = price is not None
    for title, lines in (("Teams", summary["teams"]), ("Users", summary["users"])):
        t = Table(title=f"{title}, last {since}")
        cols = ["team"] + (["user"] if title == "Users" else [])
        cols += ["jobs", "allocated GPU-h", "used GPU-h", "idle GPU-h", "idle %", "unmeasured"]
        cols += ["core $", "idle $"] if usd else []
        for c in cols:
            t.add_column(c, justify="left" if c in ("team", "user") else "right")
        for x in lines:
            row = [x.team] + ([x.user or ""] if title == "Users" else [])
            row += [
                str(x.jobs),
                f"{x.allocated_gpu_h:,.1f}",
                f"{x.used_gpu_h:,.1f}",
                f"{x.idle_gpu_h:,.1f}",
                "-" if x.idle_pct is None else f"{x.idle_pct:.0f} %",
                f"{x.unmeasured_gpu_h:,.1f}",
            ]
            if usd:
                row += [f"${x.core_usd:,.0f}", f"${x.idle_usd:,.0f}"]
            t.add_row(*row)
        console.print(t)
    for line in summary["teams"]:
        console.print(sentence(line, price), markup=False, highlight=False, soft_wrap=True)
    if not summary["teams"]:
        console.print(
            f"no Slurm job runs recorded in the last {since} (is the daemon running with "
            "core_idle enabled, and is this its state.path?)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    console.print(f"price: {source}", markup=False, highlight=False, soft_wrap=True)


@app.command()
def price(
    scenario: Annotated[Path, typer.Option(help="TCO scenario (gpus + utilization_pct)")],
) -> None:
    """The owned $/GPU-hour of a TCO scenario, and the config line that gives it to the daemon.

    The daemon's core-idle messages and `coreburst core report` price GPU-hours with it.
    """
    usd = scenario_price(scenario)
    typer.echo(f"${usd:.4f} per allocated GPU-hour (owned, amortised; from {scenario})")
    typer.echo(f"core_idle: {{gpu_hour_usd: {usd:.4f}}}")
