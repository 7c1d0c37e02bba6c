"""Stack policies: the whole stack's estimated monthly cost within its ceiling, the total
accelerator count within a cap, and Lustre in the AZ of the clusters it serves."""

from __future__ import annotations

from pulumi_policy import (
    EnforcementLevel,
    PolicyResource,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from coreburst.common.catalog import CatalogError, load_catalog
from policies.common import (
    ASG,
    INSTANCE,
    LUSTRE,
    SUBNET,
    as_int,
    deps,
    launch_template_of,
    money,
    of_type,
    schema,
    settings,
)
from policies.pricing import price_resources

BUDGET = "aws:budgets/budget:Budget"

COST_SCHEMA = schema(
    monthlyCeilingUsd={
        "type": "number",
        "minimum": 0,
        "description": "Ceiling for the estimate; default: the stack's own AWS Budget limit",
    },
    egressGbPerMonth={
        "type": "number",
        "minimum": 0,
        "default": 0,
        "description": "Internet egress to add to the estimate, GB per month",
    },
    topLines={"type": "integer", "minimum": 1, "default": 3},
)
ACCELERATOR_SCHEMA = schema(
    maxAccelerators={
        "type": "integer",
        "minimum": 0,
        "default": 512,
        "description": "Most accelerators (GPUs, Trainium chips) all ASGs together may reach",
    },
)


def _ceiling(args: StackValidationArgs, cfg: dict[str, object]) -> tuple[float, str] | None:
    if cfg.get("monthlyCeilingUsd") is not None:
        return float(cfg["monthlyCeilingUsd"]), "monthlyCeilingUsd"  # type: ignore[arg-type]
    for b in of_type(args.resources, BUDGET):
        if b.props.get("budgetType", "COST") == "COST" and b.props.get("limitAmount"):
            return float(b.props["limitAmount"]), f"budget {b.name}"
    return None


def monthly_cost_ceiling(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """The stack's estimated monthly cost (catalog prices) is within its ceiling.

    >>> # "estimated monthly cost $690,217 exceeds the ceiling $500,000 (monthlyCeilingUsd) by
    >>> #  $190,217; top cost lines: train-p5en-asg $528,170, ..."
    """
    cfg = settings(args, COST_SCHEMA)
    ceiling = _ceiling(args, cfg)
    if ceiling is None:
        return
    limit, source = ceiling
    try:
        lines = price_resources(
            args.resources, load_catalog(), egress_gb=float(cfg["egressGbPerMonth"])
        )
    except CatalogError as exc:
        report_violation(f"cannot estimate the stack's cost: {exc}", None)
        return
    total = sum(x.monthly_usd for x in lines)
    if total > limit:
        top = sorted(lines, key=lambda x: x.monthly_usd, reverse=True)[: int(cfg["topLines"])]
        report_violation(
            f"estimated monthly cost {money(total)} exceeds the ceiling {money(limit)} ({source}) "
            f"by {money(total - limit)}; top cost lines: "
            + ", ".join(f"{x.item} {money(x.monthly_usd)}" for x in top),
            None,
        )


def _accelerators(asg: PolicyResource) -> tuple[str, int] | None:
    lt = launch_template_of(asg)
    if lt is None:
        return None
    itype = str(lt.props.get("instanceType", ""))
    facts = load_catalog().instances.get(itype)
    if facts is None:
        return None
    nodes = max(as_int(asg.props.get("maxSize")), as_int(asg.props.get("desiredCapacity")))
    return itype, nodes * facts.accelerator.count


def accelerator_count_cap(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """All ASGs at their maximum size hold at most maxAccelerators accelerators.

    >>> # "the stack can reach 1,024 accelerators (big-asg 1,024), above maxAccelerators 512"
    """
    cap = int(settings(args, ACCELERATOR_SCHEMA)["maxAccelerators"])
    counted = [(asg.name, n) for asg in of_type(args.resources, ASG) if (n := _accelerators(asg))]
    total = sum(n for _, (_, n) in counted)
    if total > cap:
        parts = ", ".join(f"{name} {n:,}" for name, (_, n) in counted)
        report_violation(
            f"the stack can reach {total:,} accelerators ({parts}), above maxAccelerators {cap}",
            None,
        )


def _azs(subnets: list[PolicyResource]) -> set[str]:
    return {str(s.props["availabilityZone"]) for s in subnets if s.props.get("availabilityZone")}


def lustre_in_cluster_az(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """Each Lustre file system sits in the AZ of the clusters (cross-AZ breaks EFA and costs
    $0.01/GB each way).

    >>> # "... lustre-fs is in us-east-1b but cluster dev-p5-asg runs in us-east-1a"
    """
    clusters: list[tuple[str, set[str]]] = []
    for asg in of_type(args.resources, ASG):
        subnets = deps(asg, "vpcZoneIdentifiers", SUBNET)
        lt = launch_template_of(asg)
        if lt is not None:
            subnets += deps(lt, "networkInterfaces", SUBNET)
        clusters.append((asg.name, _azs(subnets)))
    for inst in of_type(args.resources, INSTANCE):
        clusters.append((inst.name, _azs(deps(inst, "subnetId", SUBNET))))
    for fs in of_type(args.resources, LUSTRE):
        fs_azs = _azs(deps(fs, "subnetIds", SUBNET))
        if not fs_azs:
            continue
        for name, azs in clusters:
            if azs and azs != fs_azs:
                report_violation(
                    f"{LUSTRE} {fs.name} is in {', '.join(sorted(fs_azs))} but cluster {name} "
                    f"runs in {', '.join(sorted(azs))}",
                    fs.urn,
                )


POLICIES = [
    StackValidationPolicy(
        name="monthly-cost-ceiling",
        description=(
            "The stack's estimated monthly cost (catalog prices, full size) is within its ceiling."
        ),
        validate=monthly_cost_ceiling,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=COST_SCHEMA,
        remediation_steps=(
            "Shrink or re-market the top cost lines (spot, Capacity Blocks, fewer nodes), or "
            "raise coreburst:budget / monthlyCeilingUsd with finance's approval."
        ),
    ),
    StackValidationPolicy(
        name="accelerator-count-cap",
        description="All clusters together stay within the stack's accelerator cap.",
        validate=accelerator_count_cap,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=ACCELERATOR_SCHEMA,
        remediation_steps="Lower nodes (ASG maxSize) or raise maxAccelerators for the stack.",
    ),
    StackValidationPolicy(
        name="lustre-in-cluster-az",
        description="FSx for Lustre lives in the same AZ as the clusters it serves.",
        validate=lustre_in_cluster_az,
        enforcement_level=EnforcementLevel.MANDATORY,
        remediation_steps="Put the file system's subnet in the clusters' availabilityZone.",
    ),
]
