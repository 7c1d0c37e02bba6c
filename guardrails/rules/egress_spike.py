"""Rule ``egress-spike``: project the day's egress $ from instance ``NetworkOut`` and NAT
``BytesOutToDestination`` over the window; alert over ``egress.daily_threshold_usd`` or on a
jump against the trailing baseline (``guardrails.egress``'s pure functions decide).

    >>> # run(ctx)   # ctx: guardrails.rules.RuleContext
"""

from __future__ import annotations

from guardrails import aws, messages
from guardrails.config import EgressConfig
from guardrails.egress import project_egress, spike
from guardrails.rules import Rule, RuleContext
from guardrails.rules.spend_limit import cost_explorer_cached
from guardrails.spend import day_start, month_start


def run(ctx: RuleContext) -> None:
    now = ctx.clock.now()
    cfg = ctx.cfg.egress
    start = now - cfg.window
    inst_bytes: dict[str, float] = {}
    nat_bytes: dict[str, float] = {}
    for region in ctx.cfg.regions:
        cw = ctx.aws.client("cloudwatch", region)
        ids = [n.instance_id for n in ctx.nodes if n.region == region]
        if ids:
            b, failed = aws.sum_bytes(
                cw, "AWS/EC2", "NetworkOut", "InstanceId", ids=ids, start=start, end=now
            )
            inst_bytes.update(b)
            if failed:
                ctx.report.errors.append(f"egress NetworkOut {region}: partial")
        if cfg.include_nat:
            nats = aws.nat_gateways(ctx.aws.client("ec2", region))
            if nats:
                b, _ = aws.sum_bytes(
                    cw,
                    "AWS/NATGateway",
                    "BytesOutToDestination",
                    "NatGatewayId",
                    ids=nats,
                    start=start,
                    end=now,
                )
                nat_bytes.update(b)
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
    proj = project_egress(
        inst_bytes, nat_bytes, cfg.window, mtd_gb, ctx.catalog, top=cfg.top_talkers
    )
    history = ctx.state.egress_history(now - cfg.baseline, now)
    why = spike(
        proj.projected_day_usd,
        history,
        cfg.daily_threshold_usd,
        cfg.spike_factor,
        cfg.min_baseline_samples,
    )
    ctx.state.add_egress(now, proj.projected_day_usd, proj.projected_day_gb)
    ctx.metrics.egress.set(proj.projected_day_usd)
    ctx.report.egress = {
        "projected_day_usd": proj.projected_day_usd,
        "projected_day_gb": proj.projected_day_gb,
        "top_talkers": proj.top_talkers,
        "alert": why,
    }
    ctx.actuator.audit("egress", **ctx.report.egress)
    if why:
        by_id = {n.instance_id: n for n in ctx.nodes}
        talkers = [
            (k, gb, ctx.owner(by_id[k]) if k in by_id else None) for k, gb in proj.top_talkers
        ]
        ctx.alert(messages.egress_spike(now, why, talkers, cfg.window), cfg.cooldown)


RULE = Rule(
    name="egress-spike",
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
    example="egress: {daily_threshold_usd: 500, spike_factor: 3}",
)
