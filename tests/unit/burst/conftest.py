"""Stacks for the burst unit tests. Made up here; keys follow infra/config.py (StackConfig)
and coreburst/burst/config.py (BurstSettings)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from coreburst.burst.config import BurstStack, load_burst_stack


class RecordingSlurm:
    """Records scontrol argv (no Slurm here; the integration suite runs these for real)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def scontrol(self, *args: str) -> str:
        self.calls.append(args)
        return ""


def fake_aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto in process: no endpoint or profile from the machine, test credentials."""
    for var in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


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


@pytest.fixture
def stack_dir(tmp_path: Path) -> Path:
    cfg = stack_map(
        CLUSTERS,
        {
            "coreNodes": "dgx[01-04]",
            "logFile": str(tmp_path / "p.log"),
            "auditLog": str(tmp_path / "a.jsonl"),
        },
    )
    cfg["aws:region"] = "us-east-2"  # where the trn2 price is verified
    cfg["coreburst:availabilityZone"] = "us-east-2a"
    write_stack(tmp_path, "t", cfg)
    return tmp_path


@pytest.fixture
def stack(stack_dir: Path) -> BurstStack:
    return load_burst_stack("t", stack_dir)
