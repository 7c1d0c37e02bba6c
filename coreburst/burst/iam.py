"""The least-privilege IAM policy for the on-prem controller host that runs the power programs.

slurmctld runs ``resume``, ``suspend`` and ``resume-fail`` (coreburst/burst/power.py) with the AWS
credentials in ``/etc/coreburst/burst.env``. This module writes the identity policy those
credentials need for one stack, and nothing more:

* **reads** (``DescribeInstances``, ``DescribeSubnets``, ``DescribeLaunchTemplates``,
  ``DescribeLaunchTemplateVersions``) on ``*``: EC2 Describe actions support no resource-level
  permissions (Service Authorization Reference, "Actions defined by Amazon EC2").
* **launch** with ``CreateFleet`` only from launch templates tagged ``coreburst-stack=<stack>``,
  into the stack's own (tagged) subnet and security groups, and the capacity reservations the
  stack names. Other fleet types launch through the service-linked role
  AWSServiceRoleForEC2Fleet, which holds ``ec2:RunInstances``; an ``instant`` fleet does not
  use it (EC2 User Guide, "EC2 Fleet prerequisites"), so the caller needs RunInstances
  itself. It is granted only with a launch template (``ec2:LaunchTemplate``; EC2 User Guide,
  "Example policies to control access to the Amazon EC2 API: Launch instances
  (RunInstances)").
* **tag on create** (``ec2:CreateTags`` with ``ec2:CreateAction`` CreateFleet or RunInstances;
  EC2 User Guide, "Grant permission to tag Amazon EC2 resources during creation"): only the
  stack's tag keys, and only with ``coreburst-stack=<stack>``.
* **tag the node name** afterwards: the node tag key only, on instances tagged with the stack.
* **terminate** only instances tagged ``coreburst-stack=<stack>``.
* **pass the node role** (``iam:PassRole``, to EC2 only): each cluster's launch template names
  the instance profile infra declared for it (``<cluster>-node-role`` plus Pulumi's suffix;
  EC2 User Guide, "IAM roles for Amazon EC2": permission to pass an IAM role to an instance).

    >>> from coreburst.burst.config import parse_burst
    >>> s = parse_burst("dev", {"aws:region": "us-east-1",
    ...     "coreburst:availabilityZone": "us-east-1a",
    ...     "coreburst:tags": {"team": "ml", "project": "p", "costCenter": "c",
    ...                        "environment": "dev"},
    ...     "coreburst:budget": {"monthlyUsd": 1000},
    ...     "coreburst:clusters": [{"name": "od", "instanceType": "p5.48xlarge", "nodes": 2,
    ...                             "capacity": {"model": "on-demand"}}]})
    >>> doc = controller_policy(s, account="123456789012")
    >>> doc["Statement"][-1]["Action"], doc["Statement"][-1]["Resource"]
    ('iam:PassRole', ['arn:aws:iam::123456789012:role/od-node-role-*'])
"""

from __future__ import annotations

import re
from typing import Any

from coreburst.burst.config import BurstStack
from coreburst.common.names import CLUSTER_TAG_KEY, LAUNCH_TAG_KEY, OWNER_TAG_KEYS, STACK_TAG_KEY

# What coreburst/burst/launch.py describes (tests/unit/burst/test_iam_policy.py reads its calls
# from the source), and the template versions "$Latest" stands for, to check what a launch
# would use.
READ_ACTIONS = (
    "ec2:DescribeInstances",
    "ec2:DescribeSubnets",
    "ec2:DescribeLaunchTemplateVersions",
    "ec2:DescribeLaunchTemplates",
)
# An instant fleet launches with the caller's RunInstances (module docstring), and the tags it
# applies are authorized as CreateTags with ec2:CreateAction set to the creating call.
LAUNCH_ACTIONS = ("ec2:CreateFleet", "ec2:RunInstances")
CREATE_ACTIONS = ("CreateFleet", "RunInstances")

_ACCOUNT = re.compile(r"^(\d{12}|\*)$")


def partition_of(region: str) -> str:
    """The ARN partition of a region (AWS General Reference, "Amazon Resource Names")."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def allowed_tag_keys(stack: BurstStack) -> list[str]:
    """Every tag key the power programs may write: the stack's and cluster's (CreateFleet),
    the launch's, the stack's own tags (CreateFleet and the launch templates' tag
    specifications), and the node tag (after launch)."""
    keys = [
        STACK_TAG_KEY,
        CLUSTER_TAG_KEY,
        LAUNCH_TAG_KEY,
        *stack.config.tags.as_aws_tags(),
        stack.settings.node_tag_key,
        *OWNER_TAG_KEYS,
    ]
    return sorted(set(keys))


def controller_policy(
    stack: BurstStack,
    *,
    account: str = "*",
    region: str | None = None,
    partition: str | None = None,
) -> dict[str, Any]:
    """The identity policy for the controller host's credentials (see the module docstring).

    ``account`` is the 12-digit account id, ``*`` when unknown; ``region`` defaults to the
    stack's, ``partition`` to the region's. Raises ValueError (one line) on a bad account."""
    if not _ACCOUNT.fullmatch(account):
        raise ValueError(f"{account!r} is not a 12-digit AWS account id (or *)")
    region = region or stack.config.region
    p = partition or partition_of(region)
    ec2 = f"arn:{p}:ec2:{region}:{account}"
    image = f"arn:{p}:ec2:{region}::image/*"
    template = f"{ec2}:launch-template/*"
    # The stack declares its subnet and security groups (infra/components/network.py) and
    # launch templates (gpu_cluster.py), all tagged through the provider's default tags.
    stack_owned = [template, f"{ec2}:subnet/*", f"{ec2}:security-group/*"]
    created = [f"{ec2}:instance/*", f"{ec2}:volume/*", f"{ec2}:network-interface/*"]
    reservations = sorted(
        {c.capacity.reservation_id for c in stack.config.clusters if c.capacity.reservation_id}
    )
    clusters = [c.name for c in stack.config.clusters if c.nodes > 0]
    statements: list[dict[str, Any]] = [
        {"Sid": "BurstReads", "Effect": "Allow", "Action": list(READ_ACTIONS), "Resource": "*"},
        {
            # Every resource type CreateFleet authorizes (Service Authorization Reference);
            # it has no ec2:LaunchTemplate key, and needs a template: the Deny below says which.
            "Sid": "CreateInstantFleet",
            "Effect": "Allow",
            "Action": "ec2:CreateFleet",
            "Resource": [
                f"{ec2}:fleet/*",
                f"{ec2}:instance/*",
                f"{ec2}:volume/*",
                image,
                f"{ec2}:subnet/*",
                template,
            ],
        },
        {
            "Sid": "RunFromLaunchTemplate",
            "Effect": "Allow",
            "Action": "ec2:RunInstances",
            "Resource": [
                *created,
                image,
                *stack_owned,
                *(f"{ec2}:capacity-reservation/{r}" for r in reservations),
            ],
            "Condition": {"ArnLike": {"ec2:LaunchTemplate": template}},
        },
        {
            # One Deny rather than a condition on the Allows: a condition applies to every
            # resource of its statement, and the instance being created has no tags yet.
            "Sid": "OnlyTheStacksTemplatesAndNetwork",
            "Effect": "Deny",
            "Action": list(LAUNCH_ACTIONS),
            "Resource": stack_owned,
            "Condition": {"StringNotEquals": {f"aws:ResourceTag/{STACK_TAG_KEY}": stack.name}},
        },
        {
            "Sid": "TagOnLaunch",
            "Effect": "Allow",
            "Action": "ec2:CreateTags",
            "Resource": [f"{ec2}:fleet/*", *created],
            "Condition": {
                "StringEquals": {
                    "ec2:CreateAction": list(CREATE_ACTIONS),
                    f"aws:RequestTag/{STACK_TAG_KEY}": stack.name,
                },
                "ForAllValues:StringEquals": {"aws:TagKeys": allowed_tag_keys(stack)},
            },
        },
        {
            "Sid": "TagNodeName",
            "Effect": "Allow",
            "Action": "ec2:CreateTags",
            "Resource": f"{ec2}:instance/*",
            "Condition": {
                "StringEquals": {f"aws:ResourceTag/{STACK_TAG_KEY}": stack.name},
                "ForAllValues:StringEquals": {
                    "aws:TagKeys": [stack.settings.node_tag_key, *OWNER_TAG_KEYS]
                },
            },
        },
        {
            "Sid": "TerminateStackInstances",
            "Effect": "Allow",
            "Action": "ec2:TerminateInstances",
            "Resource": f"{ec2}:instance/*",
            "Condition": {"StringEquals": {f"aws:ResourceTag/{STACK_TAG_KEY}": stack.name}},
        },
    ]
    if clusters:
        service = ["ec2.amazonaws.com"] + (["ec2.amazonaws.com.cn"] if p == "aws-cn" else [])
        statements.append(
            {
                "Sid": "PassNodeRoles",
                "Effect": "Allow",
                "Action": "iam:PassRole",
                "Resource": [f"arn:{p}:iam::{account}:role/{c}-node-role-*" for c in clusters],
                "Condition": {"StringEquals": {"iam:PassedToService": service}},
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}
