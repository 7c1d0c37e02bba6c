"""The guardrail daemon: one ``run_cycle`` observes, decides (pure functions) and acts under
the safety rules (dry-run, kill switch, per-cycle cap, circuit breaker).

    >>> # d = Daemon(cfg, Aws(cfg.aws), State(path), clock=SystemClock()); d.run_cycle()
"""

from __future__ import annotations

import functools
import gc
import hashlib
import json
import os
import secrets
import socket
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import structlog
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
)

from guardrails import aws, testhooks
from guardrails.clock import Clock, SystemClock
from guardrails.config import GuardrailsConfig, kill_switch_engaged
from guardrails.egress import project_egress, spike
from guardrails.idle import Decision, IdleParams, Utilization, assess_utilization, decide
from guardrails.metrics import Metrics
from guardrails.model import DeviceSeries, Node
from guardrails.rules import REGISTRY
from guardrails.slack import ELLIPSIS, Alert, Outbox, clip
from guardrails.spend import accrue, crossed, day_start, lustre_usd_per_hour, month_start, project
from guardrails.state import iso, parse_iso
from guardrails.store import StateStore
from common.catalog import Catalog, CatalogError, load_catalog

PAUSE_ENV = testhooks.PAUSE_ENV  # read only with COREBURST_TEST_HOOKS=1


class AwsUnreachableError(RuntimeError):
    """The AWS endpoint could not be reached or refused our credentials (user-fixable)."""


@dataclass
class CycleReport:
    at: datetime
    nodes: int = 0
    states: Counter[str] = field(default_factory=Counter)
    decisions: list[Decision] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    alerts_queued: int = 0
    errors: list[str] = field(default_factory=list)
    spend: dict[str, dict[str, float]] = field(default_factory=dict)
    egress: dict[str, Any] = field(default_factory=dict)


def idle_params(cfg: GuardrailsConfig) -> IdleParams:
    p = cfg.reclaim.protected
    return IdleParams(
        threshold_percent=cfg.idle.threshold_percent,
        window=cfg.idle.window,
        max_gap=cfg.idle.max_gap,
        grace=cfg.reclaim.grace,
        max_exemption=cfg.reclaim.max_exemption,
        exempt_tag=cfg.reclaim.exempt_tag,
        protected_asgs=frozenset(p.asg_names),
        protected_tags=tuple((s.key, frozenset(s.values)) for s in p.tag_selectors),
    )


def expected_series(node: Node, cfg: GuardrailsConfig) -> int:
    m = cfg.idle.metrics.get(node.accelerator_kind)
    if m is None:
        return 1
    return node.accelerator_count if m.expect_series == "accelerator-count" else m.expect_series


def _pid_space() -> str:
    """Which process-id space this process lives in: the boot (a pid means nothing across
    machines or reboots) and the pid namespace (nor across containers). Empty where Linux's
    /proc does not say; then a dead holder is never recognised, and its lease expires."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    return hashlib.sha1(f"{boot}/{ns}".encode()).hexdigest()[:8]


def leader_id() -> str:
    """This process's owner id for the leader lease: ``<host>~<pid space>:<pid>:<random>``.
    Unique per process, so two daemons on one host and store never share a lease (both would
    act). The host is the host name, or ``COREBURST_LEADER_ID`` when set."""
    host = os.environ.get("COREBURST_LEADER_ID") or socket.gethostname()
    return f"{host}~{_pid_space()}:{os.getpid()}:{secrets.token_hex(4)}"


def dead_local_holder(holder: str | None, me: str) -> bool:
    """True when the lease ``holder`` is a ``leader_id`` of this host and pid space (same
    host part as ``me``) whose process no longer runs. Any doubt (another host, an id of
    another form, a process that runs, maybe as another user, or a reused pid) answers
    False: the lease is then left to expire, which is slow but never lets two daemons act."""
    if not holder or holder == me:
        return False
    try:
        host, pid_s, _ = holder.rsplit(":", 2)
        my_host = me.rsplit(":", 2)[0]
        pid = int(pid_s)
    except ValueError:
        return False
    if host != my_host or host.endswith("~") or pid <= 0:
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


class Daemon:
    def __init__(
        self,
        cfg: GuardrailsConfig,
        clients: aws.Aws,
        state: StateStore,
        *,
        clock: Clock | None = None,
        catalog: Catalog | None = None,
        outbox: Outbox | None = None,
        metrics: Metrics | None = None,
        webhook_url: str | None = None,
        log: Any = None,
        owner_id: str | None = None,
        lease_ttl: timedelta | None = None,
    ) -> None:
        self.cfg = cfg
        # Who holds the leader lease: two daemons (or a Lambda and a long-running daemon) on
        # one store never both act; the other one observes. Unique per process (see
        # ``leader_id``), so two daemons on one host and state file are two owners too.
        self.owner_id = owner_id or leader_id()
        self.leader = False
        # How long the lease outlives this daemon if it dies holding it. Default: a missed
        # cycle or two, so a crashed leader is replaced quickly but a slow one is not raced.
        # A scheduled Lambda passes its schedule interval (see guardrails.lambda_handler).
        self.lease_ttl = lease_ttl or max(3 * cfg.interval, timedelta(seconds=180))
        self.aws = clients
        self.state = state
        self.clock = clock or SystemClock()
        self.catalog = catalog or load_catalog()
        self.log = log or structlog.get_logger("guardrails")
        self.metrics = metrics or Metrics()
        self.outbox = outbox or Outbox(
            state, cfg.slack, self.clock, url=webhook_url, log=self.log, metrics=self.metrics
        )
        self.nodes: list[Node] = []
        self.report = CycleReport(self.clock.now())
        self._actions_this_cycle = 0
        self._spot: dict[tuple[str, str], float] = {}
        self._heap_frozen = False
        self._series_cache = aws.SeriesCache()
        audit = cfg.state.audit_log
        audit.parent.mkdir(parents=True, exist_ok=True)
        self._audit = audit.open("a", buffering=1)

    def close(self) -> None:
        self.release_lease()
        self._audit.close()
        if self._heap_frozen:  # what this daemon held may now be collected
            gc.unfreeze()
            self._heap_frozen = False

    def release_lease(self) -> None:
        """Hand the leader lease back, so the next daemon or invocation may act at once
        instead of waiting for the lease to expire."""
        if self.leader:
            self.state.release_lease("leader", self.owner_id)
            self.leader = False

    # -- audit / hooks -----------------------------------------------------------------------
    def audit(self, event: str, **fields: Any) -> None:
        rec = {"ts": iso(self.clock.now()), "event": event, **fields}
        self._audit.write(json.dumps(rec, default=str, sort_keys=True) + "\n")

    def _pause_point(self, point: str) -> None:
        # Only with COREBURST_TEST_HOOKS=1 (guardrails.testhooks).
        testhooks.pause_at(point)

    # -- safety ------------------------------------------------------------------------------
    def kill_switch(self) -> str | None:
        s = self.cfg.safety
        if kill_switch_engaged(os.environ.get(s.kill_switch_env)):
            return f"kill switch: ${s.kill_switch_env} is set"
        if s.kill_switch_file and s.kill_switch_file.exists():
            return f"kill switch: {s.kill_switch_file} exists"
        return None

    def breaker_open(self) -> bool:
        b = self.state.get("breaker", {"failures": 0, "opened_at": None})
        if b["failures"] < self.cfg.safety.breaker_failures:
            return False
        opened = parse_iso(b["opened_at"]) if b["opened_at"] else self.clock.now()
        # After the reset period the breaker half-opens: one action may try again.
        return self.clock.now() - opened < self.cfg.safety.breaker_reset

    def _api_failure(self, what: str, exc: Exception) -> None:
        b = self.state.get("breaker", {"failures": 0, "opened_at": None})
        b["failures"] += 1
        if b["failures"] >= self.cfg.safety.breaker_failures:
            b["opened_at"] = iso(self.clock.now())
            self.alert(
                Alert(
                    f"breaker:{b['opened_at']}",
                    "breaker",
                    "Guardrails stopped acting (circuit breaker open)",
                    [
                        f"{b['failures']} consecutive AWS API failures; last: {what}: "
                        f"{type(exc).__name__}. No actions until "
                        f"{self.cfg.safety.breaker_reset} has passed or the cause is fixed."
                    ],
                    severity="critical",
                )
            )
        self.state.put("breaker", b)

    def _api_success(self) -> None:
        self.state.put("breaker", {"failures": 0, "opened_at": None})

    def gate(self) -> str | None:
        """Why acting is not allowed right now, or None."""
        if self.cfg.dry_run:
            return "dry-run"
        if not self.leader:
            return "another daemon holds the leader lease"
        ks = self.kill_switch()
        if ks:
            return ks
        if self.breaker_open():
            return "circuit breaker open"
        if self._actions_this_cycle >= self.cfg.safety.max_actions_per_cycle:
            return f"per-cycle cap of {self.cfg.safety.max_actions_per_cycle} actions reached"
        return None

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
        self._actions_this_cycle += 1
        self._pause_point("after-intent")
        try:
            api = call()
        except (ClientError, BotoCoreError) as exc:
            self.state.drop_intent(key)
            self._api_failure(f"{kind} {instance_id}", exc)
            self.audit("action.failed", key=key, instance_id=instance_id, kind=kind, error=str(exc))
            self.metrics.actions.labels(kind, "failed").inc()
            return False
        self._pause_point("after-action")
        self.state.finish_action(key, "done", self.clock.now(), api)
        self._api_success()
        self.audit(
            "action.executed", key=key, instance_id=instance_id, kind=kind, api=api, reason=reason
        )
        self.metrics.actions.labels(kind, "done").inc()
        self.report.actions.append(f"{kind} {instance_id}")
        return True

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
                    self.alert(
                        Alert(
                            f"act:{r['key']}",
                            f"act:{r['instance_id']}",
                            f"Idle node {r['instance_id']} {_verb(r['kind'])}",
                            [f"*{r['instance_id']}*: {r['kind']} confirmed after a restart."],
                        ),
                        cooldown=timedelta(0),
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

    # -- alerts ------------------------------------------------------------------------------
    def alert(self, a: Alert, cooldown: timedelta | None = None) -> None:
        if self.outbox.enqueue(a, cooldown):
            self.report.alerts_queued += 1
        self._pause_point("after-enqueue")

    # -- prices ------------------------------------------------------------------------------
    def price(self, n: Node) -> float | None:
        if n.market == "spot" and self.cfg.spend.spot_price == "live":
            live = self._spot.get((n.instance_type, n.az))
            if live is not None:
                return live
        try:
            return self.catalog.hourly_price(n.instance_type, n.region, n.market)
        except CatalogError:
            return None

    def owner(self, n: Node) -> str:
        parts = [f"{k}={n.tags[k]}" for k in self.cfg.reclaim.owner_tags if k in n.tags]
        return ", ".join(parts) or "no owner tags"

    # -- the cycle ---------------------------------------------------------------------------
    def observe(self) -> list[Node]:
        nodes: list[Node] = []
        types = self.cfg.watched_types()
        for region in self.cfg.regions:
            ec2 = self.aws.client("ec2", region)
            try:
                nodes.extend(aws.inventory(ec2, region, types, self.catalog))
            except (EndpointConnectionError, NoCredentialsError) as exc:
                raise AwsUnreachableError(
                    f"cannot reach AWS in {region} ({type(exc).__name__}): check "
                    f"aws.endpoint_url ({self.cfg.aws.endpoint_url or 'default'}) and credentials"
                ) from None
            if self.cfg.spend.spot_price == "live" and any(n.market == "spot" for n in nodes):
                try:
                    self._spot.update(aws.spot_prices(ec2, types, self.clock.now()))
                except (ClientError, BotoCoreError) as exc:
                    self.report.errors.append(f"spot prices {region}: {type(exc).__name__}")
        return nodes

    def run_cycle(self) -> CycleReport:
        """One observe-decide-act pass. The cyclic collector is paused for the pass and run
        once after it: a cycle allocates ~250,000 short-lived values per 1,000 nodes, and the
        dozens of collections they would trigger were up to half of a cycle's CPU
        (benchmarks/guardrails_cycle.py). After the first pass, everything still alive
        (botocore's service models, clients, the catalog: ~140,000 objects) is frozen out of
        later collections; ``close`` unfreezes it."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run_cycle()
        finally:
            if enabled:
                gc.enable()
                gc.collect()
                if not self._heap_frozen:
                    gc.freeze()
                    self._heap_frozen = True

    def _run_cycle(self) -> CycleReport:
        now = self.clock.now()
        w0 = time.perf_counter()
        self.report = CycleReport(now)
        self._actions_this_cycle = 0
        before = Counter(self.aws.counter.calls)
        ttl = self.lease_ttl.total_seconds()
        self.leader = self.state.acquire_lease("leader", self.owner_id, now, ttl)
        if not self.leader:
            holder = self.state.lease_holder("leader")
            if dead_local_holder(holder, self.owner_id):
                # A daemon on this host died holding the lease (SIGKILL, crash): its restart
                # takes over now instead of waiting out the TTL. Conditional on that exact
                # holder, so of two daemons taking over only one wins.
                self.leader = self.state.acquire_lease(
                    "leader", self.owner_id, now, ttl, replace=holder
                )
                if self.leader:
                    self.audit("leader.taken-over", owner=self.owner_id, previous=holder)
        if not self.leader:
            self.audit("leader.standby", owner=self.owner_id)
        try:
            self.recover_intents()
            self.nodes = self.observe()
            self.report.nodes = len(self.nodes)
            ks = self.kill_switch()
            if ks:
                self.alert(
                    Alert(
                        f"killswitch:{now.date()}",
                        "killswitch",
                        "Guardrails kill switch engaged",
                        [ks + "; observing only."],
                        severity="info",
                    ),
                    cooldown=timedelta(hours=6),
                )
            for rule in REGISTRY.values():
                if rule.run is None or not self.cfg.runs(rule.name) or not rule.enabled(self.cfg):
                    continue
                try:
                    rule.run(self)
                except AwsUnreachableError:
                    raise
                except Exception as exc:  # one failing rule must not stop the others
                    self.report.errors.append(f"{rule.name}: {type(exc).__name__}: {exc}")
                    self.log.error("rule.failed", rule=rule.name, error=str(exc))
                    self.audit("rule.failed", rule=rule.name, error=str(exc))
        except Exception:
            self.metrics.cycle_failures.inc()
            raise
        finally:
            if self.leader:  # one sender per store
                self.outbox.flush()
            self.metrics.outbox_depth.set(self.state.outbox_depth())
            for op, n in (self.aws.counter.calls - before).items():
                self.metrics.api_calls.labels(op).inc(n)
            self.metrics.cycle_seconds.observe(time.perf_counter() - w0)
        if self.leader:
            self._prune(now)
        self._save_summary()
        return self.report

    def _prune(self, now: datetime) -> None:
        """Hourly: drop spend/egress snapshots past ``state.snapshot_retention``."""
        last = self.state.get("snapshots_pruned_at")
        if last and now - parse_iso(last) < timedelta(hours=1):
            return
        before = now - self.cfg.state.snapshot_retention
        try:
            n = self.state.prune_snapshots(before, [s.name for s in self.cfg.spend.scopes])
        except Exception as exc:  # housekeeping must never fail a cycle...
            # ...but must not fail unseen either (a missing IAM permission would otherwise let
            # the table grow forever): an error in the log, the audit and the cycle's report,
            # retried hourly rather than every cycle.
            why = f"{type(exc).__name__}: {exc}"
            self.log.error("state.prune_failed", error=why)
            self.audit("state.prune_failed", error=why)
            self.report.errors.append(f"state prune: {why}")
            self.state.put("snapshots_pruned_at", iso(now))
            return
        self.state.put("snapshots_pruned_at", iso(now))
        if n:
            self.audit("state.pruned", rows=n, before=iso(before))

    def _save_summary(self) -> None:
        r = self.report
        self.state.put(
            "last_cycle",
            {
                "at": iso(r.at),
                "nodes": r.nodes,
                "states": dict(r.states),
                "blind": [
                    {"instance_id": d.instance_id, "reason": d.reason}
                    for d in r.decisions
                    if d.state == "unknown"
                ],
                "actions": r.actions,
                "errors": r.errors,
                "spend": r.spend,
                "egress": r.egress,
            },
        )

    # -- rule: idle-reclaim -------------------------------------------------------------------
    def utilization(self, nodes: list[Node]) -> dict[str, Utilization]:
        now = self.clock.now()
        out: dict[str, Utilization] = {}
        for region in sorted({n.region for n in nodes}):
            rn = [n for n in nodes if n.region == region]
            cw = self.aws.client("cloudwatch", region)
            series, errors = aws.fetch_utilization(cw, rn, self.cfg.idle, now, self._series_cache)
            params = idle_params(self.cfg)
            for n in rn:
                if n.instance_id in errors:
                    out[n.instance_id] = Utilization("unknown", errors[n.instance_id])
                    continue
                s: DeviceSeries = series.get(n.instance_id, {})
                out[n.instance_id] = assess_utilization(
                    s, expected_series(n, self.cfg), now, params
                )
        return out

    def rule_idle(self) -> None:
        now = self.clock.now()
        params = idle_params(self.cfg)
        utils = self.utilization(self.nodes)
        marks = self.state.marks()
        mark_tag = self.cfg.reclaim.mark_tag
        for n in self.nodes:
            row = marks.get(n.instance_id)
            marked_at = parse_iso(row["marked_at"]) if row else None
            if marked_at is None and mark_tag in n.tags:
                try:  # the tag survives a lost state file
                    marked_at = parse_iso(n.tags[mark_tag])
                except ValueError:
                    marked_at = None
            d = decide(n, utils[n.instance_id], marked_at, now, params)
            self.report.decisions.append(d)
            self.report.states[d.state] += 1
            self.audit(
                "decision",
                instance_id=n.instance_id,
                state=d.state,
                step=d.step,
                action=d.action,
                reason=d.reason,
            )
            self._apply(n, d)
        for st in ("idle", "busy", "unknown"):
            self.metrics.nodes.labels(st).set(self.report.states.get(st, 0))
        blind = [d for d in self.report.decisions if d.state == "unknown"]
        if blind:
            ids = ", ".join(sorted(d.instance_id for d in blind)[:20]) + (
                f" {ELLIPSIS} and {len(blind) - 20} more" if len(blind) > 20 else ""
            )
            self.alert(
                Alert(
                    "blind:"
                    + hashlib.sha1(
                        ",".join(sorted(d.instance_id for d in blind)).encode()
                    ).hexdigest()[:16],
                    "blind",
                    f"{len(blind)} GPU node(s) without usable utilization data",
                    [
                        f"Never reclaimed while blind: {ids}",
                        # all of them: the payload keeps what fits and says how many more
                        *(f"• {d.instance_id}: {d.utilization.reason}" for d in blind),
                    ],
                    severity="info",
                ),
                cooldown=timedelta(hours=6),
            )

    def _apply(self, n: Node, d: Decision) -> None:
        if not self.leader and d.step != "none":
            # A standby daemon decides and reports but never tags or acts.
            self.audit("standby.skip", instance_id=n.instance_id, step=d.step)
            return
        now = self.clock.now()
        ec2 = self.aws.client("ec2", n.region)
        price = self.price(n)
        price_s = f"${price:,.2f}/h" if price is not None else "price unknown"
        dry = self.cfg.dry_run
        if d.step == "mark":
            if not dry:
                ks = self.kill_switch()
                if ks:
                    self.audit("mark.skipped", instance_id=n.instance_id, because=ks)
                    return
                try:
                    aws.tag_instance(ec2, n.instance_id, self.cfg.reclaim.mark_tag, iso(now))
                except (ClientError, BotoCoreError) as exc:
                    self._api_failure(f"tag {n.instance_id}", exc)
                    return
            self.state.add_mark(n.instance_id, n.region, now, d.action, reason=d.reason, dry=dry)
            self.audit(
                "mark",
                instance_id=n.instance_id,
                action=d.action,
                reason=d.reason,
                act_after=d.act_after,
                dry_run=dry,
            )
            exempt_until = (now + timedelta(days=7)).date().isoformat()
            self.alert(
                Alert(
                    f"mark:{n.instance_id}:{iso(now)}",
                    f"idle:{n.instance_id}",
                    f"{'[dry-run] ' if dry else ''}Idle node {n.instance_id} will be "
                    f"{_verb(d.action)}",
                    [
                        f"*{n.instance_id}* ({n.instance_type}, {n.market}, {n.region}) "
                        f"costs {price_s}. {d.reason}.",
                        f"It will be *{_verb(d.action)}* at or after "
                        f"{iso(d.act_after) if d.act_after else '?'} unless it becomes busy.",
                        f"To exempt it: tag `{self.cfg.reclaim.exempt_tag}={exempt_until}` "
                        f"(at most {self.cfg.reclaim.max_exemption.days} days).",
                    ],
                    fields={
                        "Owner": self.owner(n),
                        "Idle since": iso(now),
                        "Action": d.action,
                        "Cost": price_s,
                    },
                ),
                cooldown=timedelta(0),
            )
        elif d.step == "unmark":
            row = self.state.marks().get(n.instance_id)
            if not (row and row["dry_run"]) and not self.kill_switch():
                try:
                    aws.untag_instance(ec2, n.instance_id, self.cfg.reclaim.mark_tag)
                except (ClientError, BotoCoreError) as exc:
                    self._api_failure(f"untag {n.instance_id}", exc)
                    return
            self.state.remove_mark(n.instance_id)
            self.audit("unmark", instance_id=n.instance_id, reason=d.reason)
            self.alert(
                Alert(
                    f"unmark:{n.instance_id}:{iso(d.marked_at) if d.marked_at else ''}",
                    f"idle:{n.instance_id}",
                    f"Node {n.instance_id} is no longer scheduled for reclaim",
                    [d.reason],
                    severity="info",
                    fields={"Owner": self.owner(n)},
                ),
                cooldown=timedelta(0),
            )
        elif d.step == "act":
            key = f"reclaim:{n.instance_id}:{iso(d.marked_at) if d.marked_at else ''}"
            asg = self.aws.client("autoscaling", n.region)
            ok = self.execute(
                key,
                n.instance_id,
                n.region,
                d.action,
                reason=d.reason,
                call=lambda: aws.reclaim(ec2, asg, n, d.action),
            )
            if ok:
                self.state.remove_mark(n.instance_id)
                self.alert(
                    Alert(
                        f"act:{key}",
                        f"act:{n.instance_id}",
                        f"Idle node {n.instance_id} {_verb(d.action)}",
                        [f"*{n.instance_id}* ({n.instance_type}, {price_s}): {d.reason}."],
                        fields={"Owner": self.owner(n), "Action": d.action},
                    ),
                    cooldown=timedelta(0),
                )

    # -- rule: spend-limit ---------------------------------------------------------------------
    def _in_scope(self, tags: dict[str, str], key: str | None, value: str | None) -> bool:
        return key is None or tags.get(key) == value

    def _ce(self, cache_key: str, fetch: Callable[[], float]) -> float:
        now = self.clock.now()
        cached = self.state.get(cache_key)
        if cached and now - parse_iso(cached["at"]) < self.cfg.spend.cost_explorer_refresh:
            return float(cached["value"])
        try:
            v = fetch()
        except (ClientError, BotoCoreError) as exc:
            self.report.errors.append(f"cost explorer: {type(exc).__name__}")
            return float(cached["value"]) if cached else 0.0
        self.state.put(cache_key, {"at": iso(now), "value": v})
        return v

    def rule_spend(self) -> None:
        now = self.clock.now()
        cfg = self.cfg.spend
        hpm = self.catalog.hours_per_month
        fs_list: list[aws.LustreFs] = []
        dx_list: list[tuple[str, str, dict[str, str]]] = []
        for region in self.cfg.regions:
            if cfg.include_lustre:
                try:
                    fs_list.extend(aws.lustre_file_systems(self.aws.client("fsx", region)))
                except (ClientError, BotoCoreError) as exc:
                    self.report.errors.append(f"fsx {region}: {type(exc).__name__}")
            if cfg.direct_connect_ports is None:
                try:
                    dx_list.extend(aws.dx_connections(self.aws.client("directconnect", region)))
                except (ClientError, BotoCoreError) as exc:
                    self.report.errors.append(f"directconnect {region}: {type(exc).__name__}")
        for p in cfg.direct_connect_ports or []:
            dx_list.extend((f"configured-{i}", p.bandwidth, {}) for i in range(p.count))
        ce = self.aws.client("ce", "us-east-1")
        for scope in cfg.scopes:
            tag = (scope.tag_key, scope.tag_value) if scope.tag_key and scope.tag_value else None
            burn = 0.0
            for n in self.nodes:
                if self._in_scope(n.tags, scope.tag_key, scope.tag_value):
                    burn += self.price(n) or 0.0
            for fs in fs_list:
                if self._in_scope(fs.tags, scope.tag_key, scope.tag_value):
                    try:
                        per_gb = self.catalog.lustre_price(fs.deployment_type, fs.throughput)
                    except CatalogError:
                        continue
                    burn += lustre_usd_per_hour(fs.capacity_gib, per_gb, hpm)
            for _cid, bw, tags in dx_list:
                if self._in_scope(tags, scope.tag_key, scope.tag_value):
                    try:
                        burn += self.catalog.dx_port_price(bw)
                    except CatalogError:
                        continue
            actual = 0.0
            if cfg.cost_explorer:
                ms, ds = month_start(now), day_start(now)
                actual = self._ce(
                    f"ce:{scope.name}:{ms.date()}:{ds.date()}",
                    functools.partial(aws.cost_explorer_actuals, ce, ms, ds, tag),
                )
            last = self.state.last_spend(scope.name)
            prev_at = parse_iso(last["ts"]) if last else None
            today = accrue(last["today"] if last else 0.0, prev_at, burn, now)
            proj = project(actual, today, burn, now)
            self.state.add_spend(
                now,
                scope.name,
                burn=burn,
                today=today,
                mtd=proj.month_to_date_usd,
                proj=proj.projected_month_usd,
            )
            self.metrics.burn.labels(scope.name).set(burn)
            self.report.spend[scope.name] = {
                "burn_usd_per_hour": burn,
                "today_usd": proj.today_usd,
                "projected_today_usd": proj.projected_today_usd,
                "month_to_date_usd": proj.month_to_date_usd,
                "projected_month_usd": proj.projected_month_usd,
                "cost_explorer_actual_usd": actual,
            }
            self.audit("spend", scope=scope.name, **self.report.spend[scope.name])
            hard = False
            for period, spent, limit in (
                (f"daily:{now.date()}", proj.today_usd, scope.daily_limit_usd),
                (
                    f"monthly:{now.strftime('%Y-%m')}",
                    proj.month_to_date_usd,
                    scope.monthly_limit_usd,
                ),
            ):
                if limit is None:
                    continue
                hit = crossed(spent, limit, cfg.thresholds_percent)
                if not hit:
                    continue
                hard = hard or spent >= limit
                top = hit[-1]
                key = f"spend:{scope.name}:{period}:{top:g}"
                for lower in hit[:-1]:  # crossed together: one message, all remembered
                    self.state.remember(
                        f"spend:{scope.name}:{period}:{lower:g}",
                        f"spend:{scope.name}:{period}:{lower:g}",
                        now,
                    )
                self.alert(
                    Alert(
                        key,
                        f"spend:{scope.name}:{period}:{top:g}",
                        f"Spend {scope.name}: {top:g}% of the {period.split(':')[0]} limit",
                        [
                            f"Spent ${spent:,.2f} of ${limit:,.2f} ({period}); burn "
                            f"${burn:,.2f}/h; projected month ${proj.projected_month_usd:,.2f}.",
                            "Enforcement "
                            + (
                                "is ON for this scope." if scope.enforce else "is off (alert only)."
                            ),
                        ],
                        severity="critical" if spent >= limit else "warning",
                    ),
                    cooldown=timedelta(0),
                )
            if hard and scope.enforce:
                self._enforce(scope.name, tag)

    def _enforce(self, scope: str, tag: tuple[str, str] | None) -> None:
        now = self.clock.now()
        params = idle_params(self.cfg)
        from guardrails.idle import exemption_status, protection_status

        period = now.strftime("%Y-%m-%d")
        for region in self.cfg.regions:
            asgc = self.aws.client("autoscaling", region)
            ec2 = self.aws.client("ec2", region)
            for g in aws.scope_asgs(asgc, tag):
                name = g["AutoScalingGroupName"]
                tags = {t["Key"]: t["Value"] for t in g.get("Tags", [])}
                if name in params.protected_asgs or exemption_status(tags, now, params)[0]:
                    continue
                if g.get("DesiredCapacity", 0) == 0:
                    continue
                self.execute(
                    f"enforce-asg:{name}:{period}",
                    name,
                    region,
                    "scale-to-zero",
                    reason=f"hard spend limit of scope {scope}",
                    call=functools.partial(_scale_to_zero, asgc, name),
                )
            for n in self.nodes:
                if n.region != region or n.market != "spot" or n.asg:
                    continue
                if tag and n.tags.get(tag[0]) != tag[1]:
                    continue
                if exemption_status(n.tags, now, params)[0] or protection_status(n, params)[0]:
                    continue
                # A one-time spot instance cannot be stopped; terminating is what AWS would do
                # on interruption anyway.
                self.execute(
                    f"enforce-spot:{n.instance_id}:{period}",
                    n.instance_id,
                    region,
                    "enforce-spot",
                    reason=f"hard spend limit of scope {scope}",
                    call=functools.partial(aws.reclaim, ec2, None, n, "terminate"),
                )

    # -- rule: egress-spike -------------------------------------------------------------------
    def rule_egress(self) -> None:
        now = self.clock.now()
        cfg = self.cfg.egress
        start = now - cfg.window
        inst_bytes: dict[str, float] = {}
        nat_bytes: dict[str, float] = {}
        for region in self.cfg.regions:
            cw = self.aws.client("cloudwatch", region)
            ids = [n.instance_id for n in self.nodes if n.region == region]
            if ids:
                b, failed = aws.sum_bytes(
                    cw, "AWS/EC2", "NetworkOut", "InstanceId", ids=ids, start=start, end=now
                )
                inst_bytes.update(b)
                if failed:
                    self.report.errors.append(f"egress NetworkOut {region}: partial")
            if cfg.include_nat:
                nats = aws.nat_gateways(self.aws.client("ec2", region))
                if nats:
                    b, _ = aws.sum_bytes(
                        cw,
                        "AWS/NATGateway",
                        "BytesOutToDestination",
                        "NatGatewayId",
                        ids=nats,
                        start=start,
                        end=now,
                    )
                    nat_bytes.update(b)
        mtd_gb = 0.0
        if self.cfg.spend.cost_explorer:
            ce = self.aws.client("ce", "us-east-1")
            ms, ds = month_start(now), day_start(now)
            mtd_gb = self._ce(
                f"ce-egress:{ms.date()}:{ds.date()}",
                lambda: aws.cost_explorer_actuals(
                    ce,
                    ms,
                    ds,
                    None,
                    metric="UsageQuantity",
                    usage_type_group="EC2: Data Transfer - Internet (Out)",
                ),
            )
        proj = project_egress(
            inst_bytes, nat_bytes, cfg.window, mtd_gb, self.catalog, top=cfg.top_talkers
        )
        history = self.state.egress_history(now - cfg.baseline, now)
        why = spike(
            proj.projected_day_usd,
            history,
            cfg.daily_threshold_usd,
            cfg.spike_factor,
            cfg.min_baseline_samples,
        )
        self.state.add_egress(now, proj.projected_day_usd, proj.projected_day_gb)
        self.metrics.egress.set(proj.projected_day_usd)
        self.report.egress = {
            "projected_day_usd": proj.projected_day_usd,
            "projected_day_gb": proj.projected_day_gb,
            "top_talkers": proj.top_talkers,
            "alert": why,
        }
        self.audit("egress", **self.report.egress)
        if why:
            by_id = {n.instance_id: n for n in self.nodes}
            talkers = [
                f"• {k}: {gb:,.1f} GB in {int(cfg.window.total_seconds() // 60)} min"
                + (f" ({clip(self.owner(by_id[k]), 200)})" if k in by_id else "")
                for k, gb in proj.top_talkers
            ]
            self.alert(
                Alert(f"egress:{iso(now)}", "egress", "Egress spike", [why, *talkers]),
                cooldown=cfg.cooldown,
            )


def _scale_to_zero(asgc: Any, name: str) -> str:
    aws.scale_to_zero(asgc, name)
    return "UpdateAutoScalingGroup"


def _verb(action: str) -> str:
    return {
        "stop": "stopped",
        "terminate": "terminated",
        "scale-in": "scaled in from its ASG",
        "report-only": "reported only",
    }.get(action, action)
