"""Rule ``burst-health``: EC2 scheduled events and impaired status checks on burst instances
drain the Slurm node and replace its instance, before the event.

EC2's DescribeInstanceStatus (EC2 API reference, "DescribeInstanceStatus" and
"InstanceStatusEvent") reports, per running instance, scheduled ``Events`` (``Code``
instance-reboot | system-reboot | system-maintenance | instance-retirement | instance-stop,
``NotBefore``, ``NotAfter``, ``InstanceEventId``; a completed or canceled event stays listed
for a week with a Description starting ``[Completed]`` / ``[Canceled]``, and is ignored) and
the two status checks ``SystemStatus`` / ``InstanceStatus`` (``ok``, ``impaired``,
``insufficient-data``, ``initializing``, ``not-applicable``). Only the stack's instances
tagged with a Slurm node (the resume program's ``coreburst-slurm-node``) are looked at; the
node must be a Slurm CLOUD node (the core is never touched).

Policy, per node (the earliest deadline of its issues wins):

* **drain now**: ``scontrol update state=drain reason="coreburst: EC2 <what>"`` (no new job
  lands there; the reason shows in ``sinfo -R``), the same text in the node's Comment, then
  ``state=power_down``: Slurm powers the node down as soon as it is idle (its SuspendProgram
  terminates the instance) and the next job that needs the node gets a fresh instance.
  (``state=power_down_asap reason=...`` in one update would keep the reason too: slurmctld's
  update_node sets the update's reason before it acts on the state, and _drain_node writes
  "POWER_DOWN_ASAP" only on a node not yet drained whose reason is unset or "Not responding";
  src/slurmctld/node_mgr.c, the same from 22.05 to 26.05.)
* **deadline**: a scheduled event's ``NotBefore - event_margin``; an impaired status check's
  first sighting ``+ impaired_grace``. At the deadline a node still running a job is powered
  down by force (``state=power_down_force``): Slurm requeues the job (it runs elsewhere or on a
  fresh instance) before EC2 acts, rather than losing it to the event.
* insufficient-data / initializing is not an issue (missing data is neither healthy nor bad:
  it is audited, nothing is done); an instance Slurm does not know as a CLOUD node is audited
  and left to burst-reconcile.

Every write goes through the actuator (dry-run, kill switch, lease, cap, audit, run-once keys
per instance and event); Slack says what was drained and why.

    >>> # run(ctx)   # ctx: guardrails.rules.RuleContext
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any

from guardrails.adapters.slack import Alert
from guardrails.adapters.slurm import Scontrol, SlurmError, SlurmNode
from guardrails.configtypes import Between, StrictModel
from guardrails.rules.base import Rule, RuleContext
from guardrails.timefmt import iso, parse_iso


# -- params: the ``burst_health`` section -----------------------------------------------------
class BurstHealthConfig(StrictModel):
    """The ``burst-health`` rule (coreburst/burst/ec2_events.py): EC2 scheduled events and
    impaired status checks on burst instances drain the node and power it down, so its
    instance is replaced. Off unless switched on; it finds the node by ``burst_reconcile``'s
    stack, tag keys and Slurm settings."""

    enabled: bool = False
    """Run the burst-health rule."""
    event_margin: Annotated[timedelta, Between("1m", "7d")] = timedelta(minutes=30)
    """A job still on the node this long before the event's NotBefore is requeued (the node is
    powered down by force); until then it may finish on the drained node."""
    impaired_grace: Annotated[timedelta, Between("1m", "1d")] = timedelta(minutes=10)
    """A status check impaired this long: the node is powered down even under a job."""


def _needs_burst_stack(cfg: Any) -> None:
    if cfg.burst_health.enabled and not cfg.burst_reconcile.stack:
        raise ValueError(
            "burst_health.enabled needs burst_reconcile.stack (the stack whose burst "
            "instances carry the Slurm node tag); set it"
        )


# EC2 API reference, DescribeInstanceStatus: "Constraints: Maximum 100 explicitly specified
# instance IDs."
STATUS_IDS_MAX = 100
FINISHED = ("[Completed]", "[Canceled]")
REASON_PREFIX = "coreburst: EC2"
IMPAIRED_KEY = "burst-health:impaired"  # {instance id: ISO time first seen impaired}
# Being replaced already: nothing to do.
GOING = frozenset({"POWERED_DOWN", "POWERING_DOWN"})


@dataclass(frozen=True)
class Issue:
    instance_id: str
    node: str
    key: str  # the event's id, or "impaired"
    why: str  # one line, for Slurm's reason, the audit and Slack
    deadline: datetime  # from then on the node is powered down even under a job


def _fmt(t: datetime) -> str:
    return f"{t:%Y-%m-%d %H:%M}Z"


def issues(
    statuses: Iterable[dict[str, Any]],
    node_of: dict[str, str],
    now: datetime,
    p: BurstHealthConfig,
    impaired_since: dict[str, datetime],
) -> list[Issue]:
    """What DescribeInstanceStatus says about the burst instances (``node_of``: instance ->
    Slurm node); ``impaired_since`` is updated in place (first sighting of an impaired check,
    dropped once the checks are no longer impaired)."""
    out: list[Issue] = []
    seen_impaired: set[str] = set()
    for st in statuses:
        iid = str(st.get("InstanceId", ""))
        node = node_of.get(iid)
        if node is None:
            continue
        for ev in st.get("Events") or []:
            desc = " ".join(str(ev.get("Description") or "").split())
            if desc.startswith(FINISHED):
                continue
            code = str(ev.get("Code") or "event")
            eid = str(ev.get("InstanceEventId") or code)
            nb = ev.get("NotBefore")
            when = f" not before {_fmt(nb)}" if isinstance(nb, datetime) else ""
            why = f"{REASON_PREFIX} {code}{when} on {iid}" + (f" ({desc[:120]})" if desc else "")
            deadline = nb - p.event_margin if isinstance(nb, datetime) else now
            out.append(Issue(iid, node, eid, why, deadline))
        bad = [
            name
            for name, k in (("system", "SystemStatus"), ("instance", "InstanceStatus"))
            if (st.get(k) or {}).get("Status") == "impaired"
        ]
        if bad:
            seen_impaired.add(iid)
            since = impaired_since.setdefault(iid, now)
            why = f"{REASON_PREFIX} {' and '.join(bad)} status check impaired on {iid} since " + (
                _fmt(since)
            )
            out.append(Issue(iid, node, "impaired", why, since + p.impaired_grace))
    for iid in [i for i in impaired_since if i not in seen_impaired]:
        del impaired_since[iid]
    return out


@dataclass(frozen=True)
class Step:
    issue: Issue
    action: str  # "drain" | "force"


def plan(
    found: list[Issue], nodes: dict[str, SlurmNode], now: datetime
) -> tuple[list[Step], list[tuple[Issue, str]]]:
    """(what to do, what was left alone and why): per node, the issue with the earliest
    deadline."""
    first: dict[str, Issue] = {}
    for i in sorted(found, key=lambda i: i.deadline):
        first.setdefault(i.node, i)
    steps: list[Step] = []
    left: list[tuple[Issue, str]] = []
    for node, issue in sorted(first.items()):
        sn = nodes.get(node)
        if sn is None or not sn.cloud:
            left.append((issue, f"{node} is not a Slurm cloud node"))
            continue
        if sn.states & GOING:
            left.append((issue, f"{node} is already {'+'.join(sorted(sn.states & GOING))}"))
            continue
        if now >= issue.deadline and sn.busy:
            steps.append(Step(issue, "force"))
        elif not {"DRAIN", "POWER_DOWN"} <= sn.states:
            steps.append(Step(issue, "drain"))
    return steps, left


def _drain(slurm: Scontrol, node: str, why: str) -> str:
    slurm.run("update", f"nodename={node}", "state=drain", f"reason={why}")
    slurm.run("update", f"nodename={node}", f"comment={why}")
    slurm.run("update", f"nodename={node}", "state=power_down")
    return "scontrol update state=drain, state=power_down"


def _force(slurm: Scontrol, node: str, why: str) -> str:
    slurm.run("update", f"nodename={node}", f"comment={why}; job requeued before the event")
    return slurm.power_down([node])


def _statuses(ec2: Any, ids: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(0, len(ids), STATUS_IDS_MAX):
        pages = ec2.get_paginator("describe_instance_status").paginate(
            InstanceIds=ids[i : i + STATUS_IDS_MAX]
        )
        for page in pages:
            out += page.get("InstanceStatuses", [])
    return out


def _burst_instances(ec2: Any, stack_key: str, stack: str, node_key: str) -> dict[str, str]:
    """Running instances of the stack that carry a Slurm node tag: instance -> node."""
    out: dict[str, str] = {}
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[
            {"Name": f"tag:{stack_key}", "Values": [stack]},
            {"Name": "tag-key", "Values": [node_key]},
            {"Name": "instance-state-name", "Values": ["running"]},
        ]
    )
    for page in pages:
        for res in page["Reservations"]:
            for inst in res["Instances"]:
                tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
                out[inst["InstanceId"]] = tags[node_key]
    return out


def _alert(step: Step) -> Alert:
    i = step.issue
    if step.action == "drain":
        title = f"Burst node {i.node} drained for EC2"
        what = (
            f"No new jobs on *{i.node}*; it is powered down (and its instance replaced) once "
            f"idle. A job still there at {_fmt(i.deadline)} is requeued."
        )
    else:
        title = f"Burst node {i.node} powered down before EC2 acts"
        what = f"The job on *{i.node}* was requeued; the instance is replaced."
    return Alert(
        f"burst-health:{step.action}:{i.instance_id}:{i.key}",
        f"burst-health:{i.node}",
        title,
        [f"Why: {i.why}.", what],
    )


def run(ctx: RuleContext) -> None:
    p: BurstHealthConfig = ctx.cfg.burst_health
    b = ctx.cfg.burst_reconcile
    assert b.stack is not None  # the config requires it when this rule is on
    now = ctx.clock.now()
    stored = ctx.state.get(IMPAIRED_KEY) or {}
    impaired_since = {k: parse_iso(v) for k, v in stored.items()}
    found: list[Issue] = []
    for region in ctx.cfg.regions:
        ec2 = ctx.aws.client("ec2", region)
        node_of = _burst_instances(ec2, b.stack_tag_key, b.stack, b.node_tag_key)
        if node_of:
            found += issues(_statuses(ec2, sorted(node_of)), node_of, now, p, impaired_since)
    ctx.state.put(IMPAIRED_KEY, {k: iso(v) for k, v in impaired_since.items()})
    if not found:
        return
    slurm = Scontrol(b.slurm_bin_dir, b.slurm_conf, b.slurm_timeout_s)
    steps, left = plan(found, slurm.nodes(), now)
    for issue, why in left:
        ctx.actuator.audit(
            "burst.health-left", node=issue.node, instance_id=issue.instance_id, issue=issue.why,
            why=why,
        )  # fmt: skip
    for step in steps:
        i = step.issue
        key = f"burst-health:{step.action}:{i.instance_id}:{i.key}"
        ctx.actuator.audit(f"burst.health-{step.action}", node=i.node, why=i.why)
        call = (
            (lambda i=i: _drain(slurm, i.node, i.why))
            if step.action == "drain"
            else (lambda i=i: _force(slurm, i.node, i.why))
        )
        try:
            done = ctx.actuator.execute(
                key, i.node, "slurm", f"health-{step.action}", reason=i.why, call=call
            )
        except SlurmError as exc:  # not an AWS failure: forget the intent, decide again later
            ctx.state.drop_intent(key)
            ctx.actuator.audit("action.failed", key=key, instance_id=i.node, error=str(exc))
            ctx.report.errors.append(f"burst-health: {exc}")
            continue
        if done:
            ctx.alert(_alert(step), timedelta(0))


RULE = Rule(
    name="burst-health",
    order=60,
    description=(
        "Drain burst nodes whose instance has an EC2 scheduled event or an impaired status "
        "check, power them down once idle so the instance is replaced, and requeue a job "
        "still there event_margin before the event."
    ),
    params=BurstHealthConfig,
    iam_actions=("ec2:DescribeInstanceStatus", "ec2:DescribeInstances"),
    section=lambda c: c.burst_health,
    enabled=lambda c: c.burst_health.enabled,
    run=run,
    example="burst_health: {enabled: true, event_margin: 30m, impaired_grace: 10m}",
    sections={"burst_health": BurstHealthConfig},
    validators=(_needs_burst_stack,),
)
