"""``coreburst plan`` through the CLI: totals equal the catalog arithmetic, done here by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coreburst.cli import app
from tests.helpers.plan_costs import _dev_monthly, _prod_monthly

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "preview"


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
    assert "| category | resource | detail | $/hour | $/month | price source |" in md
    assert (
        "| storage | `lustre-fs` | 1200 GiB PERSISTENT_2 125 MB/s/TiB @ $0.145/GB-month | 0.24 "
        "| 174.00 | ref 2025-06 |" in md
    )
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
        "priceSource": "ref 2025-06; aws-fsx-pricing 2025-06 unverified",
        "unverified": True,
    }
    md = invoke("-s", "prod", "--compare", "dev", "--format", "markdown").stdout
    assert (
        "| `lustre-fs` | 174.00 | 23,040.00 | +22,866.00 "
        "| ref 2025-06; aws-fsx-pricing 2025-06 unverified |" in md
    )


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
