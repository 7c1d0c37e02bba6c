"""Slack alerts through a durable SQLite outbox.

An alert is stored before any send is tried, retried with exponential backoff, a 429's
Retry-After is honoured up to ``slack.backoff_max`` (and the message resent, never dropped),
and the outbox's unique dedupe key means one event is delivered once. A sender claims a row
before sending it, so two senders on one store (two daemons, a daemon and a Lambda) never
both deliver it. One cycle's sends share ``slack.cycle_budget_s``: a hanging Slack delays the
cycle by that much at most, and within it the highest-priority rows go first (``PRIORITY_*``:
a spend breach or the blind-nodes summary is never queued behind routine idle digests). The
webhook URL is a secret: it is read from
``COREBURST_SLACK_WEBHOOK_URL`` or a file and never logged or stored.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from slack_sdk.webhook import WebhookClient

from coreburst.common.textio import read_text
from guardrails.clock import Clock
from guardrails.config import ConfigError, SlackConfig
from guardrails.metrics import Metrics
from guardrails.stores.base import StateStore

WEBHOOK_ENV = "COREBURST_SLACK_WEBHOOK_URL"

# slack_sdk logs request URLs at debug level; the URL embeds the webhook secret.
logging.getLogger("slack_sdk").setLevel(logging.WARNING)


# Slack Block Kit limits, from https://api.slack.com/reference/block-kit/blocks (and the
# composition-objects and messaging reference pages it links to). A message over any of them
# is answered 400 ``invalid_blocks``: the alert would be lost, so every payload is cut to fit
# here, whatever the rule put into it.
HEADER_TEXT_MAX = 150  # header block: plain_text, max 150 characters
SECTION_TEXT_MAX = 3000  # section block: text, max 3000 characters
FIELDS_MAX = 10  # section block: at most 10 fields...
FIELD_TEXT_MAX = 2000  # ...each at most 2000 characters
CONTEXT_ELEMENTS_MAX = 10  # context block: at most 10 elements
CONTEXT_TEXT_MAX = 3000  # a text object: max 3000 characters
BLOCKS_MAX = 50  # a message: at most 50 blocks
BLOCK_ID_MAX = 255
# Top-level ``text``: Slack truncates past 40,000 characters and recommends under 4,000.
FALLBACK_TEXT_MAX = 4000
# One list item (a top talker, a blind node...) before it is cut, so one long item cannot
# crowd every other one out of a section.
LINE_MAX = 1000

# Outbox priorities (``due`` returns the highest first). Slack's incoming webhooks allow about
# "1 message per second per channel" (https://api.slack.com/docs/rate-limits, "Incoming
# webhooks"), and a cycle's ``slack.cycle_budget_s`` bounds how many go out, so what matters
# most goes first: the money (spend breaches, budget notices) and the safety state (kill switch,
# breaker, blind nodes) before routine idle digests.
PRIORITY_ROUTINE = 0
PRIORITY_URGENT = 10

ELLIPSIS = "\u2026"
_PARTIAL_ENTITY = re.compile(r"&[a-z]{0,3}$")


def escape_mrkdwn(text: str) -> str:
    """Slack's three control characters, escaped as its "Formatting text" page asks, so a tag
    value like ``<!channel>`` is shown, not acted on."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending in an ellipsis when cut (never in
    the middle of an ``&amp;``-style escape)."""
    if len(text) <= limit:
        return text
    head = _PARTIAL_ENTITY.sub("", text[: limit - 1])
    return head + ELLIPSIS


def fit_lines(lines: list[str], limit: int, prefix: str = "") -> str:
    """Lines joined by newlines within ``limit`` characters; the lines that do not fit are
    replaced by one "… and N more" line."""
    out = prefix
    for i, raw in enumerate(lines):
        line = clip(raw, LINE_MAX)
        rest = len(lines) - i - 1
        # room for the "and N more" line that may follow this one
        reserve = len(f"\n{ELLIPSIS} and {rest} more") if rest else 0
        sep = "\n" if out else ""
        if len(out) + len(sep) + len(line) + reserve > limit:
            more = f"{ELLIPSIS} and {len(lines) - i} more"
            return out + ("\n" if out else "") + more
        out += sep + line
    return out


@dataclass(frozen=True)
class Alert:
    dedupe_key: str  # one event: never sent twice
    alert_key: str  # one subject: cooldown applies across its events
    title: str
    lines: list[str]
    severity: str = "warning"
    fields: dict[str, str] = field(default_factory=dict)
    priority: int = PRIORITY_ROUTINE  # higher is sent first (``PRIORITY_URGENT``)

    def payload(self) -> dict[str, Any]:
        """The webhook body: within every Block Kit limit above for any title, lines, fields
        and keys (tests/unit/guardrails/test_slack_limits.py checks with slack_sdk's models)."""
        icon = {
            "info": ":information_source:",
            "warning": ":warning:",
            "critical": ":rotating_light:",
        }
        title = clip(" ".join(self.title.split()) or "coreburst guardrails", HEADER_TEXT_MAX)
        lines = [escape_mrkdwn(x) for x in self.lines]
        blocks: list[dict[str, Any]] = [
            {"type": "header", "text": {"type": "plain_text", "text": title}},
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": fit_lines(lines, SECTION_TEXT_MAX, icon.get(self.severity, "") + " "),
                },
            },
        ]
        if self.fields:
            items = list(self.fields.items())
            shown = items[:FIELDS_MAX]
            if len(items) > FIELDS_MAX:
                shown = [
                    *items[: FIELDS_MAX - 1],
                    (f"{ELLIPSIS} and", f"{len(items) - FIELDS_MAX + 1} more"),
                ]
            blocks.append(
                {
                    "type": "section",
                    "fields": [
                        {
                            "type": "mrkdwn",
                            "text": clip(
                                f"*{escape_mrkdwn(k)}*\n{escape_mrkdwn(v) or '-'}", FIELD_TEXT_MAX
                            ),
                        }
                        for k, v in shown
                    ],
                }
            )
        blocks.append(
            {
                "type": "context",
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": clip(
                            f"coreburst guardrails · {escape_mrkdwn(self.dedupe_key)}", 300
                        ),
                    }
                ],
            }
        )
        text = clip(escape_mrkdwn(f"{title}: {' '.join(self.lines)}"), FALLBACK_TEXT_MAX)
        return {"text": text, "blocks": blocks[:BLOCKS_MAX]}


def webhook_url(cfg: SlackConfig) -> str | None:
    url = os.environ.get(WEBHOOK_ENV)
    if url:
        return url.strip()
    if cfg.webhook_url_file:
        # One line on a bad file, never its content: it holds the webhook secret.
        text = read_text(
            cfg.webhook_url_file, "Slack webhook file (slack.webhook_url_file)", ConfigError
        )
        return text.strip() or None
    return None


def _retry_after(headers: Any) -> float | None:
    for k, v in dict(headers or {}).items():
        if str(k).lower() == "retry-after":
            val = v[0] if isinstance(v, list | tuple) else v
            try:
                return max(0.0, float(val))
            except (TypeError, ValueError):
                return None
    return None


# (status, headers) or (status, headers, body): Slack's error body names what it rejected.
SendFn = Callable[[dict[str, Any]], tuple[Any, ...]]

# 4xx answers that a later attempt may still get through: timeout, rate limit.
RETRYABLE_4XX = (408, 429)

# A claim outlives its request's timeout by this much, so it never lapses while the request
# is still in flight; a sender that dies leaves the row due again after it.
CLAIM_MARGIN_S = 30.0


class Outbox:
    def __init__(
        self,
        state: StateStore,
        cfg: SlackConfig,
        clock: Clock,
        *,
        url: str | None,
        log: Any,
        send: SendFn | None = None,
        metrics: Metrics | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.state, self.cfg, self.clock, self.log = state, cfg, clock, log
        self.metrics = metrics
        self._url = url
        # Real elapsed time for the cycle budget (the injected clock may be frozen in tests).
        self._monotonic = monotonic
        # slack_sdk annotates ``timeout`` as int but hands it to urllib's ``urlopen``, which
        # takes float seconds: the float keeps 0.5 s as 0.5 s (``int(0.5)`` was 0, a
        # non-blocking socket, and every send failed unseen). No retry handlers: the outbox
        # retries with its own backoff, and slack_sdk's hidden connection retry would double
        # the time a send to an unreachable Slack takes out of the cycle.
        self._client = (
            WebhookClient(url, timeout=cfg.timeout_s, retry_handlers=[])  # type: ignore[arg-type]
            if url
            else None
        )
        self._send = send or self._send_webhook

    def _send_webhook(self, payload: dict[str, Any]) -> tuple[int, Any, str]:
        assert self._client is not None
        resp = self._client.send_dict(payload)
        return resp.status_code, resp.headers, resp.body or ""

    def _safe(self, text: str) -> str:
        """An error body fit for logs and the state store: one line, short, and without the
        webhook URL (a secret) should Slack or a proxy ever echo it."""
        if self._url:
            text = text.replace(self._url, "<webhook-url>")
        return clip(" ".join(str(text).split()), 200)

    @property
    def configured(self) -> bool:
        return self._client is not None

    def enqueue(self, alert: Alert, cooldown: timedelta | None = None) -> bool:
        """Store the alert for delivery; False if a duplicate or within the key's cooldown."""
        now = self.clock.now()
        cd = self.cfg.cooldown if cooldown is None else cooldown
        if self.state.has_event(alert.dedupe_key):
            return False
        last = self.state.last_alert(alert.alert_key)
        if last is not None and now - last < cd:
            # remembered, so the same event is not raised again once the cooldown is over
            self.state.remember(alert.dedupe_key, alert.alert_key, now)
            self.log.info("alert.suppressed", alert_key=alert.alert_key, reason="cooldown")
            return False
        added = self.state.enqueue(
            alert.dedupe_key, alert.alert_key, alert.payload(), now, priority=alert.priority
        )
        if added:
            self.log.info("alert.queued", dedupe_key=alert.dedupe_key, title=alert.title)
        return added

    def flush(self, limit: int = 50) -> int:
        """Try each due message once, highest priority first and oldest first within a
        priority, within ``slack.cycle_budget_s`` of real
        time; returns how many were delivered. What the budget leaves untried stays due.

        A retry time further ahead than ``slack.backoff_max`` was set while the clock ran
        ahead (no backoff is longer): such a row is due now instead of stranded."""
        if not self.configured:
            return 0
        sent = 0
        deadline = self._monotonic() + self.cfg.cycle_budget_s
        now = self.clock.now()
        rows = self.state.due(now, limit=limit, horizon=now + self.cfg.backoff_max)
        for i, row in enumerate(rows):
            left = deadline - self._monotonic()
            if left <= 0:
                self.log.warning(
                    "alert.deferred",
                    reason=f"slack.cycle_budget_s ({self.cfg.cycle_budget_s:g} s) spent",
                    rows=len(rows) - i,
                )
                break
            timeout = min(self.cfg.timeout_s, left)
            now = self.clock.now()
            if not self.state.claim(
                row["id"], now, timeout + CLAIM_MARGIN_S, attempts=row["attempts"]
            ):
                continue  # another sender has it, or has moved it on since we read it
            if self._client is not None:
                self._client.timeout = timeout  # type: ignore[assignment]  # float: see __init__
            attempts = row["attempts"] + 1
            body = ""
            try:
                answer = self._send(json.loads(row["payload"]))
                status, headers = int(answer[0]), answer[1]
                body = self._safe(str(answer[2])) if len(answer) > 2 else ""
            except Exception as exc:  # network errors: retry later, never drop
                status, headers, err = 0, {}, f"{type(exc).__name__}"
            else:
                err = f"HTTP {status}" + (f": {body}" if body else "")
            if 200 <= status < 300:
                self.state.mark_sent(row["id"], now)
                sent += 1
                self.log.info("alert.sent", dedupe_key=row["dedupe_key"], attempts=attempts)
                continue
            backoff = min(
                self.cfg.backoff_max.total_seconds(),
                self.cfg.backoff_base.total_seconds() * 2 ** (attempts - 1),
            )
            if status == 429:
                ra = _retry_after(headers)
                # Capped, so that no retry time lies further ahead than backoff_max: one that
                # does can only come from a clock that ran ahead (see ``due``'s horizon).
                backoff = (
                    min(ra, self.cfg.backoff_max.total_seconds()) if ra is not None else backoff
                )
            rejected = 400 <= status < 500 and status not in RETRYABLE_4XX
            give_up = attempts >= self.cfg.max_attempts or rejected
            # Kept, never deleted: a given-up row stays in the outbox as ``failed`` (the
            # dead letters `coreburst guardrails status` counts), its error beside it.
            self.state.retry_later(row["id"], now + timedelta(seconds=backoff), err, give_up)
            if rejected:
                # Slack refused this message itself (invalid_blocks, invalid_payload,
                # no_service...): resending will not help, and a silent drop would hide a
                # lost alert. An alarm in the log and the metrics instead.
                if self.metrics is not None:
                    self.metrics.slack_rejected.labels(str(status)).inc()
                self.log.error(
                    "alert.rejected",
                    dedupe_key=row["dedupe_key"],
                    status=status,
                    slack_error=body,
                    attempts=attempts,
                )
            elif give_up:
                self.log.error(
                    "alert.failed", dedupe_key=row["dedupe_key"], error=err, attempts=attempts
                )
            else:
                self.log.warning(
                    "alert.retry", dedupe_key=row["dedupe_key"], error=err, retry_in_s=backoff
                )
            if status == 429:
                break  # rate limited: the rest waits too
            if status == 0:
                # No answer at all (timeout, refused): Slack or the way to it is down. The
                # rest waits for the next cycle rather than each waiting out its own timeout.
                break
        return sent
