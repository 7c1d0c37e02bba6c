"""On a burst stack, Slurm starts the nodes (the resume program's CreateFleet on the cluster's
launch template): its Auto Scaling group must never start an instance, which would get no node
tag and never join Slurm. Checked on the program's resources under Pulumi's mocks
(infra/offline.py), the pattern of tests/unit/infra.

AWS Auto Scaling, "Set capacity limits on your Auto Scaling group"
(https://docs.aws.amazon.com/autoscaling/ec2/userguide/asg-capacity-limits.html): desired
capacity must lie within the minimum and maximum; a maximum of 0 keeps the group from launching
any instance, however the desired capacity is changed.
"""

from __future__ import annotations

import copy
from typing import Any

from infra.offline import evaluate_config, load_stack_yaml
from tests.helpers.burst import with_on_prem


def _asg(config: dict[str, Any], cluster: str) -> dict[str, Any]:
    return dict(evaluate_config("dev", config).named(f"{cluster}-asg").inputs)


def test_burst_stack_asg_launches_nothing_and_plain_stack_keeps_its_nodes() -> None:
    plain = copy.deepcopy(load_stack_yaml("dev"))
    cluster = plain["coreburst:clusters"][0]
    asg = _asg(plain, cluster["name"])
    assert asg["desiredCapacity"] == cluster["nodes"] >= 1
    assert asg["maxSize"] >= cluster["nodes"]

    burst = copy.deepcopy(plain)
    burst["coreburst:burst"] = {"node": {"confServer": "slurmctl.corp.example:6817"}}
    with_on_prem(burst)
    asg = _asg(burst, cluster["name"])
    assert (asg["minSize"], asg["maxSize"], asg["desiredCapacity"]) == (0, 0, 0)
    # The launch template is still declared for CreateFleet, with the join block.
    ev = evaluate_config("dev", burst)
    assert ev.named(f"{cluster['name']}-lt").inputs["metadataOptions"]["instanceMetadataTags"]
