"""Rule ``inventory``: the running accelerated instances of every watched region, and their live
spot prices. Always on: every other rule works on what it finds, so the daemon runs it first
(``observe``), whatever ``rules`` lists.

    >>> # nodes = observe(ctx)   # ctx: guardrails.rules.RuleContext
"""

from __future__ import annotations

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
)

from guardrails.adapters import aws
from guardrails.config import GuardrailsConfig
from guardrails.model import Node
from guardrails.rules.base import Rule, RuleContext


def observe(ctx: RuleContext) -> list[Node]:
    """Every watched node; raises ``AwsUnreachableError`` when AWS cannot be reached at all."""
    cfg = ctx.cfg
    nodes: list[Node] = []
    types = cfg.watched_types()
    for region in cfg.regions:
        ec2 = ctx.aws.client("ec2", region)
        try:
            nodes.extend(aws.inventory(ec2, region, types, ctx.catalog))
        except (EndpointConnectionError, NoCredentialsError) as exc:
            raise aws.AwsUnreachableError(
                f"cannot reach AWS in {region} ({type(exc).__name__}): check "
                f"aws.endpoint_url ({cfg.aws.endpoint_url or 'default'}) and credentials"
            ) from None
        if ctx.prices.live and any(n.market == "spot" for n in nodes):
            try:
                ctx.prices.spot.update(aws.spot_prices(ec2, types, ctx.clock.now()))
            except (ClientError, BotoCoreError) as exc:
                ctx.report.errors.append(f"spot prices {region}: {type(exc).__name__}")
    return nodes


RULE = Rule(
    name="inventory",
    order=0,
    description=(
        "List running accelerated instances per region, with live spot prices "
        "(always on, whatever `rules` lists)."
    ),
    params=GuardrailsConfig,
    iam_actions=("ec2:DescribeInstances", "ec2:DescribeSpotPriceHistory"),
    section=lambda c: c,
    enabled=lambda c: True,
    example="regions: [us-east-1, us-east-2]",
)
