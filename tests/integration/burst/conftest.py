"""A real Slurm (munged, slurmctld, slurmd per node) on 127.0.0.1 with the burst side rendered
by ``burst.cli slurm-conf`` and the power programs pointed at a moto server on 127.0.0.1.

Skipped only when not root or the Slurm binaries are missing (Debian: slurmctld slurmd
slurm-client munge). Everything started here is stopped at the end, with bounded waits.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sandbox.emulator import AMI, MotoProcess, fake_session

# Tests are not a package on sys.path (pytest's importlib mode): load the lab helper by path.
_spec = importlib.util.spec_from_file_location(
    "burst_slurmlab", Path(__file__).with_name("slurmlab.py")
)
assert _spec is not None and _spec.loader is not None
slurmlab = importlib.util.module_from_spec(_spec)
sys.modules["burst_slurmlab"] = slurmlab
_spec.loader.exec_module(slurmlab)
BootWatcher, SlurmLab = slurmlab.BootWatcher, slurmlab.SlurmLab

pytestmark = pytest.mark.integration


@dataclass
class BurstLab:
    slurm: Any
    ec2: Any
    moto: MotoProcess
    watcher: Any
    wait: Callable[..., None] = slurmlab.wait_until

    def instances(self, node: str, states: tuple[str, ...] = ("pending", "running")) -> list[str]:
        resp = self.ec2.describe_instances(
            Filters=[
                {"Name": "tag:coreburst-slurm-node", "Values": [node]},
                {"Name": "instance-state-name", "Values": list(states)},
            ]
        )
        return [i["InstanceId"] for r in resp["Reservations"] for i in r["Instances"]]


def _launch_templates(ec2: Any) -> None:
    """What infra declares per cluster, as moto needs it: ``<cluster>-lt-<7 chars>`` (Pulumi's
    auto-name), tagged with the stack by the provider's default tags."""
    for cluster, suffix in (("od", "a1b2c3d"), ("sp", "e4f5a6b"), ("cb", "c7d8e9f")):
        ec2.create_launch_template(
            LaunchTemplateName=f"{cluster}-lt-{suffix}",
            LaunchTemplateData={"ImageId": AMI, "InstanceType": "p5.48xlarge"},
            TagSpecifications=[
                {
                    "ResourceType": "launch-template",
                    "Tags": [{"Key": "coreburst-stack", "Value": "lab"}],
                }
            ],
        )


@pytest.fixture(scope="module")
def burst_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BurstLab]:
    why = slurmlab.missing_prerequisite()
    if why:
        pytest.skip(why)
    moto = MotoProcess().start()
    lab_dir: Path = tmp_path_factory.mktemp("burstlab")
    aws_env = {
        "AWS_ENDPOINT_URL": moto.url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    slurm = SlurmLab(lab_dir, aws_env)
    ec2 = fake_session().client("ec2", endpoint_url=moto.url)
    watcher = BootWatcher(slurm, ec2)
    try:
        _launch_templates(ec2)
        slurm.start()
        watcher.start()
        yield BurstLab(slurm, ec2, moto, watcher)
    finally:
        watcher.stop()
        slurm.stop()
        moto.stop()
