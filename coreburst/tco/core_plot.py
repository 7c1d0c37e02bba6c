"""PNG of the core's GPU-hours (``coreburst core report --plot``): per team and per user, the
allocated GPU-hours split into used, idle and unmeasured (blind), with the idle share.

Plain data in (one mapping per team or user: ``team``, ``user``, ``used_gpu_h``,
``idle_gpu_h``, ``unmeasured_gpu_h``, ``idle_pct``, ``idle_usd``: None without a price); the
bars are labelled with the idle share and its cost. matplotlib's Agg backend, for headless
hosts.

    >>> render_core_usage(teams, users, Path("core.png"), "last 7d")   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

WIDTH_PX, HEIGHT_PX, DPI = 1200, 500, 100
USERS_MAX = 15  # the users with most allocated GPU-hours; the rest are left out of the chart
PARTS = (("used_gpu_h", "used", "tab:green"), ("idle_gpu_h", "idle", "tab:red"),
         ("unmeasured_gpu_h", "unmeasured", "tab:gray"))  # fmt: skip


def _bars(ax: Any, rows: Sequence[Mapping[str, Any]], labels: list[str], title: str) -> None:
    left = [0.0] * len(rows)
    for key, name, colour in PARTS:
        vals = [float(r[key]) for r in rows]
        ax.barh(labels, vals, left=left, color=colour, label=name)
        left = [a + b for a, b in zip(left, vals, strict=True)]
    for y, (r, x) in enumerate(zip(rows, left, strict=True)):
        if r.get("idle_pct") is not None:
            cost = f", ${r['idle_usd']:,.0f}" if r.get("idle_usd") is not None else ""
            ax.text(x, y, f" {r['idle_pct']:.0f} % idle{cost}", va="center", fontsize=8)
        elif float(r["unmeasured_gpu_h"]) > 0:
            ax.text(x, y, " not measured", va="center", fontsize=8)
    if not rows:
        ax.text(0.5, 0.5, "no Slurm job runs recorded", ha="center", transform=ax.transAxes)
    ax.set_xlim(0, max([*left, 1.0]) * 1.3)  # room for the "% idle, $" labels
    ax.invert_yaxis()
    ax.set_title(title)
    ax.set_xlabel("GPU-hours")
    ax.grid(alpha=0.3, axis="x")
    if rows:
        ax.legend(fontsize=7, loc="lower right")


def render_core_usage(teams: Sequence[Any], users: Sequence[Any], path: Path, period: str) -> None:
    """Write the chart to ``path``. Items are mappings or dataclasses with the keys above."""
    from dataclasses import asdict, is_dataclass

    def plain(x: Any) -> Mapping[str, Any]:
        return asdict(x) if is_dataclass(x) and not isinstance(x, type) else x

    t = [plain(x) for x in teams]
    every = [plain(x) for x in users]
    u = every[:USERS_MAX]
    fig, (left, right) = plt.subplots(1, 2, figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI)
    try:
        _bars(left, t, [str(r["team"]) for r in t], f"core GPU-hours by team, {period}")
        top = f"top {USERS_MAX} of {len(every)} users" if len(every) > USERS_MAX else "by user"
        _bars(right, u, [f"{r['user']} ({r['team']})" for r in u], f"{top}, {period}")
        fig.tight_layout()
        fig.savefig(path, dpi=DPI, format="png")
    finally:
        plt.close(fig)
