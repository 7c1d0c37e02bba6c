"""The daemon's own settings (regions, aws, safety, slack, state, metrics_endpoint, org, which
rules run), and how a config file becomes a model: YAML validated by pydantic, overridable from
COREBURST_* env, errors as one line. Each rule's params live in the rule's own module and arrive
as sections of the whole config, which ``guardrails.configfile`` assembles from the registered
rules (``assemble``) and reads (``parse_config``, ``load_config``):

    >>> from guardrails.configfile import parse_config
    >>> cfg = parse_config("regions: [us-east-1]\\nidle: {window: 30m}")
    >>> cfg.idle.window.total_seconds()
    1800.0

Env overrides use the ``COREBURST_`` prefix and ``__`` for nesting, e.g.
``COREBURST_DRY_RUN=true`` or ``COREBURST_AWS__ENDPOINT_URL=http://127.0.0.1:5000``. A list
may be JSON (``COREBURST_REGIONS='["us-east-1","us-east-2"]'``) or comma-separated
(``COREBURST_REGIONS=us-east-1,us-east-2``); a whole section must be a JSON object
(``COREBURST_IDLE='{"window": "30m"}'``) or set key by key (``COREBURST_IDLE__WINDOW=30m``).

The daemon acts only when ``dry_run: false`` is written down (in the file or as
``COREBURST_DRY_RUN=false``); an empty file, or one without ``dry_run``, is a dry run.

Kill switch: the variable named by ``safety.kill_switch_env`` (``COREBURST_KILL_SWITCH``)
engages it with any non-empty value except an explicit false (``0``, ``false``, ``no``,
``off``; any case, surrounding spaces ignored): ``enabled``, ``1``, ``stop`` all engage it.
An unset or blank variable leaves it off. The file ``safety.kill_switch_file`` engages it by
existing.

Every duration has an allowed range (see ``Between`` on each field and docs/guardrails.md); values
are written ``45s``, ``30m``, ``1h30m``, ``2d`` or as a number of seconds.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from ipaddress import IPv4Address
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Protocol

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    IPvAnyAddress,
    ValidationError,
    create_model,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from coreburst.common.catalog import load_catalog
from coreburst.common.errors import one_line as _one_line
from guardrails.configtypes import (
    AwsRegion,
    Between,
    ConfigError,
    StrictModel,
    format_duration,
    parse_duration,
)

# Re-exported: the config's vocabulary, from guardrails.config as before.
__all__ = [
    "AwsConfig",
    "Between",
    "ConfigError",
    "GuardrailsConfig",
    "MetricsEndpointConfig",
    "OrgConfig",
    "SafetyConfig",
    "SlackConfig",
    "StateConfig",
    "assemble",
    "format_duration",
    "kill_switch_engaged",
    "one_line",
    "parse_duration",
    "read_config",
]

# -- secrets never reach a message ----------------------------------------------------------
# The rules (secret-like keys, secret-looking values) live in coreburst.common.errors (redact,
# one_line); ConfigError (guardrails.configtypes) redacts once more.

# -- kill switch ------------------------------------------------------------------------------
KILL_SWITCH_OFF = ("0", "false", "no", "off")


def kill_switch_engaged(value: str | None) -> bool:
    """Whether the kill-switch variable's value engages it: any non-blank value but an
    explicit false (0/false/no/off, any case, spaces trimmed). Fails safe: a value someone
    set to stop the daemon (``enabled``, ``stop``, ``y``) stops it.

    >>> [kill_switch_engaged(v) for v in (None, "", " ", "off", "FALSE", "enabled", "1")]
    [False, False, False, False, False, True, True]
    """
    v = (value or "").strip().lower()
    return bool(v) and v not in KILL_SWITCH_OFF


class AwsConfig(StrictModel):
    """``aws``: endpoint, deadlines and retries of every AWS call the daemon makes."""

    endpoint_url: str | None = None
    """Point at a moto server (http://127.0.0.1:PORT) for demos and tests."""
    connect_timeout_s: float = Field(default=3.0, gt=0)
    """Deadline to open a connection to an AWS endpoint."""
    read_timeout_s: float = Field(default=30.0, gt=0)
    """Deadline for an AWS answer, per request."""
    max_attempts: int = Field(default=3, ge=1, le=10)
    """Attempts per AWS call, the first included (botocore's standard retry mode)."""


class SafetyConfig(StrictModel):
    """``safety``: the per-cycle action cap, the circuit breaker and the kill switch."""

    max_actions_per_cycle: int = Field(default=5, ge=0)
    """At most this many actions (stop, terminate, scale, tag) in one cycle; the rest wait for the
    next."""
    breaker_failures: int = Field(default=3, ge=1)
    """After this many failed actions in a row the daemon stops acting (observing goes on)."""
    breaker_reset: Annotated[timedelta, Between("1m", "1d")] = timedelta(minutes=30)
    """How long the open breaker keeps the daemon from acting."""
    kill_switch_file: Path | None = Path("/etc/coreburst/guardrails.stop")
    """While this file exists the daemon acts on nothing (none: no file switch)."""
    kill_switch_env: str = "COREBURST_KILL_SWITCH"
    """The environment variable that engages the kill switch when set to anything but an explicit
    false (0, false, no, off)."""


class SlackConfig(StrictModel):
    """``slack``: the webhook, cooldown and retries of the alert outbox."""

    webhook_url_file: Path | None = None
    """The URL itself comes from COREBURST_SLACK_WEBHOOK_URL or this file, never from YAML."""
    cooldown: Annotated[timedelta, Between("1m", "7d")] = timedelta(minutes=30)
    """The same alert is not sent again within this long."""
    max_attempts: int = Field(default=50, ge=1)
    """Sends of one message before it is given up (kept in the outbox as failed)."""
    backoff_base: Annotated[timedelta, Between("1s", "1h")] = timedelta(seconds=5)
    """The first retry's delay; it doubles per attempt."""
    backoff_max: Annotated[timedelta, Between("1s", "1d")] = timedelta(minutes=10)
    """The longest delay between retries (Retry-After included)."""
    timeout_s: float = Field(default=10.0, gt=0)
    """Per request; fractions honoured (0.5 = half a second)."""
    cycle_budget_s: float = Field(default=20.0, gt=0)
    """All of one cycle's sends together: a slow or hanging Slack never holds up observing and
    acting for longer than this. What is not sent stays due for the next cycle."""

    @model_validator(mode="after")
    def _backoff_order(self) -> SlackConfig:
        if self.backoff_max < self.backoff_base:
            raise ValueError(
                f"backoff_max ({format_duration(self.backoff_max)}) is shorter than "
                f"backoff_base ({format_duration(self.backoff_base)})"
            )
        return self


class StateConfig(StrictModel):
    """``state``: the state store (SQLite here, DynamoDB when deployed) and the audit log."""

    path: Path = Path(".coreburst/guardrails.sqlite")
    """The SQLite state file (COREBURST_STATE_PATH also sets it)."""
    audit_log: Path = Path(".coreburst/guardrails-audit.jsonl")
    """Every decision and action, appended as JSON lines."""
    snapshot_retention: Annotated[timedelta, Between("1d", "400d")] = timedelta(days=35)
    """Spend and egress snapshots older than this are deleted (hourly); must cover the egress
    baseline."""


class MetricsEndpointConfig(StrictModel):
    """``metrics_endpoint``: where the daemon serves its Prometheus metrics."""

    enabled: bool = True
    """Serve the metrics."""
    port: int = Field(default=9108, ge=0, le=65535)
    """The TCP port (0: any free port)."""
    address: IPvAnyAddress = IPv4Address("127.0.0.1")
    """Loopback outside a container, so a host's metrics are not on its network by accident; the
    container image sets COREBURST_METRICS_ENDPOINT__ADDRESS=0.0.0.0, because a published port
    reaches only what listens beyond the container's own loopback."""


def _account_id(value: Any) -> Any:
    # YAML reads an unquoted 123456789012 as a number. One with a leading zero must be quoted
    # (as a number it has lost a digit and fails the 12-digit pattern, rather than be guessed).
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


AccountId = Annotated[str, BeforeValidator(_account_id), Field(pattern=r"^\d{12}$")]


class OrgConfig(StrictModel):
    """Accounts for `coreburst guardrails org-scan` (read-only: it assumes ``role_name`` in
    each and reports; nothing is tagged, stopped or alerted there)."""

    role_name: str = Field(default="coreburst-guardrails", pattern=r"^[\w+=,.@-]{1,64}$")
    """The role each member account has for the scanner (trusting the scanning account)."""
    accounts: list[AccountId] = []
    """Member account ids (12 digits; quote one with a leading zero)."""
    discover: bool = False
    """Also list the organization's active accounts (organizations:ListAccounts; run from the
    management account or a delegated administrator)."""
    max_concurrency: int = Field(default=8, ge=1, le=64)
    """Accounts scanned at once."""

    @model_validator(mode="after")
    def _some_accounts(self) -> OrgConfig:
        if not self.accounts and not self.discover:
            raise ValueError("list accounts: [123456789012, ...] or set discover: true")
        return self


# The names ``rules`` may list: the config's vocabulary. ``guardrails.rules`` registers exactly
# these (it refuses to import otherwise), so the config never imports the rules that read it.


def _is_scalar_list(annotation: Any) -> bool:
    """list[str] / list[float] / list[AccountId] (or Optional of one): what a comma-separated
    environment value can stand for."""
    from typing import Union, get_args, get_origin

    origin = get_origin(annotation)
    if origin is Union or type(annotation).__name__ == "UnionType":
        args = [a for a in get_args(annotation) if a is not type(None)]
        return len(args) == 1 and _is_scalar_list(args[0])
    if origin is Annotated:
        return _is_scalar_list(get_args(annotation)[0])
    if origin is not list:
        return False
    (item,) = get_args(annotation) or (Any,)
    while get_origin(item) is Annotated:
        item = get_args(item)[0]
    return item in (str, int, float)


class _EnvNotJsonError(Exception):
    """An environment value for a section (or a list of sections) that is not JSON. Not a
    ValueError: pydantic-settings would swallow that for an optional section and hand the raw
    string on, to fail later with a message that does not say it came from the environment."""

    def __init__(self, field_name: str) -> None:
        super().__init__(field_name)
        self.field_name = field_name


class _EnvSource(EnvSettingsSource):
    """Environment overrides, plus the obvious comma-separated form for lists of plain values
    (``COREBURST_REGIONS=us-east-1,us-east-2``) where JSON would be needed otherwise."""

    def decode_complex_value(self, field_name: str, field: FieldInfo, value: Any) -> Any:
        try:
            return super().decode_complex_value(field_name, field, value)
        except ValueError:
            if field is not None and isinstance(value, str) and _is_scalar_list(field.annotation):
                return [part.strip() for part in value.split(",") if part.strip()]
            raise _EnvNotJsonError(field_name) from None


class GuardrailsConfig(BaseSettings):
    """The daemon's own settings, and the type of the whole configuration
    (``guardrails/examples/guardrails.yaml``): ``assemble`` adds one field per config section
    a registered rule declares (``Rule.sections``: ``idle``, ``spend``, ...), each typed by the
    rule's params model. Typed code reads a section through a variable of that model
    (``p: SpendConfig = cfg.spend``)."""

    model_config = SettingsConfigDict(
        env_prefix="COREBURST_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
    )

    regions: list[AwsRegion] = Field(default=["us-east-1"], min_length=1)
    """The AWS regions the daemon watches (botocore's region names)."""
    instance_types: list[str] | None = None  # None = every accelerated type in the catalog
    """The instance types watched; none = every accelerated type in the catalog."""
    interval: Annotated[timedelta, Between("10s", "1d")] = timedelta(seconds=60)
    """Between cycles; each cycle makes AWS API calls, so not less than 10 s."""
    dry_run: bool = True
    """True unless written down as false: an empty or partial config never acts."""
    aws: AwsConfig = AwsConfig()
    """How the daemon calls AWS."""
    safety: SafetyConfig = SafetyConfig()
    """What stops the daemon from acting: caps, breaker and kill switch."""
    slack: SlackConfig = SlackConfig()
    """Alerts to Slack through the durable outbox."""
    state: StateConfig = StateConfig()
    """Where the daemon keeps its state and audit log."""
    metrics_endpoint: MetricsEndpointConfig = MetricsEndpointConfig()
    """The Prometheus metrics endpoint."""
    rules: list[str] | None = None
    """Which registered rules run (guardrails.rules); None = all of them. The stack passes the same
    list it grants IAM permissions for, so an omitted rule neither runs nor fails. ``inventory``
    always runs: every rule works on what it finds. ``assemble`` checks the names against the
    registered rules."""
    org: OrgConfig | None = None

    rule_validators: ClassVar[tuple[Callable[[Any], None], ...]] = ()
    """Checks across sections that the registered rules declare (``Rule.validators``), run in
    registry order after every field is valid; set by ``assemble``."""

    if TYPE_CHECKING:
        # A rule's section (``cfg.idle``, ``cfg.spend``): a field ``assemble`` adds.
        def __getattr__(self, name: str) -> Any: ...

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
        return (_EnvSource(settings_cls), init_settings)

    @model_validator(mode="after")
    def _rule_checks(self) -> GuardrailsConfig:
        for check in self.rule_validators:
            check(self)
        return self

    def runs(self, rule: str) -> bool:
        """Whether the rule named ``rule`` is selected by ``rules`` (inventory always is)."""
        return self.rules is None or rule in self.rules or rule == "inventory"

    def watched_types(self) -> list[str]:
        cat = load_catalog()
        return sorted(self.instance_types or cat.instances)


class RuleSections(Protocol):
    """What ``assemble`` reads of a registered rule (``guardrails.rules.base.Rule``)."""

    @property
    def name(self) -> str: ...
    @property
    def sections(self) -> Mapping[str, type[BaseModel]]: ...
    @property
    def validators(self) -> tuple[Callable[[Any], None], ...]: ...


def _known_rules(known: tuple[str, ...], value: list[str] | None) -> list[str] | None:
    if value is None:
        return None
    unknown = [n for n in value if n not in known]
    if unknown:
        raise ValueError(f"unknown rule(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return sorted(set(value))


def assemble(rules: Iterable[RuleSections]) -> type[GuardrailsConfig]:
    """The whole configuration's model: the daemon's settings plus each rule's sections (a
    section defaults to its model's defaults), ``rules`` checked against the rules' names, and
    the rules' cross-section checks. ``guardrails.configfile`` builds it from the registry.

    >>> from pydantic import BaseModel
    >>> class Knob(BaseModel):
    ...     level: int = 1
    >>> class Dial:
    ...     name, sections, validators = "dial", {"knob": Knob}, ()
    >>> assemble([Dial()])(knob={"level": 3}).knob.level
    3
    """
    fields: dict[str, Any] = {}
    owners: dict[str, str] = {}
    checks: list[Callable[[Any], None]] = []
    names: list[str] = []
    for rule in rules:
        names.append(rule.name)
        for key, model in rule.sections.items():
            if key in GuardrailsConfig.model_fields or key in owners:
                owner = owners.get(key, "the daemon's settings")
                raise ValueError(f"rule {rule.name!r}: config section {key!r} is {owner}'s")
            owners[key] = rule.name
            fields[key] = (model, model())
        checks.extend(rule.validators)
    known = tuple(names)
    fields["rules"] = (
        Annotated[list[str] | None, AfterValidator(functools.partial(_known_rules, known))],
        Field(default=None, description=GuardrailsConfig.model_fields["rules"].description),
    )
    model = create_model(
        "GuardrailsConfig", __base__=GuardrailsConfig, __module__=__name__, **fields
    )
    model.rule_validators = tuple(checks)
    return model


def one_line(exc: ValidationError, origin: str) -> str:
    """A pydantic error as the one line a user sees: where, what, and the rejected value,
    unless that value sits under a secret-like key (url, token, secret, password, webhook)
    or looks like a secret itself (then ``<redacted>``). Every guardrails config error goes
    through here and through ``ConfigError``, which redacts once more.

    >>> try:
    ...     SlackConfig(webhook_url="https://hooks.slack.com/services/T0/B0/XYZ")
    ... except ValidationError as e:
    ...     print(one_line(e, "g.yaml"))  # doctest: +NORMALIZE_WHITESPACE
    g.yaml: webhook_url: Extra inputs are not permitted (got <redacted>);
    remove it or fix its spelling
    """
    from_env = _env_origin(tuple(exc.errors()[0]["loc"]))
    return _one_line(exc, f"environment {from_env}" if from_env else origin, root="<root>")


def _env_origin(loc: tuple[Any, ...]) -> str | None:
    """The environment variable an error at ``loc`` came from, if one did (the longest
    COREBURST_A__B__C naming ``loc`` or a section above it)."""
    env = {k.upper(): k for k in os.environ}
    if tuple(loc[:2]) == ("state", "path") and "COREBURST_STATE_PATH" in env:
        return env["COREBURST_STATE_PATH"]
    for i in range(len(loc), 0, -1):
        name = "COREBURST_" + "__".join(str(p).upper() for p in loc[:i])
        if name in env:
            return env[name]
    return None


def _env_format_error(field_name: str) -> str:
    """An environment value for a section or list that is not JSON: name the variable(s) and
    the expected form; never echo the value (it may be a secret)."""
    field = field_name.upper()
    top = f"COREBURST_{field}"
    names = sorted(
        k
        for k in os.environ
        if k.upper() in (top,)
        or (k.upper().startswith("COREBURST_") and k.upper().endswith(f"__{field}"))
    ) or [top]
    prefix = names[0]
    return (
        f"environment {', '.join(names)}: not valid JSON for a section or list; write a "
        f'section as JSON ({prefix}=\'{{"key": "value"}}\') or set one key at a time '
        f"({prefix}__KEY=value), and a list as JSON or comma-separated (a,b)"
    )


def read_config(
    model: type[GuardrailsConfig], text: str, origin: str = "<config>"
) -> GuardrailsConfig:
    """``text`` (YAML) as ``model`` (from ``assemble``), the environment applied, the watched
    types checked against the catalog; every error one ``ConfigError`` line. The rules' own
    checks come after (``guardrails.configfile.parse_config``)."""
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
        cfg = model(**data)
    except ValidationError as exc:
        raise ConfigError(one_line(exc, origin)) from None
    except _EnvNotJsonError as exc:
        raise ConfigError(_env_format_error(exc.field_name)) from None
    except SettingsError as exc:
        m = re.search(r'field "([^"]+)"', str(exc))
        raise ConfigError(_env_format_error(m.group(1) if m else "")) from None
    cat = load_catalog()
    for t in cfg.instance_types or []:
        if t not in cat.instances:
            raise ConfigError(
                f"{origin}: instance_types: {t!r} is not in the catalog; allowed: "
                f"{', '.join(sorted(cat.instances))}"
            )
    return cfg
