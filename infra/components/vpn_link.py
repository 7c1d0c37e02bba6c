"""VpnLink: an AWS Site-to-Site VPN back to the data centre (virtual private gateway, customer
gateway, one VPN connection with static routes, and the private routes to on-prem over it)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.components import TOKEN_PREFIX
from infra.config import SiteToSiteVpn

# The only type CreateCustomerGateway and CreateVpnConnection accept.
IPSEC = "ipsec.1"


@dataclass
class VpnLinkArgs:
    config: SiteToSiteVpn
    vpc_id: pulumi.Input[str]
    private_route_table_id: pulumi.Input[str]


def prefix_key(prefix: str) -> str:
    """A resource-name suffix for an on-prem prefix, stable as the list changes."""
    return prefix.replace("/", "_")


class VpnLink(pulumi.ComponentResource):
    """The smaller hybrid link, as the AWS Site-to-Site VPN user guide lays it out ("Get
    started"): a virtual private gateway attached to the VPC, a customer gateway naming the
    on-prem device's public address, a VPN connection between them (two tunnels, AWS picks
    their addresses and keys) with ``static_routes_only``, a static route per on-prem prefix on
    the connection, and the same prefixes routed to the virtual private gateway in the private
    route table ("Configure routing": without a route, nothing in the VPC uses the tunnels).

    Routes are declared rather than propagated, so what the private subnets send over the VPN
    is what the stack says, and a preview shows it.
    """

    def __init__(
        self, name: str, args: VpnLinkArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(f"{TOKEN_PREFIX}:VpnLink", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        cfg = args.config

        self.gateway = aws.ec2.VpnGateway(
            f"{name}-vgw",
            vpc_id=args.vpc_id,
            amazon_side_asn=str(cfg.amazon_side_asn) if cfg.amazon_side_asn else None,
            tags={"Name": f"{name}-vgw"},
            opts=child,
        )
        self.customer_gateway = aws.ec2.CustomerGateway(
            f"{name}-cgw",
            type=IPSEC,
            ip_address=cfg.customer_gateway_ip,
            bgp_asn=str(cfg.customer_asn),
            tags={"Name": f"{name}-cgw"},
            opts=child,
        )
        self.connection = aws.ec2.VpnConnection(
            f"{name}-connection",
            type=IPSEC,
            vpn_gateway_id=self.gateway.id,
            customer_gateway_id=self.customer_gateway.id,
            static_routes_only=True,
            tags={"Name": f"{name}-connection"},
            opts=child,
        )
        for prefix in cfg.on_prem_prefixes:
            key = prefix_key(prefix)
            aws.ec2.VpnConnectionRoute(
                f"{name}-route-{key}",
                vpn_connection_id=self.connection.id,
                destination_cidr_block=prefix,
                opts=child,
            )
            aws.ec2.Route(
                f"{name}-onprem-{key}",
                route_table_id=args.private_route_table_id,
                destination_cidr_block=prefix,
                gateway_id=self.gateway.id,
                opts=child,
            )
        self.register_outputs(
            {
                "vpn_gateway_id": self.gateway.id,
                "vpn_connection_id": self.connection.id,
                "tunnel_addresses": [
                    self.connection.tunnel1_address,
                    self.connection.tunnel2_address,
                ],
            }
        )
