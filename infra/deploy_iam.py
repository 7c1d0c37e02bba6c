"""The deploy role's IAM policies: what ``pulumi up`` of this program needs, nothing more (pure).

The GitHub deploy job (``.github/workflows/deploy.yml``) assumes one role through OIDC and runs
``pulumi up``; the Pulumi AWS provider then creates, reads, updates and deletes every resource the
program declares. This module lists, for each AWS resource type the program can declare (its
Pulumi type token), the IAM actions that takes, and writes the policies from them (one per
entry of GROUPS, since IAM caps the size of one managed policy):

* **actions** are named one by one (no ``service:*``), per resource type: create, read, update,
  delete and tag, plus the cross-service permissions AWS documents for them (the
  ``Dependent actions`` column of the Service Authorization Reference, and the pages cited at
  each entry below).
* **resources** are limited as far as each service allows: EC2, FSx and Direct Connect to the
  stacks' regions and the account (their ids are made by AWS, so nothing narrower is known before
  ``up``); IAM roles and instance profiles, S3 buckets, queues, topics, secrets, parameters, the
  table, the function, its log group, rules and schedules to the names the program gives them;
  the actions AWS authorizes only on ``*`` (Describe and List calls, and a few creates) in one
  statement of their own.
* **IAM** is the escalation path, so it gets the most conditions: roles only by the program's
  role names; managed policies attached only if they are the two the node roles use; a role
  passed only to the service its trust policy names; service-linked roles created only for the
  services that need one.

The stacks add what only they know: their regions, the S3 buckets their Lustre links, and any
AMI parameter a cluster names (:class:`DeployScope`, built by :func:`deploy_scope`).

    >>> docs = deploy_policies(DeployScope(regions=("us-east-1",)))
    >>> sorted(docs)
    ['fleet', 'guardrails', 'identity', 'network', 'preflight', 'storage']
    >>> [s["Sid"] for s in docs["identity"]["Statement"]][:3]
    ['StackRoles', 'StackRolesOnlyTheNodeManagedPolicies', 'StackInstanceProfiles']

The Service Authorization Reference (https://docs.aws.amazon.com/service-authorization/latest/
reference/reference_policies_actions-resources-contextkeys.html), one page per service ("Actions,
resources, and condition keys for Amazon EC2", "... for Amazon FSx", "... for AWS Direct
Connect"...), says which resource types each action authorizes on and which other actions it
depends on; tests/unit/infra/test_deploy_policy.py checks these policies against parliament's
copy of it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from guardrails.regions import partition_of

if TYPE_CHECKING:
    from infra.config import StackConfig

_TAGS_EC2 = ("ec2:CreateTags", "ec2:DeleteTags")
# The provider deletes the ENIs that Lambda and other services leave behind in a subnet or a
# security group before deleting it (its "lingering ENIs" cleanup).
_LINGERING_ENIS = (
    "ec2:DescribeNetworkInterfaces",
    "ec2:DetachNetworkInterface",
    "ec2:DeleteNetworkInterface",
)

# Pulumi type token -> every IAM action the AWS provider needs to create, read, update, delete
# and tag that resource. Reads include what the provider reads back into state (a VPC's main
# route table, default network ACL and security group; a bucket's settings).
ACTIONS: dict[str, tuple[str, ...]] = {
    # -- EC2: network (infra/components/network.py) -------------------------------------------
    "aws:ec2/vpc:Vpc": (
        "ec2:CreateVpc",
        "ec2:DeleteVpc",
        "ec2:DescribeVpcs",
        "ec2:DescribeVpcAttribute",
        "ec2:ModifyVpcAttribute",
        "ec2:DescribeNetworkAcls",
        "ec2:DescribeRouteTables",
        "ec2:DescribeSecurityGroups",
        *_TAGS_EC2,
    ),
    "aws:ec2/subnet:Subnet": (
        "ec2:CreateSubnet",
        "ec2:DeleteSubnet",
        "ec2:DescribeSubnets",
        "ec2:ModifySubnetAttribute",
        *_LINGERING_ENIS,
        *_TAGS_EC2,
    ),
    "aws:ec2/routeTable:RouteTable": (
        "ec2:CreateRouteTable",
        "ec2:DeleteRouteTable",
        "ec2:DescribeRouteTables",
        *_TAGS_EC2,
    ),
    "aws:ec2/routeTableAssociation:RouteTableAssociation": (
        "ec2:AssociateRouteTable",
        "ec2:DisassociateRouteTable",
        "ec2:ReplaceRouteTableAssociation",
        "ec2:DescribeRouteTables",
    ),
    "aws:ec2/route:Route": (
        "ec2:CreateRoute",
        "ec2:DeleteRoute",
        "ec2:ReplaceRoute",
        "ec2:DescribeRouteTables",
    ),
    "aws:ec2/internetGateway:InternetGateway": (
        "ec2:CreateInternetGateway",
        "ec2:DeleteInternetGateway",
        "ec2:AttachInternetGateway",
        "ec2:DetachInternetGateway",
        "ec2:DescribeInternetGateways",
        *_TAGS_EC2,
    ),
    "aws:ec2/eip:Eip": (
        "ec2:AllocateAddress",
        "ec2:ReleaseAddress",
        "ec2:DisassociateAddress",
        "ec2:DescribeAddresses",
        "ec2:DescribeAddressesAttribute",
        *_TAGS_EC2,
    ),
    "aws:ec2/natGateway:NatGateway": (
        "ec2:CreateNatGateway",
        "ec2:DeleteNatGateway",
        "ec2:DescribeNatGateways",
        *_TAGS_EC2,
    ),
    "aws:ec2/securityGroup:SecurityGroup": (
        "ec2:CreateSecurityGroup",
        "ec2:DeleteSecurityGroup",
        "ec2:DescribeSecurityGroups",
        # The provider revokes the allow-all egress rule AWS adds to a new group.
        "ec2:RevokeSecurityGroupEgress",
        "ec2:RevokeSecurityGroupIngress",
        *_LINGERING_ENIS,
        *_TAGS_EC2,
    ),
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": (
        "ec2:AuthorizeSecurityGroupIngress",
        "ec2:RevokeSecurityGroupIngress",
        "ec2:ModifySecurityGroupRules",
        "ec2:DescribeSecurityGroupRules",
        *_TAGS_EC2,
    ),
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": (
        "ec2:AuthorizeSecurityGroupEgress",
        "ec2:RevokeSecurityGroupEgress",
        "ec2:ModifySecurityGroupRules",
        "ec2:DescribeSecurityGroupRules",
        *_TAGS_EC2,
    ),
    "aws:ec2/vpcEndpoint:VpcEndpoint": (
        "ec2:CreateVpcEndpoint",
        "ec2:DeleteVpcEndpoints",
        "ec2:ModifyVpcEndpoint",
        "ec2:DescribeVpcEndpoints",
        "ec2:DescribePrefixLists",
        # Interface endpoints with private DNS: AWS associates the VPC with the endpoint's
        # private hosted zone on the caller's behalf (a dependent action of CreateVpcEndpoint).
        "route53:AssociateVPCWithHostedZone",
        *_TAGS_EC2,
    ),
    # -- EC2: the GPU clusters (infra/components/gpu_cluster.py) ------------------------------
    "aws:ec2/launchTemplate:LaunchTemplate": (
        "ec2:CreateLaunchTemplate",
        "ec2:CreateLaunchTemplateVersion",
        "ec2:ModifyLaunchTemplate",
        "ec2:DeleteLaunchTemplate",
        "ec2:DescribeLaunchTemplates",
        "ec2:DescribeLaunchTemplateVersions",
        *_TAGS_EC2,
    ),
    "aws:ec2/placementGroup:PlacementGroup": (
        "ec2:CreatePlacementGroup",
        "ec2:DeletePlacementGroup",
        "ec2:DescribePlacementGroups",
        *_TAGS_EC2,
    ),
    # Amazon EC2 Auto Scaling User Guide, "Amazon EC2 Auto Scaling API permissions": creating a
    # group from a launch template also takes ec2:RunInstances (checked on the template),
    # ec2:CreateTags (its tag specifications), iam:PassRole (its instance profile) and
    # iam:CreateServiceLinkedRole (the group's service-linked role, the first time).
    "aws:autoscaling/group:Group": (
        "autoscaling:CreateAutoScalingGroup",
        "autoscaling:UpdateAutoScalingGroup",
        "autoscaling:DeleteAutoScalingGroup",
        "autoscaling:DescribeAutoScalingGroups",
        "autoscaling:DescribeScalingActivities",
        "autoscaling:CreateOrUpdateTags",
        "autoscaling:DeleteTags",
        "ec2:RunInstances",
        "ec2:DescribeLaunchTemplateVersions",
        "iam:PassRole",
        "iam:CreateServiceLinkedRole",
        *_TAGS_EC2,
    ),
    # -- FSx for Lustre (infra/components/lustre.py) ------------------------------------------
    "aws:fsx/lustreFileSystem:LustreFileSystem": (
        "fsx:CreateFileSystem",
        "fsx:UpdateFileSystem",
        "fsx:DeleteFileSystem",
        "fsx:DescribeFileSystems",
        "fsx:TagResource",
        "fsx:UntagResource",
        "fsx:ListTagsForResource",
        "ec2:GetSecurityGroupsForVpc",
        "ec2:DescribeSubnets",
        "ec2:DescribeSecurityGroups",
        "ec2:DescribeNetworkInterfaces",
        # AWSServiceRoleForAmazonFSx, the first time (FSx for Lustre User Guide, "Using
        # service-linked roles for Amazon FSx").
        "iam:CreateServiceLinkedRole",
    ),
    # FSx for Lustre User Guide, "Adding permissions to use data repositories in Amazon S3":
    # linking a bucket creates the file system's AWSServiceRoleForFSxS3Access_<fs> role
    # (CreateServiceLinkedRole, AttachRolePolicy, PutRolePolicy on it) and reads and writes the
    # bucket as the caller (s3:Get*, s3:List*, s3:PutObject; DATA_BUCKET_ACTIONS below).
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": (
        "fsx:CreateDataRepositoryAssociation",
        "fsx:UpdateDataRepositoryAssociation",
        "fsx:DeleteDataRepositoryAssociation",
        "fsx:DescribeDataRepositoryAssociations",
        "fsx:TagResource",
        "fsx:UntagResource",
        "fsx:ListTagsForResource",
        "iam:CreateServiceLinkedRole",
        "iam:AttachRolePolicy",
        "iam:PutRolePolicy",
        "s3:Get*",
        "s3:List*",
        "s3:PutObject",
    ),
    # -- the hybrid link: Direct Connect (hybrid_link.py) or Site-to-Site VPN (vpn_link.py) ----
    "aws:directconnect/gateway:Gateway": (
        "directconnect:CreateDirectConnectGateway",
        "directconnect:UpdateDirectConnectGateway",
        "directconnect:DeleteDirectConnectGateway",
        "directconnect:DescribeDirectConnectGateways",
    ),
    "aws:directconnect/connection:Connection": (
        "directconnect:CreateConnection",
        "directconnect:UpdateConnection",
        "directconnect:DeleteConnection",
        "directconnect:DescribeConnections",
        "directconnect:TagResource",
        "directconnect:UntagResource",
        "directconnect:DescribeTags",
        # MACsec keys live in Secrets Manager through Direct Connect's service-linked role.
        "iam:CreateServiceLinkedRole",
    ),
    "aws:directconnect/privateVirtualInterface:PrivateVirtualInterface": (
        "directconnect:CreatePrivateVirtualInterface",
        "directconnect:UpdateVirtualInterfaceAttributes",
        "directconnect:DeleteVirtualInterface",
        "directconnect:DescribeVirtualInterfaces",
        "directconnect:TagResource",
        "directconnect:UntagResource",
        "directconnect:DescribeTags",
    ),
    "aws:directconnect/transitVirtualInterface:TransitVirtualInterface": (
        "directconnect:CreateTransitVirtualInterface",
        "directconnect:UpdateVirtualInterfaceAttributes",
        "directconnect:DeleteVirtualInterface",
        "directconnect:DescribeVirtualInterfaces",
        "directconnect:TagResource",
        "directconnect:UntagResource",
        "directconnect:DescribeTags",
    ),
    "aws:directconnect/gatewayAssociation:GatewayAssociation": (
        "directconnect:CreateDirectConnectGatewayAssociation",
        "directconnect:UpdateDirectConnectGatewayAssociation",
        "directconnect:DeleteDirectConnectGatewayAssociation",
        "directconnect:DescribeDirectConnectGatewayAssociations",
        "ec2:DescribeVpnGateways",
        "ec2:DescribeTransitGateways",
    ),
    "aws:ec2/vpnGateway:VpnGateway": (
        "ec2:CreateVpnGateway",
        "ec2:AttachVpnGateway",
        "ec2:DetachVpnGateway",
        "ec2:DeleteVpnGateway",
        "ec2:DescribeVpnGateways",
        *_TAGS_EC2,
    ),
    "aws:ec2/vpnGatewayRoutePropagation:VpnGatewayRoutePropagation": (
        "ec2:EnableVgwRoutePropagation",
        "ec2:DisableVgwRoutePropagation",
        "ec2:DescribeRouteTables",
    ),
    "aws:ec2/customerGateway:CustomerGateway": (
        "ec2:CreateCustomerGateway",
        "ec2:DeleteCustomerGateway",
        "ec2:DescribeCustomerGateways",
        *_TAGS_EC2,
    ),
    "aws:ec2/vpnConnection:VpnConnection": (
        "ec2:CreateVpnConnection",
        "ec2:ModifyVpnConnection",
        "ec2:ModifyVpnConnectionOptions",
        "ec2:ModifyVpnTunnelOptions",
        "ec2:DeleteVpnConnection",
        "ec2:DescribeVpnConnections",
        *_TAGS_EC2,
    ),
    "aws:ec2/vpnConnectionRoute:VpnConnectionRoute": (
        "ec2:CreateVpnConnectionRoute",
        "ec2:DeleteVpnConnectionRoute",
        "ec2:DescribeVpnConnections",
    ),
    "aws:ec2transitgateway/transitGateway:TransitGateway": (
        "ec2:CreateTransitGateway",
        "ec2:ModifyTransitGateway",
        "ec2:DeleteTransitGateway",
        "ec2:DescribeTransitGateways",
        *_TAGS_EC2,
    ),
    "aws:ec2transitgateway/vpcAttachment:VpcAttachment": (
        "ec2:CreateTransitGatewayVpcAttachment",
        "ec2:ModifyTransitGatewayVpcAttachment",
        "ec2:DeleteTransitGatewayVpcAttachment",
        "ec2:DescribeTransitGatewayVpcAttachments",
        "ec2:DescribeTransitGatewayRouteTables",
        "ec2:GetTransitGatewayRouteTableAssociations",
        "ec2:GetTransitGatewayRouteTablePropagations",
        "ec2:AssociateTransitGatewayRouteTable",
        "ec2:DisassociateTransitGatewayRouteTable",
        "ec2:EnableTransitGatewayRouteTablePropagation",
        "ec2:DisableTransitGatewayRouteTablePropagation",
        # AWSServiceRoleForVPCTransitGateway, made with the first attachment.
        "iam:CreateServiceLinkedRole",
        *_TAGS_EC2,
    ),
    # -- IAM: node roles, the guardrails Lambda's and the scheduler's roles --------------------
    "aws:iam/role:Role": (
        "iam:CreateRole",
        "iam:GetRole",
        "iam:UpdateRole",
        "iam:UpdateAssumeRolePolicy",
        "iam:DeleteRole",
        "iam:TagRole",
        "iam:UntagRole",
        "iam:ListRolePolicies",
        "iam:ListAttachedRolePolicies",
        "iam:ListInstanceProfilesForRole",
    ),
    "aws:iam/rolePolicy:RolePolicy": (
        "iam:PutRolePolicy",
        "iam:GetRolePolicy",
        "iam:DeleteRolePolicy",
    ),
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": (
        "iam:AttachRolePolicy",
        "iam:DetachRolePolicy",
        "iam:ListAttachedRolePolicies",
    ),
    # AddRoleToInstanceProfile depends on iam:PassRole for the role it adds.
    "aws:iam/instanceProfile:InstanceProfile": (
        "iam:CreateInstanceProfile",
        "iam:GetInstanceProfile",
        "iam:DeleteInstanceProfile",
        "iam:AddRoleToInstanceProfile",
        "iam:RemoveRoleFromInstanceProfile",
        "iam:TagInstanceProfile",
        "iam:UntagInstanceProfile",
        "iam:PassRole",
    ),
    # -- the checkpoint bucket (infra/components/checkpoint_store.py) -------------------------
    "aws:s3/bucket:Bucket": (
        "s3:CreateBucket",
        "s3:DeleteBucket",
        "s3:ListBucket",
        "s3:GetBucketLocation",
        "s3:GetBucketAcl",
        "s3:GetBucketCORS",
        "s3:GetBucketWebsite",
        "s3:GetBucketVersioning",
        "s3:GetAccelerateConfiguration",
        "s3:GetBucketRequestPayment",
        "s3:GetBucketLogging",
        "s3:GetLifecycleConfiguration",
        "s3:GetReplicationConfiguration",
        "s3:GetEncryptionConfiguration",
        "s3:GetBucketObjectLockConfiguration",
        "s3:GetBucketPolicy",
        "s3:GetBucketTagging",
        "s3:PutBucketTagging",
    ),
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls": (
        "s3:GetBucketOwnershipControls",
        "s3:PutBucketOwnershipControls",
    ),
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": (
        "s3:GetBucketPublicAccessBlock",
        "s3:PutBucketPublicAccessBlock",
    ),
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": (
        "s3:GetEncryptionConfiguration",
        "s3:PutEncryptionConfiguration",
    ),
    "aws:s3/bucketVersioning:BucketVersioning": (
        "s3:GetBucketVersioning",
        "s3:PutBucketVersioning",
    ),
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration": (
        "s3:GetLifecycleConfiguration",
        "s3:PutLifecycleConfiguration",
    ),
    # -- the budget and its topic (infra/components/budget.py) --------------------------------
    # AWS Budgets' IAM actions are per permission, not per API call: ModifyBudget covers
    # Create/Update/DeleteBudget and the notification calls, ViewBudget the Describe calls.
    "aws:budgets/budget:Budget": (
        "budgets:ModifyBudget",
        "budgets:ViewBudget",
        "budgets:TagResource",
        "budgets:UntagResource",
        "budgets:ListTagsForResource",
    ),
    "aws:sns/topic:Topic": (
        "sns:CreateTopic",
        "sns:DeleteTopic",
        "sns:GetTopicAttributes",
        "sns:SetTopicAttributes",
        "sns:TagResource",
        "sns:UntagResource",
        "sns:ListTagsForResource",
    ),
    "aws:sns/topicPolicy:TopicPolicy": ("sns:GetTopicAttributes", "sns:SetTopicAttributes"),
    "aws:sns/topicSubscription:TopicSubscription": (
        "sns:Subscribe",
        "sns:Unsubscribe",
        "sns:GetSubscriptionAttributes",
        "sns:SetSubscriptionAttributes",
    ),
    # -- the guardrails Lambda (infra/components/guardrails.py) -------------------------------
    "aws:sqs/queue:Queue": (
        "sqs:CreateQueue",
        "sqs:DeleteQueue",
        "sqs:GetQueueAttributes",
        "sqs:SetQueueAttributes",
        "sqs:GetQueueUrl",
        "sqs:TagQueue",
        "sqs:UntagQueue",
        "sqs:ListQueueTags",
    ),
    "aws:sqs/queuePolicy:QueuePolicy": ("sqs:GetQueueAttributes", "sqs:SetQueueAttributes"),
    "aws:dynamodb/table:Table": (
        "dynamodb:CreateTable",
        "dynamodb:UpdateTable",
        "dynamodb:DeleteTable",
        "dynamodb:DescribeTable",
        "dynamodb:DescribeContinuousBackups",
        "dynamodb:UpdateContinuousBackups",
        "dynamodb:DescribeTimeToLive",
        "dynamodb:UpdateTimeToLive",
        "dynamodb:TagResource",
        "dynamodb:UntagResource",
        "dynamodb:ListTagsOfResource",
    ),
    # No GetSecretValue: the provider never reads a secret's value for this resource, and the
    # deploy role has no business reading the webhook or the munge key.
    "aws:secretsmanager/secret:Secret": (
        "secretsmanager:CreateSecret",
        "secretsmanager:UpdateSecret",
        "secretsmanager:DeleteSecret",
        "secretsmanager:DescribeSecret",
        "secretsmanager:GetResourcePolicy",
        "secretsmanager:TagResource",
        "secretsmanager:UntagResource",
    ),
    "aws:cloudwatch/logGroup:LogGroup": (
        "logs:CreateLogGroup",
        "logs:DeleteLogGroup",
        "logs:DescribeLogGroups",
        "logs:PutRetentionPolicy",
        "logs:DeleteRetentionPolicy",
        "logs:TagResource",
        "logs:UntagResource",
        "logs:ListTagsForResource",
    ),
    # CreateFunction depends on iam:PassRole (the function's role).
    "aws:lambda/function:Function": (
        "lambda:CreateFunction",
        "lambda:DeleteFunction",
        "lambda:GetFunction",
        "lambda:GetFunctionConfiguration",
        "lambda:GetFunctionCodeSigningConfig",
        "lambda:ListVersionsByFunction",
        "lambda:UpdateFunctionCode",
        "lambda:UpdateFunctionConfiguration",
        "lambda:PutFunctionConcurrency",
        "lambda:DeleteFunctionConcurrency",
        "lambda:TagResource",
        "lambda:UntagResource",
        "lambda:ListTags",
        "iam:PassRole",
    ),
    "aws:cloudwatch/eventRule:EventRule": (
        "events:PutRule",
        "events:DeleteRule",
        "events:DescribeRule",
        "events:EnableRule",
        "events:DisableRule",
        "events:ListTargetsByRule",
        "events:TagResource",
        "events:UntagResource",
        "events:ListTagsForResource",
    ),
    "aws:cloudwatch/eventTarget:EventTarget": (
        "events:PutTargets",
        "events:RemoveTargets",
        "events:ListTargetsByRule",
    ),
    # CreateSchedule depends on iam:PassRole (the schedule's execution role).
    "aws:scheduler/schedule:Schedule": (
        "scheduler:CreateSchedule",
        "scheduler:UpdateSchedule",
        "scheduler:DeleteSchedule",
        "scheduler:GetSchedule",
        "iam:PassRole",
    ),
    # -- burst stacks: the Slurm join parameter (gpu_cluster.declare_slurm_join) ---------------
    "aws:ssm/parameter:Parameter": (
        "ssm:PutParameter",
        "ssm:DeleteParameter",
        "ssm:GetParameter",
        "ssm:DescribeParameters",
        "ssm:AddTagsToResource",
        "ssm:RemoveTagsFromResource",
        "ssm:ListTagsForResource",
    ),
}

# Read by the program itself while it runs (preview and up): each cluster's AMI id from an SSM
# parameter (aws.ssm.get_parameter_output in gpu_cluster.py).
PROGRAM_READS = ("ssm:GetParameter",)

# Actions AWS authorizes only on "*": the Service Authorization Reference lists no resource
# type for them (or, for directconnect:CreateConnection, only a LAG the program never gives).
UNSCOPED = frozenset(
    {
        "autoscaling:DescribeAutoScalingGroups",
        "autoscaling:DescribeScalingActivities",
        "directconnect:CreateConnection",
        "directconnect:CreateDirectConnectGateway",
        "directconnect:DescribeConnections",
        "directconnect:DescribeDirectConnectGateways",
        "directconnect:DescribeVirtualInterfaces",
        "directconnect:UpdateDirectConnectGatewayAssociation",
        "ec2:DescribeAddresses",
        "ec2:DescribeAddressesAttribute",
        "ec2:DescribeCustomerGateways",
        "ec2:DescribeInternetGateways",
        "ec2:DescribeLaunchTemplateVersions",
        "ec2:DescribeLaunchTemplates",
        "ec2:DescribeNatGateways",
        "ec2:DescribeNetworkAcls",
        "ec2:DescribeNetworkInterfaces",
        "ec2:DescribePlacementGroups",
        "ec2:DescribePrefixLists",
        "ec2:DescribeRouteTables",
        "ec2:DescribeSecurityGroupRules",
        "ec2:DescribeSecurityGroups",
        "ec2:DescribeSubnets",
        "ec2:DescribeTransitGatewayRouteTables",
        "ec2:DescribeTransitGatewayVpcAttachments",
        "ec2:DescribeTransitGateways",
        "ec2:DescribeVpcEndpoints",
        "ec2:DescribeVpcs",
        "ec2:DescribeVpnConnections",
        "ec2:DescribeVpnGateways",
        "ec2:GetTransitGatewayRouteTableAssociations",
        "ec2:GetTransitGatewayRouteTablePropagations",
        "fsx:DescribeDataRepositoryAssociations",
        "fsx:DescribeFileSystems",
        "logs:DescribeLogGroups",
        "route53:AssociateVPCWithHostedZone",
        "sns:GetSubscriptionAttributes",
        "sns:SetSubscriptionAttributes",
        "sns:Unsubscribe",
        "ssm:DescribeParameters",
    }
)

# Where each service's scoped actions may act: ARN templates with {p} (partition), {r} (region:
# one copy per stack region) and {a} (account). Names are the program's: a Pulumi resource with
# no explicit name gets "<logical name>-<7 random characters>", so "checkpoints-bucket-*" is
# CheckpointStore("checkpoints")'s bucket. tests/unit/infra/test_deploy_policy.py checks every
# resource the example stacks declare against these.
SCOPES: dict[str, tuple[str, ...]] = {
    # Ids are AWS's (vpc-..., fs-..., dxcon-...): the region and the account are all there is.
    # Public AMIs belong to no account.
    "ec2": ("arn:{p}:ec2:{r}:{a}:*", "arn:{p}:ec2:{r}::image/*"),
    "fsx": ("arn:{p}:fsx:{r}:{a}:*",),
    "directconnect": ("arn:{p}:directconnect:{r}:{a}:*", "arn:{p}:directconnect::{a}:dx-gateway/*"),
    # GpuCluster("<cluster>")'s group, "<cluster>-asg-<suffix>".
    "autoscaling": ("arn:{p}:autoscaling:{r}:{a}:autoScalingGroup:*:autoScalingGroupName/*-asg-*",),
    # CheckpointStore("checkpoints").
    "s3": ("arn:{p}:s3:::checkpoints-bucket-*",),
    # Budget("budget"): its budget and its alert topic. Budgets are global (no region).
    "budgets": ("arn:{p}:budgets::{a}:budget/budget-monthly-*",),
    "sns": ("arn:{p}:sns:{r}:{a}:budget-alerts-*",),
    # Guardrails("guardrails").
    "sqs": (
        "arn:{p}:sqs:{r}:{a}:guardrails-budget-events-*",
        "arn:{p}:sqs:{r}:{a}:guardrails-spot-events-*",
    ),
    "dynamodb": ("arn:{p}:dynamodb:{r}:{a}:table/guardrails-state-*",),
    "logs": (
        "arn:{p}:logs:{r}:{a}:log-group:/aws/lambda/guardrails-daemon",
        "arn:{p}:logs:{r}:{a}:log-group:/aws/lambda/guardrails-daemon:*",
    ),
    "lambda": ("arn:{p}:lambda:{r}:{a}:function:guardrails-daemon",),
    "events": ("arn:{p}:events:{r}:{a}:rule/guardrails-spot-*",),
    "scheduler": ("arn:{p}:scheduler:{r}:{a}:schedule/default/guardrails-cycle-*",),
    # The guardrails webhook, and a burst stack's munge key (declare_slurm_join).
    "secretsmanager": (
        "arn:{p}:secretsmanager:{r}:{a}:secret:guardrails-slack-webhook-*",
        "arn:{p}:secretsmanager:{r}:{a}:secret:slurm-munge-key-*",
    ),
    # /coreburst/<stack>/slurm/conf-server (declare_slurm_join).
    "ssm": ("arn:{p}:ssm:{r}:{a}:parameter/coreburst/*",),
}

# IAM roles the program creates, by name, and the one service each may be passed to (the
# service its trust policy names): GpuCluster("<cluster>")'s node role, Guardrails's Lambda
# role and its scheduler role.
ROLES: dict[str, str] = {
    "*-node-role-*": "ec2.amazonaws.com",
    "guardrails-role-*": "lambda.amazonaws.com",
    "guardrails-scheduler-role-*": "scheduler.amazonaws.com",
}
INSTANCE_PROFILES = ("*-node-profile-*",)
# The AWS managed policies the node roles attach (gpu_cluster.py): the only ones the deploy role
# may attach to a role.
MANAGED_POLICIES = ("CloudWatchAgentServerPolicy", "AmazonSSMManagedInstanceCore")
# The services whose service-linked role `pulumi up` may create (iam:AWSServiceName).
SERVICE_LINKED_ROLES = (
    "autoscaling.amazonaws.com",
    "directconnect.amazonaws.com",
    "fsx.amazonaws.com",
    "s3.data-source.lustre.fsx.amazonaws.com",
    "transitgateway.amazonaws.com",
)
# What the FSx data repository association does to the role it creates (see its ACTIONS entry).
FSX_S3_ROLE = "role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/*"
# What FSx needs of a linked bucket, granted on the stacks' data buckets only.
DATA_BUCKET_ACTIONS = ("s3:Get*", "s3:List*", "s3:PutObject")
# The IAM actions granted in their own statements below; every other IAM action is an error.
_IAM_ROLE_ACTIONS = frozenset(
    a
    for t in ("aws:iam/role:Role", "aws:iam/rolePolicy:RolePolicy")
    for a in ACTIONS[t]
    if a.startswith("iam:")
) | {"iam:ListAttachedRolePolicies"}

# One managed policy per group, attached together to the deploy role: IAM caps a managed
# policy at 6,144 characters (IAM User Guide, "IAM and AWS STS quotas"), which one policy for
# every service would pass.
GROUPS: dict[str, frozenset[str]] = {
    "network": frozenset({"ec2", "directconnect", "route53"}),
    "storage": frozenset({"fsx", "s3"}),
    "identity": frozenset({"iam"}),
    # The clusters' groups, the budget and its topic, a burst stack's Slurm join.
    "fleet": frozenset({"autoscaling", "budgets", "sns", "ssm", "secretsmanager"}),
    # The guardrails Lambda, its state, queues, schedule and logs.
    "guardrails": frozenset({"dynamodb", "events", "lambda", "logs", "scheduler", "sqs"}),
    # What `coreburst burst check` asks after `pulumi up` beyond the reads above (PREFLIGHT).
    "preflight": frozenset(),
}

# The reads of the preflight the deploy job runs after `pulumi up` (coreburst/burst/check.py,
# guardrails/preflight.py) that `pulumi up` itself does not need: the (type, zone) offerings,
# the images of the launch templates, the P/Trn vCPU quotas, the spot-event rules by name
# prefix, and IAM's simulation of the controller's policy (--principal, the
# BURST_CONTROLLER_ARN variable). AWS authorizes the first four on `*` only (Service
# Authorization Reference: no resource type for DescribeInstanceTypeOfferings, DescribeImages,
# servicequotas:GetServiceQuota, events:ListRules); SimulatePrincipalPolicy on the principal
# simulated, a role or a user of the account. Every other call of the check
# (DescribeLaunchTemplateVersions, DescribeSubnets, ssm:GetParameter, ListTargetsByRule, the
# queue's GetQueueUrl and GetQueueAttributes) is a read `pulumi up` already has.
PREFLIGHT_UNSCOPED = (
    "ec2:DescribeImages",
    "ec2:DescribeInstanceTypeOfferings",
    "events:ListRules",
    "servicequotas:GetServiceQuota",
)
PREFLIGHT_PRINCIPALS = ("role/*", "user/*")
MAX_POLICY_CHARS = 6144

_ACCOUNT = re.compile(r"^(\d{12}|\*)$")
PUBLIC_PARAMETERS = "/aws/service/"


@dataclass(frozen=True)
class DeployScope:
    """What the stacks add to the program's needs: the regions they deploy to, the S3 buckets
    their Lustre file systems link (besides their own checkpoint bucket), and the SSM parameters
    of their own that name an AMI (the public ``/aws/service/...`` ones are always readable)."""

    regions: tuple[str, ...]
    data_buckets: tuple[str, ...] = ()
    ami_parameters: tuple[str, ...] = ()


def deploy_scope(configs: Iterable[StackConfig]) -> DeployScope:
    """The scope of every stack config given (validated ``infra.config.StackConfig``)."""
    regions: set[str] = set()
    buckets: set[str] = set()
    params: set[str] = set()
    for cfg in configs:
        regions.add(cfg.region)
        if cfg.lustre is not None:
            buckets |= {
                d.bucket
                for d in cfg.lustre.data_repository_associations
                if d.bucket != "checkpoints"
            }
        params |= {
            c.ami_ssm_parameter
            for c in cfg.clusters
            if c.ami_ssm_parameter and not c.ami_ssm_parameter.startswith(PUBLIC_PARAMETERS)
        }
    return DeployScope(tuple(sorted(regions)), tuple(sorted(buckets)), tuple(sorted(params)))


def needed_actions(types: Iterable[str]) -> set[str]:
    """Every action the given Pulumi resource types need; KeyError names a type with no entry."""
    out: set[str] = set(PROGRAM_READS)
    for t in types:
        if t not in ACTIONS:
            raise KeyError(f"{t}: no IAM actions listed for it in infra/deploy_iam.py ACTIONS")
        out |= set(ACTIONS[t])
    return out


def _expand(
    templates: Sequence[str], partition: str, regions: Sequence[str], account: str
) -> list[str]:
    out: list[str] = []
    for t in templates:
        for r in regions if "{r}" in t else [""]:
            arn = t.format(p=partition, r=r, a=account)
            if arn not in out:
                out.append(arn)
    return out


def deploy_policies(scope: DeployScope, *, account: str = "*") -> dict[str, dict[str, Any]]:
    """The deploy role's identity policies for the stacks in ``scope`` (module docstring), one
    per entry of GROUPS, each under IAM's size limit for a managed policy (MAX_POLICY_CHARS).

    ``account`` is the 12-digit account id, ``*`` when not known. Raises ValueError (one line)
    on a bad account, no region, or regions of more than one partition."""
    if not _ACCOUNT.fullmatch(account):
        raise ValueError(f"{account!r} is not a 12-digit AWS account id (or *)")
    if not scope.regions:
        raise ValueError("no region: the policy is for the regions of at least one stack")
    partitions = {partition_of(r) for r in scope.regions}
    if len(partitions) != 1:
        raise ValueError(
            f"regions {', '.join(scope.regions)} span partitions {', '.join(sorted(partitions))}: "
            "one role cannot deploy them; give each partition its own policy"
        )
    (p,) = partitions
    regions = sorted(scope.regions)
    actions = needed_actions(ACTIONS)

    def arns(*templates: str) -> list[str]:
        return _expand(templates, p, regions, account)

    by_service: dict[str, list[str]] = {}
    for action in sorted(actions - UNSCOPED):
        by_service.setdefault(action.split(":", 1)[0], []).append(action)
    by_service["s3"] = [a for a in by_service["s3"] if a not in DATA_BUCKET_ACTIONS]
    docs: dict[str, dict[str, Any]] = {}
    for group, services in GROUPS.items():
        statements: list[dict[str, Any]] = []
        unscoped = sorted(a for a in actions & UNSCOPED if a.split(":", 1)[0] in services)
        if unscoped:
            statements.append(
                {
                    "Sid": f"{group.title()}UnscopedActions",
                    "Effect": "Allow",
                    "Action": unscoped,
                    "Resource": "*",
                }
            )
        for service in sorted(services & set(by_service) - {"iam"}):
            # Services whose resources AWS names (ids) are scoped to the stacks' regions only.
            by_id = service in {"ec2", "fsx", "directconnect"}
            statements.append(
                {
                    "Sid": service.title() + ("InTheStacksRegions" if by_id else "StackResources"),
                    "Effect": "Allow",
                    "Action": by_service[service],
                    "Resource": arns(*SCOPES[service]),
                }
            )
        if "ssm" in services:
            statements.extend(_ssm_reads(p, regions, account, scope))
        if "iam" in services:
            statements.extend(_iam(p, account, actions))
        if "s3" in services:
            statements.extend(_data_buckets(p, regions, account, scope))
        if group == "preflight":
            statements += [
                {
                    "Sid": "PreflightReads",
                    "Effect": "Allow",
                    "Action": list(PREFLIGHT_UNSCOPED),
                    "Resource": "*",
                },
                {
                    "Sid": "PreflightSimulateTheController",
                    "Effect": "Allow",
                    "Action": "iam:SimulatePrincipalPolicy",
                    "Resource": [f"arn:{p}:iam::{account}:{n}" for n in PREFLIGHT_PRINCIPALS],
                },
            ]
        docs[group] = {"Version": "2012-10-17", "Statement": statements}
    for group, doc in docs.items():
        size = policy_chars(doc)
        if size > MAX_POLICY_CHARS:
            raise ValueError(
                f"the {group} policy is {size} characters, over IAM's {MAX_POLICY_CHARS} for a "
                "managed policy: split its services into another entry of GROUPS"
            )
    return docs


def policy_chars(doc: Mapping[str, Any]) -> int:
    """A policy's size as IAM counts it against its quota: without white space."""
    return len(json.dumps(doc, separators=(",", ":")))


def _data_buckets(
    p: str, regions: Sequence[str], account: str, scope: DeployScope
) -> list[dict[str, Any]]:
    resources = [
        arn for b in scope.data_buckets for arn in (f"arn:{p}:s3:::{b}", f"arn:{p}:s3:::{b}/*")
    ]
    # The stacks' own checkpoint buckets are linked too ("checkpoints" as a repository path).
    resources += _expand([*SCOPES["s3"], *(f"{t}/*" for t in SCOPES["s3"])], p, regions, account)
    return [
        {
            "Sid": "FsxLinkedBuckets",
            "Effect": "Allow",
            "Action": list(DATA_BUCKET_ACTIONS),
            "Resource": resources,
        }
    ]


def _ssm_reads(
    p: str, regions: Sequence[str], account: str, scope: DeployScope
) -> list[dict[str, Any]]:
    # Public parameters belong to no account: their ARNs have an empty account field, as AWS
    # writes them; the "*" form is there too, for matchers that want one.
    params = [
        f"arn:{p}:ssm:{{r}}::parameter{PUBLIC_PARAMETERS}*",
        f"arn:{p}:ssm:{{r}}:*:parameter{PUBLIC_PARAMETERS}*",
    ]
    # A parameter named by ARN (another account's, shared) as it is; a name in this account.
    params += [
        n if n.startswith("arn:") else f"arn:{p}:ssm:{{r}}:{{a}}:parameter/{n.lstrip('/')}"
        for n in scope.ami_parameters
    ]
    return [
        {
            "Sid": "ReadAmiParameters",
            "Effect": "Allow",
            "Action": list(PROGRAM_READS),
            "Resource": _expand(params, p, regions, account),
        }
    ]


def _iam(p: str, account: str, actions: set[str]) -> list[dict[str, Any]]:
    iam = f"arn:{p}:iam::{account}"
    roles = [f"{iam}:role/{n}" for n in ROLES]
    known = _IAM_ROLE_ACTIONS | {
        "iam:AttachRolePolicy",
        "iam:DetachRolePolicy",
        "iam:PassRole",
        "iam:CreateServiceLinkedRole",
        *(a for a in ACTIONS["aws:iam/instanceProfile:InstanceProfile"]),
    }
    unknown = sorted(a for a in actions if a.startswith("iam:") and a not in known)
    if unknown:  # a new IAM action needs a statement written for it, not a blanket grant
        raise ValueError(f"IAM actions with no statement in deploy_policy: {', '.join(unknown)}")
    profile_actions = sorted(
        a for a in ACTIONS["aws:iam/instanceProfile:InstanceProfile"] if a != "iam:PassRole"
    )
    statements: list[dict[str, Any]] = [
        {
            "Sid": "StackRoles",
            "Effect": "Allow",
            "Action": sorted(_IAM_ROLE_ACTIONS),
            "Resource": roles,
        },
        {
            "Sid": "StackRolesOnlyTheNodeManagedPolicies",
            "Effect": "Allow",
            "Action": ["iam:AttachRolePolicy", "iam:DetachRolePolicy"],
            "Resource": roles,
            "Condition": {
                "ArnEquals": {
                    "iam:PolicyARN": [f"arn:{p}:iam::aws:policy/{n}" for n in MANAGED_POLICIES]
                }
            },
        },
        {
            "Sid": "StackInstanceProfiles",
            "Effect": "Allow",
            "Action": profile_actions,
            "Resource": [f"{iam}:instance-profile/{n}" for n in INSTANCE_PROFILES],
        },
    ]
    for i, (name, service) in enumerate(ROLES.items()):
        # Adding a role to an instance profile is a pass with no service named
        # (iam:PassedToService absent): IfExists lets that through and nothing but EC2 else.
        op = "StringEqualsIfExists" if service == "ec2.amazonaws.com" else "StringEquals"
        statements.append(
            {
                "Sid": f"PassStackRole{i}",
                "Effect": "Allow",
                "Action": "iam:PassRole",
                "Resource": f"{iam}:role/{name}",
                "Condition": {op: {"iam:PassedToService": service}},
            }
        )
    statements += [
        {
            "Sid": "ServiceLinkedRoles",
            "Effect": "Allow",
            "Action": "iam:CreateServiceLinkedRole",
            "Resource": f"{iam}:role/aws-service-role/*",
            "Condition": {"StringEquals": {"iam:AWSServiceName": list(SERVICE_LINKED_ROLES)}},
        },
        {
            "Sid": "FsxS3AccessRole",
            "Effect": "Allow",
            "Action": ["iam:AttachRolePolicy", "iam:PutRolePolicy"],
            "Resource": f"{iam}:{FSX_S3_ROLE}",
        },
    ]
    return statements


def render(doc: Mapping[str, Any]) -> str:
    """A policy as the repository keeps it: two-space JSON, a newline at the end."""
    return json.dumps(doc, indent=2) + "\n"
