"""``coreburst plan`` numbers that agree (issue 23, item 5): ``--compare`` prints stack - base,
the total is compared with the stack's own budget (``coreburst:budget``) with the headroom, and
every table flags the prices whose catalog figures are ``unverified: true``."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coreburst.burst.cost import PoolRate
from coreburst.cli import app
from coreburst.plan import UNVERIFIED, Burst, _burst_rows, _unverified
from tests.helpers.plan_costs import _dev_monthly, _prod_monthly

ROOT = Path(__file__).resolve().parents[3]
PREVIEW = ROOT / "tests" / "fixtures" / "preview" / "dev.json"


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["plan", *args], env={"COLUMNS": "250"})


def as_json(*args: str) -> dict[str, Any]:
    r = invoke(*args, "--format", "json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _row(output: str, item: str) -> list[str]:
    line = next(x for x in output.splitlines() if f"│ {item} " in x)
    return [c.strip() for c in line.split("│")[1:-1]]


def test_compare_is_stack_minus_base() -> None:
    r = invoke("--stack", "prod", "--compare", "dev")
    assert r.exit_code == 0, r.output
    header = next(x for x in r.stdout.splitlines() if "prod - dev" in x)
    assert header.index("dev") < header.index("prod ") < header.index("prod - dev")
    total = [c for c in r.stdout.splitlines() if c.startswith("│ total ")][-1]
    cells = [c.strip() for c in total.split("│")[1:-1]]
    delta = _prod_monthly() - _dev_monthly()
    assert cells[1:4] == [f"{_dev_monthly():,.2f}", f"{_prod_monthly():,.2f}", f"+{delta:,.2f}"]
    # a line only dev has is negative, one only prod has positive
    diff = r.stdout.split("prod vs dev ($/month)")[1]
    assert _row(diff, "dev-p5-asg")[3] == "-36,161.28"
    assert _row(diff, "link-dx-eqdc2")[3] == "+16,425.00"


def test_total_against_the_stacks_budget() -> None:
    doc = as_json("-s", "dev")
    assert doc["budget"] == {
        "monthlyUsd": 60_000.0,
        "source": "Pulumi.dev.yaml coreburst:budget",
        "planMonthlyUsd": round(_dev_monthly(), 2),
        "headroomUsd": round(60_000 - _dev_monthly(), 2),
        "usedPercent": round(100 * _dev_monthly() / 60_000, 2),
    }
    r = invoke("-s", "dev")
    line = next(x for x in r.stdout.splitlines() if x.startswith("budget: "))
    assert line == (
        "budget: $60,000.00/month (Pulumi.dev.yaml coreburst:budget); plan total "
        f"${_dev_monthly():,.2f}/month = 60.8% of it; "
        f"headroom ${60_000 - _dev_monthly():,.2f}/month"
    )
    md = invoke("-s", "dev", "--format", "markdown").stdout
    assert line in md


def test_over_budget_says_by_how_much(tmp_path: Path) -> None:
    for name in ("Pulumi.yaml", "Pulumi.dev.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    stack = tmp_path / "Pulumi.dev.yaml"
    stack.write_text(stack.read_text().replace("monthlyUsd: 60000", "monthlyUsd: 30000"))
    doc = as_json("-s", "dev", "--stack-dir", str(tmp_path))
    assert doc["budget"]["headroomUsd"] == round(30_000 - _dev_monthly(), 2) < 0
    r = invoke("-s", "dev", "--stack-dir", str(tmp_path))
    assert f"OVER BUDGET by ${_dev_monthly() - 30_000:,.2f}/month" in r.stdout


def test_a_preview_alone_uses_the_budget_it_declares(tmp_path: Path) -> None:
    # no Pulumi.dev.yaml here: the limit of the AWS Budget the preview will create
    doc = as_json("-s", "dev", "--preview-json", str(PREVIEW), "--stack-dir", str(tmp_path))
    assert doc["budget"]["monthlyUsd"] == 60_000.0
    assert doc["budget"]["source"] == "AWS Budget budget-monthly in the preview"


def test_every_price_names_its_source_and_date_in_every_table() -> None:
    """Each priced line's last cell is the catalog figures it was priced from, each with its
    date and `unverified` where it is (issue 32 item 5), in the table, the diff and markdown."""
    doc = as_json("-s", "prod", "--compare", "dev")
    flagged = {x["item"] for x in doc["lines"] if x["unverified"]}
    assert flagged == {x["item"] for x in doc["lines"] if "unverified" in x["priceSource"]}
    assert flagged and len(flagged) < len(doc["lines"])  # some are, some are not
    for x in doc["lines"]:
        for part in x["priceSource"].split("; "):
            key, as_of, *flag = part.split(" ")
            assert key in doc["priceSources"] and re.fullmatch(r"20\d\d-\d\d", as_of), part
            assert flag in ([], [UNVERIFIED]), part
    r = invoke("-s", "prod", "--compare", "dev")
    cost, diff = r.stdout.split("prod vs dev ($/month)")
    for x in doc["lines"]:
        assert _row(cost, x["item"])[-1] == x["priceSource"], x["item"]
        assert _row(diff, x["item"])[-1].endswith(x["priceSource"]), x["item"]
        assert _row(diff, x["item"])[-1].endswith(UNVERIFIED) is x["unverified"] or x["item"] in {
            "lustre-fs"  # dev's line is verified, prod's is not: both cited in the diff
        }
    # dev's figure, then prod's: the diff's dollars come from both
    assert _row(diff, "lustre-fs")[-1] == "ref 2025-06; aws-fsx-pricing 2025-06 unverified"
    assert "price(s) marked unverified" in r.stdout
    legend = next(ln for ln in r.stdout.splitlines() if ln.startswith("sources: "))
    assert "ref = docs/sources.md#ref" in legend
    assert "aws-fsx-pricing = https://aws.amazon.com/fsx/lustre/pricing/ (read 2025-06)" in legend
    md = invoke("-s", "prod", "--compare", "dev", "--format", "markdown").stdout
    for x in doc["lines"]:
        rows = [ln for ln in md.splitlines() if ln.startswith("| ") and f"`{x['item']}`" in ln]
        assert rows and rows[0].endswith(f"| {x['priceSource']} |"), x["item"]
    assert legend in md


@pytest.mark.parametrize(
    ("source", "flag"), [("ref 2025-06", ""), ("estimate 2025-06 unverified", UNVERIFIED)]
)
def test_burst_pools_name_their_price_source_too(source: str, flag: str) -> None:
    pool = PoolRate(
        "gpu", "burst", "p5.48xlarge", "on-demand", 4, 55.04, 0.1, "1-00:00:00", 24.0, source
    )
    (row,) = _burst_rows(Burst([pool], None))
    assert row[-1] == source
    assert _unverified(source) is bool(flag)
