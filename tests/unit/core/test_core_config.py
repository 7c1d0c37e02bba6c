"""The ``core_idle`` config section: validated by pydantic, every bad value one line naming the
key, and ``check-config`` exits 2 on it without a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from guardrails.cli import app
from guardrails.config import ConfigError
from guardrails.configfile import RULE_NAMES, parse_config
from guardrails.rules import REGISTRY


def test_the_rule_is_registered_off_by_default_and_selectable() -> None:
    assert "core-idle" in REGISTRY and "core-idle" in RULE_NAMES
    cfg = parse_config("")
    assert not REGISTRY["core-idle"].enabled(cfg)
    assert cfg.core_idle.policy == "warn"  # acting is opted into
    on = parse_config(
        "rules: [core-idle]\ncore_idle: {enabled: true, prometheus_url: 'http://p:9090'}"
    )
    assert REGISTRY["core-idle"].enabled(on) and on.runs("core-idle")


@pytest.mark.parametrize(
    ("yaml_text", "says"),
    [
        ("core_idle: {enabled: true}", "core_idle: set prometheus_url"),
        ("core_idle: {prometheus_url: 'ftp://x'}", "core_idle.prometheus_url"),
        (
            "core_idle: {policy: kill}",
            "core_idle.policy: Input should be 'warn', 'requeue' or 'cancel'",
        ),
        ("core_idle: {slack_users: {ann: '@ann'}}", "core_idle.slack_users.ann"),
        ("core_idle: {exemptions: [{until: 2026-01-01}]}", "exactly one of job"),
        ("core_idle: {exemptions: [{job: x1, until: 2026-01-01}]}", "core_idle.exemptions.0.job"),
        ("core_idle: {batch: {window: 1m}}", "core_idle.batch.window: 1m is out of range"),
        ("core_idle: {step: 5m, max_gap: 2m}", "max_gap (2m) is shorter than step (5m)"),
        ("core_idle: {gpu_hour_usd: .nan}", "core_idle.gpu_hour_usd"),
        ("core_idle: {max_actions_per_cycle: -1}", "core_idle.max_actions_per_cycle"),
        ("core_idle: {colour: red}", "core_idle.colour: Extra inputs are not permitted"),
    ],
)
def test_bad_values_are_one_line_naming_the_key(yaml_text: str, says: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(yaml_text, "g.yaml")
    assert says in str(e.value) and "\n" not in str(e.value)


def test_check_config_exits_2_on_a_bad_core_idle_section(tmp_path: Path) -> None:
    bad = tmp_path / "g.yaml"
    bad.write_text("core_idle: {enabled: true, policy: requeue}\n")
    r = CliRunner().invoke(app, ["check-config", str(bad)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "core_idle: set prometheus_url" in r.output
    bad.write_text("core_idle: {enabled: true, policy: requeue, prometheus_url: 'http://p:9090'}\n")
    assert CliRunner().invoke(app, ["check-config", str(bad)]).exit_code == 0
