"""Rule ``spend-limit``: the live burn rate (instances, Lustre, Direct Connect ports) plus Cost
Explorer actuals per scope; alert at the thresholds of each daily/monthly limit and, for a
scope with ``enforce: true``, scale its ASGs to zero and terminate its one-time spot instances
at the hard limit (through the actuator's gate).

    >>> # run(ctx)   # ctx: guardrails.rules.RuleContext
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import Field, model_validator

from coreburst.common.catalog import CatalogError, load_catalog
from guardrails import messages
from guardrails.adapters import aws
from guardrails.configtypes import Between, ConfigError, StrictModel, format_duration
from guardrails.idle import exemption_status, protection_status
from guardrails.rules.base import Rule, RuleContext, cost_explorer_cached, idle_params
from guardrails.spend import (
    Projection,
    accrue_since_launch,
    breach_time,
    core_spend,
    crossed,
    day_start,
    lustre_usd_per_hour,
    month_end,
    month_start,
    project,
)
from guardrails.timefmt import iso, parse_iso


# -- params: the ``spend`` section ------------------------------------------------------------
class ScopeConfig(StrictModel):
    """One spend scope: the account, or resources tagged tag_key=tag_value, with its limits."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9:_.-]*$")
    """The scope's name (the spend gate and burst_reconcile.spend_scope refer to it)."""
    tag_key: str | None = None
    """No tag means the whole account."""
    tag_value: str | None = None
    """The tag's value (set with tag_key)."""
    daily_limit_usd: float | None = Field(default=None, gt=0)
    """The scope's daily limit (UTC day); none: no daily limit."""
    monthly_limit_usd: float | None = Field(default=None, gt=0)
    """The scope's monthly limit; none: no monthly limit."""
    enforce: bool = False
    """At a limit, scale the scope's Auto Scaling groups to zero and terminate its one-time spot
    instances (false: alert only)."""
    slurm_accounts: list[str] = []
    """Slurm accounts of the on-prem core whose GPU-hours (recorded by the core-idle rule) this
    scope shows beside its cloud spend, priced at core_idle.gpu_hour_usd. Owned, sunk cost: shown
    in status and the spend messages, never counted against the limits above."""

    @model_validator(mode="after")
    def _slurm_accounts(self) -> ScopeConfig:
        seen: set[str] = set()
        for a in self.slurm_accounts:
            if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,63}", a):
                hint = f"; write {a.lower()}" if a != a.lower() else ""
                raise ValueError(
                    f"slurm_accounts: {a!r} is not a Slurm account name (lower case letters, "
                    f"digits, _ . -; Slurm stores accounts in lower case){hint}"
                )
            if a in seen:
                raise ValueError(f"slurm_accounts: {a} is listed twice; list it once")
            seen.add(a)
        return self


class DirectConnectPort(StrictModel):
    """A Direct Connect port priced without DescribeConnections."""

    bandwidth: str
    """The port speed as the catalog prices it (e.g. 10Gbps)."""
    count: int = Field(default=1, ge=1)
    """How many such ports."""


class SpendConfig(StrictModel):
    """``spend``: what the fleet spends per scope against daily and monthly limits."""

    enabled: bool = True
    """Run the spend rule."""
    thresholds_percent: list[float] = [50.0, 80.0, 100.0]
    """Alert when a scope's spend crosses these percentages of a limit."""
    scopes: list[ScopeConfig] = [ScopeConfig(name="account")]
    """The spend scopes: the whole account or what carries one tag value."""
    spot_price: Literal["live", "catalog-estimate"] = "live"
    """"live": DescribeSpotPriceHistory; "catalog-estimate": the catalog's spot fraction."""
    cost_explorer: bool = True
    """Read what Cost Explorer says was spent (beside the daemon's own accrual)."""
    cost_explorer_refresh: Annotated[timedelta, Between("1h", "7d")] = timedelta(hours=6)
    """Cost Explorer bills each request and updates a few times a day."""
    direct_connect_ports: list[DirectConnectPort] | None = None
    """Ports to price when DescribeConnections is not wanted (or not allowed); None = discover."""
    include_lustre: bool = True
    """Count the FSx for Lustre file systems' hourly cost."""

    @model_validator(mode="after")
    def _one_scope_per_slurm_account(self) -> SpendConfig:
        owner: dict[str, str] = {}
        for scope in self.scopes:
            for a in scope.slurm_accounts:
                if a in owner:
                    raise ValueError(
                        f"Slurm account {a} is in scopes {owner[a]} and {scope.name}; put each "
                        "account in one scope's slurm_accounts"
                    )
                owner[a] = scope.name
        return self


def _retention_covers_core_month(cfg: Any) -> None:
    # a scope's core GPU-hours are month-to-date: the core-idle rule's records must last a month
    if any(sc.slurm_accounts for sc in cfg.spend.scopes) and (
        cfg.state.snapshot_retention < timedelta(days=31)
    ):
        raise ValueError(
            f"state.snapshot_retention ({format_duration(cfg.state.snapshot_retention)}) "
            "is shorter than a month, and spend.scopes list slurm_accounts (month-to-date "
            "core GPU-hours); raise it to 31d or more"
        )


def _check_scopes(cfg: Any, origin: str) -> None:
    """What the model alone cannot say: Direct Connect bandwidths the catalog prices, unique
    scope names, and a scope's tag given whole."""
    cat = load_catalog()
    for port in cfg.spend.direct_connect_ports or []:
        if port.bandwidth not in cat.direct_connect_port_usd_per_hour:
            raise ConfigError(
                f"{origin}: spend.direct_connect_ports.bandwidth: {port.bandwidth!r}; allowed: "
                f"{', '.join(cat.direct_connect_port_usd_per_hour)}"
            )
    names = [s.name for s in cfg.spend.scopes]
    if len(set(names)) != len(names):
        raise ConfigError(f"{origin}: spend.scopes: scope names must be unique (got {names})")
    for s in cfg.spend.scopes:
        if (s.tag_key is None) != (s.tag_value is None):
            raise ConfigError(
                f"{origin}: spend.scopes.{s.name}: set both tag_key and tag_value, or neither"
            )


def _in_scope(tags: dict[str, str], key: str | None, value: str | None) -> bool:
    return key is None or tags.get(key) == value


def _lustre_kind(fs: aws.LustreFs) -> str:
    """What an unpriced file system is, as the spend report and alerts name it."""
    per_unit = f", {fs.throughput} MB/s/TiB" if fs.throughput else ""
    return f"FSx for Lustre {fs.deployment_type}{per_unit} ({fs.capacity_gib} GiB)"


def run(ctx: RuleContext) -> None:
    now = ctx.clock.now()
    cfg: SpendConfig = ctx.cfg.spend
    fs_list, dx_list = _billed_resources(ctx)
    ce = ctx.aws.client("ce", "us-east-1")
    # The core's job runs this month (the core-idle rule's records), for scopes that name Slurm
    # accounts: shown beside cloud spend, never counted against its limits (owned, sunk cost).
    core_rows = (
        list(ctx.state.core_usage(month_start(now)))
        if any(s.slurm_accounts for s in cfg.scopes)
        else []
    )
    for scope in cfg.scopes:
        tag = (scope.tag_key, scope.tag_value) if scope.tag_key and scope.tag_value else None
        items, unpriced, unpriced_instances = _scope_items(ctx, scope, fs_list, dx_list)
        burn = sum(rate for rate, _ in items)
        actual = 0.0
        if cfg.cost_explorer:
            ms, ds = month_start(now), day_start(now)
            actual = cost_explorer_cached(
                ctx,
                f"ce:{scope.name}:{ms.date()}:{ds.date()}",
                functools.partial(aws.cost_explorer_actuals, ce, ms, ds, tag),
            )
        last = ctx.state.last_spend(scope.name)
        prev_at = parse_iso(last["ts"]) if last else None
        # the first cycle (or the first of a day) counts each instance from its launch
        today = accrue_since_launch(last["today"] if last else 0.0, prev_at, items, now)
        proj = project(actual, today, burn, now)
        limits = (
            (f"daily:{now.date()}", proj.today_usd, scope.daily_limit_usd, _day_end(now)),
            (
                f"monthly:{now.strftime('%Y-%m')}",
                proj.month_to_date_usd,
                scope.monthly_limit_usd,
                month_end(now),
            ),
        )
        breaches = {
            period.split(":")[0]: breach_time(spent, limit, burn, now, end)
            for period, spent, limit, end in limits
            if limit is not None
        }
        ctx.state.add_spend(
            now,
            scope.name,
            burn=burn,
            today=today,
            mtd=proj.month_to_date_usd,
            proj=proj.projected_month_usd,
        )
        ctx.metrics.burn.labels(scope.name).set(burn)
        ctx.report.spend[scope.name] = {
            "burn_usd_per_hour": burn,
            "today_usd": proj.today_usd,
            "projected_today_usd": proj.projected_today_usd,
            "month_to_date_usd": proj.month_to_date_usd,
            "projected_month_usd": proj.projected_month_usd,
            "cost_explorer_actual_usd": actual,
            # the totals above exclude these (no catalog price): counts, and each kind of item
            # ("type in region (market)", "FSx for Lustre ...", "Direct Connect port ...")
            "unpriced_items": sum(unpriced.values()),
            "unpriced_instances": unpriced_instances,
            "unpriced": dict(sorted(unpriced.items())),
            # when each limit is reached at the current burn (None: not this period)
            **{f"{k}_limit_at": iso(v) if v else None for k, v in breaches.items()},
        }
        core = None
        if scope.slurm_accounts:
            core = core_spend(
                core_rows, scope.slurm_accounts, month_start(now), ctx.cfg.core_idle.gpu_hour_usd
            ).as_dict()
            ctx.report.spend[scope.name]["core_month_to_date"] = core
        ctx.actuator.audit("spend", scope=scope.name, **ctx.report.spend[scope.name])
        if unpriced:
            ctx.alert(messages.spend_unpriced(scope.name, now.date(), unpriced), timedelta(hours=6))
        hard = _alert_limits(
            ctx,
            scope,
            limits,
            now=now,
            breaches=breaches,
            burn=burn,
            proj=proj,
            unpriced=unpriced,
            core=core,
        )
        if hard and scope.enforce:
            _enforce(ctx, scope.name, tag)


def _billed_resources(
    ctx: RuleContext,
) -> tuple[list[aws.LustreFs], list[tuple[str, str, dict[str, str]]]]:
    """The Lustre file systems and Direct Connect ports of every region (the configured ports
    instead of the discovered ones when ``spend.direct_connect_ports`` lists them)."""
    cfg: SpendConfig = ctx.cfg.spend
    fs_list: list[aws.LustreFs] = []
    dx_list: list[tuple[str, str, dict[str, str]]] = []
    for region in ctx.cfg.regions:
        if cfg.include_lustre:
            try:
                fs_list.extend(aws.lustre_file_systems(ctx.aws.client("fsx", region)))
            except (ClientError, BotoCoreError) as exc:
                ctx.report.errors.append(f"fsx {region}: {type(exc).__name__}")
        if cfg.direct_connect_ports is None:
            try:
                dx_list.extend(aws.dx_connections(ctx.aws.client("directconnect", region)))
            except (ClientError, BotoCoreError) as exc:
                ctx.report.errors.append(f"directconnect {region}: {type(exc).__name__}")
    for p in cfg.direct_connect_ports or []:
        dx_list.extend((f"configured-{i}", p.bandwidth, {}) for i in range(p.count))
    return fs_list, dx_list


def _scope_items(
    ctx: RuleContext,
    scope: ScopeConfig,
    fs_list: list[aws.LustreFs],
    dx_list: list[tuple[str, str, dict[str, str]]],
) -> tuple[list[tuple[float, datetime | None]], Counter[str], int]:
    """($/h, running since) of everything in ``scope`` that bills, what has no catalog price
    (counted by kind), and how many of those are instances. Anything without a catalog price
    (an instance, a Lustre file system, a Direct Connect port) is counted apart by what it is,
    never as $0 and never skipped: as `coreburst plan` refuses to total it."""
    hpm = ctx.catalog.hours_per_month
    items: list[tuple[float, datetime | None]] = []
    unpriced: Counter[str] = Counter()
    unpriced_instances = 0
    for n in ctx.nodes:
        if _in_scope(n.tags, scope.tag_key, scope.tag_value):
            price = ctx.prices.hourly(n)
            if price is None:
                unpriced[f"{n.instance_type} in {n.region} ({n.market})"] += 1
                unpriced_instances += 1
            else:
                items.append((price, n.launch_time))
    for fs in fs_list:
        if _in_scope(fs.tags, scope.tag_key, scope.tag_value):
            try:
                per_gb = ctx.catalog.lustre_price(fs.deployment_type, fs.throughput)
            except CatalogError:
                unpriced[_lustre_kind(fs)] += 1
                continue
            items.append((lustre_usd_per_hour(fs.capacity_gib, per_gb, hpm), fs.created))
    for _cid, bw, tags in dx_list:
        if _in_scope(tags, scope.tag_key, scope.tag_value):
            try:
                items.append((ctx.catalog.dx_port_price(bw), None))
            except CatalogError:
                unpriced[f"Direct Connect port {bw}"] += 1
                continue
    return items, unpriced, unpriced_instances


def _alert_limits(
    ctx: RuleContext,
    scope: ScopeConfig,
    limits: tuple[tuple[str, float, float | None, datetime], ...],
    *,
    now: datetime,
    breaches: dict[str, datetime | None],
    burn: float,
    proj: Projection,
    unpriced: Counter[str],
    core: dict[str, Any] | None,
) -> bool:
    """Forecast and threshold alerts for each of the scope's limits; True when one is reached
    (spent >= limit), which is what ``enforce`` acts on."""
    cfg: SpendConfig = ctx.cfg.spend
    hard = False
    for period, spent, limit, _end in limits:
        if limit is None:
            continue
        kind = period.split(":")[0]
        hit = crossed(spent, limit, cfg.thresholds_percent)
        at = breaches[kind]
        if at is not None and spent < limit:
            _forecast(
                ctx,
                scope.name,
                period,
                at=at,
                spent=spent,
                limit=limit,
                burn=burn,
                unpriced=unpriced,
                core=core,
            )
        if not hit:
            continue
        hard = hard or spent >= limit
        for lower in hit[:-1]:  # crossed together: one message, all remembered
            key = f"spend:{scope.name}:{period}:{lower:g}"
            ctx.state.remember(key, key, now)
        ctx.alert(
            messages.spend_threshold(
                scope.name,
                period,
                hit[-1],
                spent=spent,
                limit=limit,
                burn=burn,
                projected_month=proj.projected_month_usd,
                enforce=scope.enforce,
                now=now,
                breach_at=at,
                unpriced=unpriced,
                core=core,
            ),
            timedelta(0),
        )
    return hard


# A forecast is sent again only when the breach moved this much earlier than the last one sent
# for the same scope and period (a higher burn); a later breach (a lower burn) is not news.
FORECAST_STEP = timedelta(minutes=30)


def _forecast(
    ctx: RuleContext,
    scope: str,
    period: str,
    *,
    at: datetime,
    spent: float,
    limit: float,
    burn: float,
    unpriced: Counter[str],
    core: dict[str, Any] | None = None,
) -> None:
    """Alert that the current burn reaches ``limit`` at ``at``: the first time this period, and
    again each time the breach comes ``FORECAST_STEP`` or more earlier (minutes after the
    burn rises, where AWS Budgets' forecast lags 8-24 hours)."""
    # one state row per scope and kind of limit, overwritten each period
    key = f"forecast:{scope}:{period.split(':', maxsplit=1)[0]}"
    last = ctx.state.get(key)
    if last and last.get("period") == period and at > parse_iso(last["at"]) - FORECAST_STEP:
        return
    now = ctx.clock.now()
    ctx.state.put(key, {"period": period, "at": iso(at), "sent": iso(now)})
    ctx.alert(
        messages.spend_forecast(
            scope,
            period,
            now=now,
            breach_at=at,
            spent=spent,
            limit=limit,
            burn=burn,
            unpriced=unpriced,
            core=core,
        ),
        timedelta(0),
    )


def _day_end(now: datetime) -> datetime:
    return day_start(now) + timedelta(days=1)


def _enforce(ctx: RuleContext, scope: str, tag: tuple[str, str] | None) -> None:
    now = ctx.clock.now()
    params = idle_params(ctx.cfg)
    period = now.strftime("%Y-%m-%d")
    for region in ctx.cfg.regions:
        asgc = ctx.aws.client("autoscaling", region)
        ec2 = ctx.aws.client("ec2", region)
        for g in aws.scope_asgs(asgc, tag):
            name = g["AutoScalingGroupName"]
            tags = {t["Key"]: t["Value"] for t in g.get("Tags", [])}
            if name in params.protected_asgs or exemption_status(tags, now, params)[0]:
                continue
            if g.get("DesiredCapacity", 0) == 0:
                continue
            ctx.actuator.execute(
                f"enforce-asg:{name}:{period}",
                name,
                region,
                "scale-to-zero",
                reason=f"hard spend limit of scope {scope}",
                call=functools.partial(_scale_to_zero, asgc, name),
            )
        for n in ctx.nodes:
            if n.region != region or n.market != "spot" or n.asg:
                continue
            if tag and n.tags.get(tag[0]) != tag[1]:
                continue
            if exemption_status(n.tags, now, params)[0] or protection_status(n, params)[0]:
                continue
            # A one-time spot instance cannot be stopped; terminating is what AWS would do
            # on interruption anyway.
            ctx.actuator.execute(
                f"enforce-spot:{n.instance_id}:{period}",
                n.instance_id,
                region,
                "enforce-spot",
                reason=f"hard spend limit of scope {scope}",
                call=functools.partial(aws.reclaim, ec2, None, n, "terminate"),
            )


def _scale_to_zero(asgc: Any, name: str) -> str:
    aws.scale_to_zero(asgc, name)
    return "UpdateAutoScalingGroup"


RULE = Rule(
    name="spend-limit",
    order=20,
    description=(
        "Live burn rate plus Cost Explorer actuals per scope; alert at thresholds of the "
        "daily/monthly limit and optionally enforce at the hard limit."
    ),
    params=SpendConfig,
    iam_actions=(
        "ec2:DescribeSpotPriceHistory",
        "fsx:DescribeFileSystems",
        "directconnect:DescribeConnections",
        "ce:GetCostAndUsage",
        "autoscaling:DescribeAutoScalingGroups",
        "autoscaling:UpdateAutoScalingGroup",
        "ec2:TerminateInstances",
    ),
    section=lambda c: c.spend,
    enabled=lambda c: c.spend.enabled,
    run=run,
    example="spend: {scopes: [{name: account, daily_limit_usd: 5000}]}",
    sections={"spend": SpendConfig},
    validators=(_retention_covers_core_month,),
    checks=(_check_scopes,),
)
