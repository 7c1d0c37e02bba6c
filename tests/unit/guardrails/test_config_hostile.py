"""The guardrail config against hostile and careless input: kill-switch values, an empty file,
durations out of range or overflowing, secrets in rejected values, non-JSON environment
overrides, region names, and the test hooks kept out of production."""

from __future__ import annotations

import json
import types
import typing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import botocore.loaders
import pytest
from pydantic import BaseModel

from coreburst.sandbox.clocks import FakeClock
from guardrails.adapters.aws import Aws
from guardrails.config import Between, ConfigError, kill_switch_engaged
from guardrails.configfile import GuardrailsConfig, parse_config
from guardrails.daemon import Daemon
from guardrails.stores.sqlite import State

# The daemon's reference (config ranges, kill switch) moved out of README.md into docs/.
README = Path(__file__).parents[3] / "docs" / "guardrails.md"
SECRET_URL = "https://hooks.slack.com/services/T0SECRET/B0SECRET/XXXXSECRETTOKEN"
SECRET_BITS = ("T0SECRET", "B0SECRET", "XXXXSECRETTOKEN")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for k in list(os.environ):
        if k.startswith("COREBURST_"):
            monkeypatch.delenv(k)


def _one_line_error(text: str) -> str:
    with pytest.raises(ConfigError) as e:
        parse_config(text, "g.yaml")
    msg = str(e.value)
    assert "\n" not in msg
    assert "Traceback" not in msg
    return msg


# -- item 2: kill switch ----------------------------------------------------------------------
ENGAGED = ["enabled", "1", "true", "YES", " on ", "stop", "y", "2", "maintenance"]
NOT_ENGAGED = [None, "", "   ", "0", "false", "FALSE", " No ", "off", "Off\n"]


@pytest.mark.parametrize("value", ENGAGED)
def test_any_value_but_an_explicit_false_engages_the_kill_switch(
    value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``COREBURST_KILL_SWITCH=enabled`` used to leave the daemon acting."""
    assert kill_switch_engaged(value)
    d = _daemon(tmp_path)
    try:
        monkeypatch.setenv("COREBURST_KILL_SWITCH", value)
        assert d.actuator.kill_switch() == "kill switch: $COREBURST_KILL_SWITCH is set"
    finally:
        d.close()
        d.state.close()


@pytest.mark.parametrize("value", NOT_ENGAGED)
def test_unset_blank_or_explicit_false_leaves_it_off(
    value: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not kill_switch_engaged(value)
    d = _daemon(tmp_path)
    try:
        if value is not None:
            monkeypatch.setenv("COREBURST_KILL_SWITCH", value)
        assert d.actuator.kill_switch() is None
    finally:
        d.close()
        d.state.close()


def test_kill_switch_values_are_documented() -> None:
    section = _readme_guardrails()
    assert "COREBURST_KILL_SWITCH" in section
    for word in ("0", "false", "no", "off", "enabled"):
        assert f"`{word}`" in section, word
    from guardrails import config

    assert "``enabled``" in (config.__doc__ or "") and "``off``" in (config.__doc__ or "")


def _daemon(tmp_path: Path) -> Daemon:
    cfg = parse_config(
        f'state: {{path: "{tmp_path}/s.db", audit_log: "{tmp_path}/a.jsonl"}}\n'
        f'safety: {{kill_switch_file: "{tmp_path}/stop"}}\n'
        "metrics_endpoint: {enabled: false}\n"
    )
    return Daemon(cfg, Aws(cfg.aws), State(cfg.state.path), clock=FakeClock(datetime.now(UTC)))


# -- item 3: acting needs dry_run: false written down ----------------------------------------
@pytest.mark.parametrize(
    "text", ["", "# nothing\n", "regions: [us-east-1]\n", "idle: {window: 30m}\n"]
)
def test_an_empty_or_partial_config_is_a_dry_run(text: str) -> None:
    assert parse_config(text).dry_run is True


def test_acting_needs_dry_run_false_in_the_file_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert parse_config("dry_run: false").dry_run is False
    assert parse_config("dry_run: true").dry_run is True
    monkeypatch.setenv("COREBURST_DRY_RUN", "false")
    assert parse_config("").dry_run is False


# -- item 4: every duration has a range -------------------------------------------------------
def _duration_fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, Any, list[Any]]]:
    """Every timedelta-typed field reachable from ``model`` (through nested models, optional
    models, lists and dicts of models): (dotted path, field info, metadata)."""
    out: list[tuple[str, Any, list[Any]]] = []
    for name, f in model.model_fields.items():
        path = f"{prefix}{name}"
        for t in _leaf_types(f.annotation):
            if t is timedelta:
                out.append((path, f, list(f.metadata)))
            elif isinstance(t, type) and issubclass(t, BaseModel):
                out.extend(_duration_fields(t, path + "."))
    return out


def _leaf_types(ann: Any) -> list[Any]:
    origin = typing.get_origin(ann)
    if origin is typing.Annotated:
        return _leaf_types(typing.get_args(ann)[0])
    if origin in (typing.Union, types.UnionType, list, dict, tuple):
        return [t for a in typing.get_args(ann) for t in _leaf_types(a)]
    return [ann]


DURATIONS = _duration_fields(GuardrailsConfig)
# Companion settings a range end needs to pass the cross-field checks (max_gap <= window...).
COMPANIONS: dict[tuple[str, str], dict[str, Any]] = {
    ("idle.max_gap", "high"): {"idle": {"window": "7d"}},
    ("idle.period", "high"): {"idle": {"max_gap": "1h", "window": "1h"}},
    ("idle.window", "low"): {"idle": {"max_gap": "5m"}},
    ("egress.baseline", "high"): {"state": {"snapshot_retention": "30d"}},
    ("slack.backoff_base", "high"): {"slack": {"backoff_max": "1d"}},
    ("slack.backoff_max", "low"): {"slack": {"backoff_base": "1s"}},
}


def _between(meta: list[Any]) -> Between:
    found = [m for m in meta if isinstance(m, Between)]
    assert len(found) == 1
    return found[0]


def _nested(path: str, value: Any, base: dict[str, Any] | None = None) -> str:
    data: dict[str, Any] = json.loads(json.dumps(base or {}))
    *parents, last = path.split(".")
    node = data
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    return json.dumps(data)  # JSON is YAML


def test_the_walk_finds_the_durations() -> None:
    paths = {p for p, _, _ in DURATIONS}
    assert {"interval", "idle.window", "idle.max_gap", "reclaim.grace"} <= paths
    assert len(paths) >= 15


@pytest.mark.parametrize(("path", "field", "meta"), DURATIONS, ids=[d[0] for d in DURATIONS])
def test_every_duration_has_a_documented_range(path: str, field: Any, meta: list[Any]) -> None:
    """A new duration field without ``Between`` fails here; so does one missing from the
    README's table."""
    rng = _between(meta)
    assert timedelta(0) < rng.min < rng.max
    assert rng.min <= field.default <= rng.max
    row = next(
        (ln for ln in _readme_guardrails().splitlines() if ln.lstrip().startswith(f"| `{path}` |")),
        "",
    )
    assert rng.low in row and rng.high in row, f"docs/guardrails.md has no range row for {path}"


@pytest.mark.parametrize(("path", "field", "meta"), DURATIONS, ids=[d[0] for d in DURATIONS])
def test_out_of_range_values_are_one_line_naming_the_key(
    path: str, field: Any, meta: list[Any]
) -> None:
    rng = _between(meta)
    below = rng.min - timedelta(seconds=1)
    above = rng.max + timedelta(seconds=1)
    for bad in (0, "0s", -300, below.total_seconds(), above.total_seconds()):
        msg = _one_line_error(_nested(path, bad))
        assert f"g.yaml: {path}: " in msg and f"allowed {rng.low} to {rng.high}" in msg, msg
    msg = _one_line_error(_nested(path, "-5m"))
    assert f"g.yaml: {path}: not a duration" in msg


@pytest.mark.parametrize(("path", "field", "meta"), DURATIONS, ids=[d[0] for d in DURATIONS])
@pytest.mark.parametrize("huge", ["99999999999d", "1e308", 1e308, float("inf"), float("nan")])
def test_huge_values_are_one_line_not_an_overflow(
    path: str, field: Any, meta: list[Any], huge: Any
) -> None:
    text = (
        f"{path.replace('.', ': {')}: {huge if isinstance(huge, str) else _yaml_float(huge)}"
        + "}" * path.count(".")
    )
    msg = _one_line_error(text)
    assert msg.startswith(f"g.yaml: {path}: ") and "duration" in msg, msg


def _yaml_float(x: float) -> str:
    import math

    return ".nan" if math.isnan(x) else ".inf" if math.isinf(x) else "1.0e+308"


@pytest.mark.parametrize(("path", "field", "meta"), DURATIONS, ids=[d[0] for d in DURATIONS])
def test_both_range_ends_are_accepted(path: str, field: Any, meta: list[Any]) -> None:
    rng = _between(meta)
    for end, value in (("low", rng.low), ("high", rng.high)):
        cfg = parse_config(_nested(path, value, COMPANIONS.get((path, end))))
        got: Any = cfg
        for p in path.split("."):
            got = getattr(got, p)
        assert got == (rng.min if end == "low" else rng.max)


def test_idle_period_must_be_whole_minutes_and_max_gap_within_period_and_window() -> None:
    """GetMetricData's Period for standard-resolution metrics is a multiple of 60 (botocore's
    CloudWatch model documents it on MetricStat.Period)."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("cloudwatch")
    doc = model.shape_for("MetricStat").members["Period"].documentation
    assert "multiple of 60" in doc
    assert "whole minutes" in _one_line_error("idle: {period: 90s}")
    assert "at most window" in _one_line_error("idle: {window: 10m, max_gap: 20m}")
    assert "at least period" in _one_line_error("idle: {period: 10m, max_gap: 5m}")
    assert "backoff_base" in _one_line_error("slack: {backoff_base: 1h, backoff_max: 1m}")


# -- item 10: secrets never reach a message ----------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        f"slack: {{webhook_url: '{SECRET_URL}'}}",
        f"webhook_url: '{SECRET_URL}'",
        f"slack: {{'{SECRET_URL}': 1}}",
        "slack: {token: 'xoxb-0SECRET-XXXXSECRETTOKEN'}",
        f"aws: {{endpoint_url: ['{SECRET_URL}']}}",
        f"aws: {{endpoint_url: 5, password: '{SECRET_URL}'}}",
        f"regions: ['{SECRET_URL}']",
        f"instance_types: ['{SECRET_URL}']",
        f"idle: {{window: '{SECRET_URL}'}}",
        "slack: {webhook_url_file: 7, api_secret: 'XXXXSECRETTOKEN'}",
    ],
)
def test_a_rejected_secret_is_never_echoed(text: str) -> None:
    msg = _one_line_error(text)
    for bit in SECRET_BITS:
        assert bit not in msg, msg
    assert msg.startswith("g.yaml: ")


def test_the_nested_env_form_of_a_secret_is_never_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The documented ``__`` nesting: COREBURST_SLACK__WEBHOOK_URL is an unknown key."""
    monkeypatch.setenv("COREBURST_SLACK__WEBHOOK_URL", SECRET_URL)
    msg = _one_line_error("")
    assert "slack.webhook_url: Extra inputs are not permitted (got <redacted>)" in msg
    monkeypatch.delenv("COREBURST_SLACK__WEBHOOK_URL")
    monkeypatch.setenv("COREBURST_SLACK", SECRET_URL)  # not JSON for a section
    msg = _one_line_error("")
    assert "COREBURST_SLACK" in msg and not any(b in msg for b in SECRET_BITS), msg
    monkeypatch.setenv("COREBURST_SLACK", json.dumps({"webhook_url": SECRET_URL}))
    msg = _one_line_error("")
    assert "slack.webhook_url" in msg and not any(b in msg for b in SECRET_BITS), msg


def test_a_harmless_rejected_value_is_still_shown() -> None:
    assert "(got 'lots')" in _one_line_error("safety: {max_actions_per_cycle: lots}")


# -- item 12: environment lists and sections ---------------------------------------------------
def test_a_comma_separated_env_list_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COREBURST_REGIONS", "us-east-1")
    assert parse_config("").regions == ["us-east-1"]
    monkeypatch.setenv("COREBURST_REGIONS", "us-east-1, eu-west-2")
    assert parse_config("").regions == ["us-east-1", "eu-west-2"]
    monkeypatch.setenv("COREBURST_REGIONS", '["us-west-2"]')
    assert parse_config("").regions == ["us-west-2"]
    monkeypatch.setenv("COREBURST_INSTANCE_TYPES", "p5.48xlarge")
    assert parse_config("").instance_types == ["p5.48xlarge"]
    monkeypatch.setenv("COREBURST_RECLAIM__OWNER_TAGS", "owner,team")
    assert parse_config("").reclaim.owner_tags == ["owner", "team"]
    monkeypatch.setenv("COREBURST_SPEND__THRESHOLDS_PERCENT", "50,90")
    assert parse_config("").spend.thresholds_percent == [50.0, 90.0]


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("COREBURST_IDLE", "window=30m"),
        ("COREBURST_IDLE__METRICS", "nvidia"),
        ("COREBURST_ORG", "x"),
    ],
)
def test_a_non_json_env_section_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str
) -> None:
    monkeypatch.setenv(var, value)
    msg = _one_line_error("")
    assert msg.startswith(f"environment {var}: not valid JSON"), msg
    assert "__KEY=value" in msg and value not in msg


# -- item 18: regions, test hooks --------------------------------------------------------------
def _botocore_regions() -> list[str]:
    data = botocore.loaders.Loader().load_data("endpoints")
    return sorted({r for p in data["partitions"] for r in p["regions"]})


def test_every_region_botocore_knows_is_accepted() -> None:
    regions = _botocore_regions()
    assert "us-east-1" in regions and "cn-north-1" in regions and len(regions) > 30
    assert parse_config(json.dumps({"regions": regions})).regions == regions


@pytest.mark.parametrize(
    "bad",
    [
        "日本-east-1",
        "US-EAST-1",
        "us-east",
        "useast1",
        "us-east-1 ",
        "us-east-1\n",  # botocore's patterns end in $, which re.match lets a newline follow
        "us-east-1x",
        "us-\uff45ast-1",
        "us-east-\u0661",
        "",
    ],
)
def test_a_malformed_region_is_one_line(bad: str) -> None:
    msg = _one_line_error(json.dumps({"regions": ["us-east-1", bad]}))
    assert msg.startswith("g.yaml: regions.1: ") and "not an AWS region name" in msg, msg


def _readme_guardrails() -> str:
    return README.read_text()
