"""The burst-reconcile wording: the spend gate's holds and releases, pools held."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from guardrails.adapters.slack import (
    ELLIPSIS,
    Alert,
    clip,
)
from guardrails.messages.common import BURST_JOBS_MAX, jobs_text


# -- burst-reconcile -------------------------------------------------------------------------
def burst_spend_held(
    reservation: str, nodes: str, jobs: Sequence[str], reason: str, *, cost_usd: float, scope: str
) -> Alert:
    """The resume program's spend gate held burst nodes: which jobs wait and why."""
    return Alert(
        f"burst-held:{reservation or nodes}",
        f"burst-held:{reservation or nodes}",
        f"Burst held by the spend gate: {len(jobs)} job(s) wait",
        [
            f"Jobs waiting: {jobs_text(jobs)}.",
            f"Why: {clip(reason, 500)}.",
            f"Burst nodes held: {clip(nodes, 500)} (projected ${cost_usd:,.2f}); reservation "
            f"`{clip(reservation, 200) or 'none'}`.",
            f"The hold lifts by itself when spend scope *{clip(scope, 100)}* has room; the "
            "jobs stay queued (on the core if it frees up).",
        ],
        fields={"Scope": clip(scope, 100), "Projected": f"${cost_usd:,.2f}"},
    )


def burst_spend_released(reservation: str, nodes: str, left: Mapping[str, float]) -> Alert:
    room = ", ".join(f"${usd:,.0f} left {period}" for period, usd in left.items())
    return Alert(
        f"burst-released:{reservation}",
        f"burst-released:{reservation}",
        "Burst spend hold lifted",
        [
            f"Burst nodes {clip(nodes, 500)} are released ({room or 'no limit'}); Slurm may "
            "resume them for the waiting jobs again.",
        ],
        severity="info",
    )


def burst_pool_held(
    pool: str, reservation: str, nodes: Sequence[str], why: str, minutes: int | None
) -> Alert:
    """A pool backed off after InsufficientInstanceCapacity (``minutes``), or protected after
    repeated bootstrap failures (``minutes`` None: until an operator lifts it)."""
    until = (
        f"for {minutes} min (the reservation ends by itself)"
        if minutes is not None
        else f"until an operator runs `scontrol delete ReservationName={clip(reservation, 200)}`"
    )
    shown = ", ".join(nodes[:BURST_JOBS_MAX]) + (
        f" {ELLIPSIS} and {len(nodes) - BURST_JOBS_MAX} more" if len(nodes) > BURST_JOBS_MAX else ""
    )
    kind = "backed off" if minutes is not None else "in protected mode"
    return Alert(
        f"burst-pool:{reservation}",
        f"burst-pool:{pool}",
        f"Burst pool {clip(pool, 100)} {kind}",
        [
            f"Why: {clip(why, 500)}.",
            f"No launches in pool *{clip(pool, 100)}* {until}; jobs for it wait in the queue.",
            f"Nodes held: {clip(shown, 1500)}.",
        ],
        severity="critical" if minutes is None else "warning",
    )
