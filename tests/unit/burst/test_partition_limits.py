"""Partition limits: what docs/burst.md says burst.conf caps the partitions at, and what
``coreburst burst slurm-conf`` renders for the shipped example stack (Pulumi.burst.yaml: maxTime
2 days, spotMaxTime 12 hours) and for a stack that sets neither (the 7-day default), agree
(issue 32 item 4)."""

from __future__ import annotations

import re
from pathlib import Path

from coreburst.burst.config import BurstSettings, load_burst_stack, parse_burst
from coreburst.burst.slurmconf import render_slurm_include
from tests.helpers.burst import CLUSTERS, stack_map

ROOT = Path(__file__).resolve().parents[3]


def _max_times(conf: str) -> dict[str, str]:
    return dict(re.findall(r"(?m)^PartitionName=(\S+) .*\bMaxTime=(\S+)", conf))


def test_the_example_stack_renders_the_limits_the_docs_state() -> None:
    conf = render_slurm_include(load_burst_stack("burst", ROOT))
    assert _max_times(conf) == {"burst": "2-00:00:00", "spot": "12:00:00"}
    docs = " ".join((ROOT / "docs" / "burst.md").read_text().split())
    assert "renders `MaxTime=2-00:00:00` and `MaxTime=12:00:00`" in docs


def test_without_settings_every_burst_partition_is_capped_at_the_documented_week() -> None:
    defaults = BurstSettings()
    assert defaults.max_time == defaults.spot_max_time == "7-00:00:00"
    conf = render_slurm_include(parse_burst("t", stack_map(CLUSTERS, {"coreNodes": "dgx1"})))
    assert set(_max_times(conf).values()) == {"7-00:00:00"}
    docs = " ".join((ROOT / "docs" / "burst.md").read_text().split())
    assert "both 7 days (`7-00:00:00`) unless the stack sets them" in docs
