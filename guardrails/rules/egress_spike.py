"""Rule ``egress-spike``: project the day's egress $ from instance ``NetworkOut`` and NAT
``BytesOutToDestination`` over the window; alert over ``egress.daily_threshold_usd`` or on a
jump against the trailing baseline (``guardrails.egress``'s pure functions decide).

Bytes are read every ``egress.every`` (15 min), not every cycle: GetMetricData bills per
metric requested. Each read covers the span since the last one (``guardrails.egress.read_span``)
and the totals of the reads within ``egress.window`` make the projection. Where the last read
ended, and what the reads found, live in the state store's kv, so a fresh process (the Lambda
builds one per invocation) keeps the cadence and the window.

    >>> # run(ctx)   # ctx: guardrails.rules.RuleContext
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from pydantic import Field

from guardrails import messages
from guardrails.adapters import aws, cloudwatch
from guardrails.configtypes import Between, StrictModel, format_duration
from guardrails.egress import EgressRead, project_egress, read_span, spike, window_reads
from guardrails.rules.base import Rule, RuleContext, cost_explorer_cached
from guardrails.spend import day_start, month_start
from guardrails.timefmt import iso, parse_iso


# -- params: the ``egress`` section -----------------------------------------------------------
class EgressConfig(StrictModel):
    """``egress``: data transfer out (NetworkOut and NAT bytes) projected per day against a
    threshold and a trailing baseline."""

    enabled: bool = True
    """Run the egress rule."""
    window: Annotated[timedelta, Between("5m", "1d")] = timedelta(hours=1)
    """The day is projected from the reads within this span."""
    every: Annotated[timedelta, Between("1m", "1d")] = timedelta(minutes=15)
    """How often NetworkOut (and NAT bytes) is read, apart from the cycle (``interval``):
    GetMetricData bills per metric requested. Each read covers the whole span since the last one,
    so a spike is still found, up to ``every`` (plus the settling delay) later."""
    daily_threshold_usd: float = Field(default=500.0, gt=0)
    """Alert when the projected day exceeds this."""
    spike_factor: float = Field(default=3.0, gt=1)
    """Alert when the projected day exceeds this many times the baseline's median."""
    baseline: Annotated[timedelta, Between("1h", "30d")] = timedelta(hours=24)
    """The trailing span whose daily projections form the baseline."""
    min_baseline_samples: int = Field(default=3, ge=1)
    """Projections the baseline needs before spike_factor applies."""
    top_talkers: int = Field(default=5, ge=1)
    """Sources named in an alert."""
    include_nat: bool = True
    """Also count the NAT gateways' bytes out."""
    cooldown: Annotated[timedelta, Between("1m", "7d")] = timedelta(hours=1)
    """The same egress alert is not sent again within this long."""


def _retention_covers_baseline(cfg: Any) -> None:
    if cfg.state.snapshot_retention < cfg.egress.baseline:
        raise ValueError(
            f"state.snapshot_retention ({format_duration(cfg.state.snapshot_retention)}) "
            f"is shorter than egress.baseline ({format_duration(cfg.egress.baseline)}); "
            "raise it or shorten the baseline"
        )


# kv key: {"read_at", "reads": [EgressRead rows], "last": the last read's report}
READS_KEY = "egress-spike:reads"


def run(ctx: RuleContext) -> None:
    now = ctx.clock.now()
    cfg: EgressConfig = ctx.cfg.egress
    saved: dict[str, Any] = ctx.state.get(READS_KEY) or {}
    read_at = parse_iso(saved["read_at"]) if saved.get("read_at") else None
    if read_at is not None and read_at <= now < read_at + cfg.every:
        # not due: the last read's projection stands (its alert, if any, was sent then)
        if saved.get("last"):
            ctx.report.egress = {**saved["last"], "alert": None}
        return
    reads = [EgressRead.from_json(r) for r in saved.get("reads", [])]
    span = read_span(now, reads[-1].end if reads else None, cfg.window)
    if span is None:
        return
    start, end = span
    inst_bytes: dict[str, float] = {}
    nat_bytes: dict[str, float] = {}
    partial: list[str] = []
    for region in ctx.cfg.regions:
        cw = ctx.aws.client("cloudwatch", region)
        ids = [n.instance_id for n in ctx.nodes if n.region == region]
        if ids:
            b, failed = cloudwatch.sum_bytes(
                cw, "AWS/EC2", "NetworkOut", "InstanceId", ids=ids, start=start, end=end
            )
            inst_bytes.update(b)
            if failed:
                partial.append(f"egress NetworkOut {region}: partial")
        if cfg.include_nat:
            nats = aws.nat_gateways(ctx.aws.client("ec2", region))
            if nats:
                b, failed = cloudwatch.sum_bytes(
                    cw,
                    "AWS/NATGateway",
                    "BytesOutToDestination",
                    "NatGatewayId",
                    ids=nats,
                    start=start,
                    end=end,
                )
                nat_bytes.update(b)
                if failed:
                    partial.append(f"egress BytesOutToDestination {region}: partial")
    if partial:
        # the span stays unread (the cursor does not move): the next read, ``every`` later,
        # covers it again, so no byte is lost and a lasting failure costs no more than reads
        ctx.report.errors.extend(partial)
        ctx.state.put(READS_KEY, {**saved, "read_at": iso(now)})
        return
    new = EgressRead(start, end, sum(inst_bytes.values()), sum(nat_bytes.values()))
    reads = window_reads([*reads, new], cfg.window)
    covered = reads[-1].end - reads[0].start
    mtd_gb = 0.0
    if ctx.cfg.spend.cost_explorer:
        ce = ctx.aws.client("ce", "us-east-1")
        ms, ds = month_start(now), day_start(now)
        mtd_gb = cost_explorer_cached(
            ctx,
            f"ce-egress:{ms.date()}:{ds.date()}",
            lambda: aws.cost_explorer_actuals(
                ce,
                ms,
                ds,
                None,
                metric="UsageQuantity",
                usage_type_group="EC2: Data Transfer - Internet (Out)",
            ),
        )
    # the window's totals make the projection; the top talkers are this read's
    proj = project_egress(
        {"instances": sum(r.instance_bytes for r in reads)},
        {"nat": sum(r.nat_bytes for r in reads)},
        covered,
        mtd_gb,
        ctx.catalog,
        top=0,
    )
    talkers = project_egress(
        inst_bytes, nat_bytes, end - start, 0.0, ctx.catalog, top=cfg.top_talkers
    ).top_talkers
    history = ctx.state.egress_history(now - cfg.baseline, now)
    why = spike(
        proj.projected_day_usd,
        history,
        cfg.daily_threshold_usd,
        cfg.spike_factor,
        cfg.min_baseline_samples,
    )
    if why:
        why += (
            f" (from {format_duration(covered)} of bytes sent up to {end:%H:%M} UTC; "
            f"read every {format_duration(cfg.every)})"
        )
    ctx.state.add_egress(now, proj.projected_day_usd, proj.projected_day_gb)
    ctx.metrics.egress.set(proj.projected_day_usd)
    ctx.report.egress = {
        "projected_day_usd": proj.projected_day_usd,
        "projected_day_gb": proj.projected_day_gb,
        "top_talkers": talkers,
        "alert": why,
        "read": [iso(start), iso(end)],
        "window_read": [iso(reads[0].start), iso(end)],
    }
    ctx.state.put(
        READS_KEY,
        {"read_at": iso(now), "reads": [r.to_json() for r in reads], "last": ctx.report.egress},
    )
    ctx.actuator.audit("egress", **ctx.report.egress)
    if why:
        by_id = {n.instance_id: n for n in ctx.nodes}
        named = [(k, gb, ctx.owner(by_id[k]) if k in by_id else None) for k, gb in talkers]
        ctx.alert(messages.egress_spike(now, why, named, end - start), cfg.cooldown)


RULE = Rule(
    name="egress-spike",
    order=30,
    description=(
        "Project daily egress $ from instance NetworkOut and NAT BytesOutToDestination; "
        "alert over a threshold or a jump against the trailing baseline."
    ),
    params=EgressConfig,
    iam_actions=(
        "cloudwatch:GetMetricData",
        "ec2:DescribeNatGateways",
        "ce:GetCostAndUsage",
    ),
    section=lambda c: c.egress,
    enabled=lambda c: c.egress.enabled,
    run=run,
    example="egress: {daily_threshold_usd: 500, spike_factor: 3, every: 15m}",
    sections={"egress": EgressConfig},
    validators=(_retention_covers_baseline,),
)
