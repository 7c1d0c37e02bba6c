"""The actuator: the one way guardrails changes anything in AWS, behind its safety gate.

- **Gate** (``gate``): no action in dry-run, without the leader lease, with the kill switch
  engaged, with the circuit breaker open, or past ``safety.max_actions_per_cycle``.
- **Run once** (``execute``): the intent is stored before the API call and finished after it,
  so a crash never repeats an action and never forgets one.
- **Crash recovery** (``recover_intents``): an intent whose effect AWS shows is done; one whose
  effect it does not show was never carried out, and is dropped to be re-decided.
- **Breaker** (``api_failure`` / ``api_success``): repeated API failures stop all acting until
  ``safety.breaker_reset`` has passed.
- **Audit log**: every decision and action, one JSON line each.

Built from the config; a reload builds a new one (``Daemon.reload``).

    >>> # act = Actuator(cfg, state, clock, aws, metrics, alert=d.alert)
    >>> # act.execute("reclaim:i-1:...", "i-1", "us-east-1", "stop", reason="idle", call=...)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import timedelta
from typing import IO, Any

from botocore.exceptions import BotoCoreError, ClientError

from guardrails import messages
from guardrails.adapters import aws
from guardrails.adapters.slack import Alert
from guardrails.clock import Clock
from guardrails.config import GuardrailsConfig, kill_switch_engaged
from guardrails.metrics import Metrics
from guardrails.stores.base import StateStore
from guardrails.timefmt import iso, parse_iso

AlertFn = Callable[[Alert, timedelta | None], None]
PauseFn = Callable[[str], None]
# Where an injected ``pause`` is called (tests kill the process there to prove crash safety).
PAUSE_POINTS = ("after-intent", "after-action", "after-enqueue")


class Actuator:
    def __init__(
        self,
        cfg: GuardrailsConfig,
        state: StateStore,
        clock: Clock,
        clients: aws.Aws,
        metrics: Metrics,
        *,
        alert: AlertFn,
        pause: PauseFn | None = None,
    ) -> None:
        self.dry_run = cfg.dry_run
        self.safety = cfg.safety
        self.state = state
        self.clock = clock
        self.aws = clients
        self.metrics = metrics
        self._alert = alert
        self._pause = pause
        # Set by the daemon each cycle: a standby (no lease) decides and reports, never acts.
        self.leader = False
        self.actions_this_cycle = 0
        self._done: list[str] = []
        self.audit_path = cfg.state.audit_log
        self.audit_path.parent.mkdir(parents=True, exist_ok=True)
        self._audit: IO[str] = self.audit_path.open("a", buffering=1)

    def close(self) -> None:
        self._audit.close()

    def begin_cycle(self, done: list[str]) -> None:
        """A new cycle: the per-cycle cap starts over; executed actions go to ``done``."""
        self.actions_this_cycle = 0
        self._done = done

    def pause(self, point: str) -> None:
        if self._pause is not None:
            self._pause(point)

    # -- audit ---------------------------------------------------------------------------------
    def audit(self, event: str, **fields: Any) -> None:
        rec = {"ts": iso(self.clock.now()), "event": event, **fields}
        self._audit.write(json.dumps(rec, default=str, sort_keys=True) + "\n")

    # -- gate ----------------------------------------------------------------------------------
    def kill_switch(self) -> str | None:
        s = self.safety
        if kill_switch_engaged(os.environ.get(s.kill_switch_env)):
            return f"kill switch: ${s.kill_switch_env} is set"
        if s.kill_switch_file and s.kill_switch_file.exists():
            return f"kill switch: {s.kill_switch_file} exists"
        return None

    def breaker_open(self) -> bool:
        b = self.state.get("breaker", {"failures": 0, "opened_at": None})
        if b["failures"] < self.safety.breaker_failures:
            return False
        opened = parse_iso(b["opened_at"]) if b["opened_at"] else self.clock.now()
        # After the reset period the breaker half-opens: one action may try again.
        return self.clock.now() - opened < self.safety.breaker_reset

    def api_failure(self, what: str, exc: Exception) -> None:
        b = self.state.get("breaker", {"failures": 0, "opened_at": None})
        b["failures"] += 1
        if b["failures"] >= self.safety.breaker_failures:
            b["opened_at"] = iso(self.clock.now())
            self._alert(
                messages.breaker_open(
                    b["failures"],
                    b["opened_at"],
                    what,
                    type(exc).__name__,
                    str(self.safety.breaker_reset),
                ),
                None,
            )
        self.state.put("breaker", b)

    def api_success(self) -> None:
        self.state.put("breaker", {"failures": 0, "opened_at": None})

    def gate(self) -> str | None:
        """Why acting is not allowed right now, or None."""
        if self.dry_run:
            return "dry-run"
        if not self.leader:
            return "another daemon holds the leader lease"
        ks = self.kill_switch()
        if ks:
            return ks
        if self.breaker_open():
            return "circuit breaker open"
        if self.actions_this_cycle >= self.safety.max_actions_per_cycle:
            return f"per-cycle cap of {self.safety.max_actions_per_cycle} actions reached"
        return None

    # -- run once ------------------------------------------------------------------------------
    def execute(
        self,
        key: str,
        instance_id: str,
        region: str,
        kind: str,
        *,
        reason: str,
        call: Callable[[], str],
    ) -> bool:
        """Run one action at most once: intent is on disk before the call, done after."""
        why_not = self.gate()
        if why_not:
            self.audit(
                "action.skipped",
                key=key,
                instance_id=instance_id,
                kind=kind,
                reason=reason,
                because=why_not,
            )
            self.metrics.actions.labels(kind, "skipped").inc()
            return False
        if not self.state.record_intent(key, instance_id, region, kind, self.clock.now()):
            self.audit("action.already-recorded", key=key, instance_id=instance_id, kind=kind)
            return False
        self.actions_this_cycle += 1
        self.pause("after-intent")
        try:
            api = call()
        except (ClientError, BotoCoreError) as exc:
            self.state.drop_intent(key)
            self.api_failure(f"{kind} {instance_id}", exc)
            self.audit("action.failed", key=key, instance_id=instance_id, kind=kind, error=str(exc))
            self.metrics.actions.labels(kind, "failed").inc()
            return False
        self.pause("after-action")
        self.state.finish_action(key, "done", self.clock.now(), api)
        self.api_success()
        self.audit(
            "action.executed", key=key, instance_id=instance_id, kind=kind, api=api, reason=reason
        )
        self.metrics.actions.labels(kind, "done").inc()
        self._done.append(f"{kind} {instance_id}")
        return True

    # -- crash recovery ------------------------------------------------------------------------
    def recover_intents(self) -> None:
        """After a crash: an intent whose effect is visible is done; one whose effect is not
        was never carried out, so it is forgotten and re-decided from fresh data."""
        pending = self.state.pending_intents()
        if not pending or not self.leader:  # the leader's in-flight intents are its own
            return
        by_region: dict[str, list[Any]] = {}
        for row in pending:
            by_region.setdefault(row["region"], []).append(row)
        for region, rows in by_region.items():
            ec2 = self.aws.client("ec2", region)
            ids = [r["instance_id"] for r in rows if r["instance_id"].startswith("i-")]
            states = aws.instance_states(ec2, ids) if ids else {}
            for r in rows:
                st = states.get(r["instance_id"], "terminated")
                done = (r["kind"] == "stop" and st in ("stopping", "stopped")) or (
                    r["kind"] in ("terminate", "scale-in", "enforce-spot")
                    and st in ("shutting-down", "terminated")
                )
                if done:
                    self.state.finish_action(
                        r["key"], "done", self.clock.now(), "confirmed after restart"
                    )
                    # The crash may have come before the alert was stored: store it now
                    # (same dedupe key, so it is delivered once either way).
                    self._alert(
                        messages.confirmed_after_restart(r["key"], r["instance_id"], r["kind"]),
                        timedelta(0),
                    )
                    self.audit(
                        "action.confirmed-after-restart",
                        key=r["key"],
                        instance_id=r["instance_id"],
                        state=st,
                    )
                else:
                    self.state.drop_intent(r["key"])
                    self.audit(
                        "action.intent-dropped",
                        key=r["key"],
                        instance_id=r["instance_id"],
                        state=st,
                        reason="not carried out before restart; re-deciding",
                    )
