"""Slack alerts through a durable SQLite outbox.

An alert is stored before any send is tried, retried with exponential backoff, a 429's
Retry-After is honoured (and the message resent, never dropped), and the outbox's unique
dedupe key means one event is delivered once. The webhook URL is a secret: it is read from
``COREBURST_SLACK_WEBHOOK_URL`` or a file and never logged or stored.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from slack_sdk.webhook import WebhookClient

from guardrails.clock import Clock
from guardrails.config import ConfigError, SlackConfig
from guardrails.state import State

WEBHOOK_ENV = "COREBURST_SLACK_WEBHOOK_URL"

# slack_sdk logs request URLs at debug level; the URL embeds the webhook secret.
logging.getLogger("slack_sdk").setLevel(logging.WARNING)


@dataclass(frozen=True)
class Alert:
    dedupe_key: str  # one event: never sent twice
    alert_key: str  # one subject: cooldown applies across its events
    title: str
    lines: list[str]
    severity: str = "warning"
    fields: dict[str, str] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        icon = {
            "info": ":information_source:",
            "warning": ":warning:",
            "critical": ":rotating_light:",
        }
        blocks: list[dict[str, Any]] = [
            {
                "type": "header",
                "text": {"type": "plain_text", "text": self.title[:150]},
            },
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": f"{icon.get(self.severity, '')} " + "\n".join(self.lines),
                },
            },
        ]
        if self.fields:
            blocks.append(
                {
                    "type": "section",
                    "fields": [
                        {"type": "mrkdwn", "text": f"*{k}*\n{v}"}
                        for k, v in list(self.fields.items())[:10]
                    ],
                }
            )
        blocks.append(
            {
                "type": "context",
                "elements": [
                    {"type": "mrkdwn", "text": f"coreburst guardrails · {self.dedupe_key}"}
                ],
            }
        )
        return {"text": f"{self.title}: {' '.join(self.lines)}"[:3000], "blocks": blocks}


def webhook_url(cfg: SlackConfig) -> str | None:
    url = os.environ.get(WEBHOOK_ENV)
    if url:
        return url.strip()
    if cfg.webhook_url_file:
        try:
            return cfg.webhook_url_file.read_text().strip() or None
        except OSError as exc:
            raise ConfigError(
                f"slack.webhook_url_file: cannot read {cfg.webhook_url_file}: {exc.strerror}"
            ) from None
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


SendFn = Callable[[dict[str, Any]], tuple[int, Any]]


class Outbox:
    def __init__(
        self,
        state: State,
        cfg: SlackConfig,
        clock: Clock,
        *,
        url: str | None,
        log: Any,
        send: SendFn | None = None,
    ) -> None:
        self.state, self.cfg, self.clock, self.log = state, cfg, clock, log
        self._client = WebhookClient(url, timeout=int(cfg.timeout_s)) if url else None
        self._send = send or self._send_webhook

    def _send_webhook(self, payload: dict[str, Any]) -> tuple[int, Any]:
        assert self._client is not None
        resp = self._client.send_dict(payload)
        return resp.status_code, resp.headers

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
        added = self.state.enqueue(alert.dedupe_key, alert.alert_key, alert.payload(), now)
        if added:
            self.log.info("alert.queued", dedupe_key=alert.dedupe_key, title=alert.title)
        return added

    def flush(self, budget: int = 50) -> int:
        """Try every due message once; returns how many were delivered."""
        if not self.configured:
            return 0
        sent = 0
        for row in self.state.due(self.clock.now(), limit=budget):
            now = self.clock.now()
            attempts = row["attempts"] + 1
            try:
                status, headers = self._send(json.loads(row["payload"]))
            except Exception as exc:  # network errors: retry later, never drop
                status, headers, err = 0, {}, f"{type(exc).__name__}"
            else:
                err = f"HTTP {status}"
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
                backoff = ra if ra is not None else backoff
            give_up = attempts >= self.cfg.max_attempts or status in (400, 403, 404, 410)
            self.state.retry_later(row["id"], now + timedelta(seconds=backoff), err, give_up)
            self.log.warning(
                "alert.retry" if not give_up else "alert.failed",
                dedupe_key=row["dedupe_key"],
                error=err,
                retry_in_s=backoff,
            )
            if status == 429:
                break  # rate limited: the rest waits too
        return sent

    def next_due(self) -> datetime | None:
        row = self.state.db.execute(
            "SELECT MIN(next_attempt_at) FROM outbox WHERE status='pending'"
        ).fetchone()
        return datetime.fromisoformat(row[0]) if row and row[0] else None
