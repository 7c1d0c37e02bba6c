"""Loopback fixtures: one moto server process per session (reset per test) and a webhook
receiver per test. Real HTTP both ways; nothing leaves 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from coreburst.common.telemetry import UTILIZATION_METRICS
from coreburst.sandbox.clocks import FakeClock
from coreburst.sandbox.emulator import MotoProcess, WebhookReceiver, fake_session
from guardrails.adapters.aws import Aws
from guardrails.config import GuardrailsConfig
from guardrails.configfile import parse_config
from guardrails.daemon import Daemon
from guardrails.stores.sqlite import State

METRICS = {
    k: (m.namespace, m.metric_name, m.device_dimension) for k, m in UTILIZATION_METRICS.items()
}


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoProcess]:
    m = MotoProcess().start()
    yield m
    m.stop()


@pytest.fixture
def moto(moto_server: MotoProcess) -> MotoProcess:
    moto_server.reset()
    return moto_server


@pytest.fixture
def hook() -> Iterator[WebhookReceiver]:
    h = WebhookReceiver().start()
    yield h
    h.stop()


@pytest.fixture
def t0() -> datetime:
    # Two hours in the past, on a minute, and never the first day of a month (so Cost
    # Explorer has complete days to answer for).
    t = (datetime.now(UTC) - timedelta(hours=2)).replace(second=0, microsecond=0)
    if t.day == 1:
        t = t.replace(day=2)
    return t


def config_text(endpoint: str, tmp: Path, extra: str = "") -> str:
    return f"""
regions: [us-east-1, us-east-2]
dry_run: false
aws: {{endpoint_url: "{endpoint}", max_attempts: 2, connect_timeout_s: 2}}
idle: {{window: 30m, max_gap: 5m}}
reclaim: {{grace: 20m}}
safety: {{kill_switch_file: "{tmp}/stop"}}
spend:
  spot_price: catalog-estimate
  cost_explorer: false
  direct_connect_ports: []
  include_lustre: false
  scopes: [{{name: account}}]
egress: {{enabled: false}}
slack: {{backoff_base: 1s}}
state: {{path: "{tmp}/state.sqlite", audit_log: "{tmp}/audit.jsonl"}}
metrics_endpoint: {{enabled: false}}
{extra}
"""


class Harness:
    def __init__(self, cfg: GuardrailsConfig, clock: FakeClock, hook: WebhookReceiver) -> None:
        self.cfg = cfg
        self.clock = clock
        self.aws = Aws(cfg.aws, session=fake_session())
        self.state = State(cfg.state.path)
        self.daemon = Daemon(cfg, self.aws, self.state, clock=clock, webhook_url=hook.url)

    def client(self, service: str, region: str = "us-east-1") -> Any:
        return self.aws.client(service, region)

    def close(self) -> None:
        self.daemon.close()
        self.state.close()


@pytest.fixture
def harness(
    moto: MotoProcess, hook: WebhookReceiver, tmp_path: Path, t0: datetime
) -> Iterator[Any]:
    made: list[Harness] = []

    def make(extra: str = "") -> Harness:
        cfg = parse_config(config_text(moto.url, tmp_path, extra), "<test>")
        h = Harness(cfg, FakeClock(t0), hook)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()
