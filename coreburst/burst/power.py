"""Slurm's power-saving programs for the burst nodes: resume, suspend, resume-fail.

slurmctld runs them as SlurmUser with one hostlist argument and discards their output, so
everything goes to a log file and a JSON-lines audit log. They are thin and idempotent: Slurm
may call resume again for a node after a controller restart, and a node that already has a
live instance (found by its tag) gets no second one. This module is their orchestration; the
parts are their own modules:

* **resume** reads ``SLURM_RESUME_FILE`` (JSON, job -> nodes), launches each multi-node job's
  nodes all-or-nothing and the rest best-effort with EC2 CreateFleet (``instant``) on the
  cluster's launch template, in calls of at most 500 instances (our batch size, not an AWS
  limit); tags every instance with its node
  name; tells Slurm each node's address (coreburst/burst/launch.py). Nodes that get no
  instance are set DOWN with the EC2 error code as the reason and powered down at once, so
  their jobs requeue now rather than after ResumeTimeout (coreburst/burst/slurm_side.py).
* **spend gate** (``coreburst:burst.spendGate``, coreburst/burst/gate.py): before launching,
  the projected cost (nodes x $/h x each job's time limit) is checked against what the
  guardrails' spend scope has left today and this month (scope, limits and state from the
  guardrails config: :func:`coreburst.burst.config.gate_limits`). Over it (or with no fresh
  spend snapshot), nothing launches; the nodes go into a maintenance reservation
  ``coreburst-spend-...`` (so Slurm stops asking for them) and are set DOWN (the jobs requeue
  now) and powered down. The guardrails daemon's burst-reconcile rule deletes those
  reservations once the scope has room again (under its lease, kill switch and audit); the
  next resume checks again.
* **suspend** terminates the nodes' tagged instances.
* **resume-fail** (a node did not register within ResumeTimeout) terminates them too.

    $ SLURM_RESUME_FILE=/tmp/r.json coreburst burst resume p5-[1-2] --stack prod
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from coreburst.burst.claims import Batch, Claims
from coreburst.burst.config import BurstStack
from coreburst.burst.ec2io import Deadline
from coreburst.burst.gate import Gate
from coreburst.burst.hostlist import HostlistError, compress, expand
from coreburst.burst.launch import (
    HELD_STATES,
    LIVE_STATES,
    Launcher,
    ResumeResult,
    error_code,
    launch_groups,
)
from coreburst.burst.slurm_side import Choices, Slurm, SlurmSide
from coreburst.burst.slurmconf import NodeSet, node_set_of

if TYPE_CHECKING:
    from guardrails.stores.base import StateStore

log = logging.getLogger("coreburst.burst.power")


class PowerInputError(ValueError):
    """Bad input to a power program (hostlist, resume file, unknown node); one line."""


@dataclass
class Audit:
    """Append-only JSON lines (one object per event, with a UTC timestamp)."""

    path: Path
    clock: Callable[[], float] = time.time

    def __call__(self, event: str, **fields: Any) -> None:
        rec = {"ts": round(self.clock(), 3), "event": event, **fields}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(rec, sort_keys=True) + "\n")


def stack_nodes(hostlist: str, nodes_of: dict[str, NodeSet]) -> list[str]:
    try:
        names = expand(hostlist)
    except HostlistError as exc:
        raise PowerInputError(f"hostlist: {exc}") from None
    unknown = [n for n in names if n not in nodes_of]
    if unknown:
        known = compress(nodes_of) or "none"
        raise PowerInputError(
            f"{compress(unknown)} not burst nodes of this stack (its nodes: {known}); check --stack"
        )
    return names


def read_resume_file(path: str) -> list[tuple[str, list[str]]]:
    """(job id, node names) per job from Slurm's SLURM_RESUME_FILE.

    slurm.conf(5), ResumeProgram: ``{"all_nodes": "...", "jobs": [{"job_id": N,
    "nodes": "..."}]}`` in 22.05; 23.02 renamed the keys ``all_nodes_resume`` and
    ``nodes_resume`` / ``nodes_alloc``. Both are read.
    """
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise PowerInputError(f"SLURM_RESUME_FILE {path}: cannot read ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PowerInputError(f"SLURM_RESUME_FILE {path}: not JSON ({exc})") from None
    jobs = doc.get("jobs", []) if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        raise PowerInputError(f"SLURM_RESUME_FILE {path}: expected {{'jobs': [...]}}")
    out = []
    for i, job in enumerate(jobs):
        if not isinstance(job, dict):
            raise PowerInputError(f"SLURM_RESUME_FILE {path}: jobs[{i}] is not an object")
        nodes = job.get("nodes_alloc") or job.get("nodes") or job.get("nodes_resume")
        job_id = job.get("job_id")
        if not isinstance(nodes, str) or not isinstance(job_id, int | str):
            raise PowerInputError(
                f"SLURM_RESUME_FILE {path}: jobs[{i}] needs job_id and nodes (a hostlist)"
            )
        try:
            out.append((str(job_id), expand(nodes)))
        except HostlistError as exc:
            raise PowerInputError(f"SLURM_RESUME_FILE {path}: jobs[{i}].nodes: {exc}") from None
    return out


class Power:
    """The three programs over injected clients: ``ec2`` (boto3), ``slurm`` (scontrol);
    ``tag_client`` makes the EC2 client the node tags are written with (default ``ec2``).
    EC2 is the launcher's (coreburst/burst/launch.py), the money the gate's
    (coreburst/burst/gate.py), what Slurm reads and is told the Slurm side's
    (coreburst/burst/slurm_side.py)."""

    def __init__(
        self,
        stack: BurstStack,
        ec2: Any,
        slurm: Slurm,
        audit: Audit,
        *,
        spend: StateStore | None = None,
        claims: Claims | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        tag_client: Callable[[], Any] | None = None,
    ) -> None:
        self.stack = stack
        self.ec2 = ec2
        self.slurm = slurm
        self.audit = audit
        self._claims = claims
        self._unsure: set[str] = set()
        self.now = now
        self.nodes_of = node_set_of(stack)
        self.node_tag = stack.settings.node_tag_key
        self.side = SlurmSide(
            stack, slurm, audit, now=now, nodes_of=self.nodes_of,
            claims=lambda: self.claims, choices=self.choices, release=self.release,
        )  # fmt: skip
        self.launcher = Launcher(
            stack, ec2, slurm, audit, nodes_of=self.nodes_of, claims=lambda: self.claims,
            fail_nodes=self.side.fail_nodes, owner_tags=self.side.run_owner_tags,
            tag_client=tag_client,
        )  # fmt: skip
        self.side.messages = self.launcher.messages  # EC2's words, quoted where a pool is held
        # The AWS deadline the client was given (coreburst/burst/ec2io.py), when it was.
        self.deadline: Deadline | None = None
        # The spend gate; its guardrails state (``spend``) is opened on first use when not given.
        self.gate = Gate(
            stack, slurm, audit, now=now, nodes_of=self.nodes_of, side=self.side, store=spend
        )

    @property
    def claims(self) -> Claims:
        """Which run owns which node (opened on first use)."""
        if self._claims is None:
            s = self.stack.settings
            self._claims = Claims(s.claims_file or s.audit_log.with_name("burst-claims.sqlite"))
        return self._claims

    # -- the launcher's and the Slurm side's calls, as the resume program's own ----------------
    def choices(self, ns: NodeSet) -> Choices:
        return self.launcher.choices(ns)

    def subnets(self) -> dict[str, str]:
        return self.launcher.subnets()

    def fleet_request(
        self,
        ns: NodeSet,
        template_id: str,
        count: int,
        strict: bool,
        token: str | None = None,
        *,
        choices: list[tuple[str, str]] | None = None,
    ) -> dict[str, Any]:
        return self.launcher.fleet_request(ns, template_id, count, strict, token, choices=choices)

    def _launch_batch(
        self,
        ns: NodeSet,
        nodes: list[str],
        strict: bool,
        result: ResumeResult,
        token: str | None = None,
        *,
        choices: list[tuple[str, str]] | None = None,
    ) -> tuple[dict[str, str], str | None]:
        return self.launcher.launch_batch(ns, nodes, strict, result, token, choices=choices)

    def tell_addresses(self, node_ids: dict[str, str]) -> None:
        self.launcher.tell_addresses(node_ids)

    def fail_nodes(
        self, failed: dict[str, str], jobs: list[tuple[str, list[str]]] | None = None
    ) -> None:
        self.side.fail_nodes(failed, jobs)

    def release(self, nodes: list[str], *, keep_unsure: bool = False) -> None:
        """Drop the nodes' claims and spend commitments (never stops a terminate or a
        power-down: a failure here is logged). ``keep_unsure``: claims of this run whose
        CreateFleet got no clear answer stay, with their token, for the next run."""
        unsure = self._unsure if keep_unsure else set()
        try:
            self.claims.release([n for n in nodes if n not in unsure])
        except Exception as exc:
            log.error("cannot release the claims of %s: %s", compress(nodes), exc)
        self.gate.release(nodes)

    # -- reconciler heartbeat -------------------------------------------------------------
    def heartbeat_stale(self) -> str | None:
        """Why the reconciler's heartbeat is stale, or None (also None when none is set)."""
        s = self.stack.settings
        if s.reconciler_heartbeat is None:
            return None
        limit = s.heartbeat_intervals * s.reconciler_interval_s
        try:
            doc = json.loads(s.reconciler_heartbeat.read_text(encoding="utf-8"))
            ts = datetime.fromisoformat(str(doc["ts"]))
        except FileNotFoundError:
            return f"no reconciler heartbeat at {s.reconciler_heartbeat}"
        except (OSError, ValueError, KeyError, TypeError) as exc:
            why = type(exc).__name__
            return f"reconciler heartbeat {s.reconciler_heartbeat} unreadable ({why})"
        age = (self.now() - ts).total_seconds()
        if age > limit:
            return f"reconciler heartbeat is {age:.0f}s old (limit {limit}s)"
        return None

    def _claim(self, todo: list[str], result: ResumeResult) -> tuple[list[str], list[Batch]]:
        """Claim ``todo``: the nodes this run launches afresh, and dead runs' batches it
        sends again. Nodes a live run is launching are left to it (``result.busy``)."""
        stale = float(self.stack.settings.resume_timeout)
        got = self.claims.claim(todo, stale_after_s=stale)
        if got.recorded:
            gone = self.launcher.gone(got.recorded)
            for n, iid in got.recorded.items():
                if n not in gone:
                    result.already[n] = iid
            if gone:
                again = self.claims.claim(list(gone), stale_after_s=stale, replace=gone)
                got.mine += again.mine
                got.busy.update(again.busy)
                got.resumed += again.resumed
                for n, iid in again.recorded.items():
                    result.already[n] = iid
        result.busy.update(got.busy)
        if got.busy:
            log.info("being launched by another run, left to it: %s", compress(got.busy))
            self.audit(
                "resume.in_progress",
                nodes=compress(got.busy),
                owners=sorted(set(got.busy.values())),
            )
        return got.mine, got.resumed

    def resume(self, hostlist: str, resume_file: str | None) -> ResumeResult:
        names = stack_nodes(hostlist, self.nodes_of)
        jobs = read_resume_file(resume_file) if resume_file else []
        result = ResumeResult()
        self._unsure = result.unsure
        self.audit("resume.request", nodes=compress(names), jobs=[j for j, _ in jobs])
        try:
            live = self.launcher.instances_of(names, LIVE_STATES)
        except (ClientError, BotoCoreError) as exc:
            code = error_code(exc)
            log.error("DescribeInstances failed: %s", exc)
            result.failed = dict.fromkeys(names, code)
            self.fail_nodes(result.failed, jobs)
            return result
        for n, insts in live.items():
            result.already[n] = insts[0]["InstanceId"]
        self.side.start_resume(jobs)
        todo = [n for n in names if n not in result.already]
        fresh, resumed = self._claim(todo, result) if todo else ([], [])
        if result.already:
            log.info("already running, not launched again: %s", compress(result.already))
            self.audit("resume.already_running", nodes=compress(result.already))
        taken = [n for b in resumed for n in b.members]
        stale = self.heartbeat_stale() if fresh or taken else None
        if stale is not None:
            self.side.refuse(fresh + taken, stale, jobs)
            result.refused, fresh, resumed = fresh + taken, [], []
        if fresh and self.stack.settings.spend_gate is not None:
            cost, why = self.gate.check(fresh, jobs)
            if why is not None:
                self.gate.hold(fresh, why, cost, jobs)
                self.release(fresh)
                result.held = fresh
                fresh = []
        for batch in resumed:  # approved (and committed) by the run that died
            try:
                self.launcher.launch_resumed(batch, result)
            except (ClientError, BotoCoreError) as exc:
                code = error_code(exc)
                log.error("takeover of %s: %s", compress(batch.members), exc)
                result.failed.update({n: code for n in batch.members if n not in result.launched})
        for group in launch_groups(fresh, jobs):
            try:
                self.launcher.launch_group(group, result)
            except (ClientError, BotoCoreError) as exc:
                code = error_code(exc)
                log.error("%s: %s", group.label, exc)
                result.failed.update({n: code for n in group.nodes if n not in result.launched})
        # Slurm learns the addresses while the node tags are written (issue 33 item 5: at
        # 1,000 nodes CreateTags' refill rate, 10/s, took ~50 s before the first address).
        finish_tags = self.launcher.start_tagging(result)
        try:
            self.launcher.tell_addresses({**result.already, **result.launched})
        finally:
            finish_tags()
        for node, iid in result.launched.items():
            log.info("launched %s for node %s", iid, node)
        if result.launched:
            self.audit(
                "resume.launched",
                nodes=compress(result.launched),
                instances=sorted(result.launched.values()),
                fleet_calls=result.fleet_calls,
            )
        if result.launched and jobs:
            self.side.note_bursting(result, jobs)
        if result.failed:
            self.fail_nodes(result.failed, jobs)
        return result

    # -- suspend / resume-fail ------------------------------------------------------------
    def terminate(self, hostlist: str, event: str) -> list[str]:
        """End the nodes' instances (suspend, resume-fail). Their claims go first, so a
        resume still launching one of them terminates what it launches instead of keeping
        it; then their spend commitments. After resume-fail the nodes go back to the pool
        (:meth:`SlurmSide.return_to_pool`)."""
        names = stack_nodes(hostlist, self.nodes_of)
        self.claims.release(names)
        held = self.launcher.instances_of(names, HELD_STATES)
        ids = [i["InstanceId"] for insts in held.values() for i in insts]
        if ids:
            self.launcher.terminate(ids)
        log.info("%s %s: terminated %s", event, compress(names), ids or "nothing")
        self.audit(event, nodes=compress(names), instances=sorted(ids))
        self.release(names)
        if event == "resume-fail":
            self.side.return_to_pool(names)
        return ids


def resume_file_from_env() -> str | None:
    return os.environ.get("SLURM_RESUME_FILE") or None
