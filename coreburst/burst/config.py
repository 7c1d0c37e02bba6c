"""The burst side's settings, read from the same ``Pulumi.<stack>.yaml`` as the infrastructure.

The stack's clusters (instance type, node count, capacity model) say what may burst; the
``coreburst:burst`` key says how Slurm reaches it. That key is not part of infra's
``StackConfig`` yet, so it is taken out of the config map before the rest is validated.

    >>> s = BurstSettings.model_validate({"coreNodes": "dgx[01-16]"})
    >>> s.max_time, s.suspend_time
    ('7-00:00:00', 600)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from coreburst.burst.hostlist import HostlistError, expand
from coreburst.common.catalog import load_catalog
from coreburst.common.names import CAPACITY_BACKOFF_S, NODE_TAG_KEY
from coreburst.common.textio import read_text
from infra.config import SlurmNetwork, StackConfig, StackConfigError, parse_stack_config

# The stack files live at the repository root; a controller host passes --stack-dir.

BURST_KEY = "coreburst:burst"
# Slurm's time format for MaxTime: [days-]hours:minutes:seconds, minutes, or UNLIMITED.
_SLURM_TIME = re.compile(r"^(\d+-)?\d{1,2}:\d{2}:\d{2}$|^\d+$|^(UNLIMITED|INFINITE)$")
# What one Slurm parameter value may contain in a rendered line: no spaces, '#' or newlines.
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_./@%:+=,\-\[\]]+$")


def _slurm_time(value: str) -> str:
    if not _SLURM_TIME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a Slurm time: use days-hours:minutes:seconds "
            "(e.g. 7-00:00:00), minutes, or UNLIMITED"
        )
    return value


def _safe(value: str) -> str:
    if not _SAFE_VALUE.fullmatch(value):
        raise ValueError(
            f"{value!r} cannot go into slurm.conf: use letters, digits and . _ / - @ % : + = , "
            "[ ] only (no spaces, # or newlines)"
        )
    return value


def _hostlist(value: str) -> str:
    # Slurm reads a bad hostlist in slurm.conf as a fatal error at slurmctld start-up (or as
    # node names that never match); fail here, before anything is rendered.
    try:
        expand(value)
    except HostlistError as exc:
        raise ValueError(
            f"{exc}; write a Slurm hostlist such as dgx[01-16] or dgx1,dgx[3-4] "
            "(names of letters, digits, . _ -; ranges in [ ])"
        ) from None
    return value


SlurmTime = Annotated[str, AfterValidator(_slurm_time)]
SafeValue = Annotated[str, AfterValidator(_safe)]
# A Slurm hostlist (coreburst.burst.hostlist.expand accepts it), safe to put into slurm.conf.
Hostlist = Annotated[str, AfterValidator(_safe), AfterValidator(_hostlist)]


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        use_attribute_docstrings=True,
    )


class CapacityBlockWindow(_Model):
    """When a Capacity Block's instances may run (from DescribeCapacityReservations:
    StartDate / EndDate). Until ``start`` its Slurm nodes are held in a maintenance
    reservation so no job powers them up."""

    start: datetime
    """When the block's instances may start (UTC, ISO 8601)."""
    end: datetime | None = None
    """When the block ends (none: not known; the nodes are held after it)."""


class SpendGate(_Model):
    """Before the resume program launches, the projected cost (nodes x $/h x each job's time
    limit) must fit what the guardrails' spend scope has left today and this month. Over it,
    nothing launches and the nodes are held until the scope has room again (the guardrails
    daemon's burst-reconcile rule lifts the hold).

    Everything about the scope comes from the guardrails daemon's own config, the one source:
    which scope (``burst_reconcile.spend_scope``), its limits (``spend.scopes``), where its
    spend snapshots are (``state.path``) and how old one may be
    (``burst_reconcile.spend_snapshot_max_age``). See :func:`gate_limits`."""

    guardrails_config: Path
    """The guardrails daemon's guardrails.yaml (read only; COREBURST_* overrides apply)."""
    default_hours: float = Field(default=1.0, gt=0)
    """Hours assumed for a node resumed without a job (``scontrol update state=power_up``)."""


@dataclass(frozen=True)
class GateLimits:
    """What the spend gate checks against, as the guardrails config says."""

    scope: str
    daily_limit_usd: float | None
    monthly_limit_usd: float | None
    state_path: Path
    max_snapshot_age: timedelta


def gate_limits(gate: SpendGate) -> GateLimits:
    """The gate's scope, limits and state from ``gate.guardrails_config``; raises
    StackConfigError (one line) when the file is unusable or names no usable scope."""
    from guardrails.config import ConfigError  # only when a gate is configured
    from guardrails.configfile import load_config

    where = f"{BURST_KEY}.spendGate"
    path = gate.guardrails_config
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        raise StackConfigError(f"{where}.guardrailsConfig: {exc}") from None
    name = cfg.burst_reconcile.spend_scope
    names = [s.name for s in cfg.spend.scopes]
    if name is None:
        raise StackConfigError(
            f"{where}: {path} sets burst_reconcile.spend_scope to null; name the spend scope "
            f"the gate counts against ({', '.join(names) or 'none defined'})"
        )
    scope = next((s for s in cfg.spend.scopes if s.name == name), None)
    if scope is None:
        raise StackConfigError(
            f"{where}: spend scope {name!r} (burst_reconcile.spend_scope in {path}) is not in "
            f"its spend.scopes ({', '.join(names) or 'none'}); add it there or name one of those"
        )
    if scope.daily_limit_usd is None and scope.monthly_limit_usd is None:
        raise StackConfigError(
            f"{where}: spend scope {name!r} in {path} has no daily_limit_usd or "
            "monthly_limit_usd; set one, or remove spendGate"
        )
    return GateLimits(
        name,
        scope.daily_limit_usd,
        scope.monthly_limit_usd,
        cfg.state.path,
        cfg.burst_reconcile.spend_snapshot_max_age,
    )


class BurstSettings(SlurmNetwork):
    """``coreburst:burst`` in ``Pulumi.<stack>.yaml``; every key has a default. The network
    keys (``node``, ``onPrem``, ``srunPortRange``, ``slurmdPort``, ``slurmdPortBase``,
    ``slurmctldPort``) come from infra/config.py's SlurmNetwork, which the burst nodes' security
    group is derived from too."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        use_attribute_docstrings=True,
    )

    core_nodes: Hostlist | None = None
    """The on-prem nodes (a Slurm hostlist): never suspended, ordered first through partitions."""
    core_partition: SafeValue = "core"
    """The site's own partition of the core nodes (named in the rendered comments; the fragment does
    not declare it)."""
    burst_partition: SafeValue = "burst"
    """The partition of on-demand and capacity-reservation pools."""
    spot_partition: SafeValue = "spot"
    """The partition of spot pools."""
    block_partition: SafeValue = "block"
    """The partition of Capacity Block pools."""
    max_time: SlurmTime = "7-00:00:00"
    """MaxTime of the burst and block partitions: a job with a longer time limit stays on the
    core (the seed rule: runs over a week stay on-prem). The spend gate prices a node for at
    most this long."""
    spot_max_time: SlurmTime = "7-00:00:00"
    """MaxTime of the spot partition (a spot node may be interrupted; a shorter limit loses less
    work)."""
    resume_program: SafeValue = "/usr/local/sbin/coreburst-burst-resume"
    """ResumeProgram: the program slurmctld runs (as SlurmUser, with a hostlist argument) to
    start nodes; `coreburst burst install` writes it there."""
    suspend_program: SafeValue = "/usr/local/sbin/coreburst-burst-suspend"
    """SuspendProgram: ends the instances of the nodes Slurm powers down."""
    resume_fail_program: SafeValue = "/usr/local/sbin/coreburst-burst-resume-fail"
    """ResumeFailProgram: ends the instance of a node that did not register within ResumeTimeout."""
    agent_socket: Path | None = None
    """The burst agent's socket (coreburst burst agent --socket): when set, the rendered programs
    ask that warm process to run them (coreburst/burst/fast.py) and run directly if it is down."""
    suspend_time: int = Field(default=600, ge=1)
    """SuspendTime: a burst node idle this long is powered down (its instance ended)."""
    resume_timeout: int = Field(default=1800, ge=1)
    """ResumeTimeout (and BatchStartTimeout): how long a node has from resume to registering with
    slurmctld."""
    suspend_timeout: int = Field(default=120, ge=1)
    """SuspendTimeout: how long a powered-down node stays unavailable after SuspendProgram."""
    power_save_interval: int = Field(default=10, ge=1)
    """SlurmctldParameters power_save_interval: how often slurmctld runs its power saving logic."""
    memory_fraction: float = Field(default=0.95, gt=0, le=1)
    """Fraction of the instance's memory declared as RealMemory: the OS and drivers keep some, and a
    node that reports less than its RealMemory is set INVALID."""
    gpu_device_prefix: SafeValue = "/dev/nvidia"
    """Where the GPU device files are on a burst node (gres.conf File=); a trailing [0-N] range is
    appended per instance type."""
    node_address: Literal["private-ip", "registration"] = "private-ip"
    """How slurmctld reaches a resumed node: the instance's private IP (set by the resume program),
    or the address the node registers from (SlurmctldParameters=cloud_reg_addrs)."""
    capacity_blocks: dict[str, CapacityBlockWindow] = {}
    """The dates of each capacity-block cluster's block, by cluster name: its nodes are held in a
    maintenance reservation outside them (reservations.sh). A block cluster left out is held
    until an operator lifts it."""
    capacity_backoff_s: int = Field(default=CAPACITY_BACKOFF_S, ge=10)
    """Seconds an (instance type, zone) choice that got a capacity error is not offered to EC2
    again; when every choice of a pool is out, the pool is held (a MAINT reservation
    coreburst-backoff-<pool>-<ms>) as long, so its jobs start elsewhere at once. The one capacity
    back-off: the resume program writes it into each failure it audits, and the guardrails
    daemon's burst-reconcile rule holds a pool after a capacity error for as long."""
    log_file: Path = Path("/var/log/coreburst/burst-power.log")
    """Logs of the power programs (slurmctld discards their stdout and stderr)."""
    audit_log: Path = Path("/var/log/coreburst/burst-audit.jsonl")
    """The power programs' JSON-lines audit log (launches, failures, holds); the guardrails daemon's
    burst_reconcile.burst_audit_log reads it."""
    node_tag_key: str = NODE_TAG_KEY
    """Instance tag holding the Slurm node name."""
    claims_file: Path | None = None
    """Which resume run owns which node (coreburst/burst/claims.py; SQLite, on the controller).
    Default: burst-claims.sqlite beside auditLog."""
    spend_gate: SpendGate | None = None
    reconciler_heartbeat: Path | None = None
    """The guardrails daemon's burst-reconcile heartbeat file (burst_reconcile.heartbeat_file in
    guardrails.yaml). When set, resume launches nothing while it is older than heartbeatIntervals
    x reconcilerIntervalS: nobody would clean up what it launches."""
    reconciler_interval_s: int = Field(default=60, ge=10)
    """The daemon's cycle (its interval) the heartbeat is judged against."""
    heartbeat_intervals: int = Field(default=3, ge=1)
    """How many cycles the heartbeat may miss before resume refuses to launch."""


class BurstStack(BaseModel):
    """A validated stack plus its burst settings."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    config: StackConfig
    settings: BurstSettings


def _format(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown key; check the spelling against coreburst/burst/config.py"
    return f"{BURST_KEY}.{loc}: {msg}" if loc else f"{BURST_KEY}: {msg}"


def parse_burst(name: str, config_map: dict[str, Any]) -> BurstStack:
    """Validate a stack's ``config:`` map; raises StackConfigError with a one-line message."""
    raw = dict(config_map)
    burst_raw = raw.pop(BURST_KEY, None) or {}
    if not isinstance(burst_raw, dict):
        raise StackConfigError(f"{BURST_KEY}: expected a mapping of key: value")
    stack_raw: dict[str, Any] = {}
    for key, value in raw.items():
        ns, _, sub = str(key).partition(":")
        if ns == "coreburst" and sub:
            stack_raw[sub] = value
        elif key == "aws:region":
            stack_raw.setdefault("region", value)
    try:
        settings = BurstSettings.model_validate(burst_raw)
    except ValidationError as exc:
        raise StackConfigError(_format(exc)) from None
    cfg = parse_stack_config(stack_raw, load_catalog())
    conflict = settings.port_conflict(cfg.burst_node_count)
    if conflict:
        raise StackConfigError(f"{BURST_KEY}: {conflict}")
    unknown = sorted(set(settings.capacity_blocks) - {c.name for c in cfg.clusters})
    if unknown:
        raise StackConfigError(
            f"{BURST_KEY}.capacityBlocks: no cluster named {', '.join(unknown)} in the stack"
        )
    for c in cfg.clusters:
        if c.name in settings.capacity_blocks and c.capacity.model != "capacity-block":
            raise StackConfigError(
                f"{BURST_KEY}.capacityBlocks.{c.name}: cluster {c.name} is "
                f"{c.capacity.model}, not a capacity-block"
            )
    return BurstStack(name=name, config=cfg, settings=settings)


def load_stack_map(stack: str, root: Path | None = None) -> dict[str, Any]:
    """The ``config:`` map of ``root/Pulumi.<stack>.yaml`` (as infra.offline reads it, without
    importing Pulumi: the power programs start on every resume)."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", stack):
        raise StackConfigError(f"{stack!r} is not a stack name (letters, digits, . _ -)")
    path = (root or Path.cwd()) / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        known = sorted(p.name.split(".")[1] for p in path.parent.glob("Pulumi.*.yaml"))
        raise StackConfigError(
            f"no stack {stack!r}: {path} not found (known: {', '.join(known) or 'none'})"
        )
    try:
        doc = yaml.safe_load(read_text(path, "stack file", StackConfigError)) or {}
    except yaml.YAMLError as exc:
        raise StackConfigError(f"{path.name}: not valid YAML ({exc})".replace("\n", " ")) from None
    config = doc.get("config", {}) if isinstance(doc, dict) else None
    if not isinstance(config, dict):
        raise StackConfigError(f"{path.name}: 'config' must be a mapping of key: value")
    return config


def load_burst_stack(stack: str, root: Path | None = None) -> BurstStack:
    """Read ``Pulumi.<stack>.yaml`` under ``root``; raises StackConfigError."""
    return parse_burst(stack, load_stack_map(stack, root))
