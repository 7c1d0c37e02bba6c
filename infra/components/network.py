"""Network: the VPC, the cluster's subnet, S3 endpoint, optional NAT, and the security groups
that EFA, Lustre and (on a burst stack) Slurm need."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from coreburst.common.names import PRIVATE_SUBNET_TAG
from infra.components import TOKEN_PREFIX
from infra.config import Vpc
from infra.cost import INTERFACE_ENDPOINT_SERVICES
from infra.slurm_network import Flow

# Lustre's LNet ports: 988 plus 1018-1023. Templates that open only 988 or only 1021-1023 break
# clients under load.
LUSTRE_PORTS: tuple[tuple[int, int], ...] = ((988, 988), (1018, 1023))


@dataclass
class NetworkArgs:
    region: str
    availability_zone: str
    vpc: Vpc
    # A burst stack: Slurm's flows to and from on-prem (StackConfig.slurm_flows), one rule each.
    slurm_flows: Sequence[Flow] = ()


class Network(pulumi.ComponentResource):
    """One VPC with a private subnet in the compute AZ (EFA does not cross AZs).

    ``efa_sg`` carries the single self-referencing all-traffic rule in both directions that
    OS-bypass traffic needs; ``node_sg`` gives nodes their egress (SSM, CloudWatch, S3) and is
    the Lustre client group; ``lustre_sg`` opens Lustre's ports between the file servers and
    to and from the clients, nothing else. On a burst stack ``slurm_sg`` (None elsewhere) opens
    exactly the Slurm flows to and from the on-prem controller and core, one rule per flow.
    """

    def __init__(
        self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(f"{TOKEN_PREFIX}:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        az = args.availability_zone

        self.vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.vpc.cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={"Name": f"{name}-vpc"},
            opts=child,
        )
        self.private_subnet = aws.ec2.Subnet(
            f"{name}-private-{az}",
            vpc_id=self.vpc.id,
            cidr_block=args.vpc.private_subnet_cidr,
            availability_zone=az,
            map_public_ip_on_launch=False,
            # The burst resume program finds a zone's subnet by this tag (CreateFleet Overrides).
            tags={"Name": f"{name}-private-{az}", PRIVATE_SUBNET_TAG: "private"},
            opts=child,
        )
        self.private_route_table = aws.ec2.RouteTable(
            f"{name}-private-rt-{az}",
            vpc_id=self.vpc.id,
            tags={"Name": f"{name}-private-{az}"},
            opts=child,
        )
        aws.ec2.RouteTableAssociation(
            f"{name}-private-rta-{az}",
            subnet_id=self.private_subnet.id,
            route_table_id=self.private_route_table.id,
            opts=child,
        )
        # Private subnets in other zones (vpc.extraZones), for clusters that may launch there;
        # they share the private route table (one VPC, routes are zone-independent).
        self.zone_subnets: dict[str, aws.ec2.Subnet] = {az: self.private_subnet}
        for extra in args.vpc.extra_zones:
            z = extra.availability_zone
            self.zone_subnets[z] = aws.ec2.Subnet(
                f"{name}-private-{z}",
                vpc_id=self.vpc.id,
                cidr_block=extra.private_subnet_cidr,
                availability_zone=z,
                map_public_ip_on_launch=False,
                tags={"Name": f"{name}-private-{z}", PRIVATE_SUBNET_TAG: "private"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-private-rta-{z}",
                subnet_id=self.zone_subnets[z].id,
                route_table_id=self.private_route_table.id,
                opts=child,
            )
        # Checkpoints and datasets reach S3 without NAT charges.
        aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=self.vpc.id,
            service_name=f"com.amazonaws.{args.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[self.private_route_table.id],
            tags={"Name": f"{name}-s3"},
            opts=child,
        )

        self.nat_gateway: aws.ec2.NatGateway | None = None
        if args.vpc.nat_gateway:
            self._nat(name, args, child)

        self.efa_sg = aws.ec2.SecurityGroup(
            f"{name}-efa",
            vpc_id=self.vpc.id,
            description="EFA: all traffic between cluster nodes (OS bypass needs both ways)",
            tags={"Name": f"{name}-efa"},
            opts=child,
        )
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-efa-in-self",
            security_group_id=self.efa_sg.id,
            referenced_security_group_id=self.efa_sg.id,
            ip_protocol="-1",
            description="EFA all traffic from cluster nodes",
            opts=child,
        )
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-efa-out-self",
            security_group_id=self.efa_sg.id,
            referenced_security_group_id=self.efa_sg.id,
            ip_protocol="-1",
            description="EFA all traffic to cluster nodes",
            opts=child,
        )

        # EC2 cannot change a group's description: a new one replaces the group, which fails
        # while running nodes still use it. The node group's description predates its Lustre
        # ingress (see _lustre_rules) and is kept as first deployed.
        self.node_sg = aws.ec2.SecurityGroup(
            f"{name}-node",
            vpc_id=self.vpc.id,
            description="Node egress: SSM, CloudWatch, S3 and package mirrors; no ingress",
            tags={"Name": f"{name}-node"},
            opts=child,
        )
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-node-out-https",
            security_group_id=self.node_sg.id,
            cidr_ipv4="0.0.0.0/0",
            ip_protocol="tcp",
            from_port=443,
            to_port=443,
            description="HTTPS to AWS APIs (SSM, CloudWatch, S3)",
            opts=child,
        )

        self.lustre_sg = aws.ec2.SecurityGroup(
            f"{name}-lustre",
            vpc_id=self.vpc.id,
            description="FSx for Lustre: LNet ports from the cluster only",
            tags={"Name": f"{name}-lustre"},
            opts=child,
        )
        self._lustre_rules(name, child)

        self.slurm_sg: aws.ec2.SecurityGroup | None = None
        if args.slurm_flows:
            self._slurm_rules(name, args.slurm_flows, child)

        if args.vpc.interface_endpoints:
            self._endpoints(name, args, child)

        outputs: dict[str, pulumi.Input[str]] = {
            "vpc_id": self.vpc.id,
            "private_subnet_id": self.private_subnet.id,
            "efa_security_group_id": self.efa_sg.id,
            "node_security_group_id": self.node_sg.id,
            "lustre_security_group_id": self.lustre_sg.id,
        }
        if self.slurm_sg is not None:
            outputs["slurm_security_group_id"] = self.slurm_sg.id
        self.register_outputs(outputs)

    @property
    def node_security_group_ids(self) -> list[pulumi.Input[str]]:
        """Every group a cluster node carries: EFA, node egress and Lustre client, Slurm."""
        groups: list[pulumi.Input[str]] = [self.efa_sg.id, self.node_sg.id]
        if self.slurm_sg is not None:
            groups.append(self.slurm_sg.id)
        return groups

    def _slurm_rules(self, name: str, flows: Sequence[Flow], child: pulumi.ResourceOptions) -> None:
        """One rule per flow (infra/slurm_network.py says which daemon talks to which and why).
        Rules name CIDR blocks of the on-prem side, never 0.0.0.0/0; the group is stateful, so
        replies need no rule of their own."""
        self.slurm_sg = aws.ec2.SecurityGroup(
            f"{name}-slurm",
            vpc_id=self.vpc.id,
            description="Burst nodes: Slurm to and from the on-prem controller and core only",
            tags={"Name": f"{name}-slurm"},
            opts=child,
        )
        for flow in flows:
            low, high = flow.ports
            rule = (
                aws.vpc.SecurityGroupIngressRule
                if flow.direction == "ingress"
                else aws.vpc.SecurityGroupEgressRule
            )
            rule(
                f"{name}-slurm-{flow.key}",
                security_group_id=self.slurm_sg.id,
                cidr_ipv4=flow.cidr,
                ip_protocol="tcp",
                from_port=low,
                to_port=high,
                description=flow.description,
                opts=child,
            )

    def _lustre_rules(self, name: str, child: pulumi.ResourceOptions) -> None:
        """LNet rules as the FSx for Lustre user guide lays them out ("File system access
        control with Amazon VPC"): the file system's group admits 988 and 1018-1023 from itself
        (the file servers talk to each other; without it CreateFileSystem fails with "... do
        not permit Lustre LNET network traffic on port 988") and from the clients; the clients'
        group admits them from itself and from the file system. pulumi-aws drops AWS's default
        allow-all egress, so every direction also gets its outbound rule. ``node_sg`` is the
        client group: every cluster node carries it, EFA or not.
        """
        fs, clients = self.lustre_sg, self.node_sg
        # (owner, peer, key): key names the pair in the rule's resource name, stably.
        pairs = (
            (fs, fs, "lustre", "self"),
            (fs, clients, "lustre", "clients"),
            (clients, clients, "node", "clients"),
            (clients, fs, "node", "lustre"),
        )
        for low, high in LUSTRE_PORTS:
            port = f"{low}" if low == high else f"{low}-{high}"
            for owner, peer, owner_key, peer_key in pairs:
                aws.vpc.SecurityGroupIngressRule(
                    f"{name}-{owner_key}-in-lustre-{port}-from-{peer_key}",
                    security_group_id=owner.id,
                    referenced_security_group_id=peer.id,
                    ip_protocol="tcp",
                    from_port=low,
                    to_port=high,
                    description=f"Lustre {port} from {peer_key}",
                    opts=child,
                )
                aws.vpc.SecurityGroupEgressRule(
                    f"{name}-{owner_key}-out-lustre-{port}-to-{peer_key}",
                    security_group_id=owner.id,
                    referenced_security_group_id=peer.id,
                    ip_protocol="tcp",
                    from_port=low,
                    to_port=high,
                    description=f"Lustre {port} to {peer_key}",
                    opts=child,
                )

    def _nat(self, name: str, args: NetworkArgs, child: pulumi.ResourceOptions) -> None:
        az = args.availability_zone
        igw = aws.ec2.InternetGateway(
            f"{name}-igw", vpc_id=self.vpc.id, tags={"Name": f"{name}-igw"}, opts=child
        )
        public = aws.ec2.Subnet(
            f"{name}-public-{az}",
            vpc_id=self.vpc.id,
            cidr_block=args.vpc.public_subnet_cidr,
            availability_zone=az,
            map_public_ip_on_launch=False,
            tags={"Name": f"{name}-public-{az}"},
            opts=child,
        )
        public_rt = aws.ec2.RouteTable(
            f"{name}-public-rt-{az}",
            vpc_id=self.vpc.id,
            routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": igw.id}],
            tags={"Name": f"{name}-public-{az}"},
            opts=child,
        )
        aws.ec2.RouteTableAssociation(
            f"{name}-public-rta-{az}",
            subnet_id=public.id,
            route_table_id=public_rt.id,
            opts=child,
        )
        eip = aws.ec2.Eip(f"{name}-nat-eip-{az}", domain="vpc", opts=child)
        self.nat_gateway = aws.ec2.NatGateway(
            f"{name}-nat-{az}",
            subnet_id=public.id,
            allocation_id=eip.id,
            tags={"Name": f"{name}-nat-{az}"},
            opts=child,
        )
        aws.ec2.Route(
            f"{name}-private-default-{az}",
            route_table_id=self.private_route_table.id,
            destination_cidr_block="0.0.0.0/0",
            nat_gateway_id=self.nat_gateway.id,
            opts=child,
        )

    def _endpoints(self, name: str, args: NetworkArgs, child: pulumi.ResourceOptions) -> None:
        endpoint_sg = aws.ec2.SecurityGroup(
            f"{name}-endpoints",
            vpc_id=self.vpc.id,
            description="Interface endpoints: HTTPS from cluster nodes",
            tags={"Name": f"{name}-endpoints"},
            opts=child,
        )
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-endpoints-in-https",
            security_group_id=endpoint_sg.id,
            referenced_security_group_id=self.node_sg.id,
            ip_protocol="tcp",
            from_port=443,
            to_port=443,
            description="HTTPS from cluster nodes",
            opts=child,
        )
        for service in INTERFACE_ENDPOINT_SERVICES:
            aws.ec2.VpcEndpoint(
                f"{name}-{service}",
                vpc_id=self.vpc.id,
                service_name=f"com.amazonaws.{args.region}.{service}",
                vpc_endpoint_type="Interface",
                private_dns_enabled=True,
                subnet_ids=[self.private_subnet.id],
                security_group_ids=[endpoint_sg.id],
                tags={"Name": f"{name}-{service}"},
                opts=child,
            )
