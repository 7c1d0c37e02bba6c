"""Rule ``burst-reconcile``: keep EC2 and the on-prem Slurm's cloud nodes in step, for the
burst resume/suspend programs (coreburst/burst/power.py), every cycle, through the actuator's gate.

* **Orphans**: an instance of the stack (tag ``coreburst-stack``) tagged with a Slurm node
  (``coreburst-slurm-node``) that Slurm does not know, or knows as powered down / powering
  down, is terminated once it is older than ``orphan_timeout`` (from LaunchTime). So is a stack
  instance with no node tag at all (resume died between CreateFleet and CreateTags), unless it
  belongs to an Auto Scaling group.
* **Lost instances**: a Slurm CLOUD node that is up (not powered down, not powering up) with no
  pending or running instance is powered down (``scontrol update state=power_down_force``), so
  its jobs requeue now. Core nodes have no CLOUD flag and are never touched.
* **Duplicates**: two or more live instances tagged with one node that Slurm has up (a resume
  retried after a crash between CreateFleet and tagging, or a tag written twice): the one
  whose private IP is the node's ``NodeAddr`` is Slurm's; the others are terminated once past
  ``orphan_timeout``. When no instance (or more than one) has that address, all are left and
  the audit says why.
* **Spend holds** (``spend_scope``; coreburst/burst/gate.py): the resume program's spend gate
  holds nodes in ``coreburst-spend-<USD>usd-...`` reservations; each one whose projected
  cost fits what the scope has left (guardrails.yaml ``spend.scopes``, the state's latest
  snapshot) is deleted (cheapest first), so Slurm resumes the nodes and the gate checks again. With
  ``burst_audit_log``, Slack says which jobs each hold keeps waiting and why.
* **Idle reclaim** of an instance tagged with a Slurm node
(:func:`guardrails.rules.base.reclaim_slurm_node`, called
  by the idle-reclaim rule): never stopped or terminated through EC2; Slurm is asked to drain
  the node and power it down once its jobs end (``State=POWER_DOWN_ASAP``: no new job lands
  on it), and its SuspendProgram ends the instance.
* **Guard**: an instance under a node Slurm reports busy (ALLOCATED, MIXED, COMPLETING) is
  never terminated; Slurm is read again right before terminating.
* **Pool holds** (with ``burst_audit_log``, the resume program's audit log): the resume
  program holds a pool itself the moment every type and zone of it is out of capacity, or on
  a quota or invalid-request error (``resume.pool_held``; coreburst/burst/ec2errors.py), and
  this rule tells Slack once per hold. Otherwise a pool (cluster)
  whose resume got a capacity error is held for the stack's ``capacityBackoffS`` (a MAINT
  reservation ``coreburst-backoff-<pool>-<ms>`` that ends by itself); a pool with
  ``bootstrap_failures_before_protect`` resume-fail events (nodes that never registered) within
  ``bootstrap_window`` goes into protected mode: ``coreburst-protect-<pool>`` until an operator
  deletes it (``scontrol delete reservation ...``). Slack says so for each hold placed.
* **Spot to on-demand** (``spot_fallback: true``, ``spot_fallback_after``): a job pending in
  the spot partition only for longer than that also gets the on-demand partition
  (``scontrol update jobid=N partition=spot,burst``, the reason in its AdminComment); the
  resume program's spend gate still decides whether on-demand launches.
* **Heartbeat**: after each completed pass, ``heartbeat_file`` is replaced atomically with the
  time; the resume program refuses to launch when it is stale.

Decisions are :func:`plan` (pure); the Slurm adapter is ``guardrails.adapters.slurm``.

    >>> # run(ctx)   # ctx: guardrails.rules.RuleContext
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, model_validator

from coreburst.burst import admin_comment, gate
from coreburst.burst.holds import (
    Hold,
    holds,
    pool_of,
    read_events,
)
from coreburst.common.names import BACKOFF_PREFIX, NODE_TAG_KEY, STACK_TAG_KEY
from coreburst.common.textio import TextFileError
from guardrails import messages
from guardrails.adapters.slurm import (
    Scontrol,
    SlurmError,
    SlurmNode,
    run_tool,
)
from guardrails.configtypes import Between, StrictModel
from guardrails.rules.base import Rule, RuleContext
from guardrails.timefmt import iso


# -- params: the ``burst_reconcile`` section --------------------------------------------------
class BurstReconcileConfig(StrictModel):
    """The ``burst-reconcile`` rule (coreburst/burst/reconcile.py): EC2 against the
    on-prem Slurm's cloud nodes. Off unless switched on; it needs ``scontrol`` on this host."""

    enabled: bool = False
    """Run the burst-reconcile rule."""
    stack: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
    """The stack whose instances the burst resume program launches (tag coreburst-stack=<stack>)."""
    stack_tag_key: str = STACK_TAG_KEY
    """The instance tag naming the stack (the resume program sets it)."""
    node_tag_key: str = NODE_TAG_KEY
    """The instance tag naming the Slurm node (coreburst:burst.nodeTagKey)."""
    orphan_timeout: Annotated[timedelta, Between("11m", "1d")] = timedelta(minutes=15)
    """An instance with no Slurm node (or a powered-down one) this long after launch is an orphan.
    At least 11 minutes: the resume program may spend up to 10 minutes naming a fresh instance
    (coreburst.burst.ec2io.TAG_DEADLINE_MAX_S), and an instance it is still naming must never
    look like an orphan."""
    untagged_orphans: bool = True
    """Stack instances with no node tag at all (resume died between CreateFleet and CreateTags);
    Auto Scaling group members (tag aws:autoscaling:groupName) are never counted."""
    slurm_bin_dir: Path | None = None
    """Where scontrol is (None: PATH)."""
    slurm_conf: Path | None = None
    """The slurm.conf scontrol reads (None: SLURM_CONF or Slurm's default)."""
    slurm_timeout_s: float = Field(default=30.0, gt=0, le=300)
    """Deadline of each Slurm command."""
    heartbeat_file: Path | None = None
    """Written (atomically) after every completed cycle; the resume program refuses to launch when
    it is stale (coreburst:burst.reconcilerHeartbeat)."""
    burst_audit_log: Path | None = None
    """The resume program's audit log (coreburst:burst.auditLog). When set: a pool whose resume got
    a capacity error is held (a MAINT reservation) for the stack's coreburst:burst.capacityBackoffS
    (the resume program writes it on each failure), and one with
    bootstrap_failures_before_protect resume-fail events within bootstrap_window is held until an
    operator deletes its coreburst-protect-<pool> reservation."""
    bootstrap_failures_before_protect: int = Field(default=3, ge=1, le=1000)
    """Resume-fail events (nodes that never registered) within bootstrap_window that put a pool in
    protected mode."""
    bootstrap_window: Annotated[timedelta, Between("10m", "7d")] = timedelta(hours=24)
    """The span bootstrap failures are counted over."""
    spend_scope: str | None = "account"
    """The spend scope (one of spend.scopes) the resume program's spend gate counts against: the
    gate (coreburst:burst.spendGate) reads it, its limits and state.path from this file, and this
    rule lifts the gate's holds (coreburst-spend-* reservations) once it has room. null: no gate."""
    spend_snapshot_max_age: Annotated[timedelta, Between("1m", "1d")] = timedelta(hours=1)
    """A spend snapshot older than this is not trusted: the gate launches nothing, holds stay."""
    spot_fallback: bool = False
    """Spot to on-demand: a job pending in spot_partition only, for longer than
    spot_fallback_after, also gets on_demand_partition (scontrol update jobid=N
    partition=spot,burst), so it runs on on-demand if spot has no capacity, once the resume
    program's spend gate approves the on-demand price. Off (jobs wait for spot) unless true."""
    spot_fallback_after: Annotated[timedelta, Between("10s", "7d")] = timedelta(minutes=30)
    """How long a job waits in spot_partition alone before it also gets on_demand_partition."""
    spot_partition: str = Field(default="spot", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    """The spot partition (coreburst:burst.spotPartition)."""
    on_demand_partition: str = Field(default="burst", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    """The on-demand partition a waiting spot job also gets (coreburst:burst.burstPartition)."""

    @model_validator(mode="before")
    @classmethod
    def _no_capacity_backoff(cls, data: Any) -> Any:
        # One capacity back-off: the stack's, which the resume program writes on each failure.
        if isinstance(data, dict) and "capacity_backoff" in data:
            raise ValueError(
                "capacity_backoff is no longer read: the back-off is the stack's "
                "coreburst:burst.capacityBackoffS (the resume program writes it on each failure "
                "it audits); remove it here and set that key in Pulumi.<stack>.yaml"
            )
        return data

    @model_validator(mode="after")
    def _stack_when_enabled(self) -> BurstReconcileConfig:
        if self.enabled and not self.stack:
            raise ValueError("set stack: <the Pulumi stack name> when enabled is true")
        return self


def _spend_scope_known(cfg: Any) -> None:
    b = cfg.burst_reconcile
    names = [s.name for s in cfg.spend.scopes]
    if b.enabled and b.spend_scope is not None and b.spend_scope not in names:
        raise ValueError(
            f"burst_reconcile.spend_scope: no spend scope {b.spend_scope!r} in spend.scopes "
            f"({', '.join(names) or 'none'}); name one of those, add it, or set it to null"
        )


# Instances that may still cost money or hold a node name; pending/running count as live.
HELD_STATES = ("pending", "running", "stopping", "stopped")
LIVE_STATES = ("pending", "running")
ASG_TAG = "aws:autoscaling:groupName"  # added by Auto Scaling to every member instance
# Reasons Slurm or the resume program leave on a CLOUD node whose resume failed (slurmctld
# "ResumeTimeout reached"; coreburst/burst/slurm_side.py FAIL_REASON "(Code:...)Failure when
# resuming nodes" and the stale-heartbeat refusal): such a node, left down~, is returned to the
# pool. Any other reason (an operator's drain or down) is left alone.
FAILED_RESUME_REASONS = re.compile(
    r"^(ResumeTimeout reached|\(Code:[^)]*\)Failure when resuming nodes"
    r"|Failure when resuming nodes|coreburst: reconciler heartbeat stale)"
)


@dataclass(frozen=True)
class Instance:
    instance_id: str
    region: str
    state: str
    launch_time: datetime
    node: str | None
    asg: bool = False
    private_ip: str | None = None


@dataclass
class Plan:
    terminate: list[tuple[Instance, str]] = field(default_factory=list)
    power_down: list[tuple[SlurmNode, str]] = field(default_factory=list)
    # CLOUD nodes left down~ by a failed resume: back to idle~ (``state=resume``).
    repair: list[tuple[SlurmNode, str]] = field(default_factory=list)
    guarded: list[tuple[Instance, str]] = field(default_factory=list)
    # Of ``terminate``: duplicates of the instance at the node's NodeAddr (by instance id).
    duplicates: dict[str, str] = field(default_factory=dict)


def _duplicates(
    instances: list[Instance], nodes: dict[str, SlurmNode], now: datetime, timeout: timedelta
) -> Plan:
    """Live instances beyond the one Slurm uses for an up node (by its NodeAddr)."""
    out = Plan()
    by_node: dict[str, list[Instance]] = {}
    for i in instances:
        if i.node is not None and i.state in LIVE_STATES:
            by_node.setdefault(i.node, []).append(i)
    for name, group in sorted(by_node.items()):
        sn = nodes.get(name)
        if len(group) < 2 or sn is None or sn.powered_down or sn.powering_up:
            continue  # a powered-down node's instances are all orphans (plan below)
        addr = sn.fields.get("NodeAddr", "")
        keep = [i for i in group if i.private_ip and i.private_ip == addr]
        if len(keep) != 1:
            for i in group:
                out.guarded.append(
                    (
                        i,
                        f"{len(group)} instances for node {name}, {len(keep)} at its NodeAddr "
                        f"{addr or '?'}: left for an operator",
                    )
                )
            continue
        for i in group:
            if i is keep[0] or now - i.launch_time < timeout:
                continue
            why = f"duplicate of {keep[0].instance_id} for node {name} (Slurm's NodeAddr {addr})"
            out.terminate.append((i, why))
            out.duplicates[i.instance_id] = addr
    return out


def plan(
    instances: list[Instance],
    nodes: dict[str, SlurmNode],
    now: datetime,
    timeout: timedelta,
    untagged_orphans: bool = True,
) -> Plan:
    """What to terminate, what to power down, and what the busy-node guard kept."""
    out = Plan()
    live_nodes: set[str] = set()
    for i in instances:
        if i.node is not None and i.state in LIVE_STATES:
            live_nodes.add(i.node)
        old = now - i.launch_time >= timeout
        if i.node is None:
            if untagged_orphans and not i.asg and old:
                out.terminate.append((i, "no Slurm node tag (resume stopped before tagging)"))
            continue
        sn = nodes.get(i.node)
        if sn is None:
            why = f"Slurm has no node {i.node}"
        elif sn.powered_down:
            why = f"node {sn.name} is {'+'.join(sorted(sn.states))}"
        else:
            continue  # Slurm's node is up: this is its instance
        if not old:
            continue
        if sn is not None and sn.busy:  # e.g. ALLOCATED+POWERING_DOWN: a job still runs there
            out.guarded.append((i, f"{why}, but busy: never terminated under a job"))
            continue
        out.terminate.append((i, why))
    for sn in nodes.values():
        if (
            sn.cloud
            and "DOWN" in sn.states
            and "POWERED_DOWN" in sn.states
            and not sn.busy
            and not sn.states & {"POWERING_DOWN", "POWERING_UP", "DRAIN", "MAINT", "RESERVED"}
            and sn.name not in live_nodes
            and FAILED_RESUME_REASONS.match(sn.reason)
        ):
            out.repair.append((sn, f"left down~ by a failed resume ({sn.reason})"))
        if not sn.cloud or sn.powered_down or sn.powering_up or sn.name in live_nodes:
            continue
        out.power_down.append((sn, "no pending or running instance"))
    dup = _duplicates(instances, nodes, now, timeout)
    out.terminate += dup.terminate
    out.guarded += dup.guarded
    out.duplicates = dup.duplicates
    return out


def _instances(ec2: Any, region: str, p: BurstReconcileConfig) -> list[Instance]:
    out = []
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[
            {"Name": f"tag:{p.stack_tag_key}", "Values": [p.stack]},
            {"Name": "instance-state-name", "Values": list(HELD_STATES)},
        ]
    )
    for page in pages:
        for res in page["Reservations"]:
            for inst in res["Instances"]:
                tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
                out.append(
                    Instance(
                        inst["InstanceId"],
                        region,
                        inst["State"]["Name"],
                        inst["LaunchTime"],
                        tags.get(p.node_tag_key),
                        ASG_TAG in tags,
                        inst.get("PrivateIpAddress"),
                    )
                )
    return out


def write_heartbeat(path: Path, now: datetime, **fields: Any) -> None:
    """Replace ``path`` with ``{"ts": ISO time, ...}`` atomically (write, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".heartbeat-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps({"ts": iso(now), **fields}, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _return_to_pool(slurm: Scontrol, node: str, reason: str) -> str:
    """``down~`` -> ``idle~``; the failure stays in the node's Comment."""
    slurm.run(
        "update", f"nodename={node}", f"comment=coreburst: returned to the pool after: {reason}"
    )
    slurm.run("update", f"nodename={node}", "state=resume")
    return "scontrol update state=resume"


def _terminate(ec2: Any, instance_id: str) -> str:
    ec2.terminate_instances(InstanceIds=[instance_id])
    return "TerminateInstances"


def _hold_pools(
    ctx: RuleContext, slurm: Scontrol, nodes: dict[str, SlurmNode], wanted: list[Hold]
) -> None:
    if not wanted:
        return
    existing = slurm.reservations()
    for h in wanted:
        if h.key.startswith("burst-held:"):  # placed by the resume program: tell, once
            if h.reservation in existing:
                targets = sorted(n for n in nodes if pool_of(n) == h.pool)
                ctx.alert(
                    messages.burst_pool_held(h.pool, h.reservation, targets, h.why, h.minutes),
                    timedelta(0),
                )
            continue
        prefix = h.reservation if h.minutes is None else f"{BACKOFF_PREFIX}{h.pool}-"
        if any(r.startswith(prefix) for r in existing):
            continue  # held already (a later failure does not stack a second reservation)
        targets = sorted(
            n for n, sn in nodes.items() if sn.cloud and not sn.busy and pool_of(n) == h.pool
        )
        if not targets:
            continue
        ctx.actuator.audit("burst.hold", pool=h.pool, reservation=h.reservation, why=h.why)
        try:
            placed = ctx.actuator.execute(
                h.key,
                h.reservation,
                "slurm",
                "hold",
                reason=h.why,
                call=lambda h=h, targets=targets: slurm.reserve(  # type: ignore[misc]
                    h.reservation, targets, h.minutes
                ),
            )
        except SlurmError as exc:
            ctx.state.drop_intent(h.key)
            ctx.actuator.audit(
                "action.failed", key=h.key, instance_id=h.reservation, error=str(exc)
            )
            ctx.report.errors.append(f"burst-reconcile: {exc}")
            continue
        if placed:
            ctx.alert(
                messages.burst_pool_held(h.pool, h.reservation, targets, h.why, h.minutes),
                timedelta(0),
            )


def spot_waiting(
    squeue_out: str, now: datetime, after: timedelta, spot: str, on_demand: str
) -> list[tuple[str, str, float]]:
    """(job id, its partitions, seconds pending) of the jobs pending in the spot partition
    only for longer than ``after``, from ``squeue -h -t PD -o %i|%P|%V`` (job id, partition
    list, submit time in Slurm's ISO form). A line that does not parse is skipped."""
    out = []
    for line in squeue_out.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3:
            continue
        job, parts_, submitted = parts
        names = parts_.split(",")
        if spot not in names or on_demand in names:
            continue
        try:
            t = datetime.fromisoformat(submitted)
        except ValueError:
            continue
        if t.tzinfo is None:  # Slurm prints the controller's local time without a zone
            t = t.replace(tzinfo=now.astimezone().tzinfo)
        waited = (now - t).total_seconds()
        if waited >= after.total_seconds():
            out.append((job, parts_, waited))
    return out


def _spot_fallback(ctx: RuleContext, slurm: Scontrol) -> None:
    """Give jobs that waited too long for spot the on-demand partition too (audited, through
    the actuator: dry-run, caps, kill switch). The resume program's spend gate still decides
    whether on-demand may launch."""
    p: BurstReconcileConfig = ctx.cfg.burst_reconcile
    try:
        out = run_tool(
            "squeue", "-h", "-t", "PD", "-p", p.spot_partition, "-o", "%i|%P|%V",
            bin_dir=p.slurm_bin_dir, conf=p.slurm_conf, timeout_s=p.slurm_timeout_s,
        )  # fmt: skip
    except SlurmError as exc:
        ctx.report.errors.append(f"burst-reconcile: {exc}")
        return
    now = ctx.clock.now()
    waiting = spot_waiting(out, now, p.spot_fallback_after, p.spot_partition, p.on_demand_partition)
    # the jobs' AdminComments, one read for all: the note replaces only coreburst's own of its
    # kind (coreburst.burst.admin_comment); unreadable, the job moves without a note
    have: dict[str, str | None] = {}
    read = False
    if waiting:
        try:
            have, read = admin_comment.comments(admin_comment.read_jobs(slurm.squeue)), True
        except SlurmError as exc:
            ctx.report.errors.append(f"burst-reconcile: job comments unread: {exc}")
    for job, parts, waited in waiting:
        key = f"burst-spot-fallback:{job}"
        why = (
            f"pending {timedelta(seconds=int(waited))} for spot (more than "
            f"{p.spot_fallback_after}): "
            f"{p.on_demand_partition} added"
        )
        text = f"coreburst: {why}; the burst spend gate checks the on-demand price"
        value = admin_comment.merged_for(have, read, job, "fallback", text)
        note = () if value is None else (f"AdminComment={value}",)
        args = ("update", f"jobid={job}", f"partition={parts},{p.on_demand_partition}", *note)
        try:
            done = ctx.actuator.execute(
                key,
                f"job {job}",
                "slurm",
                "spot-fallback",
                reason=why,
                call=lambda a=args: slurm.run(*a),  # type: ignore[misc]
            )
        except SlurmError as exc:
            # The job may have started or ended since; or slurmctld refused for now (24.11 and
            # 26.05 answer "Resource temporarily unavailable" to a partition change for some
            # seconds after the job's submission, seen on the lab): decide again next cycle.
            ctx.state.drop_intent(key)
            ctx.actuator.audit("action.failed", key=key, instance_id=f"job {job}", error=str(exc))
            continue
        if done:  # said once it took effect (a dry run says it in action.skipped)
            ctx.actuator.audit("burst.spot_fallback", job=job, partitions=parts, why=why)


def run(ctx: RuleContext) -> None:
    p: BurstReconcileConfig = ctx.cfg.burst_reconcile
    now = ctx.clock.now()
    slurm = Scontrol(p.slurm_bin_dir, p.slurm_conf, p.slurm_timeout_s)
    nodes = slurm.nodes()  # Slurm first: an instance launched after this read is younger
    instances: list[Instance] = []
    for region in ctx.cfg.regions:
        instances += _instances(ctx.aws.client("ec2", region), region, p)
    todo = plan(instances, nodes, now, p.orphan_timeout, p.untagged_orphans)
    for inst, why in todo.guarded:
        ctx.actuator.audit("burst.guarded", instance_id=inst.instance_id, node=inst.node, why=why)
    fresh: dict[str, SlurmNode] = {}
    if todo.terminate:
        fresh = slurm.nodes()  # a node may have been resumed and taken a job meanwhile
    for inst, why in todo.terminate:
        sn = fresh.get(inst.node) if inst.node else None
        if inst.instance_id in todo.duplicates:
            addr = sn.fields.get("NodeAddr") if sn is not None else None
            if sn is None or sn.powered_down or addr != todo.duplicates[inst.instance_id]:
                ctx.actuator.audit(
                    "burst.guarded",
                    instance_id=inst.instance_id,
                    node=inst.node,
                    why=f"duplicate, but node {inst.node} changed since (NodeAddr {addr})",
                )
                continue
        elif sn is not None and (sn.busy or not sn.powered_down):
            ctx.actuator.audit(
                "burst.guarded",
                instance_id=inst.instance_id,
                node=inst.node,
                why=f"node {sn.name} is now {'+'.join(sorted(sn.states))}",
            )
            continue
        kind = "duplicate" if inst.instance_id in todo.duplicates else "orphan"
        ctx.actuator.audit(
            f"burst.{kind}",
            instance_id=inst.instance_id,
            node=inst.node,
            why=why,
            region=inst.region,
        )
        ec2 = ctx.aws.client("ec2", inst.region)
        ctx.actuator.execute(
            f"burst-orphan:{inst.instance_id}",
            inst.instance_id,
            inst.region,
            "terminate",
            reason=f"burst {kind}: {why}",
            call=lambda ec2=ec2, iid=inst.instance_id: _terminate(ec2, iid),  # type: ignore[misc]
        )
    for sn, why in todo.power_down:
        key = f"burst-power-down:{sn.name}:{sn.boot_time or iso(now)}"
        ctx.actuator.audit("burst.lost-instance", node=sn.name, state="+".join(sorted(sn.states)))
        try:
            ctx.actuator.execute(
                key,
                sn.name,
                "slurm",
                "power-down",
                reason=f"burst node without instance: {why}",
                call=lambda n=sn.name: slurm.power_down([n]),  # type: ignore[misc]
            )
        except SlurmError as exc:  # not an AWS failure: forget the intent, decide again later
            ctx.state.drop_intent(key)
            ctx.actuator.audit("action.failed", key=key, instance_id=sn.name, error=str(exc))
            ctx.report.errors.append(f"burst-reconcile: {exc}")
    for sn, why in todo.repair:
        key = f"burst-repair:{sn.name}:{sn.fields.get('Reason', '')}:{sn.boot_time}"
        ctx.actuator.audit("burst.repair", node=sn.name, why=why)
        try:
            ctx.actuator.execute(
                key,
                sn.name,
                "slurm",
                "return-to-pool",
                reason=f"burst node {why}; its instance is gone",
                call=lambda n=sn.name, r=sn.reason: _return_to_pool(slurm, n, r),  # type: ignore[misc]
            )
        except SlurmError as exc:
            ctx.state.drop_intent(key)
            ctx.actuator.audit("action.failed", key=key, instance_id=sn.name, error=str(exc))
            ctx.report.errors.append(f"burst-reconcile: {exc}")
    events: list[dict[str, Any]] = []
    if p.burst_audit_log is not None:
        try:
            events = read_events(p.burst_audit_log)
        except TextFileError as exc:  # the rest of the pass (and the heartbeat) still runs
            ctx.report.errors.append(f"burst-reconcile: {exc}")
        _hold_pools(ctx, slurm, nodes, holds(events, now, p))
    try:
        resv_text = slurm.run("-o", "show", "reservation")
    except SlurmError as exc:
        ctx.report.errors.append(f"burst-reconcile: {exc}")
    else:
        gate.alert_holds(ctx, events, resv_text)  # before the release: the wait is news
        gate.release_holds(ctx, slurm, resv_text)
    ctx.actuator.audit(
        "burst.reconciled",
        slurm_nodes=len(nodes),
        instances=len(instances),
        orphans=len(todo.terminate),
        lost=len(todo.power_down),
        repaired=len(todo.repair),
        guarded=len(todo.guarded),
    )
    if p.spot_fallback:
        _spot_fallback(ctx, slurm)
    if p.heartbeat_file is not None:
        write_heartbeat(
            p.heartbeat_file,
            now,
            dry_run=ctx.actuator.dry_run,
            leader=ctx.actuator.leader,
        )


RULE = Rule(
    name="burst-reconcile",
    order=70,
    description=(
        "Terminate burst instances Slurm has no (powered-up) node for and duplicates of a "
        "node's instance, power down Slurm cloud nodes whose instance is gone, never touch a "
        "busy node, lift spend-gate holds when the scope has room; write a heartbeat."
    ),
    params=BurstReconcileConfig,
    iam_actions=("ec2:DescribeInstances", "ec2:TerminateInstances"),
    section=lambda c: c.burst_reconcile,
    enabled=lambda c: c.burst_reconcile.enabled,
    run=run,
    example=(
        "burst_reconcile: {enabled: true, stack: prod, orphan_timeout: 15m, "
        "spend_scope: account, heartbeat_file: /var/lib/coreburst/reconciler.heartbeat}"
    ),
    sections={"burst_reconcile": BurstReconcileConfig},
    validators=(_spend_scope_known,),
)
