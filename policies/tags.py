"""Cost tags: every resource that can carry tags carries team, project, cost-center and
environment, so Budgets and Cost Explorer attribute every dollar.

Where tags come from, and what is checked:

- ordinary AWS resources get them from the provider's ``defaultTags``; at preview their
  ``tagsAll`` is still unknown, so the check merges provider default tags, ``tagsAll`` and
  ``tags``;
- the aws provider itself must carry them in ``defaultTags.tags``;
- default tags do not reach what an Auto Scaling group launches: the launch template's
  ``tagSpecifications`` (instance and volume) and the group's own ``tags`` (propagated at
  launch) must carry them explicitly.

A type counts as taggable when its pulumi-aws class has ``tags_all`` (the provider schema
decides, not a hand-kept list), or when the resource sets ``tags``.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from policies.common import (
    ASG,
    AWS_PROVIDER,
    LAUNCH_TEMPLATE,
    REQUIRED_TAG_KEYS,
    effective_tags,
    missing_keys,
    provider_default_tags,
    schema,
    settings,
    truthy,
)

TAGS_SCHEMA = schema(
    requiredKeys={
        "type": "array",
        "items": {"type": "string"},
        "default": list(REQUIRED_TAG_KEYS),
        "description": "Tag keys every taggable resource must carry",
    },
    environments={
        "type": "array",
        "items": {"type": "string"},
        "default": ["dev", "staging", "prod"],
        "description": "Allowed values of the environment tag",
    },
)
# Launched instances and their volumes are what the bill itemises.
LAUNCHED_RESOURCE_TYPES = ("instance", "volume")


@functools.cache
def taggable(resource_type: str) -> bool:
    """Whether pulumi-aws gives ``resource_type`` a ``tags_all`` (default-tags) property."""
    pkg, _, rest = resource_type.partition(":")
    module, _, cls = rest.partition(":")
    if pkg != "aws" or not cls:
        return False
    try:
        mod = importlib.import_module(f"pulumi_aws.{module.split('/')[0]}")
    except ImportError:
        return False
    return hasattr(getattr(mod, cls, None), "tags_all")


def _check_map(what: str, tags: dict[str, str], cfg: dict[str, Any]) -> list[str]:
    problems = []
    missing = missing_keys(tags, cfg["requiredKeys"])
    if missing:
        problems.append(f"{what} is missing cost tags: {', '.join(missing)}")
    env = tags.get("environment")
    if env and "environment" in cfg["requiredKeys"] and env not in cfg["environments"]:
        problems.append(
            f"{what} has environment={env!r}; allowed: {', '.join(cfg['environments'])}"
        )
    return problems


def required_cost_tags(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """Taggable resources, the provider, launch-template tag specs and ASG tags carry cost tags.

    >>> # a Vpc with no tags under a provider whose defaultTags lack "team":
    >>> # "aws:ec2/vpc:Vpc net-vpc is missing cost tags: team"
    """
    cfg = settings(args, TAGS_SCHEMA)
    label = f"{args.resource_type} {args.name}"
    problems: list[str] = []
    if args.resource_type == AWS_PROVIDER:
        tags = provider_default_tags(args)
        problems += _check_map(f"provider {args.name} defaultTags", tags, cfg)
    elif args.resource_type == ASG:
        tags = {
            str(t.get("key")): str(t.get("value"))
            for t in args.props.get("tags") or []
            if truthy(t.get("propagateAtLaunch")) and t.get("value") not in (None, "")
        }
        problems += _check_map(f"{label} tags (propagateAtLaunch)", tags, cfg)
    elif taggable(args.resource_type) or "tags" in args.props:
        problems += _check_map(label, effective_tags(args.props, args.provider), cfg)
    if args.resource_type == LAUNCH_TEMPLATE:
        specs = {
            s.get("resourceType"): s.get("tags") or {}
            for s in args.props.get("tagSpecifications") or []
        }
        for rt in LAUNCHED_RESOURCE_TYPES:
            if rt not in specs:
                problems.append(f"{label} has no tagSpecifications for {rt}")
            else:
                problems += _check_map(f"{label} tagSpecifications[{rt}]", dict(specs[rt]), cfg)
    for p in problems:
        report_violation(p, None)


POLICIES = [
    ResourceValidationPolicy(
        name="required-cost-tags",
        description=(
            "Every taggable resource carries the cost tags team, project, cost-center and "
            "environment, including what Auto Scaling groups launch."
        ),
        validate=required_cost_tags,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=TAGS_SCHEMA,
        remediation_steps=(
            "Set coreburst:tags in Pulumi.<stack>.yaml; the program applies them as provider "
            "default tags, launch-template tag specifications and ASG tags."
        ),
    ),
]
