"""Rule ``spot-interruption``: EC2's two-minute Spot Instance Interruption Warning and its
Rebalance Recommendation for burst nodes, acted on through Slurm.

The stack's EventBridge rules send both events (documented shapes: tests/fixtures/aws/events/)
to an SQS queue (``spot_interruption.queue_url``). Each cycle the leader drains the queue:

* **Interruption warning**: the instance's Slurm node (tags ``coreburst-stack`` =
  ``burst_reconcile.stack`` and ``coreburst-slurm-node``) is drained at once (reason
  ``coreburst: spot interruption ...``: no new job lands there), its running jobs get
  ``signal`` (``scancel --signal=<sig>`` to ``signal_to``: the batch shell, everything, or the
  steps) so they can checkpoint, and each job's AdminComment says so. The node is watched.
* **Rebalance recommendation**: drained and notified; its jobs run on (signalled only with
  ``rebalance_signal``).
* **Watched nodes**, every cycle: an interrupted node's jobs are requeued once ``grace`` has
  passed since the signal, or at once when its instance is going or gone (the jobs recorded at
  the warning, in the same run: same restart count; plus, once the instance is gone, whatever
  still runs on the node). A rebalanced node's jobs are requeued only when its instance goes.
  Then the node is powered down (``state=power_down_force``: Slurm's SuspendProgram terminates
  whatever instance is left, so nothing is orphaned) and, once powered down, undrained if the
  drain is still ours, so it is back in the pool (``idle~``). A job is never requeued for a
  node that got no warning, nor after it left the node. Once the node is being powered down
  (drained since the warning; its instance and slurmd ended by the SuspendProgram) the
  requeued jobs' requeue hold (``Reason=BeginTime``, about two minutes: Slurm holds every
  requeued job, coreburst/burst/requeue_hold.py) is lifted, so they start on another node or a
  fresh instance within seconds; the old run's node cannot take them back.

Every Slurm write goes through the actuator's gate (dry-run, leader lease, kill switch, breaker,
per-cycle cap) and the audit log; ``spot_interruption.dry_run`` makes this rule report only.
A message is deleted only after its effects are stored (the node's watch record, the Slack
alert in the outbox, the event id as seen): a crash in between re-delivers it, and the event
id and the actions' intent keys keep anything from happening twice. A standby daemon does not
read the queue (it would hide the warning from the leader); nor does a leader whose gate is
shut (kill switch, breaker, cap): the messages wait for it.

One bad message never holds up another: each is handled on its own, and whatever goes wrong
with it (an error of Slurm or AWS, a bug) leaves it for the next cycle and goes on with the
next message. A message not settled by its ``MAX_TRIES``-th delivery (SQS's
``ApproximateReceiveCount``), and at once one that is no event of ours (not JSON, another
detail-type, text that is not valid Unicode such as a lone surrogate in its id), is set aside:
deleted, audited (``spot.set-aside``) and alerted once, with why.

A node-side watcher of the instance metadata (``spot/instance-action``) is not part of this:
EventBridge is the one source here.

    >>> parse_event('{"id": "e-1", "detail-type": "EC2 Instance Rebalance Recommendation", '
    ...             '"region": "us-east-1", "detail": {"instance-id": "i-0abc1234def567890"}}').kind
    'rebalance'
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import Field

from coreburst.burst import admin_comment, requeue_hold
from guardrails.adapters.slack import PRIORITY_ROUTINE, PRIORITY_URGENT, Alert, clip
from guardrails.adapters.slurm import Scontrol, SlurmError, SlurmNode, run_tool
from guardrails.configtypes import Between, StrictModel, format_duration
from guardrails.rules.base import Rule, RuleContext
from guardrails.timefmt import iso, parse_iso


# -- params: the ``spot_interruption`` section ------------------------------------------------
class SpotInterruptionConfig(StrictModel):
    """The ``spot-interruption`` rule (coreburst/burst/spot_interruption.py): EC2 Spot
    interruption warnings and rebalance recommendations for burst nodes (EventBridge -> SQS).
    Off unless switched on; it needs ``scontrol`` and ``scancel`` on this host and finds the
    node by ``burst_reconcile``'s stack, tag keys and Slurm settings."""

    enabled: bool = False
    """Run the spot-interruption rule."""
    queue_url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    """The SQS queue the stack's EventBridge rules deliver both events to (queue
    guardrails-spot-events: `pulumi stack output guardrailsSpotQueueUrl`); unset = nothing to
    read."""
    max_batches: int = Field(default=5, ge=1, le=100)  # of up to 10 messages each per cycle
    """SQS receives per cycle, of up to 10 messages each."""
    dry_run: bool = False
    """Report only (audit and Slack), even when the daemon acts (dry_run: false)."""
    signal: Literal["USR1", "USR2", "TERM", "INT", "HUP", "URG", "CONT", "XCPU"] | None = "USR1"
    """Sent to the jobs on a node whose instance gets the two-minute warning, so they can checkpoint
    (scancel --signal); null: none."""
    signal_to: Literal["batch", "full", "steps"] = "batch"
    """Which processes get it (scancel(1)): batch = the batch shell only (--batch; a script traps
    it), full = the shell, its children and every step (--full), steps = the steps only."""
    grace: Annotated[timedelta, Between("5s", "10m")] = timedelta(seconds=90)
    """After the signal, how long the jobs have before they are requeued (sooner when the instance
    goes). The warning comes two minutes before EC2 takes the instance."""
    rebalance_signal: bool = False
    """A rebalance recommendation drains the node and notifies; true: signal its jobs as well."""


def _needs_burst_stack(cfg: Any) -> None:
    if cfg.spot_interruption.enabled and not cfg.burst_reconcile.stack:
        raise ValueError(
            "spot_interruption.enabled needs burst_reconcile.stack (the stack whose burst "
            "instances carry the Slurm node tag); set it"
        )


# EventBridge ``detail-type`` of the two events (Amazon EC2 User Guide, "Spot Instance
# interruption notices" and "EC2 instance rebalance recommendations").
WARNING = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
KINDS = {WARNING: "interruption", REBALANCE: "rebalance"}
# Every drain this rule sets starts so; only such a drain is lifted by it.
REASON_PREFIX = "coreburst: spot "
LIVE = ("pending", "running")
WATCH_KEY = "spot-interruption:watch"
SEEN_KEY = "spot-interruption:seen"  # event id -> when it was settled
# How long a settled event id is remembered against re-delivery (the stack's queue keeps a
# message an hour).
SEEN_FOR = timedelta(days=1)
# Jobs of the warned run that may be requeued: still there, or ended by the signal or the
# node's loss (scontrol(1) "requeue": a running, suspended or finished batch job).
REQUEUE_STATES = frozenset({"RUNNING", "SUSPENDED", "FAILED", "NODE_FAIL"})
_INSTANCE_ID = re.compile(r"^i-[0-9a-f]{8,32}$")
_JOB_ID = re.compile(r"^\d+(?:_\d+)?$")
# How long a received message stays hidden: one it could not settle comes back next cycle.
VISIBILITY_S = 30
# How long a cycle waits for Slurm to finish requeueing a job before lifting its requeue hold
# (a job still being requeued then is tried again next cycle).
LIFT_WAIT_S = 5.0
# Deliveries of one message (its ApproximateReceiveCount) before it is set aside, deleted with
# one alert: three cycles are three minutes at the daemon's default interval, and a warning
# still unsettled then is past its two minutes.
MAX_TRIES = 3


@dataclass(frozen=True)
class Message:
    """One SQS message as received (not deleted): ``tries`` is its ApproximateReceiveCount."""

    receipt: str
    message_id: str
    body: str
    tries: int


@dataclass(frozen=True)
class SpotEvent:
    event_id: str
    kind: str  # interruption | rebalance
    instance_id: str
    region: str
    time: str  # the event's own ``time`` (ISO 8601, as EventBridge sends it)
    action: str  # interruption: terminate | stop | hibernate; rebalance: ""


def printable(text: str) -> str:
    """``text`` safe for the audit log, the state store and Slack: what is not valid Unicode
    (a lone surrogate, as a JSON ``\\udc80`` escape decodes) shown as its escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def parse_event(body: str) -> SpotEvent | str:
    r"""One SQS message body (the EventBridge event itself), or why it is not one of ours
    (one line, printable). An id holding a lone surrogate (JSON ``\udc80``) is not:

    >>> print(parse_event('{"id": "e\udc80", "region": "us-east-1", "detail-type": "EC2 '
    ...     'Instance Rebalance Recommendation", "detail": {"instance-id": "i-0abc1234def5678"}}'))
    id 'e\\udc80' is not valid Unicode text
    """
    try:
        doc = json.loads(body)
    except ValueError:
        return "not JSON"
    if not isinstance(doc, dict):
        return "not a JSON object"
    kind = KINDS.get(str(doc.get("detail-type", "")))
    if kind is None:
        got = printable(str(doc.get("detail-type"))[:80])
        return f"detail-type {got!r} is neither {WARNING!r} nor {REBALANCE!r}"
    detail = doc.get("detail")
    iid = detail.get("instance-id") if isinstance(detail, dict) else None
    if not isinstance(iid, str) or not _INSTANCE_ID.match(iid):
        return "detail.instance-id missing or not an instance id"
    event_id, region = doc.get("id"), doc.get("region")
    if not isinstance(event_id, str) or not event_id or not isinstance(region, str):
        return "id or region missing"
    action = ""
    if kind == "interruption":
        action = str(detail.get("instance-action", "")) if isinstance(detail, dict) else ""
    time = str(doc.get("time", ""))
    for name, text in (("id", event_id), ("region", region), ("time", time),
                       ("detail.instance-action", action)):  # fmt: skip
        if printable(text) != text:  # stored, audited and sent: it must be valid text
            return f"{name} {printable(text)[:80]!r} is not valid Unicode text"
    return SpotEvent(event_id, kind, iid, region, time, action)


def receive(sqs: Any, url: str, max_batches: int) -> list[Message]:
    """Up to ``max_batches`` x 10 messages, not deleted."""
    out: list[Message] = []
    for _ in range(max_batches):
        resp = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=0,
            VisibilityTimeout=VISIBILITY_S,
            MessageSystemAttributeNames=["ApproximateReceiveCount"],
        )
        msgs = resp.get("Messages", [])
        for m in msgs:
            count = str(m.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
            tries = int(count) if count.isdigit() else 1
            out.append(Message(m["ReceiptHandle"], m["MessageId"], m["Body"], tries))
        if len(msgs) < 10:
            break
    return out


def queue_region(url: str, default: str) -> str:
    """``https://sqs.<region>.amazonaws.com/...`` -> region; an emulator's URL -> ``default``."""
    return url.split(".")[1] if url.startswith("https://sqs.") else default


# -- Slurm ------------------------------------------------------------------------------------
@dataclass
class Slurm:
    """The few Slurm commands this rule runs (each one ``SlurmError`` line on failure)."""

    sc: Scontrol
    # job -> its AdminComment (None: unreadable), from this run's one read of every job
    # (``squeue --json``: coreburst.burst.admin_comment); kept current as notes are written
    comments: dict[str, str | None] = field(default_factory=dict)
    read_all: bool = False  # the read of every job was tried (once a run)
    read_ok: bool = False  # ... and answered: a job it does not list has no comment

    def tool(self, name: str, *args: str) -> str:
        return run_tool(
            name, *args, bin_dir=self.sc.bin_dir, conf=self.sc.conf, timeout_s=self.sc.timeout_s
        )

    def drain(self, node: str, reason: str) -> str:
        self.sc.run("update", f"nodename={node}", "state=drain", f"reason={reason}")
        return "scontrol update state=drain"

    def jobs_on(self, node: str) -> dict[str, int]:
        """Running or suspended jobs on ``node`` -> their restart count (squeue(1) ``-O``)."""
        out = self.tool(
            "squeue", "-h", "-w", node, "-t", "RUNNING,SUSPENDED", "-O", "JobID:40 ,RestartCnt:12 "
        )
        jobs: dict[str, int] = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and _JOB_ID.match(parts[0]) and parts[1].isdigit():
                jobs[parts[0]] = int(parts[1])
            elif parts:
                raise SlurmError(f"squeue -w {node}: unexpected line {line.strip()[:80]!r}")
        return jobs

    def signal(self, jobs: list[str], sig: str, to: str) -> str:
        flag = {"batch": ["--batch"], "full": ["--full"], "steps": []}[to]
        self.tool("scancel", f"--signal={sig}", *flag, *jobs)
        return f"scancel --signal={sig} {' '.join(flag)}".strip()

    def job(self, job: str) -> tuple[str, int] | None:
        """(JobState, Restarts) of ``job``; None when Slurm no longer knows it. Both are one
        token in ``scontrol -o show job N``; its AdminComment is not read here (only
        :meth:`note`'s JSON read is exact about where a comment ends)."""
        try:
            out = self.sc.run("-o", "show", "job", job)
        except SlurmError as exc:
            if "Invalid job id" in str(exc):
                return None
            raise
        state = re.search(r"\bJobState=(\S+)", out)
        restarts = re.search(r"\bRestarts=(\d+)", out)
        if not state or not restarts:
            raise SlurmError(f"scontrol show job {job}: no JobState or Restarts in the output")
        return state.group(1), int(restarts.group(1))

    def requeue(self, job: str) -> str:
        self.sc.run("requeue", job)
        return f"scontrol requeue {job}"

    def note(self, job: str, text: str) -> None:
        """``text`` as the job's coreburst note of why it was interrupted (AdminComment: only
        an administrator can set it; ``scontrol show job`` shows it), replacing the previous
        one and keeping the rest (a site's text, coreburst's other notes:
        coreburst.burst.admin_comment). The comment comes from this run's one read of every
        job (``squeue --json --states=all``); one that cannot be read is not overwritten."""
        if job not in self.comments and not self.read_all:
            self.read_all = True
            self.comments.update(admin_comment.comments(admin_comment.read_jobs(self.sc.squeue)))
            self.read_ok = True
        value = admin_comment.merged_for(self.comments, self.read_ok, job, "requeue", text)
        if value is None:
            raise SlurmError(f"job {job}: AdminComment unreadable or full; not noted")
        self.sc.run("update", f"jobid={job}", f"AdminComment={value}")
        self.comments[job] = value

    def lift_hold(self, job: str) -> str:
        requeue_hold.lift(self.sc.run, job)
        return f"scontrol update jobid={job} StartTime=now"

    def power_down(self, node: str, down_reason: str | None = None) -> str:
        """Forced power-down; with ``down_reason`` (the instance is gone) the node is set DOWN
        first: slurmctld then ends at once what the lost slurmd can no longer end (a requeued
        job's old run stays COMPLETING until the node is DOWN, which 22.05 does by itself only
        after SlurmdTimeout), and the forced power-down still brings it back ``idle~``."""
        if down_reason is not None:
            self.sc.run("update", f"nodename={node}", "state=down", f"reason={down_reason}")
        self.sc.run("update", f"nodename={node}", "state=power_down_force")
        if down_reason is not None:
            return "scontrol update state=down, state=power_down_force"
        return "scontrol update state=power_down_force"

    def undrain(self, node: str) -> str:
        self.sc.run("update", f"nodename={node}", "state=resume")
        return "scontrol update state=resume"


# -- acting through the gate -------------------------------------------------------------------
def _act(
    ctx: RuleContext, key: str, target: str, kind: str, *, reason: str, call: Callable[[], str]
) -> str:
    """``done``, ``recorded`` (done before: the intent key was stored), ``skipped`` (the gate
    or ``spot_interruption.dry_run``) or ``failed`` (audited, in the report)."""
    if ctx.cfg.spot_interruption.dry_run:
        ctx.actuator.audit(
            "action.skipped", key=key, instance_id=target, kind=kind, reason=reason,
            because="spot_interruption.dry_run",
        )  # fmt: skip
        return "skipped"
    if ctx.actuator.gate() is not None:
        ctx.actuator.execute(key, target, "slurm", kind, reason=reason, call=call)  # audits why
        return "skipped"
    try:
        if ctx.actuator.execute(key, target, "slurm", kind, reason=reason, call=call):
            return "done"
    except SlurmError as exc:
        ctx.state.drop_intent(key)
        ctx.actuator.audit("action.failed", key=key, instance_id=target, error=str(exc))
        ctx.report.errors.append(f"spot-interruption: {exc}")
        return "failed"
    row = ctx.state.action(key)
    return "recorded" if row is not None else "failed"


def _alert(key: str, node: str, title: str, lines: list[str], urgent: bool) -> Alert:
    return Alert(
        f"spot:{clip(key, 200)}",
        f"spot:{clip(node, 100)}",
        clip(title, 140),
        [clip(x, 1000) for x in lines],
        severity="critical" if urgent else "warning",
        priority=PRIORITY_URGENT if urgent else PRIORITY_ROUTINE,
    )


def _jobs_text(jobs: list[str]) -> str:
    more = f" and {len(jobs) - 50} more" if len(jobs) > 50 else ""
    return (", ".join(jobs[:50]) + more) or "none"


# -- the queue -------------------------------------------------------------------------------
def _lookup(ctx: RuleContext, ev: SpotEvent) -> tuple[str | None, str]:
    """(the instance's Slurm node or None, its state or why it is not one of ours)."""
    b = ctx.cfg.burst_reconcile
    ec2 = ctx.aws.client("ec2", ev.region)
    try:
        resp = ec2.describe_instances(InstanceIds=[ev.instance_id])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "InvalidInstanceID.NotFound":
            return None, "EC2 does not know the instance"
        raise
    for res in resp.get("Reservations", []):
        for inst in res.get("Instances", []):
            tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
            if tags.get(b.stack_tag_key) != b.stack:
                return None, f"not an instance of stack {b.stack}"
            node = tags.get(b.node_tag_key)
            if not node:
                return None, f"no {b.node_tag_key} tag"
            return node, str(inst["State"]["Name"])
    return None, "EC2 does not know the instance"


def _handle(
    ctx: RuleContext,
    slurm: Slurm,
    nodes: dict[str, SlurmNode],
    ev: SpotEvent,
    watch: dict[str, Any],
) -> bool:
    """Act on one event; True when its message may go (everything it calls for is stored)."""
    p: SpotInterruptionConfig = ctx.cfg.spot_interruption
    act = ctx.actuator
    if ev.region not in ctx.cfg.regions:
        act.audit("spot.ignored", event_id=ev.event_id, instance_id=ev.instance_id,
                  why=f"region {ev.region} is not in regions")  # fmt: skip
        return True
    node, state = _lookup(ctx, ev)
    if node is None:
        act.audit("spot.ignored", event_id=ev.event_id, instance_id=ev.instance_id, why=state)
        return True
    sn = nodes.get(node)
    if sn is None or not sn.cloud:
        act.audit("spot.ignored", event_id=ev.event_id, instance_id=ev.instance_id, node=node,
                  why=f"Slurm has no cloud node {node}")  # fmt: skip
        return True
    if state not in LIVE and (sn.powered_down or _live_for(ctx, ev.region, node)):
        act.audit("spot.ignored", event_id=ev.event_id, instance_id=ev.instance_id, node=node,
                  why=f"instance {state}; {node} is powered down or has another")  # fmt: skip
        return True
    prior = watch.get(ev.instance_id)
    if prior is not None and (prior["kind"] == "interruption" or ev.kind == "rebalance"):
        act.audit("spot.already-watched", event_id=ev.event_id, instance_id=ev.instance_id,
                  node=node, kind=prior["kind"])  # fmt: skip
        return True
    now = ctx.clock.now()
    interrupt = ev.kind == "interruption"
    what = (
        f"spot interruption warning ({ev.action or 'terminate'} {_two_minutes_after(ev.time)})"
        if interrupt
        else "spot rebalance recommendation"
    )
    reason = f"{REASON_PREFIX}{'interruption' if interrupt else 'rebalance'} {ev.instance_id}"
    act.audit("spot.event", event_id=ev.event_id, kind=ev.kind, instance_id=ev.instance_id,
              node=node, instance_state=state, action=ev.action)  # fmt: skip
    rec: dict[str, Any] = {
        "kind": ev.kind,
        "node": node,
        "region": ev.region,
        "event_id": ev.event_id,
        "since": iso(now),
        "signalled_at": None,
        "signal": None,
        "jobs": {},
        # The node's boot: a new instance under it boots it again, and then the jobs on it
        # are not the warned instance's.
        "boot": sn.boot_time,
    }
    drained = "done"
    if "DRAIN" not in sn.states or not sn.reason.startswith(reason):
        drained = _act(
            ctx, f"spot-drain:{ev.event_id}", node, "drain",
            reason=f"{what} for {ev.instance_id}",
            call=lambda: slurm.drain(node, reason),
        )  # fmt: skip
    if drained == "failed" or (drained == "skipped" and not _dry(ctx)):
        return False  # the message comes back next cycle
    jobs = slurm.jobs_on(node) if state in LIVE else {}
    rec["jobs"] = jobs
    sig = p.signal if (interrupt or p.rebalance_signal) else None
    if sig and jobs and state in LIVE:
        ids = sorted(jobs, key=lambda j: (len(j), j))
        done = _act(
            ctx, f"spot-signal:{ev.event_id}", node, "signal",
            reason=f"{what}: SIG{sig} to {p.signal_to} of job(s) {', '.join(ids)} to checkpoint",
            call=lambda: slurm.signal(ids, sig, p.signal_to),
        )  # fmt: skip
        if done == "failed" or (done == "skipped" and not _dry(ctx)):
            return False  # retried next cycle: the drain is recorded, the signal is not
        if done in ("done", "recorded"):
            rec["signalled_at"], rec["signal"] = iso(now), sig
    requeue_at = (
        parse_iso(rec["signalled_at"]) + p.grace if rec["signalled_at"] else now
    ) if interrupt else None  # fmt: skip
    note = (
        f"coreburst: {what} for {ev.instance_id} on {node} {now:%Y-%m-%d %H:%M:%SZ}; "
        + (f"sent SIG{sig} ({p.signal_to}); " if rec["signalled_at"] else "")
        + (f"requeue by {requeue_at:%H:%M:%SZ}" if requeue_at else "node drained, job runs on")
    )
    if not _dry(ctx):
        for job in jobs:
            try:
                slurm.note(job, note)
            except SlurmError as exc:  # the job may have ended meanwhile
                act.audit("spot.note-failed", job=job, error=str(exc))
        watch[ev.instance_id] = rec
        ctx.state.put(WATCH_KEY, watch)
    verb = "would drain" if _dry(ctx) else "drained"
    lines = [
        f"Why: EC2 {what} for instance {ev.instance_id}.",
        f"Node *{clip(node, 100)}* {verb} (no new jobs)"
        + (f"; its jobs were sent SIG{sig} to checkpoint." if rec["signalled_at"] else "."),
        f"Jobs on it: {_jobs_text(sorted(jobs))}.",
        (
            f"They are requeued by {requeue_at:%H:%M:%SZ}, or when the instance goes."
            if requeue_at
            else "They run on; the node leaves the pool when the instance goes."
        ),
    ]
    if _dry(ctx):
        lines.append("Dry-run: nothing was done.")
    title = f"Spot {'interruption' if interrupt else 'rebalance'}: burst node {node}"
    ctx.alert(_alert(ev.event_id, node, title, lines, interrupt), timedelta(0))
    return True


def _two_minutes_after(when: str) -> str:
    """When EC2 acts: two minutes after the warning (the event's ``time``)."""
    try:
        at = datetime.fromisoformat(when.replace("Z", "+00:00"))
    except ValueError:
        return "in two minutes"
    return f"at {at + timedelta(minutes=2):%H:%M:%SZ}"


def _dry(ctx: RuleContext) -> bool:
    return ctx.cfg.dry_run or ctx.cfg.spot_interruption.dry_run


def _delete(ctx: RuleContext, sqs: Any, url: str, msg: Message) -> None:
    try:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=msg.receipt)
    except (ClientError, BotoCoreError) as exc:  # it comes back; its event id is seen
        ctx.actuator.audit("spot.delete-failed", message_id=msg.message_id, error=str(exc))
        ctx.report.errors.append(f"spot-interruption: message {msg.message_id}: {exc}")


def _set_aside(ctx: RuleContext, sqs: Any, url: str, msg: Message, *, what: str, why: str) -> None:
    """Delete a message that cannot be settled, with one alert saying what it was and why."""
    ctx.actuator.audit("spot.set-aside", message_id=msg.message_id, tries=msg.tries, what=what,
                       why=why)  # fmt: skip
    ctx.report.errors.append(f"spot-interruption: message {msg.message_id} set aside: {why}")
    ctx.alert(
        Alert(
            f"spot:set-aside:{clip(msg.message_id, 200)}",
            "spot:set-aside",
            "Spot queue: a message set aside",
            [
                f"Message {clip(msg.message_id, 200)} on the spot-interruption queue ({what}) "
                f"was deleted after {msg.tries} deliver{'y' if msg.tries == 1 else 'ies'}, "
                "unsettled: nothing more is done for it.",
                f"Why: {clip(why, 800)}",
                "The audit log has it as spot.set-aside; a warning in it is for a burst node "
                "to check by hand (scontrol show node).",
            ],
            severity="warning",
            priority=PRIORITY_URGENT,
        ),
        timedelta(0),
    )
    _delete(ctx, sqs, url, msg)


def _take(
    ctx: RuleContext,
    slurm: Slurm,
    nodes: dict[str, dict[str, SlurmNode]],
    ev: SpotEvent,
    watch: dict[str, Any],
) -> bool:
    """Handle one event; True when its message may go. ``nodes`` caches Slurm's nodes."""
    seen: dict[str, str] = dict(ctx.state.get(SEEN_KEY) or {})
    if ev.event_id in seen:
        ctx.actuator.audit("spot.duplicate", event_id=ev.event_id)
        return True
    if "all" not in nodes:
        nodes["all"] = slurm.sc.nodes()
    if not _handle(ctx, slurm, nodes["all"], ev, watch):
        return False
    now = ctx.clock.now()
    seen = {k: v for k, v in seen.items() if now - parse_iso(v) < SEEN_FOR}
    seen[ev.event_id] = iso(now)
    ctx.state.put(SEEN_KEY, seen)
    return True


def _restore(ctx: RuleContext, watch: dict[str, Any], kept: dict[str, Any]) -> None:
    """After a message failed: ``watch`` as stored (else as it was before the message), so
    nothing it half-recorded is written with a later message's."""
    try:
        stored = ctx.state.get(WATCH_KEY)
    except Exception:  # the store itself failing: what this cycle had before the message
        stored = kept
    watch.clear()
    watch.update(stored or {})


def _drain_queue(ctx: RuleContext, slurm: Slurm, watch: dict[str, Any]) -> None:
    p: SpotInterruptionConfig = ctx.cfg.spot_interruption
    url = p.queue_url
    if not url:
        return
    sqs = ctx.aws.client("sqs", queue_region(url, ctx.cfg.regions[0]))
    nodes: dict[str, dict[str, SlurmNode]] = {}
    for msg in receive(sqs, url, p.max_batches):
        ev = parse_event(msg.body)
        if isinstance(ev, str):  # never one of ours: no second try
            ctx.actuator.audit("spot.unreadable", message_id=msg.message_id, why=ev)
            _set_aside(ctx, sqs, url, msg, what="no spot event", why=ev)
            continue
        kept = copy.deepcopy(watch)
        try:
            if _take(ctx, slurm, nodes, ev, watch):
                _delete(ctx, sqs, url, msg)
                continue
            why = "not settled: an action failed or the daemon's gate held it back"
        except (SlurmError, ClientError, BotoCoreError) as exc:
            why = printable(str(exc))
        except Exception as exc:  # a bug must not hold up the messages behind this one
            why = printable(f"{type(exc).__name__}: {exc}")
            ctx.log.error("spot.failed", event_id=printable(ev.event_id), error=why)
        _restore(ctx, watch, kept)
        what = f"spot {ev.kind} of {ev.instance_id}, event {ev.event_id}"
        if msg.tries >= MAX_TRIES:
            _set_aside(ctx, sqs, url, msg, what=what, why=why)
            continue
        ctx.actuator.audit("spot.retry", event_id=ev.event_id, message_id=msg.message_id,
                           tries=msg.tries, error=why)  # fmt: skip
        ctx.report.errors.append(
            f"spot-interruption: event {ev.event_id} (try {msg.tries} of {MAX_TRIES}): {why}"
        )


# -- watched nodes ---------------------------------------------------------------------------
def _live_for(ctx: RuleContext, region: str, node: str) -> bool:
    """Whether a pending or running instance of the stack carries ``node``'s tag."""
    b = ctx.cfg.burst_reconcile
    resp = ctx.aws.client("ec2", region).describe_instances(
        Filters=[
            {"Name": f"tag:{b.stack_tag_key}", "Values": [str(b.stack)]},
            {"Name": f"tag:{b.node_tag_key}", "Values": [node]},
            {"Name": "instance-state-name", "Values": list(LIVE)},
        ]
    )
    return any(r.get("Instances") for r in resp.get("Reservations", []))


def _instance_states(ctx: RuleContext, watch: dict[str, Any]) -> dict[str, str]:
    """instance -> state; an instance EC2 no longer lists is ``gone``."""
    out: dict[str, str] = {}
    by_region: dict[str, list[str]] = {}
    for iid, rec in watch.items():
        by_region.setdefault(rec["region"], []).append(iid)
    for region, ids in by_region.items():
        ec2 = ctx.aws.client("ec2", region)
        for iid in ids:  # one by one: a NotFound for one must not hide the others
            try:
                resp = ec2.describe_instances(InstanceIds=[iid])
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "InvalidInstanceID.NotFound":
                    raise
                out[iid] = "gone"
                continue
            insts = [i for r in resp.get("Reservations", []) for i in r.get("Instances", [])]
            out[iid] = str(insts[0]["State"]["Name"]) if insts else "gone"
    return out


def _requeue(
    ctx: RuleContext, slurm: Slurm, iid: str, rec: dict[str, Any], gone: bool
) -> tuple[dict[str, int], bool]:
    """Requeue the node's interrupted jobs: (requeued job -> its restart count before the
    requeue, whether all were settled).
    ``gone``: the warned instance is gone and the node has not booted since, so whatever
    still runs there has lost it too."""
    node = rec["node"]
    candidates: dict[str, int] = dict(rec["jobs"]) if rec["kind"] == "interruption" else {}
    if gone:
        for job, restarts in slurm.jobs_on(node).items():
            candidates.setdefault(job, restarts)
    requeued: dict[str, int] = {}
    settled = True
    grace = format_duration(ctx.cfg.spot_interruption.grace)
    why = "its instance is gone" if gone else f"{grace} after the signal"
    for job, restarts in sorted(candidates.items()):
        now_state = slurm.job(job)
        if now_state is None:
            continue
        state, now_restarts = now_state
        if now_restarts != restarts or state not in REQUEUE_STATES:
            ctx.actuator.audit("spot.job-left", job=job, node=node, state=state,
                               restarts=now_restarts)  # fmt: skip
            continue
        done = _act(
            ctx, f"spot-requeue:{iid}:{job}:{restarts}", node, "requeue",
            reason=f"spot {rec['kind']} of {iid}: job {job} requeued ({why})",
            call=lambda job=job: slurm.requeue(job),  # type: ignore[misc]
        )  # fmt: skip
        if done == "done":
            requeued[job] = restarts
            try:
                slurm.note(
                    job,
                    f"coreburst: requeued {ctx.clock.now():%Y-%m-%d %H:%M:%SZ} after the spot "
                    f"{rec['kind']} of {iid} on {node} ({why})",
                )
            except SlurmError as exc:
                ctx.actuator.audit("spot.note-failed", job=job, error=str(exc))
        elif done in ("skipped", "failed"):
            settled = False
    return requeued, settled


def _lift_holds(
    ctx: RuleContext, slurm: Slurm, iid: str, rec: dict[str, Any], watch: dict[str, Any]
) -> None:
    """Start the jobs requeued off the node again now rather than after Slurm's requeue hold
    (coreburst/burst/requeue_hold.py): called once the node is being powered down (drained
    since the warning, its instance and slurmd ended by the SuspendProgram), so the jobs go to
    another node or a fresh instance, never back to the old run's slurmd. A job whose requeue
    has not finished is tried again next cycle; one expedited (Slurm 25.11+) has no hold."""
    before: dict[str, int] = rec.get("requeued", {})  # job -> restarts before the requeue
    lifted: list[str] = rec.get("lifted", [])
    todo = [j for j in before if j not in lifted]
    if not todo or rec.get("holds_settled"):
        return
    clock = ctx.clock
    found = requeue_hold.settle(
        slurm.sc.squeue, todo, wait_s=LIFT_WAIT_S, restarts_before=before, sleep=clock.sleep,
        clock=lambda: clock.now().timestamp(), now=lambda: clock.now().timestamp(),
    )  # fmt: skip
    settled = not found.waiting
    # a job Slurm requeued without a hold (22.05, its node lost under it) is "eligible" but
    # waits for the scheduler's next periodic pass (up to a minute on 22.05): the same update
    # makes slurmctld schedule at once (any job update queues the scheduler)
    eligible = [j for j, st in found.other.items() if st == "eligible"]
    for job in [*found.held, *eligible]:
        done = _act(
            ctx, f"spot-lift:{iid}:{job}:{before[job]}", rec["node"], "lift-hold",
            reason=f"spot {rec['kind']} of {iid}: job {job} requeued off {rec['node']}, which "
            "is powered down: eligible now (its requeue hold lifted), so it starts elsewhere",
            call=lambda job=job: slurm.lift_hold(job),  # type: ignore[misc]
        )  # fmt: skip
        if done in ("done", "recorded"):
            lifted.append(job)
        else:
            settled = False
    rec["lifted"] = lifted
    rec["holds_settled"] = settled
    ctx.state.put(WATCH_KEY, watch)


def _settle(ctx: RuleContext, slurm: Slurm, watch: dict[str, Any]) -> None:
    """Requeue what is due and bring the nodes back to the pool; drop finished records."""
    if not watch:
        return
    p: SpotInterruptionConfig = ctx.cfg.spot_interruption
    now = ctx.clock.now()
    states = _instance_states(ctx, watch)
    nodes = slurm.sc.nodes()
    for iid, rec in sorted(watch.items()):
        node = rec["node"]
        gone = states.get(iid, "gone") not in LIVE
        sn = nodes.get(node)
        if (
            sn is not None
            and not rec.get("powered_down")
            and not sn.powered_down
            and sn.boot_time != rec.get("boot", sn.boot_time)
        ):  # booted again: another instance, other jobs; nothing here is the warning's
            ctx.actuator.audit("spot.done", instance_id=iid, node=node,
                               why=f"node {node} booted again ({sn.boot_time})")  # fmt: skip
            del watch[iid]
            ctx.state.put(WATCH_KEY, watch)
            continue
        if rec["kind"] == "interruption":
            start = parse_iso(rec["signalled_at"]) + p.grace if rec["signalled_at"] else now
            due = gone or now >= start
        else:
            due = gone or (sn is not None and sn.powered_down)
        if not due:
            continue
        if not rec.get("requeued_at"):
            try:
                requeued, settled = _requeue(ctx, slurm, iid, rec, gone)
            except SlurmError as exc:
                ctx.report.errors.append(f"spot-interruption: {node}: {exc}")
                continue
            if requeued:
                rec["requeued"] = {**rec.get("requeued", {}), **requeued}
                ctx.state.put(WATCH_KEY, watch)
                ctx.alert(
                    _alert(
                        f"{rec['event_id']}:requeued", node,
                        f"Spot {rec['kind']}: jobs on {node} requeued",
                        [
                            f"Instance {iid} " + ("is gone." if gone else "is being interrupted."),
                            f"Requeued: {_jobs_text(list(requeued))} (each job's AdminComment "
                            "says why).",
                        ],
                        urgent=False,
                    ),
                    timedelta(0),
                )  # fmt: skip
            if not settled:
                continue
            rec["requeued_at"] = iso(now)
            ctx.state.put(WATCH_KEY, watch)
        if sn is None:
            ctx.actuator.audit("spot.done", instance_id=iid, node=node, why="Slurm has no node")
            del watch[iid]
            ctx.state.put(WATCH_KEY, watch)
            continue
        if not sn.powered_down:
            done = _act(
                ctx, f"spot-power-down:{iid}", node, "power-down",
                reason=f"spot {rec['kind']} of {iid}: node powered down, its instance ended",
                call=lambda node=node, why=(  # type: ignore[misc]
                    f"{REASON_PREFIX}{rec['kind']} {iid}: instance gone" if gone else None
                ): slurm.power_down(node, why),
            )  # fmt: skip
            if done in ("done", "recorded"):
                rec["powered_down"] = True
                ctx.state.put(WATCH_KEY, watch)
                _lift_holds(ctx, slurm, iid, rec, watch)
            continue
        _lift_holds(ctx, slurm, iid, rec, watch)
        if sn.states & {"POWERING_DOWN", "POWER_DOWN"}:
            continue  # next cycle, once Slurm has it powered down
        if "DRAIN" in sn.states and sn.reason.startswith(REASON_PREFIX) and iid in sn.reason:
            _act(
                ctx, f"spot-undrain:{iid}", node, "return-to-pool",
                reason=f"spot {rec['kind']} of {iid} is over: node back to the pool",
                call=lambda node=node: slurm.undrain(node),  # type: ignore[misc]
            )  # fmt: skip
            continue
        ctx.actuator.audit("spot.returned", instance_id=iid, node=node, kind=rec["kind"])
        ctx.alert(
            _alert(
                f"{rec['event_id']}:returned", node, f"Burst node {node} back in the pool",
                [f"The spot {rec['kind']} of {iid} is over: the node is powered down and "
                 "schedulable again (a new instance launches when a job needs it)."],
                urgent=False,
            ),
            timedelta(0),
        )  # fmt: skip
        del watch[iid]
        ctx.state.put(WATCH_KEY, watch)


def run(ctx: RuleContext) -> None:
    if not ctx.actuator.leader:
        return  # a standby leaves the queue to the leader
    why = ctx.actuator.gate()
    if why is not None and why != "dry-run":
        ctx.actuator.audit("spot.deferred", because=why)
        return
    b = ctx.cfg.burst_reconcile
    slurm = Slurm(Scontrol(b.slurm_bin_dir, b.slurm_conf, b.slurm_timeout_s))
    watch: dict[str, Any] = dict(ctx.state.get(WATCH_KEY) or {})
    _drain_queue(ctx, slurm, watch)
    if not _dry(ctx):
        _settle(ctx, slurm, watch)


RULE = Rule(
    name="spot-interruption",
    order=50,
    description=(
        "On EC2's spot interruption warning (EventBridge -> SQS) drain the burst node, signal "
        "its jobs to checkpoint and requeue them after a grace or when the instance goes; on a "
        "rebalance recommendation drain and notify; the node then returns to the pool."
    ),
    params=SpotInterruptionConfig,
    # What ``receive``, ``_drain_queue``, ``_lookup`` and ``_instance_states`` call.
    iam_actions=("ec2:DescribeInstances", "sqs:DeleteMessage", "sqs:ReceiveMessage"),
    section=lambda c: c.spot_interruption,
    enabled=lambda c: c.spot_interruption.enabled and c.spot_interruption.queue_url is not None,
    run=run,
    example=(
        "spot_interruption: {enabled: true, queue_url: "
        "https://sqs.us-east-1.amazonaws.com/123456789012/spot-events, signal: USR1, "
        "signal_to: batch, grace: 90s}"
    ),
    sections={"spot_interruption": SpotInterruptionConfig},
    validators=(_needs_burst_stack,),
)
