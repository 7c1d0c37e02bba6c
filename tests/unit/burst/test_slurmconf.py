"""The rendered Slurm configuration: facts from the catalog, policy as partitions and
reservations. tests/integration/burst loads the same rendering into a real slurmctld."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from coreburst.burst.config import load_burst_stack, parse_burst
from coreburst.burst.hostlist import expand
from coreburst.burst.slurmconf import (
    node_sets,
    render_gres,
    render_program,
    render_slurm_include,
    reservation_commands,
)
from coreburst.common.catalog import load_catalog
from infra.config import StackConfigError
from tests.helpers.burst import stack_map, with_on_prem

ROOT = Path(__file__).resolve().parents[3]  # the checkout: its example stacks


def _lines(text: str, prefix: str) -> list[str]:
    return [x for x in text.splitlines() if x.startswith(prefix)]


def test_node_sets_carry_catalog_facts(stack) -> None:  # type: ignore[no-untyped-def]
    cat = load_catalog()
    sets = {ns.cluster: ns for ns in node_sets(stack)}
    for ns in sets.values():
        facts = cat.instance(ns.instance_type)
        assert ns.cpus == facts.vcpus
        assert ns.real_memory_mb == int(facts.memory_gib * 1024 * 0.95)
    assert sets["od"].names == ("od-1", "od-2")
    assert (sets["od"].gpus, sets["od"].gpu_type) == (8, "h100")
    assert (sets["sp"].gpus, sets["sp"].gpu_type) == (8, "h200")
    # Trainium is not a Slurm GPU: no GRES, a feature instead.
    assert sets["trn"].gpus == 0 and "trainium2" in sets["trn"].features
    assert [ns.partition for ns in sets.values()] == ["burst", "spot", "burst"]


def test_include_power_save_and_partitions(stack) -> None:  # type: ignore[no-untyped-def]
    text = render_slurm_include(stack)
    assert "ResumeProgram=/usr/local/sbin/coreburst-burst-resume" in text
    assert "SuspendExcNodes=dgx[01-04]" in text
    assert "SuspendTime=600" in text and "ResumeTimeout=1800" in text
    nodes = _lines(text, "NodeName=")
    assert nodes[0] == (
        "NodeName=od-[1-2] CPUs=192 RealMemory=1992294 Gres=gpu:h100:8 "
        "Features=burst,on-demand,p5.48xlarge,h100,nvidia,od State=CLOUD"
    )
    assert all("Weight" not in x for x in nodes)  # pools are ordered with partitions
    parts = _lines(text, "PartitionName=")
    assert parts == [
        "PartitionName=burst Nodes=od-[1-2],trn-1 MaxTime=7-00:00:00 PriorityTier=1 State=UP",
        "PartitionName=spot Nodes=sp-[1-3] MaxTime=7-00:00:00 PriorityTier=1 State=UP",
    ]
    assert "cloud_reg_addrs" not in text  # private-ip mode: the resume program sets NodeAddr


def test_port_base_gives_one_port_per_node(tmp_path: Path) -> None:
    s = parse_burst(
        "lab",
        stack_map(
            [
                {
                    "name": "od",
                    "instanceType": "p5.48xlarge",
                    "nodes": 2,
                    "capacity": {"model": "on-demand"},
                }
            ],
            {"slurmdPortBase": 30000, "nodeAddress": "registration"},
        ),
    )
    nodes = _lines(render_slurm_include(s), "NodeName=")
    assert [x.split()[:2] for x in nodes] == [
        ["NodeName=od-1", "Port=30000"],
        ["NodeName=od-2", "Port=30001"],
    ]
    assert "cloud_reg_addrs" in render_slurm_include(s)


def test_gres_lines(stack) -> None:  # type: ignore[no-untyped-def]
    assert _lines(render_gres(stack), "NodeName=") == [
        "NodeName=od-[1-2] Name=gpu Type=h100 File=/dev/nvidia[0-7]",
        "NodeName=sp-[1-3] Name=gpu Type=h200 File=/dev/nvidia[0-7]",
    ]


def _block_stack(window: dict[str, str] | None):  # type: ignore[no-untyped-def]
    return parse_burst(
        "b",
        stack_map(
            [
                {
                    "name": "cb",
                    "instanceType": "p5.48xlarge",
                    "nodes": 4,
                    "capacity": {
                        "model": "capacity-block",
                        "reservationId": "cr-0123456789abcdef0",
                    },
                }
            ],
            {"capacityBlocks": {"cb": window}} if window else {},
        ),
    )


def test_capacity_block_held_until_it_starts() -> None:
    start = datetime(2026, 12, 10, 11, 30, tzinfo=UTC)
    s = _block_stack({"start": start.isoformat(), "end": (start + timedelta(days=2)).isoformat()})
    before = reservation_commands(s, start - timedelta(hours=1))
    assert len(before) == 2
    hold = shlex.split(before[0].removeprefix("TZ=UTC "))
    assert hold[:3] == ["scontrol", "create", "reservation"]
    assert "Nodes=cb-[1-4]" in hold and "Flags=MAINT,IGNORE_JOBS" in hold
    assert "EndTime=2026-12-10T11:30:00" in hold
    assert "StartTime=2026-12-12T11:30:00" in before[1]
    # During the block: only the hold after its end remains; after it: hold from now.
    assert len(reservation_commands(s, start + timedelta(hours=1))) == 1
    assert "StartTime=now" in reservation_commands(s, start + timedelta(days=3))[0]
    # Dates unknown: hold indefinitely.
    (cmd,) = reservation_commands(_block_stack(None), start)
    assert "Duration=UNLIMITED" in cmd and "StartTime=now" in cmd


def test_settings_errors_are_one_line() -> None:
    base = [
        {
            "name": "od",
            "instanceType": "p5.48xlarge",
            "nodes": 1,
            "capacity": {"model": "on-demand"},
        }
    ]
    cases = [
        ({"maxTime": "a week"}, "coreburst:burst.maxTime"),
        ({"coreNodes": "dgx[1-2] Weight=1"}, "coreburst:burst.coreNodes"),
        ({"suspendTme": 5}, "unknown key"),
        ({"capacityBlocks": {"od": {"start": "2026-12-10T00:00:00Z"}}}, "not a capacity-block"),
        ({"capacityBlocks": {"zz": {"start": "2026-12-10T00:00:00Z"}}}, "no cluster named zz"),
    ]
    for burst, needle in cases:
        with pytest.raises(StackConfigError) as exc:
            parse_burst("x", stack_map(base, burst))
        assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_repo_dev_stack_renders() -> None:
    """The shipped dev stack (no coreburst:burst key) renders with defaults."""
    s = load_burst_stack("dev", ROOT)
    text = render_slurm_include(s)
    c = s.config.clusters[0]
    assert expand(_lines(text, "NodeName=")[0].split()[0].removeprefix("NodeName=")) == [
        f"{c.name}-{i}" for i in range(1, c.nodes + 1)
    ]


def test_unknown_stack_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(StackConfigError, match="no stack 'nope'"):
        load_burst_stack("nope", tmp_path)


def test_program_wrapper(stack) -> None:  # type: ignore[no-untyped-def]
    text = render_program("resume", stack, ["coreburst", "burst"], "/srv/stacks", "/etc/x.env")
    assert text.startswith("#!/bin/sh\n")
    assert 'exec coreburst burst resume --stack t --stack-dir /srv/stacks "$@"' in text


def test_one_burst_section_serves_pulumi_and_slurm_conf() -> None:
    """The same `coreburst:burst` (with `node`, which the user data reads) is accepted by the
    Pulumi program's config and by `coreburst burst slurm-conf`; configless joins need
    enable_configless on the controller (slurm.conf(5), SlurmctldParameters)."""
    from infra.offline import evaluate_config

    raw = stack_map(
        [
            {
                "name": "od",
                "instanceType": "p5.48xlarge",
                "nodes": 1,
                "capacity": {"model": "on-demand"},
            }
        ],
        {"node": {"confServer": "slurmctl.corp.example:6817"}},
    )
    s = parse_burst("lab", raw)
    assert s.settings.node is not None and s.settings.node.conf_mode == "configless"
    params = _lines(render_slurm_include(s), "SlurmctldParameters=")
    assert params and "enable_configless" in params[0].split("=", 1)[1].split(",")
    assert evaluate_config("lab", with_on_prem(raw)).config.burst is not None
    no_node = parse_burst("lab", stack_map(raw["coreburst:clusters"], {}))
    assert "enable_configless" not in render_slurm_include(no_node)
