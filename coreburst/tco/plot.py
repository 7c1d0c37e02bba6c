"""PNG of a TCO result: cumulative cash per option with the payback month marked, and cost per
used GPU-hour against utilization with the crossover marked.

    >>> render_plot(result, Path("tco.png"))          # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

# Agg before pyplot is imported: the CLI runs on headless hosts and in CI.
matplotlib.use("Agg")
import matplotlib.pyplot as plt

from coreburst.tco.model import TcoResult

WIDTH_PX, HEIGHT_PX, DPI = 1200, 500, 100


def render_plot(result: TcoResult, path: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI)
    try:
        months = list(range(result.horizon_months + 1))
        for o in result.options:
            style = "-" if o.kind in ("owned", "hybrid") else "--"
            left.plot(months, [v / 1000 for v in o.cumulative_usd], style, label=o.name)
        owned = next(o for o in result.options if o.kind == "owned")
        for o in result.options:
            m = o.break_even_month
            if m is None:
                continue
            y = owned.cumulative_usd[m] / 1000
            left.plot([m], [y], "ko", markersize=4)
            left.annotate(
                f"{o.name}: m{m}", (m, y), xytext=(4, -10), textcoords="offset points", fontsize=7
            )
        if result.break_even_month is not None:
            left.axvline(result.break_even_month, color="grey", linestyle=":")
        left.set_title(f"{result.scenario}: cumulative cost ({result.nodes} node(s))")
        left.set_xlabel("month")
        left.set_ylabel("cumulative cash, k$")
        left.legend(fontsize=7)
        left.grid(alpha=0.3)

        xs = result.sweep_utilization_pct
        for name, ys in result.sweep_usd_per_used_gpu_hour.items():
            pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
            style = "-" if name == "owned" else "--"
            right.plot([p[0] for p in pts], [p[1] for p in pts], style, label=name)
        # x in data units, y in axes units: the labels sit at the top whatever the price scale.
        at_top = right.get_xaxis_transform()
        right.axvline(result.utilization_pct, color="black", linewidth=0.8)
        right.text(
            result.utilization_pct,
            0.02,
            f" {result.utilization_basis} {result.utilization_pct:.0f}%",
            transform=at_top,
            fontsize=8,
        )
        cross = result.crossover_utilization_pct
        if cross is not None:
            right.axvline(cross, color="grey", linestyle=":")
            right.text(
                cross,
                0.08,
                f" crossover vs {result.crossover_vs}: {cross:.0f}%",
                transform=at_top,
                fontsize=8,
            )
        right.set_yscale("log")
        right.set_title("cost per used GPU-hour vs utilization")
        right.set_xlabel("utilization, %")
        right.set_ylabel("$ per used GPU-hour")
        right.legend(fontsize=7)
        right.grid(alpha=0.3, which="both")
        fig.tight_layout()
        fig.savefig(path, dpi=DPI)
    finally:
        plt.close(fig)
