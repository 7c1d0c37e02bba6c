"""Rules of thumb for build-vs-rent, shown beside the computed answer (pure).

They are heuristics from practice, not a cost model: where the computed costs disagree, the
computed costs win and the advisor says so.

    >>> rule_of_thumb(85.0, steady=True, longest_run_hours=0).verdict
    'own'
    >>> rule_of_thumb(29.9, steady=True, longest_run_hours=0).verdict
    'cloud'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Verdict = Literal["cloud", "hybrid", "own"]

CLOUD_BELOW_PCT = 30.0
OWN_ABOVE_PCT = 70.0
LONG_RUN_HOURS = 72.0


@dataclass(frozen=True)
class RuleAdvice:
    verdict: Verdict
    reasons: list[str] = field(default_factory=list)


def rule_of_thumb(utilization_pct: float, steady: bool, longest_run_hours: float) -> RuleAdvice:
    """< 30% → cloud; 30-70% (inclusive) → hybrid; > 70% and steady → owning may pay."""
    reasons: list[str] = []
    verdict: Verdict
    u = f"{round(utilization_pct, 1):g}"
    if utilization_pct < CLOUD_BELOW_PCT:
        verdict = "cloud"
        reasons.append(
            f"utilization {u}% < {CLOUD_BELOW_PCT:g}%: owned GPUs would sit idle "
            "most of the time; rent"
        )
    elif utilization_pct <= OWN_ABOVE_PCT:
        verdict = "hybrid"
        reasons.append(
            f"utilization {u}% is in {CLOUD_BELOW_PCT:g}-{OWN_ABOVE_PCT:g}%: own a "
            "core for the steady part, burst the peaks to cloud"
        )
    elif steady:
        verdict = "own"
        reasons.append(f"utilization {u}% > {OWN_ABOVE_PCT:g}% and steady: owning may pay")
    else:
        verdict = "hybrid"
        reasons.append(
            f"utilization {u}% > {OWN_ABOVE_PCT:g}% but demand is bursty: own the "
            "base, burst the peaks"
        )
    if longest_run_hours > LONG_RUN_HOURS:
        reasons.append(
            f"continuous runs of {longest_run_hours:g} h (> {LONG_RUN_HOURS:g} h) favour owning "
            "(the 72-hour test; it also assumes a stable architecture)"
        )
    return RuleAdvice(verdict, reasons)
