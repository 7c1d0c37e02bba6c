"""What every message shares: the action verbs, who owns a node, a price as text, and the
safety alerts (kill switch, breaker, an action confirmed after a restart)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import date

from guardrails.adapters.slack import ELLIPSIS, PRIORITY_URGENT, Alert, clip
from guardrails.model import Node

VERBS = {
    "stop": "stopped",
    "terminate": "terminated",
    "scale-in": "scaled in from its ASG",
    "report-only": "reported only",
}


def verb(action: str) -> str:
    """The past participle a message uses for an action (``stop`` -> ``stopped``)."""
    return VERBS.get(action, action)


def owner(node: Node, owner_tags: Iterable[str]) -> str:
    """Who a node belongs to, from its owner tags (``team=ml, owner=bob``)."""
    parts = [f"{k}={node.tags[k]}" for k in owner_tags if k in node.tags]
    return ", ".join(parts) or "no owner tags"


def price_text(usd_per_hour: float | None) -> str:
    return f"${usd_per_hour:,.2f}/h" if usd_per_hour is not None else "price unknown"


BURST_JOBS_MAX = 50  # job ids listed in one message; the rest are counted


def jobs_text(jobs: Sequence[str]) -> str:
    """Slurm job ids for a message: the first ``BURST_JOBS_MAX``, the rest counted."""
    shown = ", ".join(clip(str(j), 40) for j in jobs[:BURST_JOBS_MAX])
    more = len(jobs) - BURST_JOBS_MAX
    return (shown or "none named") + (f" {ELLIPSIS} and {more} more" if more > 0 else "")


# -- safety ----------------------------------------------------------------------------------
def kill_switch(day: date, why: str) -> Alert:
    return Alert(
        f"killswitch:{day}",
        "killswitch",
        "Guardrails kill switch engaged",
        [why + "; observing only."],
        severity="info",
        priority=PRIORITY_URGENT,
    )


def breaker_open(failures: int, opened_at: str, what: str, error: str, reset: str) -> Alert:
    return Alert(
        f"breaker:{opened_at}",
        "breaker",
        "Guardrails stopped acting (circuit breaker open)",
        [
            f"{failures} consecutive AWS API failures; last: {what}: {error}. No actions "
            f"until {reset} has passed or the cause is fixed."
        ],
        severity="critical",
        priority=PRIORITY_URGENT,
    )


def confirmed_after_restart(key: str, instance_id: str, kind: str) -> Alert:
    return Alert(
        f"act:{key}",
        f"act:{instance_id}",
        f"Idle node {instance_id} {verb(kind)}",
        [f"*{instance_id}*: {kind} confirmed after a restart."],
    )
