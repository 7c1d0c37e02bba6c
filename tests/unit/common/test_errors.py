"""coreburst.common.errors: one line naming the field path, what is wrong and how to fix it, and
never a
secret, for every product that validates user input with pydantic."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from coreburst.common.errors import (
    REDACTED,
    field_path,
    first_problem,
    is_secret_key,
    one_line,
    redact,
    secret_fields,
)

ROOT = Path(__file__).resolve().parents[3]
# Made-up secrets in the shapes the redaction looks for: a Slack incoming-webhook URL (Slack's
# "Sending messages using incoming webhooks" page: https://hooks.slack.com/services/T.../B.../X),
# a bot token (xoxb-...), an AWS access key id (IAM user guide, "Manage access keys": AKIA + 16).
WEBHOOK = "https://hooks.slack.com/services/T0SECRET1/B0SECRET2/XXSECRETTOKENXX"
BOT_TOKEN = "xoxb-1111-2222-SECRETBOTTOKEN"
ACCESS_KEY = "AKIAIOSFODNN7EXAMPLE"
CRED_URL = "https://admin:hunter2secret@example.internal/hook"
SECRETS = (WEBHOOK, BOT_TOKEN, ACCESS_KEY, CRED_URL)
SECRET_BITS = ("SECRET1", "SECRET2", "SECRETTOKEN", "SECRETBOTTOKEN", "IOSFODNN7", "hunter2")


def _assert_clean(message: str) -> None:
    assert "\n" not in message, "one line"
    for bit in SECRET_BITS:
        assert bit not in message, f"secret {bit!r} leaked into: {message}"


class _Hook(BaseModel):
    model_config = ConfigDict(extra="forbid")
    channel: str = Field(pattern=r"^#[a-z0-9-]+$")
    retries: int = Field(default=1, ge=0, le=5)
    signing_key: str | None = None
    auth: _Auth | None = None


class _Auth(BaseModel):
    model_config = ConfigDict(extra="forbid")
    password_file: str | None = None
    api: SecretStr | None = None

    @field_validator("api")
    @classmethod
    def _long(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None and len(v.get_secret_value()) < 40:
            raise ValueError(f"too short: {v.get_secret_value()}")
        return v


_Hook.model_rebuild()


def _error(model: type[BaseModel], data: Any) -> ValidationError:
    with pytest.raises(ValidationError) as exc:
        model.model_validate(data)
    return exc.value


# -- the line: where, what, the value, the fix ---------------------------------------------------
def test_names_path_problem_value_and_fix() -> None:
    exc = _error(_Hook, {"channel": "#ops", "retries": 9})
    assert one_line(exc, "hook.yaml") == (
        "hook.yaml: retries: Input should be less than or equal to 5 (got 9)"
    )


def test_unknown_key_says_how_to_fix_it() -> None:
    exc = _error(_Hook, {"channel": "#ops", "chanel": "#ops"})
    assert one_line(exc, "hook.yaml") == (
        "hook.yaml: chanel: Extra inputs are not permitted (got '#ops'); "
        "remove it or fix its spelling"
    )


def test_missing_key_says_add_it_and_counts_the_rest() -> None:
    exc = _error(_Hook, {"retries": -1})
    assert one_line(exc, "hook.yaml") == "hook.yaml: channel: Field required; add it (+1 more)"
    assert one_line(exc, "hook.yaml", more=False) == "hook.yaml: channel: Field required; add it"


def test_path_styles_and_root() -> None:
    class Fleet(BaseModel):
        nodes: list[_Hook]

    exc = _error(Fleet, {"nodes": [{"channel": "#a"}, {"channel": "bad"}]})
    assert first_problem(exc).loc == ("nodes", 1, "channel")
    assert one_line(exc, "f.yml").startswith("f.yml: nodes.1.channel: String should match")
    line = one_line(exc, "coreburst", sep=":", path="brackets", value="before")
    assert line.startswith("coreburst:nodes[1].channel: 'bad': String should match pattern")
    top = _error(Fleet, ["not", "a", "mapping"])
    assert one_line(top, "f.yml").startswith("f.yml: (top level): Input should be")
    assert one_line(top, "coreburst", sep=":", root="").startswith("coreburst: Input should")
    assert field_path(("a", 0, "b"), "brackets") == "a[0].b"
    assert field_path(("a", 0, "b")) == "a.0.b"


def test_long_values_are_shortened() -> None:
    exc = _error(_Hook, {"channel": "x" * 500})
    line = one_line(exc)
    assert line.endswith("(got '" + "x" * 79 + "...)")  # 80 characters of the repr


# -- secrets ----------------------------------------------------------------------------------
@pytest.mark.parametrize("secret", SECRETS)
def test_secret_looking_values_never_shown_whatever_the_key(secret: str) -> None:
    exc = _error(_Hook, {"channel": secret})
    line = one_line(exc, "hook.yaml")
    _assert_clean(line)
    assert f"(got {REDACTED})" in line
    assert line.startswith("hook.yaml: channel: String should match pattern")


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"channel": "#ops", "webhook_url": "plain-looking-SECRET1"}, "webhook_url"),
        ({"channel": "#ops", "signing_key": 12345}, "signing_key"),
        ({"channel": "#ops", "auth": {"password_file": ["SECRET1"]}}, "auth.password_file"),
    ],
)
def test_values_under_secret_keys_never_shown(data: dict[str, Any], path: str) -> None:
    line = one_line(_error(_Hook, data), "hook.yaml")
    _assert_clean(line)
    assert line.startswith(f"hook.yaml: {path}: ")


def test_secretstr_fields_are_found_and_redacted_even_in_the_message() -> None:
    """A SecretStr validator that quotes the value: the field is found by its type."""
    assert secret_fields(_Hook) == {"api"}
    exc = _error(_Hook, {"channel": "#ops", "auth": {"api": "shortSECRET1"}})
    unguarded = one_line(exc, "hook.yaml")
    assert "SECRET1" in unguarded  # the validator's own words quote it: nothing else knows
    line = one_line(exc, "hook.yaml", secrets=secret_fields(_Hook))
    _assert_clean(line)
    assert line == f"hook.yaml: auth.api: too short: {REDACTED} (got {REDACTED})"


def test_secret_key_names() -> None:
    for name in ("webhook_url", "slackWebhookUrl", "token", "api_key", "apiKey", "password"):
        assert is_secret_key(name), name
    # Names a user must see in an error: tag keys, InfiniBand partition keys.
    for name in ("key", "tag_key", "pkey", "instance_type", "keyName"):
        assert not is_secret_key(name), name
    assert redact(f"see {WEBHOOK} and {ACCESS_KEY}") == f"see {REDACTED} and {REDACTED}"


# -- the products' own configs ----------------------------------------------------------------
def test_secret_in_a_stack_config_never_reaches_the_message() -> None:
    """A webhook URL pasted into a Pulumi stack config (as a wrong key and as a wrong value)."""
    from infra.config import StackConfigError
    from infra.offline import evaluate_config, load_stack_yaml

    base = load_stack_yaml("dev")
    for where, value in (("slackWebhookUrl", WEBHOOK), ("name", WEBHOOK), ("name", ACCESS_KEY)):
        config = copy.deepcopy(base)
        config["coreburst:clusters"][0][where] = value
        with pytest.raises(StackConfigError) as exc:
            evaluate_config("dev", config)
        _assert_clean(str(exc.value))
        assert str(exc.value).startswith(f"coreburst:clusters[0].{where}: ")


def test_secret_in_a_fleet_file_never_reaches_the_message(tmp_path: Path) -> None:
    from coreburst.onprem.fleet import FleetError, load_fleet

    base = yaml.safe_load((ROOT / "ansible" / "fleet.example.yml").read_text())
    for key, value in (("slack_webhook_url", WEBHOOK), ("colour", CRED_URL)):
        data = copy.deepcopy(base)
        data[key] = value
        path = tmp_path / "fleet.yml"
        path.write_text(yaml.safe_dump(data))
        with pytest.raises(FleetError) as exc:
            load_fleet(path)
        _assert_clean(str(exc.value))
        assert f"{key}: Extra inputs are not permitted (got {REDACTED})" in str(exc.value)


def test_secret_in_a_guardrails_config_never_reaches_the_message() -> None:
    from guardrails.config import ConfigError
    from guardrails.configfile import parse_config

    with pytest.raises(ConfigError) as exc:
        parse_config(f"slack: {{webhook_url: '{WEBHOOK}', token: '{BOT_TOKEN}'}}\n")
    _assert_clean(str(exc.value))
    assert "slack.webhook_url" in str(exc.value) or "slack.token" in str(exc.value)
