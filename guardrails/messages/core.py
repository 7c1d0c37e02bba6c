"""The core-idle wording: Slurm jobs on the on-prem core holding GPUs they do not use."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from guardrails.adapters.slack import (
    BLOCKS_MAX,
    ELLIPSIS,
    FALLBACK_TEXT_MAX,
    PRIORITY_URGENT,
    Alert,
    clip,
)
from guardrails.messages.common import jobs_text
from guardrails.timefmt import iso

# -- core-idle (Slurm jobs on the on-prem core) -----------------------------------------------
# A Slack member id (https://api.slack.com/reference/surfaces/formatting#mentioning-users):
# only these become a real ``<@U...>`` mention; anything else is text (escaped).
SLACK_MEMBER_ID = re.compile(r"^[UW][A-Z0-9]{2,20}$")
CORE_GPUS_MAX = 16  # GPU names listed in one message; the rest are counted
CORE_ACTIONS = {"warn": "left running", "requeue": "requeued", "cancel": "cancelled"}


@dataclass(frozen=True)
class MentionAlert(Alert):
    """An alert that pings Slack members: ``mentions`` (validated member ids, at most 10) go
    into a section of their own as ``<@U...>``, the one markup the other text never carries
    (it is escaped, so a job name like ``<!channel>`` is shown, not acted on)."""

    mentions: tuple[str, ...] = ()

    def payload(self) -> dict[str, Any]:
        p = super().payload()
        ids = [m for m in dict.fromkeys(self.mentions) if SLACK_MEMBER_ID.match(m)][:10]
        if ids:
            text = " ".join(f"<@{m}>" for m in ids)
            p["blocks"].insert(1, {"type": "section", "text": {"type": "mrkdwn", "text": text}})
            p["blocks"] = p["blocks"][:BLOCKS_MAX]
            p["text"] = clip(f"{text} {p['text']}", FALLBACK_TEXT_MAX)
        return p


def _gpus_text(gpus: Sequence[str]) -> str:
    shown = ", ".join(clip(g, 60) for g in gpus[:CORE_GPUS_MAX])
    more = len(gpus) - CORE_GPUS_MAX
    return (shown or "none") + (f" {ELLIPSIS} and {more} more" if more > 0 else "")


def _gpu_usd(gpus: int, usd_per_gpu_hour: float | None) -> str:
    if usd_per_gpu_hour is None:
        return ""
    return f" (${gpus * usd_per_gpu_hour:,.2f}/h of owned GPUs at ${usd_per_gpu_hour:,.2f}/GPU-h)"


def core_idle_warning(
    *,
    job_id: str,
    job_name: str,
    user: str,
    account: str,
    partition: str,
    kind: str,
    gpus: int,
    idle_gpus: Sequence[str],
    efficiency_pct: float | None,
    window: str,
    threshold_pct: float,
    policy: str,
    act_after: datetime | None,
    member: str | None,
    usd_per_gpu_hour: float | None,
    exempt_comment_key: str,
    exempt_until: date,
    max_exemption_days: int,
    run_key: str,
    dry_run: bool,
) -> MentionAlert:
    """A job holds GPUs it does not use: tell its owner what happens next and how to keep it.
    ``act_after`` None: every GPU is not idle (some are), so nothing will be done to it."""
    all_idle = len(idle_gpus) == gpus
    eff = f"{efficiency_pct:.0f} %" if efficiency_pct is not None else "unknown"
    if all_idle and act_after is not None and policy != "warn":
        then = (
            f"It will be *{CORE_ACTIONS.get(policy, policy)}* at or after {iso(act_after)} unless "
            "its GPUs become busy."
        )
    elif all_idle:
        then = "Policy here is to warn only: nothing will be done to it."
    else:
        then = "Only some of its GPUs are idle, so nothing will be done to it; please free them."
    return MentionAlert(
        f"core-idle:{run_key}:{'all' if all_idle else 'some'}{':dry-run' if dry_run else ''}",
        f"core-idle:{job_id}",
        f"{'[dry-run] ' if dry_run else ''}Slurm job {clip(job_id, 20)} holds "
        f"{len(idle_gpus)} of {gpus} GPU(s) idle",
        [
            f"Job *{clip(job_id, 20)}* ({clip(job_name, 100)}, {kind}, partition "
            f"{clip(partition, 60)}): GPUs {_gpus_text(idle_gpus)} stayed below "
            f"{threshold_pct:g} % activity for {window}"
            f"{_gpu_usd(len(idle_gpus), usd_per_gpu_hour)}.",
            f"GPU efficiency over its run so far: {eff}.",
            then,
            f"To keep it: `scontrol update job={clip(job_id, 20)} "
            f"comment={exempt_comment_key}={exempt_until.isoformat()}` (at most "
            f"{max_exemption_days} days ahead), or ask an operator for an exemption.",
        ],
        fields={
            "User": clip(user, 100),
            "Account": clip(account or "-", 100),
            "Idle GPUs": f"{len(idle_gpus)} of {gpus}",
            "Policy": policy,
        },
        mentions=(member,) if member else (),
    )


def core_idle_acted(
    key: str, *, job_id: str, user: str, policy: str, reason: str, member: str | None
) -> MentionAlert:
    return MentionAlert(
        f"act:{key}",
        f"act:slurm-job-{job_id}",
        f"Idle Slurm job {clip(job_id, 20)} {CORE_ACTIONS.get(policy, policy)}",
        [
            f"Job *{clip(job_id, 20)}* of {clip(user, 100)}: {clip(reason, 500)}.",
            "A requeued job waits in the queue and starts again from its beginning (or its "
            "last checkpoint)."
            if policy == "requeue"
            else "Its GPUs are free for others.",
        ],
        fields={"User": clip(user, 100), "Action": policy},
        mentions=(member,) if member else (),
    )


def core_blind(jobs: Sequence[tuple[str, str]]) -> Alert:
    """Jobs whose GPUs have no usable DCGM data: (job id, reason). Never acted on."""
    ids_sorted = sorted(j for j, _ in jobs)
    return Alert(
        "core-blind:" + hashlib.sha1(",".join(ids_sorted).encode()).hexdigest()[:16],
        "core-blind",
        f"{len(jobs)} Slurm job(s) on the core without usable GPU data",
        [
            f"Never requeued or cancelled while blind: {jobs_text(ids_sorted)}",
            *(f"• job {clip(j, 20)}: {why}" for j, why in jobs),
        ],
        severity="info",
        priority=PRIORITY_URGENT,
    )
