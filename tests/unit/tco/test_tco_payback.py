"""``coreburst tco``'s payback line agrees with its table, and every dollar cites its figures
(issue 32, item 5).

The issue: team8_85pct printed owned $530,692 net as cheaper than spot $587,046 and then
"Owning pays back vs spot: never". The table's net takes off the hardware's book value left at
month 36 ($98,750); the payback is cash, and was only looked for within the 36 months, while the
cash catches up in month 41, inside the hardware's 48-month life. Over one hardware life owning
pays back in cash exactly when its amortised monthly cost is at most the rental's, which is when
its net is lower at any horizon inside that life: so the payback is looked for over the horizon
or the life, whichever is longer, and the line says which side of the horizon it falls.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from coreburst.tco.cli import _read_scenario, app, build_scenario, payback_sentence
from coreburst.tco.demand import load_demand
from coreburst.tco.model import OWNED_FIGURES, Scenario, TcoResult, analyse

EXAMPLES = Path(__file__).parents[3] / "coreburst" / "tco" / "examples"
SCENARIOS = sorted(EXAMPLES.glob("*.yaml"))


def _result(path: Path, horizon: int | None = None) -> TcoResult:
    s = build_scenario(_read_scenario(path), {"horizon_months": horizon})
    return analyse(s, load_demand(s.demand_file) if s.demand_file is not None else None)


def _opt(result: TcoResult, name: str):  # type: ignore[no-untyped-def]
    return next(o for o in result.options if o.name == name)


def test_the_issues_figures_now_agree() -> None:
    result = _result(EXAMPLES / "team8_85pct.yaml")
    owned, spot = _opt(result, "owned"), _opt(result, "spot")
    assert (round(owned.total_usd), round(spot.total_usd)) == (530_692, 587_046)
    assert (round(owned.cash_usd), round(owned.book_value_usd)) == (629_442, 98_750)
    # by hand: $395,000 up front, then $6,512/month against spot's $16,307/month
    opex = owned.monthly_usd - 395_000 / 48
    assert math.ceil(395_000 / (spot.monthly_usd - opex)) == 41
    assert result.break_even_vs == "spot" and result.break_even_month == 41
    printed = CliRunner().invoke(app, ["--scenario", str(EXAMPLES / "team8_85pct.yaml")])
    assert printed.exit_code == 0, printed.output
    out = " ".join(printed.stdout.split())
    assert "never" not in out
    assert (
        "Owning pays back vs spot in month 41, after the 36-month horizon: by month 36 owning "
        "has paid $629,442 in cash to spot's $587,046, but $98,750 of the hardware's value is "
        "left then, so owning's net over 36 months, $530,692, is lower than spot's $587,046."
    ) in out
    spot_row = next(line for line in printed.stdout.splitlines() if line.startswith("│ spot "))
    assert "41 (after mo 36)" in spot_row


def test_no_payback_says_so_with_the_nets() -> None:
    result = _result(EXAMPLES / "lab256_bursty.yaml")
    assert result.break_even_month is None and result.break_even_vs == "spot"
    owned, spot = _opt(result, "owned"), _opt(result, "spot")
    assert owned.total_usd > spot.total_usd  # renting spot is cheaper: no payback agrees
    assert payback_sentence(result) == (
        "Owning does not pay back vs spot in cash within 48 months (the horizon or the "
        "48-month hardware life, whichever is longer): owning's net over 36 months, "
        f"${owned.total_usd:,.0f}, is not lower than spot's ${spot.total_usd:,.0f}."
    )


def _agrees(result: TcoResult) -> None:
    """The line's claim and the table's nets say the same thing, for every rental option."""
    owned = _opt(result, "owned")
    h = result.horizon_months
    for o in result.options:
        if o.kind not in ("pay-per-use", "commitment"):
            continue
        be = o.break_even_month
        cheaper = owned.total_usd <= o.total_usd * (1 + 1e-9)
        if be is not None and be <= h:
            # paid back in cash inside the horizon: its net is lower too
            assert cheaper, (o.name, be)
        if be is not None:
            assert be <= result.payback_search_months
            # the cash has caught up by then, and not a month before
            assert owned.monthly_usd <= o.monthly_usd * (1 + 1e-9), o.name
        if cheaper and be is None:
            # cheaper net but no payback: only a commitment's unexpired months do that
            assert o.committed_after_usd > 0, (o.name, owned.total_usd, o.total_usd)
        if be is None and not cheaper:
            assert "not lower" in payback_sentence(result) or o.name != result.break_even_vs


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
@pytest.mark.parametrize("horizon", [None, 6, 12, 24, 36, 47, 48, 60, 96])
def test_payback_and_table_agree_for_every_shipped_scenario(
    path: Path, horizon: int | None
) -> None:
    result = _result(path, horizon)
    _agrees(result)
    sentence = payback_sentence(result)
    assert sentence.startswith("Owning ") and result.break_even_vs in sentence


@settings(max_examples=60, deadline=None)
@given(
    utilization=st.floats(5, 100),
    horizon=st.integers(1, 120),
    hardware=st.floats(50_000, 900_000),
)
def test_payback_and_table_agree_for_any_team(
    utilization: float, horizon: int, hardware: float
) -> None:
    s = Scenario.model_validate(
        {
            "gpus": 8,
            "utilization_pct": utilization,
            "utilization_basis": "measured",
            "horizon_months": horizon,
            "owned": {"hardware_usd_per_node": hardware},
        }
    )
    _agrees(analyse(s))


def test_every_option_cites_the_figures_its_dollars_rest_on() -> None:
    path = EXAMPLES / "lab256_bursty.yaml"
    result = _result(path)
    assert len(result.unverified_figures) == sum(f.unverified for f in result.figures) == 19
    cites = {o.name: o.price_source for o in result.options}
    assert cites["on-demand"] == "ref 2025-06"
    assert cites["spot"] == "ref 2025-06; estimate 2026-11 unverified"
    assert cites["capacity-block"] == "ref 2025-06 unverified"
    assert cites["commit-3y"] == "ref 2025-06; aws-savings-plans 2026-11 unverified"
    # each owned figure's citation, and nothing else (no AWS price is in owning's dollars)
    owned = [f for f in result.figures if f.name.split("[")[0] in OWNED_FIGURES]
    assert len(owned) == len(OWNED_FIGURES)
    assert set(cites["owned"].split("; ")) == {f.cited for f in owned}
    assert "reseller-quotes 2026-11 unverified" in cites["owned"]
    # the hybrid core + spot burst: the owned figures and spot's
    assert set(cites["hybrid-14n"].split("; ")) == set(cites["owned"].split("; ")) | {
        "ref 2025-06",
        "estimate 2026-11 unverified",
    }
    assert all(o.unverified == ("unverified" in o.price_source) for o in result.options)

    printed = CliRunner().invoke(app, ["--scenario", str(path)])
    assert printed.exit_code == 0, printed.output
    lines = printed.stdout.splitlines()
    for o in result.options:
        note = next(line for line in lines if line.startswith(f"  {o.name}: "))
        assert note.endswith(f"priced from {o.price_source}"), note
        row = next(line for line in lines if line.startswith(f"│ {o.name} "))
        assert row.rstrip("│ ").endswith("unverified") is o.unverified, row
    core = next(line for line in lines if line.startswith("  core: owned priced from "))
    assert core.endswith("burst (spot) from ref 2025-06; estimate 2026-11 unverified")
    used = next(line for line in lines if line.startswith("figures used (19 of 20 unverified): "))
    # every figure with its source and date; the catalog's labels keep their brackets
    assert "on_demand[p5.48xlarge,us-east-1]=55.04 (ref, 2025-06);" in used
    assert "hardware_usd_per_node=350000 (reseller-quotes, 2026-11, unverified)" in used
    legend = next(line for line in lines if line.startswith("sources: "))
    for key in {f.source for f in result.figures}:
        assert re.search(rf"\b{re.escape(key)} = ", legend), key


def test_a_figure_the_scenario_gives_is_cited_as_the_scenario() -> None:
    result = analyse(
        Scenario.model_validate(
            {
                "gpus": 8,
                "utilization_pct": 50,
                "utilization_basis": "measured",
                "cloud": {"on_demand_usd_per_node_hour": 50},
            }
        )
    )
    assert _opt(result, "on-demand").price_source == "scenario"
    assert not _opt(result, "on-demand").unverified
    od = next(f for f in result.figures if f.name.startswith("on_demand"))
    assert od.text == "on_demand[p5.48xlarge,us-east-1]=50 (scenario)"
