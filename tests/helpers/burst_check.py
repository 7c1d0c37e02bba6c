"""What ``pulumi up`` of a burst stack leaves in an account, made on moto for the
``coreburst burst check`` tests: the stack's VPC and private subnet per zone (tagged as
infra/components/network.py tags them), one launch template per pool (named and tagged as
infra/components/gpu_cluster.py declares them, the subnet in the template for a one-zone
pool), and the spot-event queue with its two EventBridge rules (as
infra/components/guardrails.py declares them). Made up here, following those modules."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import boto3

from coreburst.burst.config import BurstStack
from coreburst.burst.slurmconf import node_sets
from coreburst.common.names import CLUSTER_TAG_KEY, PRIVATE_SUBNET_TAG, STACK_TAG_KEY
from coreburst.sandbox.emulator import AMI

SPOT_EVENTS = {
    "interruption": "EC2 Spot Instance Interruption Warning",
    "rebalance": "EC2 Instance Rebalance Recommendation",
}


@dataclass
class World:
    subnets: dict[str, str] = field(default_factory=dict)  # zone -> subnet id
    templates: dict[str, str] = field(default_factory=dict)  # cluster -> template id
    queue_url: str = ""
    rules: dict[str, str] = field(default_factory=dict)  # kind -> rule name


def client(service: str, url: str, region: str = "us-east-1") -> Any:
    return boto3.client(
        service,  # type: ignore[call-overload]
        region_name=region,
        endpoint_url=url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def seed(url: str, stack: BurstStack, *, spot_events: bool = True) -> World:
    """The resources of ``stack`` on the moto server at ``url``."""
    region = stack.config.region
    ec2 = client("ec2", url, region)
    w = World()
    vpc = ec2.create_vpc(CidrBlock="10.72.0.0/16")["Vpc"]["VpcId"]
    sets = node_sets(stack)
    zones = sorted({z for ns in sets for z in ns.zones} | {stack.config.availability_zone})
    for i, zone in enumerate(zones):
        sn = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.72.{i * 16}.0/20", AvailabilityZone=zone)
        sid = sn["Subnet"]["SubnetId"]
        ec2.create_tags(
            Resources=[sid],
            Tags=[
                {"Key": STACK_TAG_KEY, "Value": stack.name},
                {"Key": PRIVATE_SUBNET_TAG, "Value": "private"},
            ],
        )
        w.subnets[zone] = sid
    for ns in sets:
        data: dict[str, Any] = {"ImageId": AMI, "InstanceType": ns.instance_type}
        if len(ns.zones) <= 1:
            zone = ns.zones[0] if ns.zones else stack.config.availability_zone
            data["NetworkInterfaces"] = [{"DeviceIndex": 0, "SubnetId": w.subnets[zone]}]
        lt = ec2.create_launch_template(
            LaunchTemplateName=f"{ns.cluster}-lt-0a1b2c3",
            LaunchTemplateData=data,
            TagSpecifications=[
                {
                    "ResourceType": "launch-template",
                    "Tags": [
                        {"Key": STACK_TAG_KEY, "Value": stack.name},
                        {"Key": CLUSTER_TAG_KEY, "Value": ns.cluster},
                    ],
                }
            ],
        )
        w.templates[ns.cluster] = lt["LaunchTemplate"]["LaunchTemplateId"]
    if spot_events:
        sqs = client("sqs", url, region)
        w.queue_url = sqs.create_queue(QueueName="guardrails-spot-events-4f2a9c1")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=w.queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        events = client("events", url, region)
        for kind, detail in SPOT_EVENTS.items():
            name = f"guardrails-spot-{kind}-7c1e0b2"
            events.put_rule(
                Name=name,
                EventPattern=json.dumps({"source": ["aws.ec2"], "detail-type": [detail]}),
                State="ENABLED",
            )
            events.put_targets(Rule=name, Targets=[{"Id": "queue", "Arn": arn}])
            w.rules[kind] = name
    return w
