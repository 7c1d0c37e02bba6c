"""``coreburst plan`` through the CLI: totals equal the catalog arithmetic, done here by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coreburst.cli import app
from coreburst.common.catalog import load_catalog

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "preview"
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


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["plan", *args])


def as_json(*args: str) -> dict[str, Any]:
    result = invoke(*args, "--format", "json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_catalog_figures_are_the_ones_written_down() -> None:
    assert round(_dev_monthly(), 2) == 36_453.70
    assert round(_prod_monthly(), 2) == 690_190.60


@pytest.mark.parametrize(("stack", "expected"), [("dev", _dev_monthly), ("prod", _prod_monthly)])
def test_totals_equal_the_catalog_arithmetic(stack: str, expected: Any) -> None:
    doc = as_json("-s", stack)
    assert doc["totals"]["monthlyUsd"] == pytest.approx(expected(), abs=0.01)
    assert sum(x["monthlyUsd"] for x in doc["lines"]) == pytest.approx(expected(), abs=0.05)
    assert doc["policies"] == {
        "checked": 17,
        "config": str(ROOT / "policies" / "config" / f"{stack}.json"),
        "passed": True,
        "violations": [],
    }


def test_json_lines_are_per_resource() -> None:
    doc = as_json("-s", "dev")
    assert [(x["category"], x["item"]) for x in doc["lines"]] == [
        ("compute", "dev-p5-asg"),
        ("storage", "dev-p5-asg/volumes"),
        ("storage", "lustre-fs"),
        ("network", "net-nat-us-east-1a"),
        ("network", "net-nat-eip-us-east-1a"),
    ]
    assert doc["lines"][0]["detail"] == "2 x p5.48xlarge spot @ $24.768/h"
    # Spot is on-demand (REFERENCE snapshot) x the catalog's spot fraction (an estimate).
    assert doc["lines"][0]["priceSource"] == "ref 2025-06; estimate 2026-11 unverified"
    assert doc["lines"][-1]["priceSource"] == "aws-ipv4-pricing 2024-02 unverified"
    assert doc["region"] == "us-east-1"
    assert doc["resourceCount"] == 53  # the dev program's custom AWS resources


def test_table_prints_total_and_verdict() -> None:
    result = invoke("-s", "dev")
    assert result.exit_code == 0
    assert "36,453.70" in result.stdout
    assert "policies: PASS (17 policies, no violations)" in result.stdout


def test_markdown_for_pr_comments() -> None:
    result = invoke("-s", "dev", "--format", "markdown")
    assert result.exit_code == 0
    md = result.stdout
    assert md.startswith("### coreburst plan: `dev` (us-east-1, offline evaluation)\n")
    assert "| category | resource | detail | $/hour | $/month | price |" in md
    assert "| **total** | | | **49.94** | **36,453.70** | |" in md
    assert md.rstrip().endswith("**Policies: PASS** (17 policies, no violations)")


def test_egress_is_priced_with_the_catalog_tiers() -> None:
    doc = as_json("-s", "dev", "--egress-gb", "5000")
    egress = next(x for x in doc["lines"] if x["item"] == "internet-egress")
    assert egress["monthlyUsd"] == pytest.approx((5000 - 100) * 0.09)  # first 100 GB free
    assert doc["totals"]["monthlyUsd"] == pytest.approx(_dev_monthly() + 441.0, abs=0.01)


def test_compare_prints_the_difference_line_by_line() -> None:
    # stack - base: what prod adds to dev is positive (issue 23)
    doc = as_json("-s", "prod", "--compare", "dev")
    cmp = doc["compare"]
    assert (cmp["stack"], cmp["base"], cmp["delta"]) == ("prod", "dev", "prod - dev")
    assert cmp["totals"]["deltaUsd"] == pytest.approx(_prod_monthly() - _dev_monthly(), abs=0.01)
    lustre = next(x for x in cmp["lines"] if x["item"] == "lustre-fs")
    assert lustre == {
        "item": "lustre-fs",
        "baseMonthlyUsd": 174.0,
        "monthlyUsd": 23_040.0,
        "deltaUsd": 22_866.0,
        "unverified": True,
    }
    md = invoke("-s", "prod", "--compare", "dev", "--format", "markdown").stdout
    assert "| `lustre-fs` | 174.00 | 23,040.00 | +22,866.00 | unverified |" in md


def test_preview_json_prices_what_pulumi_will_do() -> None:
    # The fixture grows dev-p5-asg from 1 to 2 nodes and deletes a second NAT gateway:
    # the new state is priced, the deleted gateway is not.
    doc = as_json("-s", "dev", "--preview-json", str(FIXTURES / "dev.json"))
    assert doc["source"] == "pulumi preview (dev.json)"
    assert doc["totals"]["monthlyUsd"] == pytest.approx(_dev_monthly(), abs=0.01)
    assert [x["item"] for x in doc["lines"] if x["category"] == "network"] == [
        "net-nat-us-east-1a",
        "net-nat-eip-us-east-1a",
    ]
    assert doc["policies"]["passed"] is True


def test_violations_are_reported(tmp_path: Path) -> None:
    cfg = tmp_path / "policy.json"
    cfg.write_text(json.dumps({"monthly-cost-ceiling": {"monthlyCeilingUsd": 10_000}}))
    result = invoke("-s", "dev", "--policy-config", str(cfg), "--format", "markdown")
    assert result.exit_code == 0
    assert "**Policies: FAIL** (1 violations)" in result.stdout
    assert (
        "- `mandatory` **monthly-cost-ceiling**: estimated monthly cost $36,454 exceeds the "
        "ceiling $10,000 (monthlyCeilingUsd) by $26,454; top cost lines: dev-p5-asg $36,161, "
        "lustre-fs $174, dev-p5-asg/volumes $82"
    ) in result.stdout


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("truncated.json", "not valid JSON (Expecting ',' delimiter at line 1)"),
        (
            "no-steps.json",
            "preview JSON has no 'steps' list; pass the output of `pulumi preview --json`",
        ),
        ("step-without-type.json", "preview JSON steps[0].newState.urn: missing"),
        ("missing.json", "cannot read preview JSON"),
    ],
)
def test_malformed_preview_json(name: str, message: str) -> None:
    result = invoke("-s", "dev", "--preview-json", str(FIXTURES / name))
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert "Traceback" not in result.output


def test_unknown_stack() -> None:
    result = invoke("-s", "nope")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: no stack 'nope': Pulumi.nope.yaml not found in ")
    assert "(known: burst, dev, prod); run from the directory holding" in result.stderr
    assert result.stderr.count("\n") == 1
    compare = invoke("-s", "dev", "--compare", "nope")
    assert compare.exit_code == 2
    assert compare.stderr.startswith("error: no stack 'nope'")


def test_bad_format_is_a_usage_error() -> None:
    assert invoke("-s", "dev", "--format", "yaml").exit_code == 2


# -- wrongly typed preview JSON (issue 12, item 14) -------------------------------------------
def _mutated_preview(tmp_path: Path, resource_type: str, path: list[str], value: Any) -> Path:
    """dev.json with one value of the first ``resource_type`` newState replaced."""
    doc = json.loads((FIXTURES / "dev.json").read_text())
    for step in doc["steps"]:
        state = step.get("newState") or {}
        if state.get("type") == resource_type and (
            path[0] != "propertyDependencies" or state.get("propertyDependencies")
        ):
            node = state
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
            break
    else:
        raise AssertionError(f"no {resource_type} in the fixture")
    out = tmp_path / "preview.json"
    out.write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize(
    ("resource_type", "path", "value", "message"),
    [
        (
            "aws:autoscaling/group:Group",
            ["propertyDependencies"],
            "vpcZoneIdentifiers",
            ".newState.propertyDependencies: expected an object, got the string "
            "'vpcZoneIdentifiers'",
        ),
        (
            "aws:autoscaling/group:Group",
            ["inputs", "desiredCapacity"],
            "lots",
            ".newState.inputs.desiredCapacity: expected a whole number >= 0, got the string 'lots'",
        ),
        (
            "aws:autoscaling/group:Group",
            ["inputs", "desiredCapacity"],
            2.5,
            ".newState.inputs.desiredCapacity: expected a whole number >= 0, got the number 2.5",
        ),
        (
            "aws:fsx/lustreFileSystem:LustreFileSystem",
            ["inputs", "storageCapacity"],
            [1200],
            ".newState.inputs.storageCapacity: expected a whole number >= 0, got a list",
        ),
        (
            "aws:ec2/launchTemplate:LaunchTemplate",
            ["inputs", "instanceType"],
            8,
            ".newState.inputs.instanceType: expected a string, got the number 8",
        ),
        (
            "aws:autoscaling/group:Group",
            ["inputs"],
            ["desiredCapacity"],
            ".newState.inputs: expected an object, got a list",
        ),
        (
            "aws:autoscaling/group:Group",
            ["provider"],
            7,
            ".newState.provider: expected a string, got the number 7",
        ),
    ],
)
def test_wrongly_typed_preview_fields_name_the_json_path(
    tmp_path: Path, resource_type: str, path: list[str], value: Any, message: str
) -> None:
    """The shape is the one `pulumi preview --json` writes: each step's newState is the engine's
    resource record (apitype.ResourceV3 in pulumi/pulumi sdk/go/common/apitype/core.go):
    inputs an object, provider a string, propertyDependencies an object of property -> URNs
    (CLI reference: https://www.pulumi.com/docs/iac/cli/commands/pulumi_preview/). Before the
    shape check, a string propertyDependencies raised AttributeError and desiredCapacity "lots"
    was silently priced from minSize."""
    result = invoke(
        "-s", "dev", "--preview-json", str(_mutated_preview(tmp_path, resource_type, path, value))
    )
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: preview JSON steps[")
    assert message in lines[0]
    assert "pulumi preview --json" in lines[0]
    assert "Traceback" not in result.output


def test_unknown_values_in_a_preview_are_not_type_errors(tmp_path: Path) -> None:
    """The engine writes values known only after apply as its unknown sentinel string; they are
    not wrongly typed (an unknown desiredCapacity falls back to minSize, as before)."""
    sentinel = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
    path = _mutated_preview(
        tmp_path, "aws:autoscaling/group:Group", ["inputs", "desiredCapacity"], sentinel
    )
    result = invoke("-s", "dev", "--preview-json", str(path), "--format", "json")
    assert result.exit_code == 0, result.output


# -- non-finite numbers (item 17) ---------------------------------------------------------------
@pytest.mark.parametrize("flag", ["--egress-gb", "--nat-gb"])
@pytest.mark.parametrize("value", ["inf", "nan", "1e999", "-1"])
def test_non_finite_cli_numbers_are_refused(flag: str, value: str) -> None:
    """Before: --egress-gb inf printed `Infinity`, which no JSON parser (RFC 8259) accepts."""
    result = invoke("-s", "dev", flag, value, "--format", "json")
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag} ")
    assert "finite" in lines[0]


def test_json_output_is_strict_json() -> None:
    """Every number in --format json parses with a parser that refuses NaN/Infinity."""
    out = invoke("-s", "dev", "--egress-gb", "1e6", "--format", "json").stdout

    def refuse(token: str) -> None:
        raise AssertionError(f"non-finite {token} in JSON output")

    json.loads(out, parse_constant=refuse)
