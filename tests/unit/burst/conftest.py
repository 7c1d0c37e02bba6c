"""The burst unit tests' stack (tests/helpers/burst.py builds it) on disk and loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from coreburst.burst.config import BurstStack, load_burst_stack
from tests.helpers.burst import CLUSTERS, stack_map, write_stack


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
