"""HybridLink: Direct Connect back to the data centre (connections, DX gateway, VIFs, and the
gateway association)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.components import TOKEN_PREFIX
from infra.config import HybridLink as HybridLinkConfig

# Gateway associations take 15-45+ minutes; VIFs and connections can be slow too.
_SLOW = pulumi.CustomTimeouts(create="90m", update="90m", delete="90m")


@dataclass
class HybridLinkArgs:
    config: HybridLinkConfig
    vpc_id: pulumi.Input[str]
    vpc_cidr: str
    private_subnet_id: pulumi.Input[str]
    private_route_table_id: pulumi.Input[str]


def _slug(location: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in location.lower()).strip("-")


class HybridLink(pulumi.ComponentResource):
    """One dedicated connection per listed location (two locations = high resiliency), a DX
    gateway, one private or transit VIF per connection, and the gateway association that
    advertises the VPC to on-prem.

    The association is protected by default: an edit that forces its replacement fails at
    preview instead of cutting traffic to the data centre.
    """

    def __init__(
        self, name: str, args: HybridLinkArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(f"{TOKEN_PREFIX}:HybridLink", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        cfg = args.config
        slow = pulumi.ResourceOptions(parent=self, custom_timeouts=_SLOW)

        self.gateway = aws.directconnect.Gateway(
            f"{name}-dxgw",
            name=f"{name}-dxgw",
            amazon_side_asn=str(cfg.amazon_side_asn),
            opts=child,
        )

        if cfg.vif_type == "transit":
            self.tgw = aws.ec2transitgateway.TransitGateway(
                f"{name}-tgw",
                amazon_side_asn=cfg.amazon_side_asn + 1 if cfg.amazon_side_asn < 65_534 else 64_512,
                description=f"{name} hybrid link",
                opts=child,
            )
            aws.ec2transitgateway.VpcAttachment(
                f"{name}-tgw-vpc",
                transit_gateway_id=self.tgw.id,
                vpc_id=args.vpc_id,
                subnet_ids=[args.private_subnet_id],
                opts=child,
            )
            for prefix in cfg.on_prem_prefixes:
                aws.ec2.Route(
                    f"{name}-onprem-{prefix.replace('/', '_')}",
                    route_table_id=args.private_route_table_id,
                    destination_cidr_block=prefix,
                    transit_gateway_id=self.tgw.id,
                    opts=child,
                )
            associated: pulumi.Input[str] = self.tgw.id
        else:
            vgw = aws.ec2.VpnGateway(f"{name}-vgw", vpc_id=args.vpc_id, opts=child)
            # On-prem prefixes arrive over BGP and are propagated into the private routes.
            aws.ec2.VpnGatewayRoutePropagation(
                f"{name}-vgw-propagation",
                vpn_gateway_id=vgw.id,
                route_table_id=args.private_route_table_id,
                opts=child,
            )
            associated = vgw.id

        self.connections: list[aws.directconnect.Connection] = []
        self.vifs: list[pulumi.CustomResource] = []
        for conn in cfg.connections:
            key = _slug(conn.location)
            dx = aws.directconnect.Connection(
                f"{name}-dx-{key}",
                name=f"{name}-{key}",
                location=conn.location,
                bandwidth=conn.bandwidth,
                request_macsec=cfg.macsec or None,
                encryption_mode="must_encrypt" if cfg.macsec else None,
                opts=slow,
            )
            self.connections.append(dx)
            vif_type = (
                aws.directconnect.TransitVirtualInterface
                if cfg.vif_type == "transit"
                else aws.directconnect.PrivateVirtualInterface
            )
            vif: pulumi.CustomResource = vif_type(
                f"{name}-{cfg.vif_type}-vif-{key}",
                connection_id=dx.id,
                dx_gateway_id=self.gateway.id,
                name=f"{name}-{key}",
                vlan=conn.vlan,
                address_family="ipv4",
                bgp_asn=cfg.customer_asn,
                mtu=cfg.mtu,
                opts=slow,
            )
            self.vifs.append(vif)

        self.association = aws.directconnect.GatewayAssociation(
            f"{name}-dxgw-assoc",
            dx_gateway_id=self.gateway.id,
            associated_gateway_id=associated,
            allowed_prefixes=[args.vpc_cidr],
            opts=pulumi.ResourceOptions(
                parent=self, custom_timeouts=_SLOW, protect=cfg.protect_association
            ),
        )
        self.register_outputs(
            {
                "dx_gateway_id": self.gateway.id,
                "connection_ids": [c.id for c in self.connections],
                "association_id": self.association.id,
            }
        )
