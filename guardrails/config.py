"""Typed guardrail configuration: YAML validated by pydantic, overridable from COREBURST_* env.

    >>> from guardrails.config import parse_config
    >>> cfg = parse_config("regions: [us-east-1]\\nidle: {window: 30m}")
    >>> cfg.idle.window.total_seconds()
    1800.0

Env overrides use the ``COREBURST_`` prefix and ``__`` for nesting, e.g.
``COREBURST_DRY_RUN=true`` or ``COREBURST_AWS__ENDPOINT_URL=http://127.0.0.1:5000``.
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from ipaddress import IPv4Address
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    IPvAnyAddress,
    ValidationError,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from infra.catalog import load_catalog
from infra.telemetry import UTILIZATION_METRICS, AcceleratorKind


class ConfigError(ValueError):
    """A configuration the daemon refuses to run with; the message is one line for the user."""


_DURATION_RE = re.compile(r"^\s*(?:(\d+)d)?\s*(?:(\d+)h)?\s*(?:(\d+)m)?\s*(?:(\d+)s)?\s*$")


def parse_duration(value: Any) -> Any:
    """Accept "30m", "1h30m", "2d", "45s" or a number of seconds."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return timedelta(seconds=value)
    if isinstance(value, str):
        m = _DURATION_RE.match(value)
        if m and any(m.groups()):
            d, h, mi, s = (int(g) if g else 0 for g in m.groups())
            return timedelta(days=d, hours=h, minutes=mi, seconds=s)
    raise ValueError(f"not a duration: {value!r} (use e.g. 45s, 30m, 1h30m, 2d)")


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AwsConfig(_Strict):
    # Point at a moto server (http://127.0.0.1:PORT) for demos and tests.
    endpoint_url: str | None = None
    connect_timeout_s: float = Field(default=3.0, gt=0)
    read_timeout_s: float = Field(default=30.0, gt=0)
    max_attempts: int = Field(default=3, ge=1, le=10)


class MetricConfig(_Strict):
    namespace: str
    metric_name: str
    device_dimension: str
    # "accelerator-count": a node needs one series per accelerator in the catalog (nvidia: one
    # per GPU). Neuron publishes per NeuronCore whose count depends on the LNC setting, so
    # there the default only requires that some series exist.
    expect_series: Literal["accelerator-count"] | int = "accelerator-count"


def _default_metrics() -> dict[AcceleratorKind, MetricConfig]:
    out: dict[AcceleratorKind, MetricConfig] = {}
    for kind, m in UTILIZATION_METRICS.items():
        out[kind] = MetricConfig(
            namespace=m.namespace,
            metric_name=m.metric_name,
            device_dimension=m.device_dimension,
            expect_series="accelerator-count" if kind == "nvidia" else 1,
        )
    return out


class IdleConfig(_Strict):
    threshold_percent: float = Field(default=5.0, gt=0, le=100)
    window: Duration = timedelta(minutes=30)
    period: Duration = timedelta(minutes=1)
    # Longest tolerated hole in a series, including at the window's start and before "now".
    max_gap: Duration = timedelta(minutes=5)
    series_discovery: Literal["list-metrics", "telemetry"] = "list-metrics"
    # How long a ListMetrics answer is reused; an instance that was not running when it was
    # taken triggers a fresh one at once.
    series_refresh: Duration = timedelta(minutes=10)
    metrics: dict[AcceleratorKind, MetricConfig] = Field(default_factory=_default_metrics)


class TagSelector(_Strict):
    key: str
    values: list[str] = Field(min_length=1)


class ProtectedConfig(_Strict):
    asg_names: list[str] = []
    tag_selectors: list[TagSelector] = []


class ReclaimConfig(_Strict):
    enabled: bool = True
    grace: Duration = timedelta(hours=1)
    mark_tag: str = "coreburst:idle-since"
    exempt_tag: str = "coreburst:exempt-until"
    max_exemption: Duration = timedelta(days=30)
    owner_tags: list[str] = ["owner", "team", "project", "cost-center"]
    protected: ProtectedConfig = ProtectedConfig()


class SafetyConfig(_Strict):
    max_actions_per_cycle: int = Field(default=5, ge=0)
    breaker_failures: int = Field(default=3, ge=1)
    breaker_reset: Duration = timedelta(minutes=30)
    kill_switch_file: Path | None = Path("/etc/coreburst/guardrails.stop")
    kill_switch_env: str = "COREBURST_KILL_SWITCH"


class ScopeConfig(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9:_.-]*$")
    # No tag means the whole account.
    tag_key: str | None = None
    tag_value: str | None = None
    daily_limit_usd: float | None = Field(default=None, gt=0)
    monthly_limit_usd: float | None = Field(default=None, gt=0)
    enforce: bool = False


class DirectConnectPort(_Strict):
    bandwidth: str
    count: int = Field(default=1, ge=1)


class SpendConfig(_Strict):
    enabled: bool = True
    thresholds_percent: list[float] = [50.0, 80.0, 100.0]
    scopes: list[ScopeConfig] = [ScopeConfig(name="account")]
    # "live": DescribeSpotPriceHistory; "catalog-estimate": the catalog's spot fraction.
    spot_price: Literal["live", "catalog-estimate"] = "live"
    cost_explorer: bool = True
    cost_explorer_refresh: Duration = timedelta(hours=6)
    # Ports to price when DescribeConnections is not wanted (or not allowed); None = discover.
    direct_connect_ports: list[DirectConnectPort] | None = None
    include_lustre: bool = True


class EgressConfig(_Strict):
    enabled: bool = True
    window: Duration = timedelta(hours=1)
    daily_threshold_usd: float = Field(default=500.0, gt=0)
    spike_factor: float = Field(default=3.0, gt=1)
    baseline: Duration = timedelta(hours=24)
    min_baseline_samples: int = Field(default=3, ge=1)
    top_talkers: int = Field(default=5, ge=1)
    include_nat: bool = True
    cooldown: Duration = timedelta(hours=1)


class SlackConfig(_Strict):
    # The URL itself comes from COREBURST_SLACK_WEBHOOK_URL or this file, never from YAML.
    webhook_url_file: Path | None = None
    cooldown: Duration = timedelta(minutes=30)
    max_attempts: int = Field(default=50, ge=1)
    backoff_base: Duration = timedelta(seconds=5)
    backoff_max: Duration = timedelta(minutes=10)
    # Per request; fractions honoured (0.5 = half a second).
    timeout_s: float = Field(default=10.0, gt=0)
    # All of one cycle's sends together: a slow or hanging Slack never holds up observing and
    # acting for longer than this. What is not sent stays due for the next cycle.
    cycle_budget_s: float = Field(default=20.0, gt=0)


class StateConfig(_Strict):
    path: Path = Path(".coreburst/guardrails.sqlite")
    audit_log: Path = Path(".coreburst/guardrails-audit.jsonl")
    # Spend and egress snapshots older than this are deleted (hourly); must cover the egress
    # baseline.
    snapshot_retention: Duration = timedelta(days=35)


class MetricsEndpointConfig(_Strict):
    enabled: bool = True
    port: int = Field(default=9108, ge=0, le=65535)
    # Loopback outside a container, so a host's metrics are not on its network by accident;
    # the container image sets COREBURST_METRICS_ENDPOINT__ADDRESS=0.0.0.0, because a
    # published port reaches only what listens beyond the container's own loopback.
    address: IPvAnyAddress = IPv4Address("127.0.0.1")


def _account_id(value: Any) -> Any:
    # YAML reads an unquoted 123456789012 as a number. One with a leading zero must be quoted
    # (as a number it has lost a digit and fails the 12-digit pattern, rather than be guessed).
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


AccountId = Annotated[str, BeforeValidator(_account_id), Field(pattern=r"^\d{12}$")]


class OrgConfig(_Strict):
    """Accounts for `coreburst guardrails org-scan` (read-only: it assumes ``role_name`` in
    each and reports; nothing is tagged, stopped or alerted there)."""

    # The role each member account has for the scanner (trusting the scanning account).
    role_name: str = Field(default="coreburst-guardrails", pattern=r"^[\w+=,.@-]{1,64}$")
    accounts: list[AccountId] = []
    # Also list the organization's active accounts (organizations:ListAccounts; run from the
    # management account or a delegated administrator).
    discover: bool = False
    max_concurrency: int = Field(default=8, ge=1, le=64)

    @model_validator(mode="after")
    def _some_accounts(self) -> OrgConfig:
        if not self.accounts and not self.discover:
            raise ValueError("list accounts: [123456789012, ...] or set discover: true")
        return self


def _known_rules(value: list[str] | None) -> list[str] | None:
    if value is None:
        return None
    from guardrails.rules import REGISTRY  # the registry imports this module

    unknown = [n for n in value if n not in REGISTRY]
    if unknown:
        raise ValueError(
            f"unknown rule(s) {', '.join(unknown)}; known: {', '.join(sorted(REGISTRY))}"
        )
    return sorted(set(value))


class GuardrailsConfig(BaseSettings):
    """The whole daemon configuration (``guardrails/examples/guardrails.yaml``)."""

    model_config = SettingsConfigDict(
        env_prefix="COREBURST_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    regions: list[str] = Field(default=["us-east-1"], min_length=1)
    instance_types: list[str] | None = None  # None = every accelerated type in the catalog
    interval: Duration = timedelta(seconds=60)
    dry_run: bool = False
    aws: AwsConfig = AwsConfig()
    idle: IdleConfig = IdleConfig()
    reclaim: ReclaimConfig = ReclaimConfig()
    safety: SafetyConfig = SafetyConfig()
    spend: SpendConfig = SpendConfig()
    egress: EgressConfig = EgressConfig()
    slack: SlackConfig = SlackConfig()
    state: StateConfig = StateConfig()
    metrics_endpoint: MetricsEndpointConfig = MetricsEndpointConfig()
    # Which registered rules run (guardrails.rules); None = all of them. The stack passes the
    # same list it grants IAM permissions for, so an omitted rule neither runs nor fails.
    # ``inventory`` always runs: every rule works on what it finds.
    rules: Annotated[list[str] | None, AfterValidator(_known_rules)] = None
    org: OrgConfig | None = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment wins over the YAML file (the file arrives as init kwargs).
        return (env_settings, init_settings)

    @model_validator(mode="after")
    def _retention_covers_baseline(self) -> GuardrailsConfig:
        if self.state.snapshot_retention < self.egress.baseline:
            raise ValueError(
                f"state.snapshot_retention ({self.state.snapshot_retention}) is shorter than "
                f"egress.baseline ({self.egress.baseline}); raise it or shorten the baseline"
            )
        return self

    def runs(self, rule: str) -> bool:
        """Whether the rule named ``rule`` is selected by ``rules`` (inventory always is)."""
        return self.rules is None or rule in self.rules or rule == "inventory"

    def watched_types(self) -> list[str]:
        cat = load_catalog()
        return sorted(self.instance_types or cat.instances)


def _one_line(exc: ValidationError, origin: str) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "<root>"
    msg = err["msg"]
    got = err.get("input")
    shown = "" if isinstance(got, dict | list) or got is None else f" (got {got!r})"
    return f"{origin}: {loc}: {msg}{shown}"


def parse_config(text: str, origin: str = "<config>") -> GuardrailsConfig:
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{origin}: not valid YAML{where}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: top level must be a mapping of settings")
    # The deploy units set the flat COREBURST_STATE_PATH; the nested form is STATE__PATH.
    flat_state = os.environ.get("COREBURST_STATE_PATH")
    if flat_state and "COREBURST_STATE__PATH" not in os.environ:
        data = {**data, "state": {**(data.get("state") or {}), "path": flat_state}}
    try:
        cfg = GuardrailsConfig(**data)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, origin)) from None
    cat = load_catalog()
    for t in cfg.instance_types or []:
        if t not in cat.instances:
            raise ConfigError(
                f"{origin}: instance_types: {t!r} is not in the catalog; allowed: "
                f"{', '.join(sorted(cat.instances))}"
            )
    for port in cfg.spend.direct_connect_ports or []:
        if port.bandwidth not in cat.direct_connect_port_usd_per_hour:
            raise ConfigError(
                f"{origin}: spend.direct_connect_ports.bandwidth: {port.bandwidth!r}; allowed: "
                f"{', '.join(cat.direct_connect_port_usd_per_hour)}"
            )
    names = [s.name for s in cfg.spend.scopes]
    if len(set(names)) != len(names):
        raise ConfigError(f"{origin}: spend.scopes: scope names must be unique (got {names})")
    for s in cfg.spend.scopes:
        if (s.tag_key is None) != (s.tag_value is None):
            raise ConfigError(
                f"{origin}: spend.scopes.{s.name}: set both tag_key and tag_value, or neither"
            )
    return cfg


def load_config(path: Path | None) -> GuardrailsConfig:
    if path is None:
        return parse_config("", "<defaults>")
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    return parse_config(text, str(path))
