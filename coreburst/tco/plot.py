"""PNG of a TCO result: cumulative cash per option with the payback month marked, and cost per
used GPU-hour against utilization with the crossover marked.

Both panels draw the model's own numbers: each cumulative-cash line is ``OptionCost.cost_path``
(cash month by month, then the settlement at the horizon: unexpired commitment added, the owned
hardware's book value taken off), so every line ends on the net total the table prints.

    >>> render_plot(result, Path("tco.png"))          # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

# Agg before pyplot is imported: the CLI runs on headless hosts and in CI.
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from coreburst.tco.model import TcoResult

WIDTH_PX, HEIGHT_PX, DPI = 1200, 500, 100


def usd_axis_label(value: float, _pos: object = None) -> str:
    """A dollar tick label a finance reader reads at a glance.

    >>> [usd_axis_label(v) for v in (0, 4, 2.5, 40_000, 1_250_000, 3_000_000_000)]
    ['$0', '$4', '$2.50', '$40k', '$1.25M', '$3B']
    """
    sign, v = ("-" if value < 0 else ""), abs(value)
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if v >= scale:
            return f"{sign}${v / scale:,.2f}".rstrip("0").rstrip(".") + suffix
    if v == 0:
        return "$0"
    if v < 10 and v != int(v):
        return f"{sign}${v:.2f}"
    return f"{sign}${v:,.0f}"


def _legend_label(
    name: str, total: float, payback: int | None, kind: str, result: TcoResult
) -> str:
    label = f"{name}: net ${total:,.0f}"
    if kind in ("pay-per-use", "commitment"):
        if payback is None:
            label += f", owning pays back: not by month {result.payback_search_months}"
        elif payback > result.horizon_months:
            label += f", owning pays back month {payback} (after the horizon)"
        else:
            label += f", owning pays back month {payback}"
    return label


def build_figure(result: TcoResult) -> Figure:
    """The chart as a matplotlib Figure (the caller closes it); ``render_plot`` saves it.

    Left: one line per option, labelled with the option's name first (``<name>: net $...``).
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI)
    horizon = result.horizon_months
    owned = next(o for o in result.options if o.kind == "owned")
    # one colour per option in both panels
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colour = {o.name: cycle[i % len(cycle)] for i, o in enumerate(result.options)}
    for o in result.options:
        months, usd = o.cost_path()
        style = "-" if o.kind in ("owned", "hybrid") else "--"
        (line,) = left.plot(
            months,
            usd,
            style,
            color=colour[o.name],
            label=_legend_label(o.name, o.total_usd, o.break_even_month, o.kind, result),
            gid=o.name,
        )
        left.plot([months[-1]], [usd[-1]], "s", color=line.get_color(), markersize=4)
        m = o.break_even_month
        if m is not None and m <= horizon:
            # payback: where the option's cash line meets owned's; named in the legend, so
            # no text sits on the chart to overlap another
            left.plot([m], [owned.cumulative_usd[m]], "o", color=line.get_color(), markersize=5)
    if result.break_even_month is not None and result.break_even_month <= horizon:
        left.axvline(result.break_even_month, color="grey", linestyle=":")
    left.set_xlim(0, horizon * 1.02)
    left.set_title(f"{result.scenario}: cumulative cost ({result.nodes} node(s))")
    left.set_xlabel(f"month (at {horizon}: + commitment still owed, - book value of hardware)")
    left.set_ylabel("cumulative cash")
    left.yaxis.set_major_formatter(FuncFormatter(usd_axis_label))
    left.legend(fontsize=7, loc="upper left")
    left.grid(alpha=0.3)

    xs = result.sweep_utilization_pct
    for name, ys in result.sweep_usd_per_used_gpu_hour.items():
        pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
        style = "-" if name == "owned" else "--"
        right.plot(
            [p[0] for p in pts], [p[1] for p in pts], style, color=colour.get(name), label=name
        )
    # x in data units, y in axes units: the labels sit at the bottom whatever the price scale,
    # at two heights (never text on text), each on the side of its line with room for it.
    at_bottom = right.get_xaxis_transform()

    def mark(x: float, y: float, text: str, **line: object) -> None:
        right.axvline(x, **line)
        room_left = x > (xs[0] + xs[-1]) / 2
        right.text(
            x,
            y,
            f" {text} ",
            transform=at_bottom,
            fontsize=8,
            ha="right" if room_left else "left",
        )

    mark(
        result.utilization_pct,
        0.02,
        f"{result.utilization_basis} {result.utilization_pct:.0f}%",
        color="black",
        linewidth=0.8,
    )
    cross = result.crossover_utilization_pct
    if cross is not None:
        mark(
            cross,
            0.08,
            f"crossover vs {result.crossover_vs}: {cross:.0f}%",
            color="grey",
            linestyle=":",
        )
    right.set_yscale("log")
    # dollars on every labelled tick (1, 2, 5 per decade), none of matplotlib's 4x10^0 labels
    right.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    right.yaxis.set_major_formatter(FuncFormatter(usd_axis_label))
    right.yaxis.set_minor_formatter(NullFormatter())
    right.set_title("cost per used GPU-hour vs utilization")
    right.set_xlabel("utilization, %")
    right.set_ylabel("$ per used GPU-hour")
    right.legend(fontsize=7)
    right.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def render_plot(result: TcoResult, path: Path) -> None:
    fig = build_figure(result)
    try:
        fig.savefig(path, dpi=DPI)
    finally:
        plt.close(fig)
