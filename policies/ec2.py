"""EC2 policies: accelerated instance allowlist, EFA interface layout, IMDSv2, placement groups
with AWS-placed capacity, and spot / Capacity Blocks outside production.

Instance facts (EFA interface counts) come from the catalog, the same one infra uses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from coreburst.common.catalog import load_catalog
from policies.common import (
    ASG,
    AWS_PROVIDER,
    INSTANCE,
    LAUNCH_TEMPLATE,
    as_int,
    asg_market,
    deps,
    effective_tags,
    get,
    is_accelerated,
    known,
    launch_template_of,
    of_type,
    provider_default_tags,
    schema,
    settings,
)

EFA_TYPES = ("efa", "efa-only")

ALLOWLIST_SCHEMA = schema(
    allowedInstanceTypes={
        "type": "array",
        "items": {"type": "string"},
        "default": sorted(load_catalog().instances),
        "description": "Accelerated instance types this stack may launch (default: the catalog)",
    },
)
MARKET_SCHEMA = schema(
    productionEnvironments={
        "type": "array",
        "items": {"type": "string"},
        "default": ["prod"],
        "description": "environment tag values where on-demand accelerated capacity is allowed",
    },
)


def _instance_types(args: ResourceValidationArgs) -> list[str]:
    types = []
    if args.resource_type in (LAUNCH_TEMPLATE, INSTANCE):
        if isinstance(args.props.get("instanceType"), str):
            types.append(args.props["instanceType"])
    elif args.resource_type == ASG:
        overrides = get(args.props, "mixedInstancesPolicy.launchTemplate.overrides") or []
        types += [o["instanceType"] for o in overrides if isinstance(o.get("instanceType"), str)]
    return types


def accelerated_instance_allowlist(
    args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """Accelerated types (catalog entries and p/g/trn/inf/... families) must be allowlisted.

    >>> # LaunchTemplate instanceType "p4de.24xlarge", allowlist [p5.48xlarge]:
    >>> # "... dev-lt uses p4de.24xlarge, which is not in allowedInstanceTypes (p5.48xlarge)"
    """
    allowed = settings(args, ALLOWLIST_SCHEMA)["allowedInstanceTypes"]
    known = load_catalog().instances
    for t in _instance_types(args):
        if is_accelerated(t, known) and t not in allowed:
            report_violation(
                f"{args.resource_type} {args.name} uses {t}, which is not in "
                f"allowedInstanceTypes ({', '.join(allowed)})",
                None,
            )


def efa_layout_problems(instance_type: str, interfaces: list[Mapping[str, Any]]) -> list[str]:
    """What is wrong with a launch template's interfaces for ``instance_type`` (pure)."""
    facts = load_catalog().instances.get(instance_type)
    nics = [
        (
            as_int(n.get("networkCardIndex")),
            as_int(n.get("deviceIndex")),
            n.get("interfaceType") or "interface",
            known(n, "subnetId"),
        )
        for n in interfaces
    ]
    efa = [n for n in nics if n[2] in EFA_TYPES]
    if not efa:
        return []
    problems = []
    if facts is not None and len(efa) != facts.efa_interfaces.value:
        problems.append(
            f"{len(efa)} EFA interfaces for {instance_type}; the catalog says "
            f"{facts.efa_interfaces.value} (one per EFA-capable network card)"
        )
    slots = Counter((card, dev) for card, dev, _, _ in nics)
    for (card, dev), n in sorted(slots.items()):
        if n > 1:
            problems.append(f"network card {card} device {dev} is used {n} times")
    by_slot = {(card, dev): kind for card, dev, kind, _ in nics}
    if by_slot.get((0, 0), "missing") != "interface":
        problems.append(
            f"card 0 device 0 must be a plain ENA interface, found {by_slot.get((0, 0), 'none')}"
        )
    if by_slot.get((0, 1)) != "efa-only":
        problems.append(f"card 0 device 1 must be efa-only, found {by_slot.get((0, 1), 'none')}")
    for (card, dev), kind in sorted(by_slot.items()):
        if card == 0:
            continue
        if dev == 0 and kind != "efa-only":
            problems.append(f"card {card} device 0 must be efa-only, found {kind}")
        if dev == 1 and kind != "interface":
            problems.append(f"card {card} device 1 may only be an ENA interface, found {kind}")
        if dev > 1:
            problems.append(f"card {card} device {dev}: a card holds at most devices 0 and 1")
    cards_with_efa = Counter(card for card, _, kind, _ in nics if kind in EFA_TYPES)
    for card, n in sorted(cards_with_efa.items()):
        if n > 1:
            problems.append(f"network card {card} carries {n} EFA interfaces; use one per card")
    subnets = {s for _, _, _, s in nics if s is not None}
    if len(subnets) > 1:
        problems.append(
            f"interfaces span {len(subnets)} subnets; EFA needs one subnet (one AZ) for all"
        )
    return problems


def efa_interface_layout(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """Launch templates with EFA: count from the catalog, card 0 = ENA + efa-only, other cards
    efa-only at device 0, one subnet, no slot used twice.

    >>> # p5.48xlarge with 8 efa-only interfaces:
    >>> # "... 8 EFA interfaces for p5.48xlarge; the catalog says 32 (...)"
    """
    if args.resource_type != LAUNCH_TEMPLATE:
        return
    instance_type = args.props.get("instanceType")
    interfaces = args.props.get("networkInterfaces") or []
    for p in efa_layout_problems(str(instance_type), list(interfaces)):
        report_violation(f"{LAUNCH_TEMPLATE} {args.name}: {p}", None)


def imdsv2_required(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """Launch templates and instances require IMDSv2 session tokens.

    >>> # metadataOptions.httpTokens "optional":
    >>> # "... dev-lt allows IMDSv1: set metadataOptions.httpTokens to \"required\" (is optional)"
    """
    if args.resource_type not in (LAUNCH_TEMPLATE, INSTANCE):
        return
    tokens = get(args.props, "metadataOptions.httpTokens", "unset")
    if get(args.props, "metadataOptions.httpEndpoint") == "disabled":
        return
    if tokens != "required":
        report_violation(
            f"{args.resource_type} {args.name} allows IMDSv1: set metadataOptions.httpTokens "
            f'to "required" (is {tokens})',
            None,
        )


def no_placement_group_with_reserved_capacity(
    args: StackValidationArgs, report_violation: ReportViolation
) -> None:
    """An ASG whose launch template targets a Capacity Block or reservation has no placement
    group (launches into AWS-placed capacity fail with InsufficientInstanceCapacity).

    >>> # "... train-asg sets placementGroup but its launch template train-lt targets
    >>> #  capacity-block cr-...; remove the placement group"
    """
    for asg in of_type(args.resources, ASG):
        has_pg = bool(asg.props.get("placementGroup")) or bool(deps(asg, "placementGroup"))
        lt = launch_template_of(asg)
        if not has_pg or lt is None:
            continue
        market = asg_market(asg.props, lt.props)
        if market in ("capacity-block", "capacity-reservation"):
            target = get(
                lt.props,
                "capacityReservationSpecification.capacityReservationTarget.capacityReservationId",
                "",
            )
            report_violation(
                f"{ASG} {asg.name} sets placementGroup but its launch template {lt.name} "
                f"targets {market} {target}; remove the placement group",
                asg.urn,
            )


def _environment(asg_props: Mapping[str, Any], resources: list[Any]) -> str | None:
    for t in asg_props.get("tags") or []:
        if t.get("key") == "environment":
            return str(t.get("value"))
    providers = of_type(resources, AWS_PROVIDER)
    tags = effective_tags(asg_props, None)
    if providers:
        tags = {**provider_default_tags(providers[0]), **tags}
    return tags.get("environment")


def spot_or_capacity_block_outside_production(
    args: StackValidationArgs, report_violation: ReportViolation
) -> None:
    """Outside production, accelerated ASGs run on spot or Capacity Blocks, never on-demand.

    >>> # dev ASG on on-demand p5: "... dev-asg runs p5.48xlarge on-demand in environment
    >>> #  'dev'; outside prod use spot or a Capacity Block"
    """
    cfg = settings(args, MARKET_SCHEMA)
    known = load_catalog().instances
    for asg in of_type(args.resources, ASG):
        lt = launch_template_of(asg)
        if lt is None:
            continue
        instance_type = str(lt.props.get("instanceType", ""))
        if not is_accelerated(instance_type, known):
            continue
        env = _environment(asg.props, args.resources)
        if env in cfg["productionEnvironments"]:
            continue
        market = asg_market(asg.props, lt.props)
        if market not in ("spot", "capacity-block"):
            report_violation(
                f"{ASG} {asg.name} runs {instance_type} {market} in environment {env!r}; "
                f"outside {', '.join(cfg['productionEnvironments'])} use spot or a Capacity Block",
                asg.urn,
            )


POLICIES = [
    ResourceValidationPolicy(
        name="accelerated-instance-allowlist",
        description="Accelerated instance types come only from the stack's allowlist.",
        validate=accelerated_instance_allowlist,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=ALLOWLIST_SCHEMA,
        remediation_steps=(
            "Use an allowlisted instance type, or add the type to the catalog and to "
            "allowedInstanceTypes in the stack's policy config."
        ),
    ),
    ResourceValidationPolicy(
        name="efa-interface-layout",
        description=(
            "EFA launch templates use the current layout: catalog interface count, card 0 "
            "device 0 ENA, card 0 device 1 efa-only, other cards efa-only at device 0, one subnet."
        ),
        validate=efa_interface_layout,
        enforcement_level=EnforcementLevel.MANDATORY,
        remediation_steps=(
            "Build interfaces with infra.efa.efa_layout(catalog efa_interfaces) and give them "
            "all the cluster's one subnet."
        ),
    ),
    ResourceValidationPolicy(
        name="imdsv2-required",
        description="Instances and launch templates require IMDSv2 (httpTokens=required).",
        validate=imdsv2_required,
        enforcement_level=EnforcementLevel.MANDATORY,
        remediation_steps='Set metadata_options.http_tokens="required".',
    ),
    StackValidationPolicy(
        name="no-placement-group-with-reserved-capacity",
        description=(
            "No placement group on an ASG that launches into a Capacity Block or a capacity "
            "reservation."
        ),
        validate=no_placement_group_with_reserved_capacity,
        enforcement_level=EnforcementLevel.MANDATORY,
        remediation_steps=(
            "Remove placementGroup from the cluster (AWS already places reserved capacity)."
        ),
    ),
    StackValidationPolicy(
        name="spot-or-capacity-block-outside-production",
        description="Accelerated capacity outside production is spot or a Capacity Block.",
        validate=spot_or_capacity_block_outside_production,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=MARKET_SCHEMA,
        remediation_steps=(
            "Set capacity.model to spot or capacity-block, or deploy from a production stack."
        ),
    ),
]
