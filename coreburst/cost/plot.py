"""PNG of ``coreburst cost report --plot``: dollars per row, split into owned core GPUs and
burst GPUs on AWS, and two bars of their own: core GPUs no job held and burst instances no
job used, with each bar's total written beside it (``unknown`` where Slurm could not say);
the window, the owned price and what is unpriced in the footnote. matplotlib's Agg backend,
for headless hosts.

    >>> render_cost(doc, Path("cost.png"))   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter

ROWS_MAX = 20  # the costliest rows; the rest are summed into one bar
PARTS = (("core_usd", "core (owned GPUs)", "tab:blue"), ("burst_usd", "burst (AWS)", "tab:orange"))


def _dollars(x: float, _pos: Any = None) -> str:
    if abs(x) >= 1e6:
        return f"${x / 1e6:,.1f}M"
    if abs(x) >= 1e4:
        return f"${x / 1e3:,.0f}k"
    return f"${x:,.0f}" if abs(x) >= 10 else f"${x:,.2f}"


def _when(iso: str) -> str:
    """``2026-12-04 01:21`` from an ISO time (to the minute: a window may be shorter than a day)."""
    return iso[:16].replace("T", " ")


def render_cost(doc: Mapping[str, Any], path: Path) -> None:
    rows = sorted(doc["rows"], key=lambda r: -((r["core_usd"] or 0) + (r["burst_usd"] or 0)))
    if len(rows) > ROWS_MAX:
        rest = rows[ROWS_MAX - 1 :]
        rows = [
            *rows[: ROWS_MAX - 1],
            {
                "group": f"{len(rest)} others",
                **{k: sum(r[k] or 0 for r in rest) for k, _, _ in PARTS},
                "total_usd": sum(r["total_usd"] or 0 for r in rest),
                "unpriced_gpu_h": sum(r["unpriced_gpu_h"] for r in rest),
            },
        ]
    idle = {**doc["idle"], "group": "idle burst instances"}
    idle_core = {**doc["idle_core"], "group": "idle core GPUs"}
    # bottom to top: the waste first, the costliest team on top
    rows = [idle, idle_core, *rows[::-1]]
    labels = [str(r["group"]) for r in rows]
    fig, ax = plt.subplots(figsize=(11, max(3.0, 0.45 * len(rows) + 2)), dpi=100)
    left = [0.0] * len(rows)
    for key, name, colour in PARTS:
        vals = [0.0 if r is idle or r is idle_core else float(r.get(key) or 0) for r in rows]
        ax.barh(labels, vals, left=left, color=colour, label=name)
        left = [a + b for a, b in zip(left, vals, strict=True)]
    for row, key, colour, name in (
        (idle_core, "core_usd", "tab:purple", "core GPUs no job held"),
        (idle, "burst_usd", "tab:red", "burst instances no job used"),
    ):
        waste = [float(row.get(key) or 0) if r is row else 0.0 for r in rows]
        ax.barh(labels, waste, left=left, color=colour, label=name)
        left = [a + b for a, b in zip(left, waste, strict=True)]
    for y, (r, x) in enumerate(zip(rows, left, strict=True)):
        if r.get("unknown"):
            ax.text(x, y, "  unknown (Slurm could not say)", va="center", fontsize=9)
            continue
        text = _dollars(x) if r.get("total_usd") is not None or x else "unpriced"
        if r.get("core_usd") is None and r.get("core_gpu_h"):
            text += " + core unpriced"
        if r.get("unpriced_gpu_h"):
            text += f" + {r['unpriced_gpu_h']:,.1f} GPU-h unpriced"
        ax.text(x, y, "  " + text, va="center", fontsize=9)
    ax.xaxis.set_major_formatter(FuncFormatter(_dollars))
    ax.set_xlabel("US dollars")
    ax.set_xlim(0, max([*left, 1.0]) * 1.3)
    total = doc["total"]["total_usd"]
    ax.set_title(
        f"GPU cost by {doc['by']}, {_when(doc['since'])} to {_when(doc['until'])} UTC: "
        + (f"total {_dollars(total)}" if total is not None else "total unpriced")
    )
    # Outside the bars, to the right: inside, it could cover a bar and its dollar label.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    rate = doc["owned_usd_per_gpu_hour"]
    foot = (
        f"Core: ${float(rate):,.2f} per allocated GPU-hour ({doc['owned_price_source']}). "
        if rate
        else "Core: unpriced (no owned $/GPU-hour given). "
    ) + (
        "Idle core = GPUs in service no job held. "
        "Burst: EC2 instance price from the catalog; idle = instance-hours no job used."
    )
    fig.text(0.01, 0.01, foot, fontsize=8)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    try:
        fig.savefig(path)
    finally:
        plt.close(fig)
