"""``coreburst core``: what the on-prem core's GPUs were allocated for, and what they did.

$ coreburst core report --config guardrails.yaml --since 7d
$ coreburst core report --config guardrails.yaml --state-table guardrails-state
$ coreburst core report --since 7d --format json --plot core.png \
    --scenario coreburst/tco/examples/team8_85pct.yaml
$ coreburst core price --scenario coreburst/tco/examples/team8_85pct.yaml

**Source.** The ``core-idle`` rule of the guardrails daemon records, every cycle, each Slurm job
run's allocated GPU-hours and its measured GPU-hours (allocated x its DCGM efficiency so far) in
the daemon's state (``record_core_usage``; SQLite at ``state.path``, or the DynamoDB table of
the scheduled Lambda, read with ``--state-table`` or ``COREBURST_STATE_TABLE``, as
``guardrails.cli.open_store`` opens it). The report reads that store: no second reading of
Prometheus, and the same numbers the rule decided on. A run counts
whole when it was seen within ``--since``. A run whose GPUs were not all measured (blind) counts
as allocated but *unmeasured*, never as idle.

**Price.** One $/GPU-hour for owned nodes: ``--gpu-hour-usd``, else the TCO model's amortised
cost of a ``--scenario`` (``coreburst.common.pricing.owned_gpu_hour_usd`` over
``coreburst.tco.model``), else the
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

from coreburst.common.console import console as make_console

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="The on-prem core: allocated versus measured GPU-hours, and their price.",
)


TOP_JOBS = 10  # job runs in the printed table (JSON lists every one)


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

    def add(self, row: Any, since: datetime | None = None) -> None:
        from guardrails.spend import core_run_hours

        self.jobs += 1
        if since is None:
            alloc = float(row["allocated_gpu_h"])
            used = None if row["used_gpu_h"] is None else min(float(row["used_gpu_h"]), alloc)
        else:  # only the part of a long run inside the report's window
            alloc, used = core_run_hours(row, since)
        self.allocated += alloc
        if used is not None:
            self.measured += alloc
            self.used += used

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
    # the spend scope whose month-to-date cloud spend ``burst_usd_mtd`` is (it may hold more
    # Slurm accounts than this team)
    burst_scope: str | None = None


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
    rows: list[Any],
    price: float | None,
    burst: dict[str, tuple[str, float]] | None = None,
    since: datetime | None = None,
) -> dict[str, Any]:
    """Per team (Slurm account), per user and in total (pure). With ``since``, a run that
    started earlier counts only its GPU-hours from ``since`` on; ``burst``: team -> (spend
    scope, its month-to-date cloud spend).

    >>> run = {"job_id": "1", "partition": "core", "state": "busy", "gpus": 1,
    ...        "start": "2026-04-01T00:00:00+00:00", "last_seen": "2026-04-01T10:00:00+00:00"}
    >>> rows = [{**run, "account": "ml", "user": "ann", "allocated_gpu_h": 10.0, "used_gpu_h": 4.0},
    ...         {**run, "account": "ml", "user": "bob", "allocated_gpu_h": 6.0, "used_gpu_h": None}]
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
        teams.setdefault(team, Usage()).add(r, since)
        users.setdefault((team, str(r["user"])), Usage()).add(r, since)
        total.add(r, since)
    burst = burst or {}
    return {
        "teams": [
            Line(
                **{
                    **asdict(_line(t, None, u, price)),
                    "burst_usd_mtd": burst[t][1] if t in burst else None,
                    "burst_scope": burst[t][0] if t in burst else None,
                }
            )
            for t, u in sorted(teams.items(), key=lambda kv: -kv[1].allocated)
        ],
        "users": [
            _line(t, user, u, price)
            for (t, user), u in sorted(users.items(), key=lambda kv: -kv[1].allocated)
        ],
        "total": _line("all", None, total, price),
        "jobs": job_runs(rows, price, since),
    }


def job_runs(
    rows: list[Any], price: float | None, since: datetime | None = None
) -> list[dict[str, Any]]:
    """Each job run: its GPU efficiency over the run so far and its GPU-hours inside the
    window, most idle GPU-hours first (pure)."""
    from guardrails.spend import core_run_hours

    out = []
    for r in rows:
        full_alloc = float(r["allocated_gpu_h"])
        full_used = r["used_gpu_h"]
        alloc, used = (
            core_run_hours(r, since)
            if since is not None
            else (full_alloc, None if full_used is None else min(float(full_used), full_alloc))
        )
        idle = None if used is None else alloc - used
        eff = (
            None
            if full_used is None or full_alloc <= 0
            else round(100 * min(float(full_used), full_alloc) / full_alloc, 1)
        )
        out.append(
            {
                "job_id": str(r["job_id"]),
                "team": str(r["account"] or "(no account)"),
                "user": str(r["user"]),
                "partition": str(r["partition"]),
                "state": str(r["state"]),
                "gpus": int(r["gpus"]),
                "start": str(r["start"]),
                "last_seen": str(r["last_seen"]),
                "efficiency_pct": eff,
                "allocated_gpu_h": round(alloc, 3),
                "used_gpu_h": None if used is None else round(used, 3),
                "idle_gpu_h": None if idle is None else round(idle, 3),
                "idle_usd": None if idle is None or price is None else round(idle * price, 2),
            }
        )
    return sorted(out, key=lambda j: (-(j["idle_gpu_h"] or 0.0), j["start"], j["job_id"]))


def sentence(line: Line, price: float | None) -> str:
    """``team ml: core 412 GPU-h at $1.90 = $783, burst $4,210 month-to-date; 38 % of
    allocated GPU-hours idle``."""
    from guardrails.spend import gpu_h_text

    core = f"core {gpu_h_text(line.allocated_gpu_h)} GPU-h"
    if price is not None and line.core_usd is not None:
        core += f" at ${price:,.2f} = ${line.core_usd:,.0f}"
    burst = (
        f", burst ${line.burst_usd_mtd:,.0f} month-to-date"
        if line.burst_usd_mtd is not None
        else ""
    )
    if burst and line.burst_scope not in (None, line.team):
        burst += f" (spend scope {line.burst_scope})"

    measured = line.allocated_gpu_h - line.unmeasured_gpu_h
    if line.idle_pct is None:
        idle = "idle share unknown (no measured GPU-hours)"
    elif line.unmeasured_gpu_h > 0:  # the share is of the measured part, and says so
        idle = (
            f"{line.idle_pct:.0f} % of the {gpu_h_text(measured)} measured GPU-hours idle "
            f"({gpu_h_text(line.unmeasured_gpu_h)} GPU-h unmeasured)"
        )
    else:
        idle = f"{line.idle_pct:.0f} % of allocated GPU-hours idle"
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
    from coreburst.common.textio import read_text
    from coreburst.tco.cli import build_scenario
    from coreburst.tco.model import TcoError, scenario_gpu_hour_price

    try:
        text = read_text(path, "scenario", TcoError)
    except TcoError as exc:  # it names the path already
        raise _fail(str(exc)) from None
    try:
        data = yaml.safe_load(text) or {}
        if not isinstance(data, dict):
            raise TcoError("a scenario is a mapping of keys (name, gpus, ...)")
        return scenario_gpu_hour_price(build_scenario(data, {}))
    except yaml.YAMLError:
        raise _fail(f"{path}: not valid YAML") from None
    except TcoError as exc:
        raise _fail(f"{path}: {exc}") from None


def _burst(state: Any, cfg: Any, teams: list[str]) -> dict[str, tuple[str, float]]:
    """Month-to-date burst spend per team: that of the spend scope listing the team's Slurm
    account in ``slurm_accounts``, else of the scope named like it (by name or tag value)."""
    out: dict[str, tuple[str, float]] = {}
    for team in teams:
        listed = [s for s in cfg.spend.scopes if team in s.slurm_accounts]
        named = [s for s in cfg.spend.scopes if team in (s.name, s.tag_value)]
        for s in (listed or named)[:1]:
            row = state.last_spend(s.name)
            if row is not None:
                out[team] = (s.name, round(float(row["mtd"]), 2))
    return out


def _check_plot(path: Path) -> None:
    """Before any work: the chart's path names a .png file (matplotlib would add ``.png`` to a
    name without one and write somewhere else than the report says)."""
    if path.is_dir():
        raise _fail(f"--plot {path}: is a directory; give a file name such as {path / 'core.png'}")
    if path.suffix.lower() != ".png":
        raise _fail(f"--plot {path}: give a file name ending in .png (the chart is a PNG)")


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
    from guardrails.cli import load_checked, open_store

    span = _since(since)
    if plot is not None:
        _check_plot(plot)
    cfg = load_checked(config)
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
        summary = summarize(rows, price, _burst(state, cfg, teams), now - span)
    finally:
        state.close()
    if plot is not None:
        from coreburst.tco.core_plot import render_core_usage

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
            "jobs": summary["jobs"],
        }
        typer.echo(json.dumps(doc, indent=2))
        return
    _print_table(summary, price, source, since)
    if plot is not None:
        typer.echo(f"plot: {plot}")


def _print_table(summary: dict[str, Any], price: float | None, source: str, since: str) -> None:
    from rich.table import Table

    console = make_console()
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
    idle_jobs = [j for j in summary["jobs"] if (j["idle_gpu_h"] or 0) > 0][:TOP_JOBS]
    if idle_jobs:
        t = Table(title=f"Jobs with the most idle GPU-hours, last {since}")
        for c in ("job", "team", "user", "GPUs", "efficiency", "state", "idle GPU-h"):
            t.add_column(c, justify="left" if c in ("job", "team", "user", "state") else "right")
        for j in idle_jobs:
            t.add_row(
                j["job_id"], j["team"], j["user"], str(j["gpus"]),
                f"{j['efficiency_pct']:.0f} %", j["state"], f"{j['idle_gpu_h']:,.1f}",
            )  # fmt: skip
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
