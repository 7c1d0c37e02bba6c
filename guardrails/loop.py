"""The daemon's run loop (``coreburst guardrails run``): a cycle every ``interval``, the config
file reloaded when it changes (a bad file keeps the last good one), the metrics endpoint, and
a stop that lets the step in flight finish. The CLI command only parses its options, installs
the signal handlers and turns :class:`LoopStopError` into its one-line exit.

    >>> # with daemon(cfg) as d: serve_metrics(d, log); run_loop(d, path, stop, 0, log)
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from guardrails.adapters.aws import AwsUnreachableError
from guardrails.adapters.slack import webhook_url
from guardrails.config import ConfigError
from guardrails.configfile import load_config
from guardrails.stores.sqlite import State


class LoopStopError(RuntimeError):
    """Why the loop cannot go on (one line; the CLI exits 2 with it)."""


def stop_handler(stop: threading.Event, log: Any) -> Callable[[int, Any], None]:
    """The SIGTERM/SIGINT handler of ``run``. The first signal lets the step in flight finish
    (each is bounded: AWS timeouts, slack.cycle_budget_s) and ends the wait between cycles at
    once; a second one stops mid-step: safe too, as every action's intent is on disk before
    its call.

    The handler runs in the main thread between two of its bytecodes, possibly inside
    ``stop.wait()`` after it took the event's lock and before it released it; ``stop.set()``
    takes that same lock, so called from the handler it could wait for itself for ever (the
    daemon then ignored SIGTERM until killed). The event is set, and the stop logged, from a
    thread of its own, which takes the lock once the main thread lets go of it."""

    def stopping(name: str) -> None:
        stop.set()
        log.info("daemon.stopping", signal=name)

    def handle(signum: int, _frame: Any) -> None:
        if stop.is_set():
            raise SystemExit(128 + signum)
        name = signal.Signals(signum).name
        threading.Thread(target=stopping, args=(name,), name="stop", daemon=True).start()

    return handle


def serve_metrics(d: Any, log: Any) -> None:
    """Start the Prometheus endpoint when the config enables it."""
    from prometheus_client import start_http_server

    ep = d.cfg.metrics_endpoint
    if not ep.enabled:
        return
    try:
        start_http_server(ep.port, addr=str(ep.address), registry=d.metrics.registry)
    except OSError as exc:
        raise LoopStopError(
            f"metrics_endpoint: cannot listen on {ep.address} port {ep.port}: "
            f"{exc.strerror}; change metrics_endpoint.address/port or disable it"
        ) from None
    log.info("metrics.listening", address=str(ep.address), port=ep.port)


def run_loop(d: Any, config: Path | None, stop: threading.Event, max_cycles: int, log: Any) -> int:
    """Run cycles until ``stop`` is set or ``max_cycles`` (0: no limit) ran; returns how many
    ran. ``d``: the daemon (guardrails.daemon.Daemon); ``config``: the file to watch."""
    cfg = d.cfg
    mtime = config.stat().st_mtime if config else 0.0
    n = 0
    while not stop.is_set() and (max_cycles == 0 or n < max_cycles):
        n += 1
        gone = d.state.file_problem() if isinstance(d.state, State) else None
        if gone:
            # Stop rather than carry on or recreate the file: carrying on writes marks,
            # intents and alerts where no one can see them, and a recreated file would
            # silently drop in-flight intents and unsent alerts, restart every idle
            # grace period, and hold no lease, so a second daemon on it would act too.
            raise LoopStopError(f"{gone}; restore it, or restart the daemon to begin a new one")
        if config is not None:
            try:
                m = config.stat().st_mtime
                if m != mtime:
                    mtime = m
                    new = load_config(config)
                    # Everything built from the config is rebuilt (clients, outbox,
                    # actuator, prices); a bad file or webhook file keeps the last good.
                    d.reload(new, webhook_url=webhook_url(new.slack))
                    log.info("config.reloaded", path=str(config))
                    # Opened once per process: these wait for a restart.
                    later = [
                        key
                        for key, a, b in (
                            ("state.path", new.state.path, cfg.state.path),
                            ("metrics_endpoint", new.metrics_endpoint, cfg.metrics_endpoint),
                        )
                        if a != b
                    ]
                    if later:
                        log.warning("config.needs_restart", keys=later)
            except (ConfigError, OSError) as exc:
                # Keep running on the last good config.
                log.error("config.rejected", error=str(exc))
        started = d.clock.now()
        try:
            report = d.run_cycle()
            log.info(
                "cycle.done",
                nodes=report.nodes,
                actions=len(report.actions),
                alerts=report.alerts_queued,
                errors=len(report.errors),
            )
        except (AwsUnreachableError, ClientError, BotoCoreError) as exc:
            log.error("cycle.failed", error=str(exc))
        if max_cycles and n >= max_cycles:
            break
        elapsed = (d.clock.now() - started).total_seconds()
        d.clock.wait(max(0.0, d.cfg.interval.total_seconds() - elapsed), stop)
    return n
