"""The TCO chart and table agree (issue 23, item 5): for every shipped scenario and every option,
the value the cumulative-cash chart's line ends on (read from the matplotlib figure the code
builds) is the net total the table prints; the dollar axes read as dollars; no label sits on
another.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from typer.testing import CliRunner

from coreburst.tco.cli import _read_scenario, app, build_scenario, horizon_columns, option_rows
from coreburst.tco.demand import load_demand
from coreburst.tco.model import TcoResult, analyse
from coreburst.tco.plot import build_figure

EXAMPLES = Path(__file__).parents[3] / "coreburst" / "tco" / "examples"
SCENARIOS = sorted(EXAMPLES.glob("*.yaml"))
# The scenario's own horizon, one shorter than a 3-year term (unexpired commitment after the
# horizon) and one longer than the hardware's 48-month life (bought again, book value left).
HORIZONS = [None, 12, 60]
CASES = [(p, h) for p in SCENARIOS for h in HORIZONS]
IDS = [f"{p.stem}-{h or 'own'}" for p, h in CASES]


def _result(path: Path, horizon: int | None) -> TcoResult:
    s = build_scenario(_read_scenario(path), {"horizon_months": horizon})
    return analyse(s, load_demand(s.demand_file) if s.demand_file is not None else None)


@pytest.fixture
def figure() -> Iterator[list[Figure]]:
    made: list[Figure] = []
    yield made
    for f in made:
        plt.close(f)


def _lines_by_option(fig: Figure) -> dict[str, Line2D]:
    left = fig.axes[0]
    return {str(line.get_gid()): line for line in left.get_lines() if line.get_gid()}


def _printed_rows(output: str) -> dict[str, list[str]]:
    """Rows of the option table as the CLI printed them: option -> cells."""
    rows: dict[str, list[str]] = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells and cells[0] and not cells[0].startswith("option"):
            rows.setdefault(cells[0], cells)
    return rows


def test_every_shipped_scenario_is_covered() -> None:
    assert {p.stem for p in SCENARIOS} >= {"team8_25pct", "team8_85pct", "lab256_bursty"}


@pytest.mark.parametrize(("path", "horizon"), CASES, ids=IDS)
def test_chart_ends_where_the_table_says(
    path: Path, horizon: int | None, figure: list[Figure]
) -> None:
    result = _result(path, horizon)
    fig = build_figure(result)
    figure.append(fig)
    lines = _lines_by_option(fig)
    assert set(lines) == {o.name for o in result.options}

    args = ["--scenario", str(path)] + (
        [] if horizon is None else ["--horizon-months", str(horizon)]
    )
    printed = CliRunner().invoke(app, args)
    assert printed.exit_code == 0, printed.output
    table = _printed_rows(printed.output)
    rows = {r[0]: r for r in option_rows(result)}
    # cells: option, $/month, then the horizon columns (cash, + owed, - book value, = net)
    net = 2 + horizon_columns(result.horizon_months).index(f"= net {result.horizon_months} mo")
    for name, line in lines.items():
        ys = [float(y) for y in line.get_ydata()]
        final, cash = ys[-1], ys[-2]
        # the figure's final value is the table's net total, printed and as the code holds it
        assert table[name][net] == f"${final:,.0f}", (name, table[name])
        assert rows[name][net] == f"${final:,.0f}"
        # the last month before the settlement is the cash column
        assert table[name][2] == f"${cash:,.0f}"
        # the x of the final point is the horizon (the settlement is a vertical step)
        assert float(line.get_xdata()[-1]) == result.horizon_months
    # the recommendation's cheapest option is the line that ends lowest
    lowest = min(lines, key=lambda n: float(lines[n].get_ydata()[-1]))
    assert lowest == result.recommendation.cheapest_option


def test_team8_85pct_chart_shows_owned_below_spot(figure: list[Figure]) -> None:
    # The case: the chart ended with spot below owned while the table said OWN.
    result = _result(EXAMPLES / "team8_85pct.yaml", None)
    fig = build_figure(result)
    figure.append(fig)
    lines = _lines_by_option(fig)
    owned, spot = (float(lines[n].get_ydata()[-1]) for n in ("owned", "spot"))
    assert result.recommendation.verdict == "own"
    assert owned < spot
    # ... while the cash alone (before the book value) is above spot, which is what it showed
    assert float(lines["owned"].get_ydata()[-2]) > spot


def test_horizon_columns_name_what_they_hold() -> None:
    result = _result(EXAMPLES / "team8_85pct.yaml", 12)
    printed = CliRunner().invoke(
        app, ["--scenario", str(EXAMPLES / "team8_85pct.yaml"), "--horizon-months", "12"]
    )
    assert printed.exit_code == 0
    assert "total 12 mo" not in printed.output
    for header in horizon_columns(12):
        assert header in printed.output
    commit3 = _printed_rows(printed.output)["commit-3y"]
    o = next(o for o in result.options if o.name == "commit-3y")
    # 12 months paid, 24 still owed, 36 in the net: each under its own header
    assert commit3[2] == f"${o.monthly_usd * 12:,.0f}"
    assert commit3[3] == f"${o.monthly_usd * 24:,.0f}"
    assert commit3[5] == f"${o.monthly_usd * 36:,.0f}"


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_dollar_axes_read_as_dollars(path: Path, figure: list[Figure]) -> None:
    fig = build_figure(_result(path, None))
    figure.append(fig)
    fig.canvas.draw()
    for ax in fig.axes:
        labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
        labels += [t.get_text() for t in ax.yaxis.get_minorticklabels() if t.get_text()]
        assert labels, ax.get_title()
        for text in labels:
            assert re.fullmatch(r"-?\$[0-9][0-9,.]*[kMB]?", text), (ax.get_title(), text)
        # no offset or multiplier text (1e6, x10^0) beside the axis
        assert ax.yaxis.get_offset_text().get_text() == ""


@pytest.mark.parametrize(("path", "horizon"), CASES, ids=IDS)
def test_no_label_overlaps_another(path: Path, horizon: int | None, figure: list[Figure]) -> None:
    fig = build_figure(_result(path, horizon))
    figure.append(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    for ax in fig.axes:
        boxes = [t.get_window_extent(renderer) for t in ax.texts if t.get_text().strip()]
        for a, b in itertools.combinations(boxes, 2):
            assert not a.overlaps(b), ax.get_title()
        # and every label stays inside its panel
        panel = ax.get_window_extent(renderer)
        for box in boxes:
            assert panel.x0 - 1 <= box.x0 and box.x1 <= panel.x1 + 1, ax.get_title()
