"""GpuCluster: launch template with the EFA layout, placement, capacity targeting, an Auto
Scaling group and a least-privilege instance profile. On a burst stack its nodes join the
on-prem Slurm controller (``declare_slurm_join`` declares what they read; the user data joins)."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from coreburst.common.catalog import Catalog
from infra.components import TOKEN_PREFIX
from infra.config import BurstNode, Cluster
from infra.efa import efa_layout
from infra.userdata import lustre_efa_client_supported, render_user_data, slurm_join_for

SSM_CORE_POLICY = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
CLOUDWATCH_AGENT_POLICY = "arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy"


@dataclass
class GpuClusterArgs:
    cluster: Cluster
    catalog: Catalog
    subnet_id: pulumi.Input[str]
    security_group_ids: list[pulumi.Input[str]]
    checkpoint_bucket_arn: pulumi.Input[str]
    instance_tags: dict[str, str]
    lustre_dns: pulumi.Input[str] | None = None
    lustre_mount_name: pulumi.Input[str] | None = None
    # The file system is EFA-enabled: nodes whose type is an EFA client configure LNet for it.
    lustre_efa: bool = False
    # A burst stack: nodes join the on-prem Slurm controller (declare_slurm_join).
    slurm_join: SlurmJoinRefs | None = None
    # The subnets of every zone the cluster may launch in (Cluster.zones), primary first.
    # With more than one, the launch template names no subnet: each launch gives its own
    # (CreateFleet Overrides SubnetId, the ASG's zone identifiers).
    zone_subnet_ids: list[pulumi.Input[str]] | None = None


@dataclass
class SlurmJoinRefs:
    """What burst nodes read to join Slurm: the munge key secret and the Slurm parameter."""

    region: str
    node: BurstNode
    node_tag_key: str
    munge_key_secret_arn: pulumi.Input[str]
    slurm_conf_parameter_arn: pulumi.Input[str]
    gpu_device_prefix: str = "/dev/nvidia"


def declare_slurm_join(
    stack: str,
    region: str,
    node: BurstNode,
    node_tag_key: str,
    *,
    opts: pulumi.ResourceOptions,
    gpu_device_prefix: str = "/dev/nvidia",
) -> SlurmJoinRefs:
    """The stack's munge key secret (declared empty: the key never passes through Pulumi's
    state; put it with ``aws secretsmanager put-secret-value --secret-binary``) and the SSM
    parameter holding the conf server, unless the config names existing ones by ARN."""
    secret_arn: pulumi.Input[str]
    if node.munge_key_secret_arn:
        secret_arn = node.munge_key_secret_arn
    else:
        secret_arn = aws.secretsmanager.Secret(
            "slurm-munge-key",
            description=f"munge key of the on-prem Slurm cluster, read by burst nodes ({stack})",
            opts=opts,
        ).arn
    param_arn: pulumi.Input[str]
    if node.slurm_conf_parameter_arn:
        param_arn = node.slurm_conf_parameter_arn
    else:
        assert node.conf_server is not None  # BurstNode's validator
        param_arn = aws.ssm.Parameter(
            "slurm-conf-server",
            name=f"/coreburst/{stack}/slurm/conf-server",
            type="String",
            insecure_value=node.conf_server,
            description="slurmd --conf-server for burst nodes (Slurm configless)",
            opts=opts,
        ).arn
    return SlurmJoinRefs(region, node, node_tag_key, secret_arn, param_arn, gpu_device_prefix)


def network_interfaces(
    efa_count: int,
    subnet_id: pulumi.Input[str] | None,
    security_groups: list[pulumi.Input[str]],
) -> list[aws.ec2.LaunchTemplateNetworkInterfaceArgs]:
    """Launch-template interfaces for ``efa_count`` EFA devices (0 = plain ENA only)."""
    return [
        aws.ec2.LaunchTemplateNetworkInterfaceArgs(
            network_card_index=nic.network_card_index,
            device_index=nic.device_index,
            interface_type=None if nic.interface_type == "interface" else nic.interface_type,
            subnet_id=subnet_id,
            security_groups=security_groups,
            delete_on_termination="true",
            associate_public_ip_address="false",
        )
        for nic in efa_layout(efa_count)
    ]


class GpuCluster(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: GpuClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(f"{TOKEN_PREFIX}:GpuCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        c = args.cluster
        facts = args.catalog.instance(c.instance_type)
        kind = facts.accelerator.kind

        role = aws.iam.Role(
            f"{name}-node-role",
            assume_role_policy=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "ec2.amazonaws.com"},
                            "Action": "sts:AssumeRole",
                        }
                    ],
                }
            ),
            opts=child,
        )
        managed = [CLOUDWATCH_AGENT_POLICY] + ([SSM_CORE_POLICY] if c.ssm_access else [])
        for arn in managed:
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{arn.rsplit('/', 1)[1]}",
                role=role.name,
                policy_arn=arn,
                opts=child,
            )
        aws.iam.RolePolicy(
            f"{name}-node-checkpoints",
            role=role.id,
            policy=pulumi.Output.from_input(args.checkpoint_bucket_arn).apply(_checkpoint_policy),
            opts=child,
        )
        join = args.slurm_join
        if join is not None:
            aws.iam.RolePolicy(
                f"{name}-node-slurm-join",
                role=role.id,
                policy=pulumi.Output.all(
                    join.munge_key_secret_arn, join.slurm_conf_parameter_arn
                ).apply(lambda v: slurm_join_policy(v[0], v[1])),
                opts=child,
            )
        profile = aws.iam.InstanceProfile(f"{name}-node-profile", role=role.name, opts=child)

        self.placement_group: aws.ec2.PlacementGroup | None = None
        if c.placement_group:
            self.placement_group = aws.ec2.PlacementGroup(
                f"{name}-pg", strategy="cluster", opts=child
            )

        ami_param = c.ami_ssm_parameter or args.catalog.ami_ssm_parameters[kind]
        # Resolved at deploy time so every node of one `pulumi up` boots the same image.
        ami = aws.ssm.get_parameter_output(
            name=ami_param, opts=pulumi.InvokeOutputOptions(parent=self)
        )

        lustre_efa = args.lustre_efa and c.efa and lustre_efa_client_supported(c.instance_type)
        catalog = args.catalog
        user_data = pulumi.Output.all(
            args.lustre_dns,
            args.lustre_mount_name,
            join.munge_key_secret_arn if join else None,
            join.slurm_conf_parameter_arn if join else None,
        ).apply(
            lambda v: base64.b64encode(
                render_user_data(
                    kind,
                    v[0],
                    v[1],
                    lustre_efa=lustre_efa,
                    slurm_join=slurm_join_for(
                        join.node,
                        c,
                        catalog,
                        region=join.region,
                        node_tag_key=join.node_tag_key,
                        munge_key_secret_arn=v[2],
                        slurm_conf_parameter_arn=v[3],
                        gpu_device_prefix=join.gpu_device_prefix,
                    )
                    if join
                    else None,
                    per_device_metrics=c.per_device_metrics,
                ).encode()
            ).decode()
        )

        efa_count = facts.efa_interfaces.value if c.efa else 0
        market = None
        reservation = None
        if c.capacity.model == "capacity-block":
            market = aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block")
        if c.capacity.reservation_id:
            target = (
                aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                    capacity_reservation_id=c.capacity.reservation_id
                )
            )
            reservation = aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                capacity_reservation_target=target
            )

        subnets = args.zone_subnet_ids or [args.subnet_id]
        tag_specs = [
            aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=rt, tags=args.instance_tags)
            for rt in ("instance", "volume", "network-interface")
        ]
        self.launch_template = aws.ec2.LaunchTemplate(
            f"{name}-lt",
            image_id=ami.value,
            instance_type=c.instance_type,
            iam_instance_profile=aws.ec2.LaunchTemplateIamInstanceProfileArgs(arn=profile.arn),
            network_interfaces=network_interfaces(
                efa_count,
                args.subnet_id if len(subnets) == 1 else None,
                args.security_group_ids,
            ),
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled",
                http_tokens="required",
                # Two hops so containers on the node can reach IMDSv2.
                http_put_response_hop_limit=2,
                # A burst node reads its Slurm node name from its tag in instance metadata.
                instance_metadata_tags="enabled" if join is not None else None,
            ),
            block_device_mappings=[
                aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                    device_name="/dev/sda1",
                    ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                        volume_size=c.root_volume_gib,
                        volume_type="gp3",
                        encrypted="true",
                        delete_on_termination="true",
                    ),
                )
            ],
            instance_market_options=market,
            capacity_reservation_specification=reservation,
            user_data=user_data,
            tag_specifications=tag_specs,
            update_default_version=True,
            opts=child,
        )

        # An ASG cannot take spot from launch-template market options: spot goes through a
        # mixed-instances policy with no on-demand share.
        mixed = None
        launch_template = None
        if c.capacity.model == "spot":
            mixed = aws.autoscaling.GroupMixedInstancesPolicyArgs(
                instances_distribution=aws.autoscaling.GroupMixedInstancesPolicyInstancesDistributionArgs(
                    on_demand_base_capacity=0,
                    on_demand_percentage_above_base_capacity=0,
                    spot_allocation_strategy="capacity-optimized",
                ),
                launch_template=aws.autoscaling.GroupMixedInstancesPolicyLaunchTemplateArgs(
                    launch_template_specification=aws.autoscaling.GroupMixedInstancesPolicyLaunchTemplateLaunchTemplateSpecificationArgs(
                        launch_template_id=self.launch_template.id, version="$Latest"
                    )
                ),
            )
        else:
            launch_template = aws.autoscaling.GroupLaunchTemplateArgs(
                id=self.launch_template.id, version="$Latest"
            )
        asg_tags = [
            aws.autoscaling.GroupTagArgs(key=k, value=v, propagate_at_launch=True)
            for k, v in sorted(args.instance_tags.items())
        ]
        # On a burst stack Slurm starts the nodes (the resume program's CreateFleet on this
        # launch template, each instance tagged with its node name): an ASG instance would get
        # no node tag and never join Slurm, so the group is kept at 0 and cannot grow.
        size = 0 if args.slurm_join is not None else c.nodes
        self.asg = aws.autoscaling.Group(
            f"{name}-asg",
            min_size=0,
            max_size=max(size, 1) if args.slurm_join is None else 0,
            desired_capacity=size,
            vpc_zone_identifiers=subnets,
            launch_template=launch_template,
            mixed_instances_policy=mixed,
            placement_group=self.placement_group.id if self.placement_group else None,
            capacity_rebalance=c.capacity.model == "spot",
            health_check_type="EC2",
            tags=asg_tags,
            # GPU nodes can take long to pass status checks; don't block `pulumi up` on them.
            wait_for_capacity_timeout="0",
            opts=child,
        )
        self.register_outputs(
            {
                "asg_name": self.asg.name,
                "launch_template_id": self.launch_template.id,
                "instance_profile_arn": profile.arn,
            }
        )


def slurm_join_policy(secret_arn: str, parameter_arn: str) -> str:
    """Exactly what the join block calls: GetSecretValue on the munge key secret and
    GetParameter on the Slurm parameter. Node names come from instance metadata tags, so no
    ec2:DescribeTags."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "ReadMungeKey",
                    "Effect": "Allow",
                    "Action": "secretsmanager:GetSecretValue",
                    "Resource": secret_arn,
                },
                {
                    "Sid": "ReadSlurmConf",
                    "Effect": "Allow",
                    "Action": "ssm:GetParameter",
                    "Resource": parameter_arn,
                },
            ],
        }
    )


def _checkpoint_policy(bucket_arn: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "ListCheckpoints",
                    "Effect": "Allow",
                    "Action": ["s3:ListBucket", "s3:GetBucketLocation"],
                    "Resource": bucket_arn,
                },
                {
                    "Sid": "ReadWriteCheckpoints",
                    "Effect": "Allow",
                    "Action": [
                        "s3:GetObject",
                        "s3:PutObject",
                        "s3:DeleteObject",
                        "s3:AbortMultipartUpload",
                    ],
                    "Resource": f"{bucket_arn}/*",
                },
            ],
        }
    )
