"""Burst stacks for the burst unit tests, made up here (keys follow infra/config.py
(StackConfig) and coreburst/burst/config.py (BurstSettings)), and the EC2 resources that infra
and the power programs would have made for them, on moto."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

AMI = "ami-12c6146b"  # one of moto's built-in images
STACK = "prod"


def stack_map(
    clusters: list[dict[str, Any]], burst: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "aws:region": "us-east-1",
        "coreburst:availabilityZone": "us-east-1a",
        "coreburst:tags": {
            "team": "ml",
            "project": "llm",
            "costCenter": "cc-1",
            "environment": "dev",
        },
        "coreburst:budget": {"monthlyUsd": 100000},
        "coreburst:clusters": clusters,
        **({"coreburst:burst": burst} if burst is not None else {}),
    }


# The on-prem side of the made-up burst stacks: where slurmctld and the core are
# (coreburst:burst.onPrem, infra/config.py OnPrem) and the link burst nodes reach them over
# (coreburst:vpn, infra/config.py SiteToSiteVpn; 203.0.113.0/24 is a documentation range).
ON_PREM = {"controllerCidrs": ["10.20.0.10/32"], "coreCidrs": ["10.20.16.0/24"]}
VPN = {"customerGatewayIp": "203.0.113.10", "onPremPrefixes": ["10.20.0.0/16"]}


def with_on_prem(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (a stack's config map with ``coreburst:burst``) with :data:`ON_PREM` under
    its burst section and :data:`VPN` as its link, unless it names its own."""
    config["coreburst:burst"].setdefault("onPrem", ON_PREM)
    if "coreburst:hybridLink" not in config:
        config.setdefault("coreburst:vpn", VPN)
    return config


CLUSTERS = [
    {"name": "od", "instanceType": "p5.48xlarge", "nodes": 2, "capacity": {"model": "on-demand"}},
    {"name": "sp", "instanceType": "p5en.48xlarge", "nodes": 3, "capacity": {"model": "spot"}},
    {
        "name": "trn",
        "instanceType": "trn2.48xlarge",
        "nodes": 1,
        "capacity": {"model": "capacity-reservation", "reservationId": "cr-0123456789abcdef0"},
    },
]


def write_stack(root: Path, name: str, config: dict[str, Any]) -> Path:
    path = root / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return path


def _templates(ec2: Any, stack: str, clusters: list[str]) -> None:
    """As infra declares them: ``<cluster>-lt-<Pulumi suffix>``, tagged with the stack."""
    for c in clusters:
        ec2.create_launch_template(
            LaunchTemplateName=f"{c}-lt-0a1b2c3",
            LaunchTemplateData={"ImageId": AMI, "InstanceType": "p5.48xlarge"},
            TagSpecifications=[
                {
                    "ResourceType": "launch-template",
                    "Tags": [{"Key": "coreburst-stack", "Value": stack}],
                }
            ],
        )


def launch(ec2: Any, node: str | None, stack: str = STACK) -> str:
    tags = [{"Key": "coreburst-stack", "Value": stack}, {"Key": "coreburst-cluster", "Value": "od"}]
    if node:
        tags.append({"Key": "coreburst-slurm-node", "Value": node})
    resp = ec2.run_instances(
        ImageId=AMI,
        InstanceType="p5.48xlarge",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    return str(resp["Instances"][0]["InstanceId"])
