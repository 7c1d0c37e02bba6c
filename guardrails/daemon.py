"""The guardrail daemon's cycle: take the leader lease, recover intents, observe, run the
enabled rules from the registry in order, send, prune, save a summary.

What a cycle acts with is built from the config and rebuilt by ``reload``: the AWS clients,
the Slack outbox, the actuator (dry-run, kill switch, caps, breaker, audit log) and the prices.
The rules live in ``guardrails.rules``, the safety gate in ``guardrails.actuator``, the Slack
wording in ``guardrails.messages``.

    >>> # d = Daemon(cfg, Aws(cfg.aws), State(path), clock=SystemClock()); d.run_cycle()
    >>> # d.reload(new_cfg)   # takes effect in the next cycle
"""

from __future__ import annotations

import gc
import hashlib
import os
import secrets
import socket
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import structlog

from coreburst.common.catalog import Catalog, load_catalog
from guardrails import messages
from guardrails.actuator import Actuator, PauseFn
from guardrails.adapters import aws, cloudwatch
from guardrails.adapters.aws import AwsUnreachableError
from guardrails.adapters.slack import Alert, Outbox
from guardrails.clock import Clock, SystemClock
from guardrails.config import GuardrailsConfig
from guardrails.metrics import Metrics
from guardrails.model import Node
from guardrails.rules import REGISTRY, CycleReport, Prices, RuleContext, inventory
from guardrails.stores.base import StateStore
from guardrails.timefmt import iso, parse_iso

__all__ = ["AwsUnreachableError", "CycleReport", "Daemon", "dead_local_holder", "leader_id"]

_KEEP = object()  # reload(): keep the webhook URL the daemon has


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
        metrics: Metrics | None = None,
        webhook_url: str | None = None,
        log: Any = None,
        owner_id: str | None = None,
        lease_ttl: timedelta | None = None,
        pause: PauseFn | None = None,
    ) -> None:
        # Who holds the leader lease: two daemons (or a Lambda and a long-running daemon) on
        # one store never both act; the other one observes. Unique per process (see
        # ``leader_id``), so two daemons on one host and state file are two owners too.
        self.owner_id = owner_id or leader_id()
        # How long the lease outlives this daemon if it dies holding it. Default: a missed
        # cycle or two, so a crashed leader is replaced quickly but a slow one is not raced.
        # A scheduled Lambda passes its schedule interval (see guardrails.lambda_handler).
        self._lease_ttl = lease_ttl
        self.state = state
        self.clock = clock or SystemClock()
        self.catalog = catalog or load_catalog()
        self.log = log or structlog.get_logger("guardrails")
        self.metrics = metrics or Metrics()
        # Test harnesses stop the process at named points (after-intent, after-action,
        # after-enqueue); production passes nothing.
        self._pause = pause
        self._webhook_url = webhook_url
        self.nodes: list[Node] = []
        self.report = CycleReport(self.clock.now())
        self._heap_frozen = False
        self.aws = clients
        self._build(cfg, clients)

    # -- what the config builds ----------------------------------------------------------------
    def _build(self, cfg: GuardrailsConfig, clients: aws.Aws) -> None:
        """(Re)build every part that depends on the config."""
        self.cfg = cfg
        self.aws = clients
        self.lease_ttl = self._lease_ttl or max(3 * cfg.interval, timedelta(seconds=180))
        self.series_cache = cloudwatch.SeriesCache()
        self.prices = Prices(self.catalog, cfg.spend.spot_price)
        self.outbox = Outbox(
            self.state,
            cfg.slack,
            self.clock,
            url=self._webhook_url,
            log=self.log,
            metrics=self.metrics,
        )
        self.actuator = Actuator(
            cfg,
            self.state,
            self.clock,
            clients,
            self.metrics,
            alert=self.alert,
            pause=self._pause,
        )

    def reload(self, cfg: GuardrailsConfig, *, webhook_url: Any = _KEEP) -> None:
        """Use ``cfg`` from the next cycle on: the AWS clients (rebuilt when ``aws`` or
        ``regions`` changed), the outbox (Slack settings, and ``webhook_url`` when given), the
        actuator (dry-run, kill switch, caps, breaker settings, audit log), the prices (spot
        mode; live spot prices are fetched afresh) and the lease TTL. The leader lease and
        the state store are kept: a reload is not a restart."""
        old = self.cfg
        clients = self.aws
        if cfg.aws != old.aws or cfg.regions != old.regions:
            clients = aws.Aws(cfg.aws, self.aws.session)
        if webhook_url is not _KEEP:
            self._webhook_url = webhook_url
        new_clients = clients is not self.aws
        leader = self.actuator.leader
        self.actuator.close()
        self._build(cfg, clients)
        self.actuator.leader = leader
        self.log.info("daemon.rebuilt", new_aws_clients=new_clients)

    @property
    def leader(self) -> bool:
        return self.actuator.leader

    @leader.setter
    def leader(self, value: bool) -> None:
        self.actuator.leader = value

    def close(self) -> None:
        self.release_lease()
        self.actuator.close()
        if self._heap_frozen:  # what this daemon held may now be collected
            gc.unfreeze()
            self._heap_frozen = False

    def release_lease(self) -> None:
        """Hand the leader lease back, so the next daemon or invocation may act at once
        instead of waiting for the lease to expire."""
        if self.leader:
            self.state.release_lease("leader", self.owner_id)
            self.leader = False

    def audit(self, event: str, **fields: Any) -> None:
        self.actuator.audit(event, **fields)

    def alert(self, a: Alert, cooldown: timedelta | None = None) -> None:
        if self.outbox.enqueue(a, cooldown):
            self.report.alerts_queued += 1
        if self._pause is not None:
            self._pause("after-enqueue")

    def context(self) -> RuleContext:
        """What a rule gets this cycle."""
        return RuleContext(
            cfg=self.cfg,
            clock=self.clock,
            state=self.state,
            aws=self.aws,
            actuator=self.actuator,
            alert=self.alert,
            prices=self.prices,
            metrics=self.metrics,
            log=self.log,
            report=self.report,
            series_cache=self.series_cache,
            nodes=self.nodes,
        )

    # -- the cycle -----------------------------------------------------------------------------
    def observe(self) -> list[Node]:
        """The ``inventory`` rule: every watched node (and live spot prices)."""
        return inventory.observe(self.context())

    def run_cycle(self) -> CycleReport:
        """One observe-decide-act pass. The cyclic collector is paused for the pass and run
        once after it: a cycle allocates ~250,000 short-lived values per 1,000 nodes, and the
        dozens of collections they would trigger were up to half of a cycle's CPU
        (benchmarks/guardrails_cycle.py). After the first pass, everything still alive
        (botocore's service models, clients, the catalog: ~140,000 objects) is frozen out of
        later collections; ``close`` unfreezes it. With the collector paused nothing is promoted,
        so everything the pass allocated is still in the youngest generation: collecting that
        one finds the pass's garbage without walking the rest of the process (a process that
        holds much more than the daemon, a test run's, spent 0.3 s per cycle walking it)."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run_cycle()
        finally:
            if enabled:
                gc.enable()
                gc.collect(0)
                if not self._heap_frozen:
                    gc.freeze()
                    self._heap_frozen = True

    def _take_lease(self, now: datetime) -> None:
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

    def _run_cycle(self) -> CycleReport:
        now = self.clock.now()
        w0 = time.perf_counter()
        self.report = CycleReport(now)
        self.actuator.begin_cycle(self.report.actions)
        before = Counter(self.aws.counter.calls)
        self._take_lease(now)
        try:
            self.actuator.recover_intents()
            self.nodes = self.observe()
            self.report.nodes = len(self.nodes)
            ks = self.actuator.kill_switch()
            if ks:
                self.alert(messages.kill_switch(now.date(), ks), timedelta(hours=6))
            ctx = self.context()
            for rule in REGISTRY.values():
                if rule.run is None or not self.cfg.runs(rule.name) or not rule.enabled(self.cfg):
                    continue
                try:
                    rule.run(ctx)
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
