"""Helpers the validators share: property access, policy config with schema defaults, tags
and references between resources.

Props arrive with the engine's camelCase keys; numbers may be floats (``988.0``) and booleans
may be the strings ``"true"``/``"false"`` (launch-template fields are strings in the schema).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from pulumi_policy import (
    PolicyConfigSchema,
    PolicyProviderResource,
    PolicyResource,
    ResourceValidationArgs,
    StackValidationArgs,
)
from pulumi_policy.proxy import UnknownValueError

REQUIRED_TAG_KEYS = ("team", "project", "cost-center", "environment")
AWS_PROVIDER = "pulumi:providers:aws"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
ASG = "aws:autoscaling/group:Group"
INSTANCE = "aws:ec2/instance:Instance"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
SG_INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
SG_EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
SUBNET = "aws:ec2/subnet:Subnet"
LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
BUCKET = "aws:s3/bucket:Bucket"
BUCKET_V2 = "aws:s3/bucketV2:BucketV2"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"

# Instance families that carry accelerators (GPU, Trainium, Inferentia, Gaudi, FPGA, video).
ACCELERATED_FAMILY = re.compile(r"^(p|g|gr|trn|inf|dl|f|vt)\d")

Props = Mapping[str, Any]


class HasProps(Protocol):
    @property
    def props(self) -> Mapping[str, Any]: ...


Args = ResourceValidationArgs | StackValidationArgs


def get(props: Any, path: str, default: Any = None) -> Any:
    """``get(props, "metadataOptions.httpTokens")``; lists are indexed by number."""
    node = props
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, Sequence) and not isinstance(node, str) and part.isdigit():
            idx = int(part)
            if idx >= len(node):
                return default
            node = node[idx]
        else:
            return default
    return default if node is None else node


def known(props: Mapping[str, Any], key: str) -> Any:
    """``props.get(key)``, or None where the value is unknown until apply (preview).

    Reading an unknown value raises inside the engine's proxy and skips the whole policy for the
    resource; use this for fields a check can do without.
    """
    try:
        return props.get(key)
    except UnknownValueError:
        return None


def truthy(value: Any) -> bool:
    """True for ``True`` and ``"true"`` (launch templates carry booleans as strings)."""
    return value is True or (isinstance(value, str) and value.lower() == "true")


def as_int(value: Any, default: int = 0) -> int:
    if isinstance(value, bool) or value is None:
        return default
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        try:
            return int(float(value))
        except ValueError:
            return default
    return default


def settings(args: Args, schema: PolicyConfigSchema) -> dict[str, Any]:
    """The policy's config for this stack, with the schema's defaults filled in.

    The CLI applies defaults too; doing it here keeps validators correct when they are called
    directly (tests, ``coreburst plan``).
    """
    merged = {k: v["default"] for k, v in schema.properties.items() if "default" in v}
    merged.update({k: v for k, v in args.get_config().items() if k != "enforcementLevel"})
    return merged


def schema(**properties: dict[str, Any]) -> PolicyConfigSchema:
    return PolicyConfigSchema(properties=dict(properties))


def _tag_map(value: Any) -> dict[str, str]:
    if isinstance(value, str):
        # Provider config values reach the engine JSON-encoded.
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items() if v not in (None, "")}
    return {}


def provider_default_tags(provider: HasProps | None) -> dict[str, str]:
    """``defaultTags.tags`` of an aws provider (its props may hold it as a JSON string)."""
    if provider is None:
        return {}
    default_tags = provider.props.get("defaultTags")
    if isinstance(default_tags, str):
        try:
            default_tags = json.loads(default_tags)
        except json.JSONDecodeError:
            return {}
    return _tag_map(get(default_tags, "tags"))


def effective_tags(props: Props, provider: PolicyProviderResource | None) -> dict[str, str]:
    """Tags the resource ends up with: provider default tags, then ``tagsAll``, then ``tags``.

    At preview ``tagsAll`` of a new resource is computed (unknown), so the provider's default
    tags are what proves the cost tags will be there.
    """
    tags = provider_default_tags(provider)
    tags.update(_tag_map(props.get("tagsAll")))
    tags.update(_tag_map(props.get("tags")))
    return tags


def missing_keys(tags: Mapping[str, str], keys: Iterable[str]) -> list[str]:
    return [k for k in keys if not tags.get(k)]


def deps(resource: PolicyResource, prop: str, typ: str | None = None) -> list[PolicyResource]:
    """Resources that ``prop`` of ``resource`` refers to (the engine's property dependencies)."""
    found = resource.property_dependencies.get(prop, []) or []
    return [r for r in found if typ is None or r.resource_type == typ]


def of_type(resources: Iterable[PolicyResource], *types: str) -> list[PolicyResource]:
    return [r for r in resources if r.resource_type in types]


def launch_template_of(asg: PolicyResource) -> PolicyResource | None:
    for prop in ("launchTemplate", "mixedInstancesPolicy"):
        found = deps(asg, prop, LAUNCH_TEMPLATE)
        if found:
            return found[0]
    return None


def asg_market(asg: Props, lt: Props | None) -> str:
    """Capacity model of an ASG: spot, capacity-block, capacity-reservation or on-demand.

    Spot comes from a mixed-instances policy with no on-demand share; Capacity Blocks and
    reservations from the launch template.
    """
    dist = get(asg, "mixedInstancesPolicy.instancesDistribution")
    if isinstance(dist, Mapping):
        base = as_int(dist.get("onDemandBaseCapacity"), 0)
        pct = as_int(dist.get("onDemandPercentageAboveBaseCapacity"), 100)
        if base == 0 and pct == 0:
            return "spot"
    lt = lt or {}
    market_type = get(lt, "instanceMarketOptions.marketType")
    if market_type == "capacity-block":
        return "capacity-block"
    if market_type == "spot":
        return "spot"
    if get(lt, "capacityReservationSpecification.capacityReservationTarget.capacityReservationId"):
        return "capacity-reservation"
    return "on-demand"


def is_accelerated(instance_type: str, known: Iterable[str]) -> bool:
    return instance_type in set(known) or bool(ACCELERATED_FAMILY.match(instance_type))


def money(usd: float) -> str:
    return f"${usd:,.0f}"
