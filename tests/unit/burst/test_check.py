"""The pure parts of ``coreburst burst check``: the Slurm side read from a recorded
``scontrol show config`` (Slurm 22.05, tests/fixtures/slurm/README.md) with this host's
filesystem, the vCPUs a stack asks of each quota, and the command line's bad input."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coreburst.burst.check import (
    QUOTA_CODES,
    check_slurm_config,
    executable_by,
    parse_show_config,
    quota_group,
    quota_needs,
)
from coreburst.burst.cli import app
from coreburst.burst.config import BurstStack, parse_burst
from coreburst.burst.slurmconf import node_sets
from coreburst.common.catalog import load_catalog
from guardrails.preflight import Result, exit_code, render_text
from tests.helpers.burst import CLUSTERS, stack_map, with_on_prem, write_stack

FIXTURE = (
    Path(__file__).parents[2] / "fixtures" / "slurm" / "scontrol-show-config-22.05-recorded.txt"
)
LAB = "/tmp/coreburst-checklab"  # the recording's lab directory
runner = CliRunner()


def recorded(lab: Path, **replace: str) -> str:
    text = FIXTURE.read_text().replace(LAB, str(lab))
    for key, value in replace.items():
        text = "\n".join(
            f"{key:<23} = {value}" if line.startswith(f"{key} ") else line
            for line in text.splitlines()
        )
    return text


def lab_stack(
    lab: Path, clusters: list[dict[str, object]] | None = None, **burst: object
) -> BurstStack:
    etc = lab / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    for name in ("resume", "suspend", "resume-fail"):
        p = etc / f"coreburst-burst-{name}"
        p.write_text("#!/bin/sh\n")
        p.chmod(0o755)
    settings = {
        "coreNodes": "core[1-2]",
        "resumeProgram": f"{etc}/coreburst-burst-resume",
        "suspendProgram": f"{etc}/coreburst-burst-suspend",
        "resumeFailProgram": f"{etc}/coreburst-burst-resume-fail",
        "resumeTimeout": 40,
        **burst,
    }
    return parse_burst("lab", with_on_prem(stack_map(clusters or CLUSTERS[:1], settings)))


def marks(results: list[Result]) -> list[tuple[str, str]]:
    return [(r.status, r.check) for r in results]


def test_the_recorded_config_parses() -> None:
    conf = parse_show_config(FIXTURE.read_text())
    assert conf["ResumeTimeout"] == "40 sec"
    assert conf["SlurmUser"] == "root(0)"
    assert conf["ResumeProgram"] == f"{LAB}/etc/coreburst-burst-resume"


def test_the_recorded_controller_runs_the_stacks_programs(tmp_path: Path) -> None:
    results = check_slurm_config(lab_stack(tmp_path), recorded(tmp_path), [])
    assert marks(results) == [("ok", "slurm-fragment")] + [("ok", "slurm-program")] * 3 + [
        ("ok", "slurm-timeout")
    ]
    assert exit_code(results, strict=True) == 0


def test_a_slurm_conf_without_the_fragment(tmp_path: Path) -> None:
    text = recorded(tmp_path, ResumeProgram="(null)", SuspendProgram="(null)")
    [frag, *_] = check_slurm_config(lab_stack(tmp_path), text, [])
    assert frag.status == "fail"
    assert frag.detail.startswith(
        f"ResumeProgram is (null), not {tmp_path}/etc/coreburst-burst-resume"
    )
    assert "add `Include <dir>/burst.conf`" in frag.fix and "scontrol reconfigure" in frag.fix


def test_a_program_slurmuser_cannot_run(tmp_path: Path) -> None:
    stack = lab_stack(tmp_path)
    # copied without its mode (a common slip): not executable, not even by root, the recorded
    # SlurmUser
    (tmp_path / "etc" / "coreburst-burst-suspend").chmod(0o644)
    results = check_slurm_config(stack, recorded(tmp_path), [])
    bad = [r for r in results if r.status == "fail"]
    assert [r.subject for r in bad] == [f"SuspendProgram {tmp_path}/etc/coreburst-burst-suspend"]
    assert bad[0].detail.startswith("SlurmUser root cannot run it: ")
    assert "mode -rw-r--r--" in bad[0].detail
    assert "writes the programs mode 0755" in bad[0].fix


def test_a_directory_slurmuser_cannot_enter(tmp_path: Path) -> None:
    prog = tmp_path / "private" / "resume"
    prog.parent.mkdir()
    prog.write_text("#!/bin/sh\n")
    prog.chmod(0o755)
    prog.parent.chmod(0o700)
    owner = os.stat(prog).st_uid
    assert executable_by(prog, owner, set()) is None
    assert executable_by(prog, 65534, set()) == (
        f"directory {prog.parent} is mode drwx------, not searchable"
    )
    assert executable_by(tmp_path / "nope", 65534, set()) == f"{tmp_path}/nope does not exist"


def test_a_resume_timeout_shorter_than_the_pools_boot(tmp_path: Path) -> None:
    results = check_slurm_config(lab_stack(tmp_path, resumeTimeout=1800), recorded(tmp_path), [])
    [t] = [r for r in results if r.check == "slurm-timeout"]
    assert t.status == "fail"
    assert t.detail.startswith("40 s < the pools' boot allowance 1800 s")


def test_capacity_block_holds_are_looked_for(tmp_path: Path) -> None:
    capacity = {"model": "capacity-block", "reservationId": "cr-0123456789abcdef0"}
    cb = [{"name": "cb", "instanceType": "p5.48xlarge", "nodes": 1, "capacity": capacity}]
    stack = lab_stack(tmp_path, cb)
    missing = check_slurm_config(stack, recorded(tmp_path), ["other"])
    assert ("fail", "slurm-reservation") in marks(missing)
    present = check_slurm_config(stack, recorded(tmp_path), ["coreburst-hold-cb"])
    assert ("ok", "slurm-reservation") in marks(present)
    unreadable = check_slurm_config(stack, recorded(tmp_path), None)
    assert ("unknown", "slurm-reservation") in marks(unreadable)
    assert exit_code(unreadable, strict=False) == 0 and exit_code(unreadable, strict=True) == 1


def test_quota_needs_every_node_of_each_market_at_once() -> None:
    stack = parse_burst("prod", with_on_prem(stack_map(CLUSTERS, {"coreNodes": "dgx[1-2]"})))
    need = quota_needs(node_sets(stack), load_catalog())
    # od: 2 x p5.48xlarge (192 vCPUs); sp: 3 x p5en.48xlarge (192); trn: a capacity reservation
    # of 1 x trn2.48xlarge (192), counted as on-demand.
    assert need == {
        ("P", "on-demand"): (384, ["od"]),
        ("P", "spot"): (576, ["sp"]),
        ("Trn", "on-demand"): (192, ["trn"]),
    }


def test_every_catalog_family_has_its_on_demand_and_spot_quota_codes() -> None:
    families = {i.family for i in load_catalog().instances.values()}
    for family in sorted(families):
        group = quota_group(family)
        assert group is not None, f"{family}: no vCPU quota group; add its codes to QUOTA_CODES"
        assert (group, "on-demand") in QUOTA_CODES and (group, "spot") in QUOTA_CODES


def test_the_summary_line_counts_each_mark(tmp_path: Path) -> None:
    text = render_text(
        check_slurm_config(lab_stack(tmp_path, resumeTimeout=1800), recorded(tmp_path), [])
    )
    assert text.splitlines()[-1] == "4 ✔, 1 ✘, 0 ? of 5 checks"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "xml"], "error: --format 'xml': use text or json"),
        (["--skip", "ec2"], "error: --skip 'ec2': use aws, permissions, slurm"),
        (
            ["--principal", "burst-controller"],
            "error: --principal 'burst-controller': not an IAM role or user ARN; "
            "e.g. arn:aws:iam::123456789012:role/burst-controller",
        ),
    ],
)
def test_bad_options_are_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    write_stack(tmp_path, "prod", with_on_prem(stack_map(CLUSTERS, {"coreNodes": "dgx[1-2]"})))
    r = runner.invoke(app, ["check", "--stack", "prod", "--stack-dir", str(tmp_path), *args])
    assert r.exit_code == 2
    assert r.output.strip() == message


def test_an_unknown_stack_is_one_line_and_exit_2(tmp_path: Path) -> None:
    r = runner.invoke(app, ["check", "--stack", "nope", "--stack-dir", str(tmp_path)])
    assert r.exit_code == 2
    assert r.output.startswith("error: no stack 'nope'") and len(r.output.splitlines()) == 1


def test_a_spend_gate_whose_guardrails_config_is_gone(tmp_path: Path) -> None:
    gone = tmp_path / "guardrails.yaml"
    stack = lab_stack(tmp_path, spendGate={"guardrailsConfig": str(gone)})
    [gate] = [
        r for r in check_slurm_config(stack, recorded(tmp_path), []) if r.check == "spend-gate"
    ]
    assert gate.status == "fail"
    assert gate.detail.startswith("coreburst:burst.spendGate.guardrailsConfig: ")
    assert str(gone) in gate.detail
