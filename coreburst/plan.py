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
from coreburst.common.cloudwatch_cost import CloudWatchBill, FleetGroup
from coreburst.common.cloudwatch_cost import bill as cloudwatch_bill
from coreburst.common.console import console as make_console
from coreburst.common.pricing import CostLine, cites_unverified, merge_sources, sources_legend
from coreburst.common.textio import read_text
from guardrails.configfile import cloudwatch_cadence
from guardrails.configfile import parse_config as guardrails_defaults
from infra.config import StackConfig, StackConfigError
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


@dataclass(frozen=True)
class StackBudget:
    """The stack's own monthly budget (``coreburst:budget.monthlyUsd``, what its AWS Budget
    alarms on), and where it was read."""

    monthly_usd: float
    source: str


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
    # The guardrails' own CloudWatch bill a day (None: no stack file was evaluated).
    cloudwatch: CloudWatchBill | None = None
    # Which policy pack config the verdicts used (a path, or that there was none).
    policy_config: str = ""
    budget: StackBudget | None = None

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


def _stack_budget(stack: str, root: Path | None, resources: list[Any]) -> StackBudget | None:
    """``coreburst:budget.monthlyUsd`` from ``Pulumi.<stack>.yaml``; with only a preview, the
    monthly USD limit of the AWS Budget the preview declares; None when neither has one."""
    if stack_file(stack, root).is_file():
        budget = load_stack_yaml(stack, root).get("coreburst:budget")
        value = budget.get("monthlyUsd") if isinstance(budget, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not (math.isfinite(value) and value > 0):
                raise PlanError(
                    f"Pulumi.{stack}.yaml: coreburst:budget.monthlyUsd {value}: give a positive "
                    "number of USD per month"
                )
            return StackBudget(float(value), f"Pulumi.{stack}.yaml coreburst:budget")
    for r in resources:
        props = getattr(r, "props", {})
        if getattr(r, "resource_type", "") != "aws:budgets/budget:Budget":
            continue
        if props.get("timeUnit") != "MONTHLY" or props.get("limitUnit") != "USD":
            continue
        raw = props.get("limitAmount")
        try:
            value = float(raw) if isinstance(raw, str | int | float) else math.nan
        except ValueError:
            continue
        if math.isfinite(value) and value > 0:
            return StackBudget(value, f"AWS Budget {getattr(r, 'name', '')} in the preview")
    return None


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
    telemetry = None if preview_json is not None else _cloudwatch(ev.config)
    burst = _burst(stack, root)
    if burst is not None:
        lines = _mark_burst(lines, burst)
    used = policy_config or policy_config_path(stack, root)
    violations = run_policies(resources, _policy_config(stack, policy_config, root))
    aws = sum(1 for r in resources if r.resource_type.startswith("aws:"))
    budget = _stack_budget(stack, root, list(resources))
    return Report(
        stack,
        source,
        stack_region(resources),
        lines,
        violations,
        len(all_policies()),
        aws,
        burst=burst,
        cloudwatch=telemetry,
        policy_config=str(used) if used else "none: every policy at its defaults",
        budget=budget,
    )


def _cloudwatch(config: StackConfig) -> CloudWatchBill:
    """The guardrails' CloudWatch $/day with every cluster's nodes up (coreburst.common.
    cloudwatch_cost), at the daemon's default cadence."""
    return cloudwatch_bill(
        [FleetGroup(c.instance_type, c.nodes, c.per_device_metrics) for c in config.clusters],
        load_catalog(),
        cloudwatch_cadence(guardrails_defaults("")),
    )


def _cloudwatch_line(b: CloudWatchBill) -> str:
    terms = "; ".join(f"{t} {q} ${usd:,.2f}" for t, q, usd in b.lines()[:-1])
    flag = ", unverified" if b.unverified else ""
    return (
        f"guardrails' CloudWatch per day at {b.nodes:,} nodes: ${b.total_usd_day:,.2f} "
        f"({terms}; {b.source}{flag})"
    )


def _cloudwatch_json(b: CloudWatchBill | None) -> dict[str, Any] | None:
    if b is None:
        return None
    return {
        "nodes": b.nodes,
        "customMetrics": b.custom_metrics,
        "customMetricsUsd": round(b.custom_usd_day, 2),
        "putMetricDataRequests": round(b.put_requests_day),
        "putMetricDataUsd": round(b.put_usd_day, 2),
        "getMetricDataMetrics": round(b.get_metrics_day),
        "getMetricDataUsd": round(b.get_usd_day, 2),
        "totalUsd": round(b.total_usd_day, 2),
        "priceSource": b.source,
        "unverified": b.unverified,
    }


# -- rendering ------------------------------------------------------------------------------
def _usd(x: float) -> str:
    return f"{x:,.2f}"


# Marks a price whose catalog figure is `unverified: true` (an estimate), in every table.
UNVERIFIED = "unverified"
# Every table's last column: the catalog figures a line was priced from, each as
# `source-key as_of`, `unverified` added where it is (`ref 2025-06; estimate 2026-11 unverified`).
PRICE_SOURCE = "price source"
_unverified = cites_unverified


def _all_sources(report: Report) -> str:
    """Every figure citation the report's dollars rest on, each once."""
    parts = [x.source for x in report.lines]
    if report.compare is not None:
        parts += [x.source for x in report.compare.lines]
    if report.burst is not None:
        parts += [p.source for p in report.burst.pools]
    if report.cloudwatch is not None:
        parts.append(report.cloudwatch.source)
    return merge_sources(*parts)


def _legend(report: Report) -> str:
    """Where each source key the report cites can be checked (docs/sources.md explains them)."""
    return sources_legend(load_catalog().sources, _all_sources(report))


def _unverified_note(report: Report) -> str | None:
    n = sum(1 for x in report.lines if _unverified(x.source))
    if report.compare is not None:
        n += sum(1 for x in report.compare.lines if _unverified(x.source))
    if report.burst is not None:
        n += sum(1 for p in report.burst.pools if _unverified(p.source))
    if not n:
        return None
    return (
        f"{n} price(s) marked {UNVERIFIED}: priced from catalog figures marked unverified "
        "(estimates; coreburst/common/data/catalog.yaml, `coreburst prices import` updates them)"
    )


def _diff_rows(report: Report) -> list[tuple[str, float, float, str]]:
    """(item, base $/month, stack $/month, price source of both) for ``--compare``: the delta
    is stack - base, so what the stack adds to the base is positive."""
    other = report.compare
    assert other is not None
    mine = {x.item: x for x in report.lines}
    base = {x.item: x for x in other.lines}
    items = list(base) + [i for i in mine if i not in base]

    def usd(lines: dict[str, CostLine], item: str) -> float:
        return lines[item].monthly_usd if item in lines else 0.0

    return [
        (
            i,
            usd(base, i),
            usd(mine, i),
            merge_sources(*(d[i].source for d in (base, mine) if i in d)),
        )
        for i in items
    ]


def _budget_lines(report: Report) -> list[str]:
    """The plan's fixed monthly total against the stack's own budget, with the headroom."""
    b = report.budget
    if b is None:
        return [
            f"budget: stack {report.stack} sets none (coreburst:budget.monthlyUsd): nothing to "
            "compare the plan's total with"
        ]
    total, left = report.monthly, b.monthly_usd - report.monthly
    used = 100 * total / b.monthly_usd
    head = f"headroom ${left:,.2f}/month" if left >= 0 else f"OVER BUDGET by ${-left:,.2f}/month"
    out = [
        f"budget: ${b.monthly_usd:,.2f}/month ({b.source}); plan total ${total:,.2f}/month "
        f"= {used:.1f}% of it; {head}"
    ]
    if report.burst is not None and left > 0:
        per_hour = sum(p.usd_per_hour_all_nodes for p in report.burst.pools)
        if per_hour > 0:
            out.append(
                f"burst nodes are not in that total: the headroom pays for {left / per_hour:,.1f} "
                f"hours a month of every burst node at ${per_hour:,.2f}/hour"
            )
    return out


def _budget_json(report: Report) -> dict[str, Any] | None:
    b = report.budget
    if b is None:
        return None
    return {
        "monthlyUsd": round(b.monthly_usd, 2),
        "source": b.source,
        "planMonthlyUsd": round(report.monthly, 2),
        "headroomUsd": round(b.monthly_usd - report.monthly, 2),
        "usedPercent": round(100 * report.monthly / b.monthly_usd, 2),
    }


BURST_TITLE = "burst nodes: Slurm starts them on demand, billed per node-hour, not in the total"
BURST_COLUMNS = (
    "pool",
    "partition",
    "nodes",
    "$/node-hour",
    "$/hour, all nodes",
    "MaxTime",
    "$ largest gate projection",
    PRICE_SOURCE,
)


def _burst_rows(b: Burst) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for p in b.pools:
        proj = p.max_projection_usd
        rows.append(
            (
                p.cluster,
                p.partition,
                f"{p.nodes} x {p.instance_type} {p.market}"
                + (
                    f" (priced as {p.priced_type}, the dearest type it may launch)"
                    if p.priced_type not in (None, p.instance_type)
                    else ""
                ),
                f"{p.usd_per_node_hour:,.3f}",
                _usd(p.usd_per_hour_all_nodes),
                p.max_time,
                "no MaxTime" if proj is None else _usd(proj),
                p.source,
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
                "pricedAs": p.priced_type or p.instance_type,
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
                "unverified": _unverified(p.source),
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


def _sources_json(report: Report) -> dict[str, Any]:
    from coreburst.common.pricing import source_keys

    cat = load_catalog()
    return {
        k: cat.sources[k].model_dump(exclude_none=True) if k in cat.sources else None
        for k in sorted(source_keys(_all_sources(report)))
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
                "unverified": _unverified(x.source),
            }
            for x in report.lines
        ],
        "totals": {"hourlyUsd": round(report.hourly, 4), "monthlyUsd": round(report.monthly, 2)},
        "budget": _budget_json(report),
        "budgetNotes": _budget_lines(report),
        "burst": None if report.burst is None else _burst_json(report.burst),
        "cloudwatchPerDay": _cloudwatch_json(report.cloudwatch),
        # each source key the priceSource fields cite: its page (with the date read) or the
        # file recording it (docs/sources.md)
        "priceSources": _sources_json(report),
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
            "stack": report.stack,
            "base": other.stack,
            # what the stack adds to the base is positive
            "delta": f"{report.stack} - {other.stack}",
            "lines": [
                {
                    "item": i,
                    "baseMonthlyUsd": round(base, 2),
                    "monthlyUsd": round(mine, 2),
                    "deltaUsd": round(mine - base, 2),
                    "priceSource": src,
                    "unverified": _unverified(src),
                }
                for i, base, mine, src in _diff_rows(report)
            ],
            "totals": {
                "baseMonthlyUsd": round(other.monthly, 2),
                "monthlyUsd": round(report.monthly, 2),
                "deltaUsd": round(report.monthly - other.monthly, 2),
            },
        }
    return doc


def to_markdown(report: Report) -> str:
    out = [
        f"### coreburst plan: `{report.stack}` ({report.region}, {report.source})",
        "",
        f"{report.resource_count} AWS resources; {len(report.lines)} priced lines below.",
        "",
        f"| category | resource | detail | $/hour | $/month | {PRICE_SOURCE} |",
        "|---|---|---|---:|---:|---|",
    ]
    for x in report.lines:
        out.append(
            f"| {x.category} | `{x.item}` | {x.detail} | {_usd(x.hourly_usd)} "
            f"| {_usd(x.monthly_usd)} | {x.source} |"
        )
    out.append(f"| **total** | | | **{_usd(report.hourly)}** | **{_usd(report.monthly)}** | |")
    out.append("")
    out += [*_budget_lines(report), ""]
    if report.burst is not None:
        out += [
            f"#### {BURST_TITLE}",
            "",
            "| " + " | ".join(BURST_COLUMNS) + " |",
            "|---|---|---|---:|---:|---|---:|---|",
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
            f"| resource | {other.stack} | {report.stack} | {report.stack} - {other.stack} "
            f"| {PRICE_SOURCE} |",
            "|---|---:|---:|---:|---|",
        ]
        for item, base, mine, src in _diff_rows(report):
            out.append(f"| `{item}` | {_usd(base)} | {_usd(mine)} | {mine - base:+,.2f} | {src} |")
        out.append(
            f"| **total** | **{_usd(other.monthly)}** | **{_usd(report.monthly)}** "
            f"| **{report.monthly - other.monthly:+,.2f}** | |"
        )
        out.append("")
    note = _unverified_note(report)
    if note:
        out += [note, ""]
    if report.cloudwatch is not None:
        out += [_cloudwatch_line(report.cloudwatch), ""]
    out += [_legend(report), ""]
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
    for col in ("category", "resource", "detail", "$/hour", "$/month", PRICE_SOURCE):
        cost.add_column(col, justify="right" if col.startswith("$") else "left")
    for x in report.lines:
        cost.add_row(
            x.category,
            x.item,
            x.detail,
            _usd(x.hourly_usd),
            _usd(x.monthly_usd),
            x.source,
        )
    cost.add_row("total", "", "", _usd(report.hourly), _usd(report.monthly), "", style="bold")
    console.print(cost)
    for line in _budget_lines(report):
        console.print(line, highlight=False)
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
        for col in (other.stack, report.stack, f"{report.stack} - {other.stack}"):
            diff.add_column(col, justify="right")
        diff.add_column(PRICE_SOURCE)
        for item, base, mine, src in _diff_rows(report):
            diff.add_row(item, _usd(base), _usd(mine), f"{mine - base:+,.2f}", src)
        diff.add_row(
            "total",
            _usd(other.monthly),
            _usd(report.monthly),
            f"{report.monthly - other.monthly:+,.2f}",
            "",
            style="bold",
        )
        console.print(diff)
    note = _unverified_note(report)
    if note:
        console.print(note, highlight=False)
    if report.cloudwatch is not None:
        console.print(_cloudwatch_line(report.cloudwatch), markup=False)
    console.print(_legend(report), markup=False, highlight=False)
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
        None,
        "--compare",
        metavar="BASE_STACK",
        help="Also price BASE_STACK; print STACK - BASE_STACK line by line",
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
        print_table(report, make_console())
