"""The core-idle Slack messages stay within Slack's Block Kit limits at maximal inputs
(https://api.slack.com/reference/block-kit/blocks), checked with slack_sdk's own block models
(``tests/unit/guardrails/test_slack_limits.check_payload``), and mention the owner as Slack
formats a user mention (``<@U...>``, https://api.slack.com/reference/surfaces/formatting
"Mentioning users") only for a member id; hostile job names stay text.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from typing import Any

import pytest

from guardrails import messages
from tests.helpers.slack import UNI, check_payload

NOW = datetime(2026, 12, 3, 12, tzinfo=UTC)


def warning(**over: Any) -> messages.MentionAlert:
    kw: dict[str, Any] = dict(
        job_id="123456789",
        job_name="train <!channel>",
        user="ann",
        account="ml",
        partition="core",
        kind="batch",
        gpus=8,
        idle_gpus=[f"dgx-{i:03d} GPU {g}" for i in range(1) for g in range(8)],
        efficiency_pct=3.25,
        window="2h",
        threshold_pct=5.0,
        policy="requeue",
        act_after=NOW,
        member="U0123ABCD",
        usd_per_gpu_hour=1.9,
        exempt_comment_key="coreburst-exempt-until",
        exempt_until=date(2026, 12, 10),
        max_exemption_days=14,
        run_key="123456789:1796311049",
        dry_run=False,
    )
    kw.update(over)
    return messages.core_idle_warning(**kw)


MAXIMAL = dict(
    job_id="9" * 5000,
    job_name=UNI * 500,
    user=UNI * 300,
    account=UNI * 300,
    partition=UNI * 300,
    idle_gpus=[f"{UNI * 20} GPU {g}" for g in range(4096)],
    gpus=4096,
    exempt_comment_key="k" * 300,
    run_key="r" * 5000,
    dry_run=True,
)


@pytest.mark.parametrize(
    "alert",
    [
        warning(),
        warning(**MAXIMAL),
        warning(idle_gpus=["n GPU 1"], efficiency_pct=None, usd_per_gpu_hour=None, member=None),
        messages.core_idle_acted(
            "k" * 5000,
            job_id="9" * 5000,
            user=UNI * 300,
            policy="cancel",
            reason=UNI * 3000,
            member="W0123ABCD",
        ),
        messages.core_blind([(str(i) * 20, UNI * 100) for i in range(2000)]),
        messages.core_blind([]),
    ],
    ids=["typical", "maximal", "partial-no-price", "acted-maximal", "blind-2000", "blind-none"],
)
def test_payload_stays_within_block_kit_limits(alert: Any) -> None:
    check_payload(alert.payload())


def test_the_owner_is_mentioned_and_nothing_else_is_markup() -> None:
    p = warning().payload()
    assert p["blocks"][1] == {"type": "section", "text": {"type": "mrkdwn", "text": "<@U0123ABCD>"}}
    assert p["text"].startswith("<@U0123ABCD> ")
    body = json.dumps(p)
    assert "<!channel>" not in body and "&lt;!channel&gt;" in body
    assert "It will be *requeued* at or after 2026-12-03T12:00:00+00:00" in body
    assert "$15.20/h of owned GPUs at $1.90/GPU-h" in body
    assert "GPU efficiency over its run so far: 3 %" in body
    assert "scontrol update job=123456789 comment=coreburst-exempt-until=2026-12-10" in body


@pytest.mark.parametrize("member", ["<!channel>", "ann", "U12<@U9>", ""])
def test_anything_but_a_member_id_is_never_a_mention(member: str) -> None:
    p = warning(member=member).payload()
    assert p["blocks"][1]["text"]["text"] != f"<@{member}>"
    assert "<@" not in json.dumps(p)


def test_what_the_owner_is_told_follows_the_policy() -> None:
    def said(**kw: Any) -> str:
        return json.dumps(warning(**kw).payload())

    assert "warn only: nothing will be done" in said(policy="warn")
    assert "Only some of its GPUs are idle" in said(idle_gpus=["n GPU 0"], act_after=None)
    assert said(dry_run=True).count("[dry-run]") >= 1
    a = messages.core_idle_acted("k", job_id="7", user="ann", policy="requeue", reason="idle",
                                 member=None)  # fmt: skip
    assert a.title == "Idle Slurm job 7 requeued" and "starts again" in a.lines[1]
