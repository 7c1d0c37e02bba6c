"""``coreburst plan``: price a stack and run the policy pack over it, before anything deploys.

Resources come from the offline evaluation of ``Pulumi.<stack>.yaml`` (the real program under
mocks) or, in CI, from ``pulumi preview --json`` so the estimate is what Pulumi will actually
do. Both are priced from resource properties with the catalog (:mod:`policies.pricing`) and
checked with the same validators CrossGuard runs (:mod:`policies.runner`).

    $ coreburst plan -s dev
    $ coreburst plan -s prod --compare dev --format markdown
    $ pulumi preview -s dev --json > preview.json
    $ coreburst plan -s dev --preview-json preview.json --egress-gb 5000 --format markdown
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import resources as package_files
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from coreburst.burst.config import parse_burst
from coreburst.burst.cost import GateSummary, PoolRate, gate_summary, pool_rates
from coreburst.common.catalog import CatalogError, load_catalog
from coreburst.common.pricing import CostLine
from coreburst.common.textio import read_text
from infra.config import StackConfigError
from infra.offline import evaluate_stack, load_stack_yaml, stack_file
from policies.pack import all_policies
from policies.pricing import price_resources, stack_region
from policies.runner import PolicyError, Violation, run_policies
from policies.sources import PreviewError, from_offline, load_preview

# The policy pack's per-stack config: the user's own (policies/config/<stack>.json beside the
# stack files, what `pulumi preview --policy-pack-config` is given), else the one this package
# ships for its example stacks.
POLICY_CONFIG_SUBDIR = ("policies", "config")


class Format(StrEnum):
    table = "table"
    json = "json"
    markdown = "markdown"


class PlanError(ValueError):
    """Bad input the user can fix; printed as one line."""


@dataclass
class Burst:
    """A burst stack's GPU nodes: Slurm starts them on demand (their Auto Scaling groups stay
    at 0), so they are priced per node-hour, outside the fixed total."""

    pools: list[PoolRate]
    gate: GateSummary | None


@dataclass
class Report:
    stack: str
    source: str
    region: str
    lines: list[CostLine]
    violations: list[Violation]
    policies_checked: int
    resource_count: int = 0
    compare: Report | None = field(default=None)
    burst: Burst | None = None
    # Which policy pack config the verdicts used (a path, or that there was none).
    policy_config: str = ""

    @property
    def hourly(self) -> float:
        return sum(x.hourly_usd for x in self.lines)

    @property
    def monthly(self) -> float:
        return sum(x.monthly_usd for x in self.lines)


def policy_config_path(stack: str, root: Path | None) -> Path | None:
    """Where ``stack``'s policy config is: beside the stack files, else shipped; None when
    neither has one (every policy at its defaults)."""
    own = (root or Path.cwd()).joinpath(*POLICY_CONFIG_SUBDIR, f"{stack}.json")
    if own.is_file():
        return own
    shipped = Path(str(package_files.files("policies"))) / "config" / f"{stack}.json"
    return shipped if shipped.is_file() else None


def _policy_config(stack: str, path: Path | None, root: Path | None = None) -> dict[str, Any]:
    if path is None:
        path = policy_config_path(stack, root)
        if path is None:
            return {}  # no per-stack file: every policy at its defaults (the report says so)
    if not path.is_file():
        raise PlanError(f"policy config {path} not found")
    try:
        doc = json.loads(read_text(path, "policy config", PlanError))
    except json.JSONDecodeError as exc:
        raise PlanError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(doc, dict):
        raise PlanError(f"{path}: expected an object of policy name -> config")
    return doc


BURST_NOTE = " (burst: Slurm starts these nodes on demand; priced per node-hour below)"


def _burst(stack: str, root: Path | None) -> Burst | None:
    """The stack's burst pools (``coreburst:burst`` in ``Pulumi.<stack>.yaml``), or None.
    With ``--preview-json`` and no stack file there is nothing to read."""
    if not stack_file(stack, root).is_file():
        return None
    config = load_stack_yaml(stack, root)
    if not config.get("coreburst:burst"):
        return None
    b = parse_burst(stack, config)
    return Burst(pool_rates(b), gate_summary(b))


def _mark_burst(lines: list[CostLine], burst: Burst) -> list[CostLine]:
    """Say on each burst cluster's Auto Scaling group line why it holds no instance."""
    asgs = {f"{p.cluster}-asg" for p in burst.pools}
    return [
        CostLine(x.category, x.item, x.detail + BURST_NOTE, x.hourly_usd, x.monthly_usd, x.source)
        if x.item in asgs
        else x
        for x in lines
    ]


def build_report(
    stack: str,
    preview_json: Path | None = None,
    egress_gb: float = 0.0,
    nat_gb: float = 0.0,
    policy_config: Path | None = None,
    *,
    root: Path | None = None,
) -> Report:
    """Price and check one stack (``root/Pulumi.<stack>.yaml``); raises PlanError /
    StackConfigError / CatalogError / PreviewError with a one-line message."""
    if preview_json is not None:
        resources = load_preview(preview_json)
        source = f"pulumi preview ({preview_json.name})"
    else:
        ev = evaluate_stack(stack, root)
        resources = from_offline(ev.resources, stack)
        source = "offline evaluation"
    lines = price_resources(resources, load_catalog(), egress_gb=egress_gb, nat_gb_per_month=nat_gb)
    burst = _burst(stack, root)
    if burst is not None:
        lines = _mark_burst(lines, burst)
    used = policy_config or policy_config_path(stack, root)
    violations = run_policies(resources, _policy_config(stack, policy_config, root))
    aws = sum(1 for r in resources if r.resource_type.startswith("aws:"))
    return Report(
        stack,
        source,
        stack_region(resources),
        lines,
        violations,
        len(all_policies()),
        aws,
        burst=burst,
        policy_config=str(used) if used else "none: every policy at its defaults",
    )


# -- rendering ------------------------------------------------------------------------------
def _usd(x: float) -> str:
    return f"{x:,.2f}"


def _diff_rows(report: Report) -> list[tuple[str, float, float]]:
    other = report.compare
    assert other is not None
    mine = {x.item: x.monthly_usd for x in report.lines}
    theirs = {x.item: x.monthly_usd for x in other.lines}
    items = list(mine) + [i for i in theirs if i not in mine]
    return [(i, mine.get(i, 0.0), theirs.get(i, 0.0)) for i in items]


BURST_TITLE = "burst nodes: Slurm starts them on demand, billed per node-hour, not in the total"
BURST_COLUMNS = (
    "pool",
    "partition",
    "nodes",
    "$/node-hour",
    "$/hour, all nodes",
    "MaxTime",
    "$ largest gate projection",
)


def _burst_rows(b: Burst) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for p in b.pools:
        proj = p.max_projection_usd
        rows.append(
            (
                p.cluster,
                p.partition,
                f"{p.nodes} x {p.instance_type} {p.market}",
                f"{p.usd_per_node_hour:,.3f}",
                _usd(p.usd_per_hour_all_nodes),
                p.max_time,
                "no MaxTime" if proj is None else _usd(proj),
            )
        )
    return rows


def _gate_lines(b: Burst) -> list[str]:
    """What the spend gate will check, and each pool whose largest job can never pass it."""
    g = b.gate
    if g is None:
        return [
            "spend gate: none (coreburst:burst.spendGate unset): Slurm may start every node "
            "for as long as its jobs run"
        ]
    if g.scope is None:
        return [f"spend gate: limits in {g.guardrails_config}, not readable here ({g.unreadable})"]
    periods = ((g.daily_limit_usd, "a day"), (g.monthly_limit_usd, "a month"))
    limits = [(v, p) for v, p in periods if v is not None]
    out = [
        f"spend gate: scope {g.scope}, {' and '.join(f'${v:,.2f} {p}' for v, p in limits)} "
        f"({g.guardrails_config}); a job waits when nodes x $/h (instance) x its time limit "
        "exceeds what the scope has left"
    ]
    lowest, period = min(limits)
    for p in b.pools:
        proj = p.max_projection_usd
        if proj is not None and proj > lowest:
            out.append(
                f"warning: pool {p.cluster}: a job on all {p.nodes} nodes for MaxTime "
                f"{p.max_time} projects ${proj:,.2f}, over the ${lowest:,.2f} {period} limit: "
                "the gate never launches it (lower the partition's MaxTime or raise the limit)"
            )
    return out


def _burst_json(b: Burst) -> dict[str, Any]:
    g = b.gate
    return {
        "note": BURST_TITLE,
        "pools": [
            {
                "cluster": p.cluster,
                "partition": p.partition,
                "instanceType": p.instance_type,
                "market": p.market,
                "nodes": p.nodes,
                "usdPerNodeHour": round(p.usd_per_node_hour, 4),
                "instanceUsdPerNodeHour": round(p.instance_usd_per_node_hour, 4),
                "volumeUsdPerNodeHour": round(p.volume_usd_per_node_hour, 4),
                "usdPerHourAllNodes": round(p.usd_per_hour_all_nodes, 4),
                "maxTime": p.max_time,
                "maxProjectionUsd": (
                    None if p.max_projection_usd is None else round(p.max_projection_usd, 2)
                ),
                "priceSource": p.source,
            }
            for p in b.pools
        ],
        "spendGateNotes": _gate_lines(b),
        "spendGate": None
        if g is None
        else {
            "guardrailsConfig": g.guardrails_config,
            "scope": g.scope,
            "dailyLimitUsd": g.daily_limit_usd,
            "monthlyLimitUsd": g.monthly_limit_usd,
            "unreadable": g.unreadable,
        },
    }


def to_json(report: Report) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "stack": report.stack,
        "source": report.source,
        "region": report.region,
        "resourceCount": report.resource_count,
        "currency": "USD",
        "hoursPerMonth": load_catalog().hours_per_month,
        "lines": [
            {
                "category": x.category,
                "item": x.item,
                "detail": x.detail,
                "hourlyUsd": round(x.hourly_usd, 4),
                "monthlyUsd": round(x.monthly_usd, 2),
                # The catalog figures the line used: source key and date
                # (coreburst/common/data/catalog.yaml).
                "priceSource": x.source,
            }
            for x in report.lines
        ],
        "totals": {"hourlyUsd": round(report.hourly, 4), "monthlyUsd": round(report.monthly, 2)},
        "burst": None if report.burst is None else _burst_json(report.burst),
        "policies": {
            "checked": report.policies_checked,
            "config": report.policy_config,
            "passed": not report.violations,
            "violations": [
                {
                    "policy": v.policy,
                    "enforcement": v.enforcement,
                    "message": v.message,
                    "urn": v.urn,
                }
                for v in report.violations
            ],
        },
    }
    if report.compare is not None:
        other = report.compare
        doc["compare"] = {
            "stack": other.stack,
            "lines": [
                {
                    "item": i,
                    "monthlyUsd": round(a, 2),
                    "otherMonthlyUsd": round(b, 2),
                    "deltaUsd": round(b - a, 2),
                }
                for i, a, b in _diff_rows(report)
            ],
            "totals": {
                "monthlyUsd": round(report.monthly, 2),
                "otherMonthlyUsd": round(other.monthly, 2),
                "deltaUsd": round(other.monthly - report.monthly, 2),
            },
        }
    return doc


def to_markdown(report: Report) -> str:
    out = [
        f"### coreburst plan: `{report.stack}` ({report.region}, {report.source})",
        "",
        f"{report.resource_count} AWS resources; {len(report.lines)} priced lines below.",
        "",
        "| category | resource | detail | $/hour | $/month |",
        "|---|---|---|---:|---:|",
    ]
    for x in report.lines:
        out.append(
            f"| {x.category} | `{x.item}` | {x.detail} | {_usd(x.hourly_usd)} "
            f"| {_usd(x.monthly_usd)} |"
        )
    out.append(f"| **total** | | | **{_usd(report.hourly)}** | **{_usd(report.monthly)}** |")
    out.append("")
    if report.burst is not None:
        out += [
            f"#### {BURST_TITLE}",
            "",
            "| " + " | ".join(BURST_COLUMNS) + " |",
            "|---|---|---|---:|---:|---|---:|",
        ]
        out += ["| " + " | ".join(row) + " |" for row in _burst_rows(report.burst)]
        for line in _gate_lines(report.burst):
            out += ["", line]
        out.append("")
    if report.compare is not None:
        other = report.compare
        out += [
            f"#### `{report.stack}` vs `{other.stack}` ($/month)",
            "",
            f"| resource | {report.stack} | {other.stack} | {other.stack} - {report.stack} |",
            "|---|---:|---:|---:|",
        ]
        for item, a, b in _diff_rows(report):
            out.append(f"| `{item}` | {_usd(a)} | {_usd(b)} | {b - a:+,.2f} |")
        out.append(
            f"| **total** | **{_usd(report.monthly)}** | **{_usd(other.monthly)}** "
            f"| **{other.monthly - report.monthly:+,.2f}** |"
        )
        out.append("")
    if not report.violations:
        out.append(f"**Policies: PASS** ({report.policies_checked} policies, no violations)")
    else:
        out.append(f"**Policies: FAIL** ({len(report.violations)} violations)")
        out.append("")
        out += [f"- `{v.enforcement}` **{v.policy}**: {v.message}" for v in report.violations]
    return "\n".join(out) + "\n"


def print_table(report: Report, console: Console) -> None:
    cost = Table(
        title=f"stack {report.stack}: {report.resource_count} AWS resources, estimated cost "
        f"({report.region}, {report.source})"
    )
    for col in ("category", "resource", "detail", "$/hour", "$/month"):
        cost.add_column(col, justify="right" if col.startswith("$") else "left")
    for x in report.lines:
        cost.add_row(x.category, x.item, x.detail, _usd(x.hourly_usd), _usd(x.monthly_usd))
    cost.add_row("total", "", "", _usd(report.hourly), _usd(report.monthly), style="bold")
    console.print(cost)
    if report.burst is not None:
        burst = Table(title=BURST_TITLE)
        for col in BURST_COLUMNS:
            burst.add_column(col, justify="right" if col.startswith("$") else "left")
        for row in _burst_rows(report.burst):
            burst.add_row(*row)
        console.print(burst)
        for line in _gate_lines(report.burst):
            console.print(line)
    if report.compare is not None:
        other = report.compare
        diff = Table(title=f"{report.stack} vs {other.stack} ($/month)")
        diff.add_column("resource")
        for col in (report.stack, other.stack, f"{other.stack} - {report.stack}"):
            diff.add_column(col, justify="right")
        for item, a, b in _diff_rows(report):
            diff.add_row(item, _usd(a), _usd(b), f"{b - a:+,.2f}")
        diff.add_row(
            "total",
            _usd(report.monthly),
            _usd(other.monthly),
            f"{other.monthly - report.monthly:+,.2f}",
            style="bold",
        )
        console.print(diff)
    console.print(f"policy config: {report.policy_config}")
    if not report.violations:
        console.print(f"policies: PASS ({report.policies_checked} policies, no violations)")
        return
    pol = Table(title=f"policies: FAIL ({len(report.violations)} violations)")
    for col in ("policy", "enforcement", "message"):
        pol.add_column(col)
    for v in report.violations:
        pol.add_row(v.policy, v.enforcement, v.message)
    console.print(pol)


# A typer command takes one parameter per option.
def plan(  # noqa: PLR0917
    stack: str = typer.Option("dev", "--stack", "-s", help="Stack name (Pulumi.<stack>.yaml)"),
    fmt: Format = typer.Option(Format.table, "--format", "-f", help="Output format"),
    compare: str | None = typer.Option(
        None, "--compare", metavar="OTHER_STACK", help="Also price OTHER_STACK; print the diff"
    ),
    preview_json: Path | None = typer.Option(
        None, "--preview-json", help="Price the output of `pulumi preview --json` instead"
    ),
    egress_gb: float = typer.Option(
        0.0, "--egress-gb", help="Internet egress per month, GB (catalog tiers)"
    ),
    nat_gb: float = typer.Option(0.0, "--nat-gb", help="NAT-processed GB per month"),
    policy_config: Path | None = typer.Option(
        None,
        "--policy-config",
        help="Policy pack config JSON (default policies/config/<stack>.json)",
    ),
    stack_dir: Path = typer.Option(
        Path("."), "--stack-dir", help="Directory holding Pulumi.<stack>.yaml (default: here)"
    ),
) -> None:
    """Price STACK per resource and run the policy pack over it (no cloud access needed)."""
    for flag, value in (("--egress-gb", egress_gb), ("--nat-gb", nat_gb)):
        if not (math.isfinite(value) and value >= 0):
            typer.echo(
                f"error: {flag} {value}: give a finite number of GB per month, 0 or more",
                err=True,
            )
            raise typer.Exit(2)
    try:
        root = stack_dir.resolve()
        report = build_report(stack, preview_json, egress_gb, nat_gb, policy_config, root=root)
        if compare:
            report.compare = build_report(compare, None, egress_gb, nat_gb, None, root=root)
    except (StackConfigError, CatalogError, PreviewError, PlanError, PolicyError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if fmt is Format.json:
        # Strict JSON: a NaN or infinity would print as bare NaN/Infinity, which parsers refuse.
        typer.echo(json.dumps(to_json(report), indent=2, allow_nan=False))
    elif fmt is Format.markdown:
        typer.echo(to_markdown(report), nl=False)
    else:
        print_table(report, Console())
