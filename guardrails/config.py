"""Typed guardrail configuration: YAML validated by pydantic, overridable from COREBURST_* env.

    >>> from guardrails.config import parse_config
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

import math
import os
import re
from dataclasses import dataclass
from datetime import date, timedelta
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
    GetCoreSchemaHandler,
    IPvAnyAddress,
    ValidationError,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import core_schema
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from coreburst.common.catalog import load_catalog
from coreburst.common.cloudwatch_cost import Cadence
from coreburst.common.errors import one_line as _one_line
from coreburst.common.errors import redact
from coreburst.common.names import NODE_TAG_KEY, STACK_TAG_KEY
from coreburst.common.telemetry import AGENT_FLUSH_INTERVAL_S, UTILIZATION_METRICS, AcceleratorKind
from coreburst.common.textio import read_text
from guardrails.regions import aws_region

# -- secrets never reach a message ----------------------------------------------------------
# The rules (secret-like keys, secret-looking values) live in coreburst.common.errors (redact,
# one_line).


class ConfigError(ValueError):
    """A configuration the daemon refuses to run with; the message is one line for the user,
    with anything that looks like a secret redacted (it goes to terminals and logs)."""

    def __init__(self, message: str) -> None:
        super().__init__(redact(" ".join(str(message).split())))


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


# -- durations ------------------------------------------------------------------------------
_DURATION_RE = re.compile(
    r"^\s*(?:(\d+)d)?\s*(?:(\d+)h)?\s*(?:(\d+)m)?\s*(?:(\d+)s)?\s*$", re.ASCII
)
_SECONDS_RE = re.compile(r"^\s*\d{1,12}(?:\.\d{1,9})?\s*$", re.ASCII)
# timedelta's own limit is 999999999 days; anything near it is a typo, not a setting.
_DURATION_CAP_S = 10 * 366 * 86400


def parse_duration(value: Any) -> Any:
    """Accept "30m", "1h30m", "2d", "45s" or a number of seconds."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value) or abs(value) > _DURATION_CAP_S:
            raise ValueError(f"duration out of range: {value!r} (use e.g. 45s, 30m, 1h30m, 2d)")
        return timedelta(seconds=value)
    if isinstance(value, str) and _SECONDS_RE.match(value):
        return parse_duration(float(value))  # an environment value: a number of seconds
    if isinstance(value, str):
        m = _DURATION_RE.match(value)
        if m and any(m.groups()):
            d, h, mi, s = (int(g) if g else 0 for g in m.groups())
            if d * 86400 + h * 3600 + mi * 60 + s > _DURATION_CAP_S:
                raise ValueError(f"duration out of range: {value!r} (at most 3660d)")
            return timedelta(days=d, hours=h, minutes=mi, seconds=s)
    raise ValueError(f"not a duration: {value!r} (use e.g. 45s, 30m, 1h30m, 2d)")


def format_duration(td: timedelta) -> str:
    """The shortest ``1d2h3m4s`` form (what the config accepts back)."""
    total = int(td.total_seconds())
    if total < 0:
        return "-" + format_duration(-td)
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        n, total = divmod(total, size)
        if n:
            out += f"{n}{unit}"
    return out or "0s"


@dataclass(frozen=True)
class Between:
    """A duration field's allowed range (inclusive), as ``Annotated[timedelta, Between(...)]``:
    it parses "30m"-style values and refuses anything outside ``[low, high]``. Every duration
    in the config has one (tests walk the models to make sure)."""

    low: str
    high: str

    @property
    def min(self) -> timedelta:
        return parse_duration(self.low)

    @property
    def max(self) -> timedelta:
        return parse_duration(self.high)

    def describe(self) -> str:
        return f"{self.low} to {self.high}"

    def _check(self, value: timedelta) -> timedelta:
        if not self.min <= value <= self.max:
            raise ValueError(f"{format_duration(value)} is out of range; allowed {self.describe()}")
        return value

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_before_validator_function(
            parse_duration,
            core_schema.no_info_after_validator_function(self._check, handler(source)),
        )


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AwsConfig(_Strict):
    # Point at a moto server (http://127.0.0.1:PORT) for demos and tests.
    endpoint_url: str | None = None
    connect_timeout_s: float = Field(default=3.0, gt=0)
    read_timeout_s: float = Field(default=30.0, gt=0)
    max_attempts: int = Field(default=3, ge=1, le=10)


class MetricConfig(_Strict):
    """Where one accelerator family's per-device utilization is read. How many series a node
    must have is not configurable here: it comes from the catalog (one per GPU; one per logical
    NeuronCore at the node's LNC, see ``idle.neuron_lnc``), so a node is idle only when every
    accelerator it has is covered."""

    namespace: str
    metric_name: str
    device_dimension: str
    # Decide from the per-instance rollup (the same metric under InstanceId alone: Maximum and
    # SampleCount per period, plus Minimum with ``idle.report_partial_idle``;
    # coreburst.common.telemetry publishes it): 2 metrics per instance per read instead of one
    # per accelerator. false: read every per-device series (a metric
    # someone else publishes without that rollup). ``explain`` always shows per-device series.
    rollup: bool = True

    @model_validator(mode="before")
    @classmethod
    def _no_expect_series(cls, data: Any) -> Any:
        if isinstance(data, dict) and "expect_series" in data:
            raise ValueError(
                "expect_series is no longer accepted: the expected number of series comes from "
                "the catalog (one per GPU, one per logical NeuronCore at idle.neuron_lnc or the "
                "node's coreburst:neuron-lnc tag); remove it"
            )
        return data


def _default_metrics() -> dict[AcceleratorKind, MetricConfig]:
    return {
        kind: MetricConfig(
            namespace=m.namespace, metric_name=m.metric_name, device_dimension=m.device_dimension
        )
        for kind, m in UTILIZATION_METRICS.items()
    }


def _merge_metrics(value: Any) -> Any:
    """``idle.metrics`` merges into the defaults, family by family and key by key: overriding
    ``neuron`` keeps ``nvidia``, and ``neuron: {metric_name: x}`` keeps the namespace and device
    dimension. ``<family>: null`` removes a family (refused while a watched type needs it)."""
    if value is None:
        return _default_metrics()
    if not isinstance(value, dict):
        return value  # pydantic says what is wrong with it
    out: dict[Any, Any] = {k: m.model_dump() for k, m in _default_metrics().items()}
    for kind, m in value.items():
        if m is None:
            out.pop(kind, None)
        elif isinstance(m, dict) and isinstance(out.get(kind), dict):
            out[kind] = {**out[kind], **m}
        else:
            out[kind] = m
    return out


class IdleConfig(_Strict):
    threshold_percent: float = Field(default=5.0, gt=0, le=100)
    # How long a node must stay below the threshold to count as idle.
    window: Annotated[timedelta, Between("5m", "7d")] = timedelta(minutes=30)
    # CloudWatch period of the datapoints read; standard-resolution metrics need whole
    # minutes (GetMetricData's Period: a multiple of 60).
    period: Annotated[timedelta, Between("1m", "1h")] = timedelta(minutes=1)
    # Longest tolerated hole in a series, including at the window's start and before "now";
    # at least one period and at most the window.
    max_gap: Annotated[timedelta, Between("1m", "1d")] = timedelta(minutes=5)
    series_discovery: Literal["list-metrics", "telemetry"] = "list-metrics"
    # How long a ListMetrics answer is reused; an instance that was not running when it was
    # taken triggers a fresh one at once.
    series_refresh: Annotated[timedelta, Between("1m", "1d")] = timedelta(minutes=10)
    # How often utilization is read and nodes are assessed, apart from the daemon's cycle
    # (``interval``, which spend uses): GetMetricData bills per metric requested, so idle at
    # 5 min costs a fifth of idle at 1 min. A cycle in between reads nothing and acts on
    # nothing, except that a node due for its reclaim is read fresh at once. At a read, only
    # the nodes that could be idle by then are read: one whose last read showed a busy
    # period at t cannot be idle for ``window`` before t + window, so it is next read at the
    # first read after that (a busy node about every window - publish_delay - period, rounded
    # up to ``every``: 25 min at the defaults); a node marked idle is next read at its reclaim
    # time. A node never read, with no data or whose read failed is read at every read.
    every: Annotated[timedelta, Between("1m", "1d")] = timedelta(minutes=5)
    # How late the nodes' newest datapoints may arrive: the CloudWatch agent flushes every
    # AGENT_FLUSH_INTERVAL_S (5 min) and the Neuron publisher as often. A node may go this much
    # longer than ``max_gap`` without a datapoint at the end of the window (only there: a hole
    # inside the window is still held to ``max_gap``) and still be idle. The cost: the newest
    # <= 5 min of activity is not visible yet when a node is marked; the act step reads the
    # whole window again before it acts, after the grace period.
    publish_delay: Annotated[timedelta, Between("1m", "1h")] = timedelta(
        seconds=AGENT_FLUSH_INTERVAL_S
    )
    # Also read each rollup's Minimum (a third metric per node and read) to report "at least 1
    # of N devices idle in every period" on busy nodes. Off: a busy node is just busy.
    # ``explain`` reads it whatever this says.
    report_partial_idle: bool = False
    metrics: Annotated[dict[AcceleratorKind, MetricConfig], BeforeValidator(_merge_metrics)] = (
        Field(default_factory=_default_metrics)
    )
    # Logical NeuronCore size (LNC) of the Trainium nodes, fleet-wide; None = the catalog's
    # default for each type (trn2: 2, so 64 series per trn2.48xlarge). A node's
    # ``coreburst:neuron-lnc`` tag overrides it.
    neuron_lnc: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _consistent(self) -> IdleConfig:
        if self.period.total_seconds() % 60:
            raise ValueError(f"period {format_duration(self.period)}: use whole minutes")
        if not self.period <= self.max_gap <= self.window:
            raise ValueError(
                f"max_gap ({format_duration(self.max_gap)}) must be at least period "
                f"({format_duration(self.period)}) and at most window "
                f"({format_duration(self.window)})"
            )
        return self


class TagSelector(_Strict):
    key: str
    values: list[str] = Field(min_length=1)


class ProtectedConfig(_Strict):
    asg_names: list[str] = []
    tag_selectors: list[TagSelector] = []


class ReclaimConfig(_Strict):
    enabled: bool = True
    # Time between marking a node idle (and telling its owner) and acting on it.
    grace: Annotated[timedelta, Between("5m", "30d")] = timedelta(hours=1)
    mark_tag: str = "coreburst:idle-since"
    exempt_tag: str = "coreburst:exempt-until"
    max_exemption: Annotated[timedelta, Between("1h", "365d")] = timedelta(days=30)
    owner_tags: list[str] = ["owner", "team", "project", "cost-center"]
    protected: ProtectedConfig = ProtectedConfig()


class SafetyConfig(_Strict):
    max_actions_per_cycle: int = Field(default=5, ge=0)
    breaker_failures: int = Field(default=3, ge=1)
    breaker_reset: Annotated[timedelta, Between("1m", "1d")] = timedelta(minutes=30)
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
    # Slurm accounts of the on-prem core whose GPU-hours (recorded by the core-idle rule) this
    # scope shows beside its cloud spend, priced at core_idle.gpu_hour_usd. Owned, sunk cost:
    # shown in status and the spend messages, never counted against the limits above.
    slurm_accounts: list[str] = []

    @model_validator(mode="after")
    def _slurm_accounts(self) -> ScopeConfig:
        seen: set[str] = set()
        for a in self.slurm_accounts:
            if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,63}", a):
                hint = f"; write {a.lower()}" if a != a.lower() else ""
                raise ValueError(
                    f"slurm_accounts: {a!r} is not a Slurm account name (lower case letters, "
                    f"digits, _ . -; Slurm stores accounts in lower case){hint}"
                )
            if a in seen:
                raise ValueError(f"slurm_accounts: {a} is listed twice; list it once")
            seen.add(a)
        return self


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
    # Cost Explorer bills each request and updates a few times a day.
    cost_explorer_refresh: Annotated[timedelta, Between("1h", "7d")] = timedelta(hours=6)
    # Ports to price when DescribeConnections is not wanted (or not allowed); None = discover.
    direct_connect_ports: list[DirectConnectPort] | None = None
    include_lustre: bool = True

    @model_validator(mode="after")
    def _one_scope_per_slurm_account(self) -> SpendConfig:
        owner: dict[str, str] = {}
        for scope in self.scopes:
            for a in scope.slurm_accounts:
                if a in owner:
                    raise ValueError(
                        f"Slurm account {a} is in scopes {owner[a]} and {scope.name}; put each "
                        "account in one scope's slurm_accounts"
                    )
                owner[a] = scope.name
        return self


class EgressConfig(_Strict):
    enabled: bool = True
    window: Annotated[timedelta, Between("5m", "1d")] = timedelta(hours=1)
    # How often NetworkOut (and NAT bytes) is read, apart from the cycle (``interval``):
    # GetMetricData bills per metric requested. Each read covers the whole span since the last
    # one, so a spike is still found, up to ``every`` (plus the settling delay) later.
    every: Annotated[timedelta, Between("1m", "1d")] = timedelta(minutes=15)
    daily_threshold_usd: float = Field(default=500.0, gt=0)
    spike_factor: float = Field(default=3.0, gt=1)
    baseline: Annotated[timedelta, Between("1h", "30d")] = timedelta(hours=24)
    min_baseline_samples: int = Field(default=3, ge=1)
    top_talkers: int = Field(default=5, ge=1)
    include_nat: bool = True
    cooldown: Annotated[timedelta, Between("1m", "7d")] = timedelta(hours=1)


class BudgetRelayConfig(_Strict):
    # The SQS queue AWS Budgets notifications arrive on (SNS -> SQS); unset = nothing to relay.
    # The Lambda sets it from COREBURST_BUDGET_QUEUE_URL, which the stack's component writes.
    queue_url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    max_batches: int = Field(default=5, ge=1, le=100)  # of up to 10 messages each per cycle


class BurstReconcileConfig(_Strict):
    """The ``burst-reconcile`` rule (guardrails/rules/burst_reconcile.py): EC2 against the
    on-prem Slurm's cloud nodes. Off unless switched on; it needs ``scontrol`` on this host."""

    enabled: bool = False
    # The stack whose instances the burst resume program launches (tag coreburst-stack=<stack>).
    stack: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
    stack_tag_key: str = STACK_TAG_KEY
    node_tag_key: str = NODE_TAG_KEY
    # An instance with no Slurm node (or a powered-down one) this long after launch is an orphan.
    # At least 11 minutes: the resume program may spend up to 10 minutes naming a fresh
    # instance (coreburst.burst.ec2io.TAG_DEADLINE_MAX_S), and an instance it is still naming
    # must never look like an orphan.
    orphan_timeout: Annotated[timedelta, Between("11m", "1d")] = timedelta(minutes=15)
    # Stack instances with no node tag at all (resume died between CreateFleet and CreateTags);
    # Auto Scaling group members (tag aws:autoscaling:groupName) are never counted.
    untagged_orphans: bool = True
    # Where scontrol is (None: PATH) and which slurm.conf it reads (None: SLURM_CONF / default).
    slurm_bin_dir: Path | None = None
    slurm_conf: Path | None = None
    slurm_timeout_s: float = Field(default=30.0, gt=0, le=300)
    # Written (atomically) after every completed cycle; the resume program refuses to launch
    # when it is stale (coreburst:burst.reconcilerHeartbeat).
    heartbeat_file: Path | None = None
    # The resume program's audit log (coreburst:burst.auditLog). When set: a pool whose resume
    # got InsufficientInstanceCapacity is held (a MAINT reservation) for capacity_backoff, and
    # one with bootstrap_failures_before_protect resume-fail events within bootstrap_window is
    # held until an operator deletes its coreburst-protect-<pool> reservation.
    burst_audit_log: Path | None = None
    capacity_backoff: Annotated[timedelta, Between("1m", "1d")] = timedelta(minutes=30)
    bootstrap_failures_before_protect: int = Field(default=3, ge=1, le=1000)
    bootstrap_window: Annotated[timedelta, Between("10m", "7d")] = timedelta(hours=24)
    # The spend scope (one of spend.scopes) the resume program's spend gate counts against:
    # the gate (coreburst:burst.spendGate) reads it, its limits and state.path from this file,
    # and this rule lifts the gate's holds (coreburst-spend-* reservations) once it has room.
    # null: no gate.
    spend_scope: str | None = "account"
    # A spend snapshot older than this is not trusted: the gate launches nothing, holds stay.
    spend_snapshot_max_age: Annotated[timedelta, Between("1m", "1d")] = timedelta(hours=1)
    # Spot to on-demand: a job pending in spot_partition only, for longer than this, also gets
    # on_demand_partition (scontrol update jobid=N partition=spot,burst), so it runs on
    # on-demand if spot has no capacity, once the resume program's spend gate approves the
    # on-demand price. Off (jobs wait for spot) unless spot_fallback is true.
    spot_fallback: bool = False
    spot_fallback_after: Annotated[timedelta, Between("10s", "7d")] = timedelta(minutes=30)
    spot_partition: str = Field(default="spot", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    on_demand_partition: str = Field(default="burst", pattern=r"^[A-Za-z0-9_.-]{1,64}$")

    @model_validator(mode="after")
    def _stack_when_enabled(self) -> BurstReconcileConfig:
        if self.enabled and not self.stack:
            raise ValueError("set stack: <the Pulumi stack name> when enabled is true")
        return self


class SpotInterruptionConfig(_Strict):
    """The ``spot-interruption`` rule (guardrails/rules/spot_interruption.py): EC2 Spot
    interruption warnings and rebalance recommendations for burst nodes (EventBridge -> SQS).
    Off unless switched on; it needs ``scontrol`` and ``scancel`` on this host and finds the
    node by ``burst_reconcile``'s stack, tag keys and Slurm settings."""

    enabled: bool = False
    # The SQS queue the stack's EventBridge rules deliver both events to (queue
    # guardrails-spot-events: `pulumi stack output guardrailsSpotQueueUrl`); unset = nothing
    # to read.
    queue_url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    max_batches: int = Field(default=5, ge=1, le=100)  # of up to 10 messages each per cycle
    # Report only (audit and Slack), even when the daemon acts (dry_run: false).
    dry_run: bool = False
    # Sent to the jobs on a node whose instance gets the two-minute warning, so they can
    # checkpoint (scancel --signal); null: none.
    signal: Literal["USR1", "USR2", "TERM", "INT", "HUP", "URG", "CONT", "XCPU"] | None = "USR1"
    # Which processes get it (scancel(1)): batch = the batch shell only (--batch; a script
    # traps it), full = the shell, its children and every step (--full), steps = the steps only.
    signal_to: Literal["batch", "full", "steps"] = "batch"
    # After the signal, how long the jobs have before they are requeued (sooner when the
    # instance goes). The warning comes two minutes before EC2 takes the instance.
    grace: Annotated[timedelta, Between("5s", "10m")] = timedelta(seconds=90)
    # A rebalance recommendation drains the node and notifies; true: signal its jobs as well.
    rebalance_signal: bool = False


class BurstHealthConfig(_Strict):
    """The ``burst-health`` rule (guardrails/rules/burst_health.py): EC2 scheduled events and
    impaired status checks on burst instances drain the node and power it down, so its
    instance is replaced. Off unless switched on; it finds the node by ``burst_reconcile``'s
    stack, tag keys and Slurm settings."""

    enabled: bool = False
    # A job still on the node this long before the event's NotBefore is requeued (the node is
    # powered down by force); until then it may finish on the drained node.
    event_margin: Annotated[timedelta, Between("1m", "7d")] = timedelta(minutes=30)
    # A status check impaired this long: the node is powered down even under a job.
    impaired_grace: Annotated[timedelta, Between("1m", "1d")] = timedelta(minutes=10)


class CoreIdleThresholds(_Strict):
    """When a job's GPUs count as idle, and how long its owner has before the policy acts."""

    # Every GPU of the job below this (percent of DCGM activity) for ``window``: idle.
    threshold_percent: float = Field(default=5.0, gt=0, le=100)
    window: Annotated[timedelta, Between("5m", "7d")] = timedelta(hours=2)
    # From the warning to the requeue / cancel (policy ``warn``: never acts).
    grace: Annotated[timedelta, Between("5m", "7d")] = timedelta(hours=1)


class CoreExemption(_Strict):
    """A job (``job``) or a Slurm user's jobs (``user``) left alone until ``until``."""

    job: str | None = Field(default=None, pattern=r"^\d+$")
    user: str | None = Field(default=None, min_length=1)
    until: date

    @model_validator(mode="after")
    def _one_target(self) -> CoreExemption:
        if (self.job is None) == (self.user is None):
            raise ValueError("an exemption names exactly one of job: <id> or user: <name>")
        return self


class CoreIdleConfig(_Strict):
    """The ``core-idle`` rule (guardrails/rules/core_idle.py): GPUs that Slurm jobs on the
    on-prem core hold but do not use, from DCGM through Prometheus. Off unless switched on; it
    needs ``squeue``/``scontrol``/``scancel`` on this host and a Prometheus URL."""

    enabled: bool = False
    # Prometheus scraping dcgm-exporter on every core node (its HTTP API root).
    prometheus_url: str | None = Field(default=None, pattern=r"^https?://[^\s/]+(/\S*)?$")
    # The whole answer's deadline (not one socket read's), and the largest answer read.
    prometheus_timeout_s: float = Field(default=30.0, gt=0, le=300)
    prometheus_max_mib: int = Field(default=64, ge=1, le=4096)
    # Resolution the activity is read at, and the longest hole tolerated in a GPU's series
    # (more, or no series at all: the job is blind and never acted on).
    step: Annotated[timedelta, Between("15s", "5m")] = timedelta(minutes=1)
    max_gap: Annotated[timedelta, Between("1m", "1d")] = timedelta(minutes=5)
    # What happens after the grace: warn only, ``scontrol requeue`` or ``scancel``.
    policy: Literal["warn", "requeue", "cancel"] = "warn"
    batch: CoreIdleThresholds = CoreIdleThresholds()
    # salloc/srun sessions (Slurm's batch_flag false): people step away; warn sooner.
    interactive: CoreIdleThresholds = CoreIdleThresholds(
        window=timedelta(minutes=30), grace=timedelta(minutes=30)
    )
    # Jobs whose time limit is at most ``short_time_limit``: they end soon by themselves.
    short: CoreIdleThresholds = CoreIdleThresholds(
        window=timedelta(minutes=30), grace=timedelta(minutes=30)
    )
    short_time_limit: Annotated[timedelta, Between("1m", "7d")] = timedelta(hours=1)
    # Partitions watched (None: every partition whose jobs hold GPUs).
    partitions: list[str] | None = None
    # dcgm-exporter's host label -> Slurm node name, where they differ beyond a domain: an
    # exporter host matches the node of its own name, else the node of its short name
    # (``core1.lab.example`` -> ``core1``). Two exporter hosts matching one node make that
    # node's GPUs blind (never a guess) until this names the one to use.
    host_map: dict[
        Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")],
        Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")],
    ] = {}
    # Slurm user -> Slack member id, so the warning mentions the job's owner.
    slack_users: dict[str, Annotated[str, Field(pattern=r"^[UW][A-Z0-9]{2,20}$")]] = {}
    # A job exempts itself with ``--comment=coreburst-exempt-until=YYYY-MM-DD`` (at most
    # ``max_exemption`` ahead); operators list exemptions here. Both expire.
    exempt_comment_key: str = Field(default="coreburst-exempt-until", pattern=r"^[\w.:-]+$")
    exemptions: list[CoreExemption] = []
    max_exemption: Annotated[timedelta, Between("1h", "365d")] = timedelta(days=14)
    # At most this many requeues/cancels per cycle (``safety.max_actions_per_cycle`` applies too).
    max_actions_per_cycle: int = Field(default=2, ge=0, le=100)
    # $ per allocated GPU-hour of an owned node, for the messages and the report (see
    # ``coreburst core price``: the TCO model's amortised cost); None: no dollar figures.
    gpu_hour_usd: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    slurm_bin_dir: Path | None = None
    slurm_conf: Path | None = None
    slurm_timeout_s: float = Field(default=30.0, gt=0, le=300)

    @model_validator(mode="after")
    def _url_when_enabled(self) -> CoreIdleConfig:
        if self.enabled and not self.prometheus_url:
            raise ValueError(
                "set prometheus_url: http://<prometheus>:9090 (the server scraping dcgm-exporter)"
                " when enabled is true"
            )
        if self.max_gap < self.step:
            raise ValueError(
                f"max_gap ({format_duration(self.max_gap)}) is shorter than step "
                f"({format_duration(self.step)})"
            )
        by_node: dict[str, list[str]] = {}
        for host, node in self.host_map.items():
            by_node.setdefault(node, []).append(host)
        for node, hosts in sorted(by_node.items()):
            if len(hosts) > 1:
                raise ValueError(
                    f"host_map maps {' and '.join(sorted(hosts))} to the one Slurm node {node};"
                    " map exactly one exporter host to each node"
                )
        return self


class SlackConfig(_Strict):
    # The URL itself comes from COREBURST_SLACK_WEBHOOK_URL or this file, never from YAML.
    webhook_url_file: Path | None = None
    cooldown: Annotated[timedelta, Between("1m", "7d")] = timedelta(minutes=30)
    max_attempts: int = Field(default=50, ge=1)
    backoff_base: Annotated[timedelta, Between("1s", "1h")] = timedelta(seconds=5)
    backoff_max: Annotated[timedelta, Between("1s", "1d")] = timedelta(minutes=10)
    # Per request; fractions honoured (0.5 = half a second).
    timeout_s: float = Field(default=10.0, gt=0)
    # All of one cycle's sends together: a slow or hanging Slack never holds up observing and
    # acting for longer than this. What is not sent stays due for the next cycle.
    cycle_budget_s: float = Field(default=20.0, gt=0)

    @model_validator(mode="after")
    def _backoff_order(self) -> SlackConfig:
        if self.backoff_max < self.backoff_base:
            raise ValueError(
                f"backoff_max ({format_duration(self.backoff_max)}) is shorter than "
                f"backoff_base ({format_duration(self.backoff_base)})"
            )
        return self


class StateConfig(_Strict):
    path: Path = Path(".coreburst/guardrails.sqlite")
    audit_log: Path = Path(".coreburst/guardrails-audit.jsonl")
    # Spend and egress snapshots older than this are deleted (hourly); must cover the egress
    # baseline.
    snapshot_retention: Annotated[timedelta, Between("1d", "400d")] = timedelta(days=35)


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


# The names ``rules`` may list: the config's vocabulary. ``guardrails.rules`` registers exactly
# these (it refuses to import otherwise), so the config never imports the rules that read it.
RULE_NAMES = (
    "budget-relay",
    "burst-health",
    "burst-reconcile",
    "core-idle",
    "egress-spike",
    "idle-reclaim",
    "inventory",
    "spend-limit",
    "spot-interruption",
)


def _known_rules(value: list[str] | None) -> list[str] | None:
    if value is None:
        return None
    unknown = [n for n in value if n not in RULE_NAMES]
    if unknown:
        raise ValueError(
            f"unknown rule(s) {', '.join(unknown)}; known: {', '.join(sorted(RULE_NAMES))}"
        )
    return sorted(set(value))


AwsRegion = Annotated[str, AfterValidator(aws_region)]


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
    """The whole daemon configuration (``guardrails/examples/guardrails.yaml``)."""

    model_config = SettingsConfigDict(
        env_prefix="COREBURST_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    regions: list[AwsRegion] = Field(default=["us-east-1"], min_length=1)
    instance_types: list[str] | None = None  # None = every accelerated type in the catalog
    # Between cycles; each cycle makes AWS API calls, so not less than 10 s.
    interval: Annotated[timedelta, Between("10s", "1d")] = timedelta(seconds=60)
    # True unless written down as false: an empty or partial config never acts.
    dry_run: bool = True
    aws: AwsConfig = AwsConfig()
    idle: IdleConfig = IdleConfig()
    reclaim: ReclaimConfig = ReclaimConfig()
    safety: SafetyConfig = SafetyConfig()
    spend: SpendConfig = SpendConfig()
    egress: EgressConfig = EgressConfig()
    budget_relay: BudgetRelayConfig = BudgetRelayConfig()
    burst_reconcile: BurstReconcileConfig = BurstReconcileConfig()
    burst_health: BurstHealthConfig = BurstHealthConfig()
    spot_interruption: SpotInterruptionConfig = SpotInterruptionConfig()
    core_idle: CoreIdleConfig = CoreIdleConfig()
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
        return (_EnvSource(settings_cls), init_settings)

    @model_validator(mode="after")
    def _retention_covers_baseline(self) -> GuardrailsConfig:
        if self.state.snapshot_retention < self.egress.baseline:
            raise ValueError(
                f"state.snapshot_retention ({format_duration(self.state.snapshot_retention)}) "
                f"is shorter than egress.baseline ({format_duration(self.egress.baseline)}); "
                "raise it or shorten the baseline"
            )
        # a scope's core GPU-hours are month-to-date: the core-idle rule's records must last
        # a month
        if any(sc.slurm_accounts for sc in self.spend.scopes) and (
            self.state.snapshot_retention < timedelta(days=31)
        ):
            raise ValueError(
                f"state.snapshot_retention ({format_duration(self.state.snapshot_retention)}) "
                "is shorter than a month, and spend.scopes list slurm_accounts (month-to-date "
                "core GPU-hours); raise it to 31d or more"
            )
        return self

    @model_validator(mode="after")
    def _burst_spend_scope_known(self) -> GuardrailsConfig:
        b = self.burst_reconcile
        names = [s.name for s in self.spend.scopes]
        if b.enabled and b.spend_scope is not None and b.spend_scope not in names:
            raise ValueError(
                f"burst_reconcile.spend_scope: no spend scope {b.spend_scope!r} in spend.scopes "
                f"({', '.join(names) or 'none'}); name one of those, add it, or set it to null"
            )
        return self

    @model_validator(mode="after")
    def _spot_interruption_stack(self) -> GuardrailsConfig:
        if self.spot_interruption.enabled and not self.burst_reconcile.stack:
            raise ValueError(
                "spot_interruption.enabled needs burst_reconcile.stack (the stack whose burst "
                "instances carry the Slurm node tag); set it"
            )
        return self

    @model_validator(mode="after")
    def _burst_health_stack(self) -> GuardrailsConfig:
        if self.burst_health.enabled and not self.burst_reconcile.stack:
            raise ValueError(
                "burst_health.enabled needs burst_reconcile.stack (the stack whose burst "
                "instances carry the Slurm node tag); set it"
            )
        return self

    def runs(self, rule: str) -> bool:
        """Whether the rule named ``rule`` is selected by ``rules`` (inventory always is)."""
        return self.rules is None or rule in self.rules or rule == "inventory"

    def watched_types(self) -> list[str]:
        cat = load_catalog()
        return sorted(self.instance_types or cat.instances)


def cloudwatch_cadence(cfg: GuardrailsConfig) -> Cadence:
    """How often a daemon with ``cfg`` reads CloudWatch (what ``coreburst.common.cloudwatch_cost``
    prices): the idle rule's schedule and the egress rule's reads, if it is on."""
    idle = cfg.idle
    return Cadence(
        idle.every.total_seconds(),
        cfg.egress.every.total_seconds() if cfg.egress.enabled else None,
        window_s=idle.window.total_seconds(),
        publish_delay_s=idle.publish_delay.total_seconds(),
        period_s=idle.period.total_seconds(),
        partial_idle=idle.report_partial_idle,
    )


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
    _check_metric_coverage(cfg, origin)
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


def _check_metric_coverage(cfg: GuardrailsConfig, origin: str) -> None:
    """Every accelerator family the watched types have needs a utilization metric, and
    ``idle.neuron_lnc`` must be a size each watched Trainium type accepts: otherwise whole
    families would be silently blind (or, with a wrong count, wrongly covered)."""
    cat = load_catalog()
    by_kind: dict[str, list[str]] = {}
    for t in cfg.watched_types():
        by_kind.setdefault(cat.instance(t).accelerator.kind, []).append(t)
    for kind, types in sorted(by_kind.items()):
        if kind not in cfg.idle.metrics:
            default = UTILIZATION_METRICS[kind]  # type: ignore[index]
            raise ConfigError(
                f"{origin}: idle.metrics: no metric for {kind} accelerators, which "
                f"{', '.join(types)} have; remove `{kind}: null` to use the default "
                f"({default.namespace} {default.metric_name} by {default.device_dimension}), "
                "or leave those types out with instance_types"
            )
    lnc = cfg.idle.neuron_lnc
    if lnc is not None:
        for t in by_kind.get("neuron", []):
            nc = cat.instance(t).accelerator.neuron_cores
            if nc is not None and lnc not in nc.logical_core_sizes:
                raise ConfigError(
                    f"{origin}: idle.neuron_lnc: {lnc} is not a logical NeuronCore size of {t}; "
                    f"allowed: {', '.join(map(str, nc.logical_core_sizes))}"
                )


def load_config(path: Path | None) -> GuardrailsConfig:
    if path is None:
        return parse_config("", "<defaults>")
    text = read_text(path, "config", ConfigError)
    return parse_config(text, str(path))
