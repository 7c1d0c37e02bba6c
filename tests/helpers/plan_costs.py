"""The totals of ``coreburst plan`` for the dev and prod stacks, done here by hand from the
catalog (the arithmetic the plan must agree with)."""

from __future__ import annotations

from coreburst.common.catalog import load_catalog

CAT = load_catalog()
H = CAT.hours_per_month  # 730
GP3 = CAT.ebs_gp3_usd_per_gb_month.value  # 0.08
NAT_H = CAT.nat_gateway.usd_per_hour.value  # 0.045
# The NAT gateway's Elastic IP bills as a public IPv4 address (Amazon VPC pricing, "Public IPv4
# Address": every public IPv4 address, in use or idle, https://aws.amazon.com/vpc/pricing/).
EIP_H = CAT.public_ipv4_usd_per_hour.value  # 0.005


def _dev_monthly() -> float:
    p5 = CAT.instance("p5.48xlarge").on_demand_usd_per_hour["us-east-1"].value  # 55.04
    spot = p5 * CAT.spot_fraction_of_on_demand.value  # x 0.45
    lustre = CAT.fsx_lustre_usd_per_gb_month["PERSISTENT_2"]["125"].value  # 0.145
    return (
        2 * spot * H  # 2 spot p5 nodes
        + 2 * 512 * GP3  # their 512 GiB gp3 root volumes
        + 1200 * lustre  # 1,200 GiB PERSISTENT_2 at 125 MB/s/TiB
        + NAT_H * H  # one NAT gateway, no processed data
        + EIP_H * H  # its Elastic IP
    )


def _prod_monthly() -> float:
    p5en_cb = CAT.instance("p5en.48xlarge").capacity_block_usd_per_hour["us-east-2"].value
    trn2 = CAT.instance("trn2.48xlarge").on_demand_usd_per_hour["us-east-2"].value
    lustre = CAT.fsx_lustre_usd_per_gb_month["PERSISTENT_2"]["1000"].value
    dx100 = CAT.direct_connect_port_usd_per_hour["100Gbps"].value
    endpoint = CAT.vpc_interface_endpoint_usd_per_hour.value
    secret = CAT.secrets_manager_secret_usd_per_month.value  # 0.40 per secret-month
    return (
        16 * p5en_cb * H  # 16 p5en on a Capacity Block
        + 4 * trn2 * H  # 4 trn2 on-demand
        + (16 + 4) * 1024 * GP3  # 1 TiB gp3 root volume per node
        + 38_400 * lustre  # EFA-enabled Lustre, 1000 MB/s/TiB
        + 2 * dx100 * H  # two 100G dedicated ports
        + NAT_H * H
        + EIP_H * H  # the NAT gateway's Elastic IP
        + 5 * endpoint * H  # ssm, ssmmessages, ec2messages, monitoring, logs
        + secret  # the guardrails' Slack webhook secret
    )
