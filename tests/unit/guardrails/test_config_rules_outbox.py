"""Config validation, the rule registry, and the Slack outbox (with a fake transport)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coreburst.common.telemetry import UTILIZATION_METRICS
from coreburst.sandbox.clocks import FakeClock
from guardrails.adapters.slack import Alert, Outbox
from guardrails.cli import app
from guardrails.config import ConfigError, SlackConfig
from guardrails.configfile import parse_config
from guardrails.rules import REGISTRY, iam_actions
from guardrails.stores.sqlite import State

EXAMPLE = Path(__file__).parents[3] / "guardrails" / "examples" / "guardrails.yaml"


def test_example_config_is_valid() -> None:
    cfg = parse_config(EXAMPLE.read_text(), str(EXAMPLE))
    assert cfg.idle.window == timedelta(minutes=30)
    assert cfg.dry_run is True


def test_metric_defaults_come_from_telemetry() -> None:
    cfg = parse_config("")
    for kind, m in UTILIZATION_METRICS.items():
        assert cfg.idle.metrics[kind].metric_name == m.metric_name
        assert cfg.idle.metrics[kind].namespace == m.namespace
        assert cfg.idle.metrics[kind].device_dimension == m.device_dimension


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("idle: {window: soon}", "idle.window"),
        ("idle: {threshold_percent: 150}", "idle.threshold_percent"),
        ("reclaim: {grace: 1h, colour: red}", "reclaim.colour"),
        ("idle: {series_discovery: search}", "'list-metrics' or 'telemetry'"),
        ("instance_types: [p9.huge]", "allowed: p4d.24xlarge"),
        ("spend: {direct_connect_ports: [{bandwidth: 3Gbps}]}", "allowed: 1Gbps"),
        ("regions: [us-east-1\n", "not valid YAML"),
        ("- a\n- b", "top level must be a mapping"),
        (
            "state: {snapshot_retention: 2d}\negress: {baseline: 3d}",
            "state.snapshot_retention (2d) is shorter than egress.baseline (3d)",
        ),
    ],
)
def test_bad_config_is_one_line_naming_the_key(text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(text, "g.yaml")
    msg = str(e.value)
    assert needle in msg
    assert "\n" not in msg


def test_env_overrides_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COREBURST_DRY_RUN", "true")
    monkeypatch.setenv("COREBURST_AWS__ENDPOINT_URL", "http://127.0.0.1:9")
    cfg = parse_config("dry_run: false\naws: {endpoint_url: http://x}")
    assert cfg.dry_run is True
    assert cfg.aws.endpoint_url == "http://127.0.0.1:9"


def test_cli_check_config_errors_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "g.yaml"
    bad.write_text("safety: {max_actions_per_cycle: -1}\n")
    r = CliRunner().invoke(app, ["check-config", str(bad)])
    assert r.exit_code == 2
    assert "safety.max_actions_per_cycle" in r.output
    assert "Traceback" not in r.output
    ok = CliRunner().invoke(app, ["check-config", str(EXAMPLE)])
    assert ok.exit_code == 0, ok.output
    missing = CliRunner().invoke(app, ["check-config", str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 2 and "cannot read config" in missing.output


def test_registry_rules_declare_params_and_iam() -> None:
    assert {"idle-reclaim", "spend-limit", "egress-spike", "inventory"} <= set(REGISTRY)
    for name, rule in REGISTRY.items():
        assert name == name.lower() and " " not in name
        assert rule.description and rule.example
        # core-idle talks to Slurm and Prometheus only: no AWS API, no IAM action
        assert rule.iam_actions or name == "core-idle", name
        for action in rule.iam_actions:
            service, _, verb = action.partition(":")
            assert service and verb[:1].isupper(), action
        assert rule.params.model_config.get("extra") == "forbid"
    assert "autoscaling:TerminateInstanceInAutoScalingGroup" in iam_actions()


class FakeSlack:
    def __init__(self, script: list[tuple[int, dict[str, str]]]) -> None:
        self.script = script
        self.delivered: list[dict[str, Any]] = []

    def __call__(self, payload: dict[str, Any]) -> tuple[int, Any]:
        status, headers = self.script.pop(0) if self.script else (200, {})
        if status == 200:
            self.delivered.append(payload)
        return status, headers


class NullLog:
    def info(self, *a: Any, **k: Any) -> None: ...

    warning = info


def _outbox(tmp_path: Path, fake: FakeSlack, clock: FakeClock) -> Outbox:
    cfg = SlackConfig(backoff_base=timedelta(seconds=5), cooldown=timedelta(minutes=30))
    return Outbox(
        State(tmp_path / "s.db"), cfg, clock, url="http://127.0.0.1:1/x", log=NullLog(), send=fake
    )


def test_outbox_retries_500_honours_retry_after_and_delivers_once(tmp_path: Path) -> None:
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    fake = FakeSlack([(500, {}), (429, {"Retry-After": "120"})])
    ob = _outbox(tmp_path, fake, clock)
    assert ob.enqueue(Alert("ev-1", "k", "title", ["line"]))
    assert not ob.enqueue(Alert("ev-1", "k", "title", ["line"]))  # same event: deduped
    assert ob.flush() == 0  # 500
    clock.advance(timedelta(seconds=5))
    assert ob.flush() == 0  # 429, Retry-After 120
    clock.advance(timedelta(seconds=119))
    assert ob.flush() == 0  # not yet due
    clock.advance(timedelta(seconds=1))
    assert ob.flush() == 1
    assert ob.flush() == 0
    assert len(fake.delivered) == 1


def test_outbox_cooldown_per_alert_key(tmp_path: Path) -> None:
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    ob = _outbox(tmp_path, FakeSlack([]), clock)
    assert ob.enqueue(Alert("ev-1", "egress", "t", ["a"]))
    clock.advance(timedelta(minutes=10))
    assert not ob.enqueue(Alert("ev-2", "egress", "t", ["b"]))
    clock.advance(timedelta(minutes=25))
    assert ob.enqueue(Alert("ev-3", "egress", "t", ["c"]))
    assert not ob.enqueue(Alert("ev-2", "egress", "t", ["b"]))  # suppressed stays handled
