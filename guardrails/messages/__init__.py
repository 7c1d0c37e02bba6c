"""What guardrails says in Slack: one pure builder per alert kind.

Each builder takes plain values and returns the ``Alert`` the outbox stores (dedupe key,
cooldown subject, title, lines, fields). No clock, no I/O, no state: the rules and the actuator
decide *when* to alert and pass in what they saw; the wording lives here, one module per
subject (``common``: verbs, owners, safety; ``idle``; ``spend`` with egress and the budget
relay; ``burst``; ``core``), every builder re-exported as ``guardrails.messages.<name>``.

    >>> from datetime import UTC, datetime
    >>> a = kill_switch(datetime(2026, 1, 5, tzinfo=UTC).date(), "kill switch: $X is set")
    >>> (a.dedupe_key, a.title)
    ('killswitch:2026-01-05', 'Guardrails kill switch engaged')
"""

from __future__ import annotations

from guardrails.messages.burst import (
    burst_pool_held,
    burst_spend_held,
    burst_spend_released,
)
from guardrails.messages.common import (
    BURST_JOBS_MAX,
    VERBS,
    breaker_open,
    confirmed_after_restart,
    kill_switch,
    owner,
    price_text,
    verb,
)
from guardrails.messages.core import (
    CORE_ACTIONS,
    CORE_GPUS_MAX,
    SLACK_MEMBER_ID,
    MentionAlert,
    core_blind,
    core_idle_acted,
    core_idle_warning,
)
from guardrails.messages.idle import (
    DIGEST_IDS_MAX,
    DIGEST_LINE_MAX,
    DIGEST_LIST_MAX,
    Marked,
    Reclaimed,
    blind,
    idle_digest,
    idle_marked,
    idle_unmarked,
    reclaimed,
)
from guardrails.messages.spend import (
    breach_text,
    budget_notice,
    budget_notice_lines,
    core_spend_text,
    egress_spike,
    spend_forecast,
    spend_threshold,
    spend_unpriced,
    unpriced_text,
)

__all__ = [
    "BURST_JOBS_MAX",
    "CORE_ACTIONS",
    "CORE_GPUS_MAX",
    "DIGEST_IDS_MAX",
    "DIGEST_LINE_MAX",
    "DIGEST_LIST_MAX",
    "SLACK_MEMBER_ID",
    "VERBS",
    "Marked",
    "MentionAlert",
    "Reclaimed",
    "blind",
    "breach_text",
    "breaker_open",
    "budget_notice",
    "budget_notice_lines",
    "burst_pool_held",
    "burst_spend_held",
    "burst_spend_released",
    "confirmed_after_restart",
    "core_blind",
    "core_idle_acted",
    "core_idle_warning",
    "core_spend_text",
    "egress_spike",
    "idle_digest",
    "idle_marked",
    "idle_unmarked",
    "kill_switch",
    "owner",
    "price_text",
    "reclaimed",
    "spend_forecast",
    "spend_threshold",
    "spend_unpriced",
    "unpriced_text",
    "verb",
]
