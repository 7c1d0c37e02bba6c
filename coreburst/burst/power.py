"""Slurm's power-saving programs for the burst nodes: resume, suspend, resume-fail.

slurmctld runs them as SlurmUser with one hostlist argument and discards their output, so
everything goes to a log file and a JSON-lines audit log. They are thin and idempotent: Slurm
may call resume again for a node after a controller restart, and a node that already has a
live instance (found by its tag) gets no second one.

* **resume** reads ``SLURM_RESUME_FILE`` (JSON, job -> nodes), launches each multi-node job's
  nodes all-or-nothing and the rest best-effort with EC2 CreateFleet (``instant``) on the
  cluster's launch template, at most 500 instances a call; tags every instance with its node
  name; tells Slurm each node's address. Nodes that get no instance are set DOWN with the EC2
  error code as the reason and powered down at once, so their jobs requeue now rather than
  after ResumeTimeout.
* **spend gate** (``coreburst:burst.spendGate``): before launching, the projected cost (nodes x
  $/h x each job's time limit) is checked against what the guardrails' spend scope has left
  today and this month (scope, limits and state from the guardrails config:
  :func:`coreburst.burst.config.gate_limits`). Over it (or with no fresh spend snapshot), nothing
  launches; the nodes go into a maintenance reservation ``coreburst-spend-...`` (so Slurm
  stops asking for them) and are set DOWN (the jobs requeue now) and powered down. The
  guardrails daemon's burst-reconcile rule deletes those reservations once the scope has room
  again (under its lease, kill switch and audit); the next resume checks again.
* **suspend** terminates the nodes' tagged instances.
* **resume-fail** (a node did not register within ResumeTimeout) terminates them too.

    $ SLURM_RESUME_FILE=/tmp/r.json coreburst burst resume p5-[1-2] --stack prod
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from coreburst.burst import admin_comment, ec2io
from coreburst.burst.claims import Batch, Claims, new_token
from coreburst.burst.commitments import SpendLedger
from coreburst.burst.config import BurstStack, GateLimits, gate_limits
from coreburst.burst.cost import slurm_hours
from coreburst.burst.ec2errors import UNFULFILLABLE, classify, resolve
from coreburst.burst.hostlist import HostlistError, compress, expand
from coreburst.burst.slurmconf import NodeSet, node_set_of
from coreburst.common.catalog import CatalogError, load_catalog
from coreburst.common.pricing import instance_rate
from guardrails.adapters.slurm import SPEND_HOLD_PREFIX, run_tool, spend_left
from infra.config import StackConfigError

if TYPE_CHECKING:
    from guardrails.stores.base import StateStore

log = logging.getLogger("coreburst.burst.power")

STACK_TAG_KEY = "coreburst-stack"  # the same key infra/program.py puts on every resource
CLUSTER_TAG_KEY = "coreburst-cluster"
# The batch's ClientToken, on every instance it launched: a run that died before tagging its
# instances with node names left instances the next run (or the reconciler) can find.
LAUNCH_TAG_KEY = "coreburst-launch"
# EC2 API reference, CreateFleet: an instant fleet launches at most 500 instances per call
# ("The maximum number of instances... for a fleet of type instant is 500").
FLEET_BATCH = 500
# EC2 API reference, "Filtering": at most 200 values in one filter.
FILTER_VALUES_MAX = 200
TAG_WORKERS = 16
LIVE_STATES = ("pending", "running")
# Instances a terminated node may still hold.
HELD_STATES = ("pending", "running", "stopping", "stopped")
FAIL_REASON = "Failure when resuming nodes"
# The code nodes fail with while every (type, zone) choice of their pool is backed off.
BACKOFF_CODE = "CapacityBackoff"
# The pool holds' reservation names (coreburst/burst/reconcile.py places and lifts the
# same ones).
BACKOFF_RESERVATION = "coreburst-backoff-"
PROTECT_RESERVATION = "coreburst-protect-"
# Who a burst instance was launched for (the first job in the resume file that wants its
# node): AWS cost and Slurm jobs join on these (coreburst cost report; Cost Explorer once they
# are activated as cost allocation tags).
JOB_TAG_KEY, USER_TAG_KEY, ACCOUNT_TAG_KEY = "coreburst-job", "coreburst-user", "coreburst-account"
OWNER_TAG_KEYS = (JOB_TAG_KEY, USER_TAG_KEY, ACCOUNT_TAG_KEY)
# EC2 tag values: letters, digits, spaces and + - = . _ : / @ (EC2 User Guide, "Tag
# restrictions"), at most 256 characters.
_TAG_VALUE_BAD = re.compile(r"[^A-Za-z0-9 +\-=._:/@]")
# infra/components/network.py PRIVATE_SUBNET_TAG: a zone's private subnet.
PRIVATE_SUBNET_TAG = "coreburst-subnet"
# The reason on nodes the spend gate holds, and the prefix of its reservations (the only ones
# the burst-reconcile rule deletes). A reservation, not drain: slurmctld 22.05 clears DRAIN when the
# forced power-down completes (measured in tests/integration/burst/test_spend_gate.py).
SPEND_HOLD_REASON = "coreburst: spend gate"
SPEND_HOLD_RESERVATION = SPEND_HOLD_PREFIX
# The reason on nodes resume refused because the reconciler (guardrails burst-reconcile) has
# not written its heartbeat lately (coreburst:burst.reconcilerHeartbeat).
HEARTBEAT_REASON = "coreburst: reconciler heartbeat stale"


class PowerInputError(ValueError):
    """Bad input to a power program (hostlist, resume file, unknown node); one line."""


class Slurm(Protocol):
    def scontrol(self, *args: str) -> str: ...


@dataclass
class Scontrol:
    """The real ``scontrol`` (PATH, SLURM_CONF from the environment); a failure, a timeout or
    output that is not UTF-8 is one ``guardrails.adapters.slurm.SlurmError`` line."""

    timeout_s: float = 30.0

    def scontrol(self, *args: str) -> str:
        return run_tool("scontrol", *args, bin_dir=None, conf=None, timeout_s=self.timeout_s)


@dataclass
class Audit:
    """Append-only JSON lines (one object per event, with a UTC timestamp)."""

    path: Path
    clock: Callable[[], float] = time.time

    def __call__(self, event: str, **fields: Any) -> None:
        rec = {"ts": round(self.clock(), 3), "event": event, **fields}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(rec, sort_keys=True) + "\n")


@dataclass
class LaunchGroup:
    """Nodes launched together: one multi-node job (all-or-nothing) or best-effort nodes."""

    label: str
    nodes: list[str]
    all_or_nothing: bool


@dataclass
class ResumeResult:
    launched: dict[str, str] = field(default_factory=dict)  # node -> instance id
    already: dict[str, str] = field(default_factory=dict)
    busy: dict[str, str] = field(default_factory=dict)  # node -> the live run launching it
    # Nodes whose CreateFleet got no clear answer: their claims keep the ClientToken.
    unsure: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)  # node -> error code
    held: list[str] = field(default_factory=list)  # nodes the spend gate held
    refused: list[str] = field(default_factory=list)  # stale reconciler heartbeat
    fleet_calls: int = 0
    # (instance type, zone) of each instance launched, as CreateFleet reported it.
    placed: list[tuple[str, str]] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)  # node -> instance type launched


def parse_nodes(hostlist: str, nodes_of: dict[str, NodeSet]) -> list[str]:
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


def launch_groups(names: list[str], jobs: list[tuple[str, list[str]]]) -> list[LaunchGroup]:
    """Multi-node jobs first (each all-or-nothing over the job's nodes being resumed), then
    every other node best-effort. A node claimed by two jobs goes with the first."""
    wanted = dict.fromkeys(names)
    taken: set[str] = set()
    groups = []
    for job_id, job_nodes in jobs:
        mine = [n for n in job_nodes if n in wanted and n not in taken]
        if len(job_nodes) > 1 and mine:
            groups.append(LaunchGroup(f"job {job_id}", mine, all_or_nothing=True))
            taken.update(mine)
    rest = [n for n in wanted if n not in taken]
    if rest:
        groups.append(LaunchGroup("best-effort", rest, all_or_nothing=False))
    return groups


def open_spend_state(path: Path) -> StateStore:
    """The guardrails daemon's SQLite state, for reading its spend snapshots. A missing file
    is an error here (opening it would create an empty one the daemon never writes)."""
    if not path.is_file():
        raise FileNotFoundError(f"no guardrails state at {path}")
    from guardrails.stores.sqlite import State  # only when a gate is configured

    return State(path)


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _error_code(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code") or "ClientError")
    return type(exc).__name__


class Power:
    """The three programs over injected clients: ``ec2`` (boto3), ``slurm`` (scontrol)."""

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
    ) -> None:
        self.stack = stack
        self.ec2 = ec2
        self.slurm = slurm
        self.audit = audit
        # The guardrails' state for the spend gate; opened on first use when not given.
        self.spend = spend
        self._claims = claims
        self._unsure: set[str] = set()
        self.now = now
        self.nodes_of = node_set_of(stack)
        self.node_tag = stack.settings.node_tag_key
        self._templates: dict[str, str] | None = None
        self._subnets: dict[str, str] | None = None
        # node -> the job, user and account it is launched for (OWNER_TAG_KEYS); read once a
        # resume has launched something.
        self._jobs: list[tuple[str, list[str]]] = []
        self._owner_tags: dict[str, dict[str, str]] | None = None
        self._hours: dict[str, float] = {}  # job -> time limit in hours, read once per run
        # ``scontrol -o show job`` of every job, read once per run (None: not yet; "": failed)
        # and the AdminComment of each job read (None: unreadable), kept current as this run
        # writes notes
        self._all_jobs: str | None = None
        self._jobs_read = False
        self._comments: dict[str, str | None] = {}

    @property
    def claims(self) -> Claims:
        """Which run owns which node (opened on first use)."""
        if self._claims is None:
            s = self.stack.settings
            self._claims = Claims(s.claims_file or s.audit_log.with_name("burst-claims.sqlite"))
        return self._claims

    # -- EC2 lookups ----------------------------------------------------------------------
    def instances_of(
        self, names: Iterable[str], states: tuple[str, ...]
    ) -> dict[str, list[dict[str, Any]]]:
        """node -> its tagged instances of this stack in ``states``."""
        found: dict[str, list[dict[str, Any]]] = {}
        for chunk in _chunks(list(names), FILTER_VALUES_MAX):
            pages = self.ec2.get_paginator("describe_instances").paginate(
                Filters=[
                    {"Name": f"tag:{STACK_TAG_KEY}", "Values": [self.stack.name]},
                    {"Name": f"tag:{self.node_tag}", "Values": chunk},
                    {"Name": "instance-state-name", "Values": list(states)},
                ]
            )
            for page in pages:
                for res in page["Reservations"]:
                    for inst in res["Instances"]:
                        tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
                        found.setdefault(tags[self.node_tag], []).append(inst)
        return found

    def launch_template(self, cluster: str) -> str:
        """The launch template infra declared for ``cluster``: tagged with the stack, named
        ``<cluster>-lt`` plus Pulumi's 7-character suffix (or tagged coreburst-cluster)."""
        if self._templates is None:
            self._templates = {}
            pages = self.ec2.get_paginator("describe_launch_templates").paginate(
                Filters=[{"Name": f"tag:{STACK_TAG_KEY}", "Values": [self.stack.name]}]
            )
            clusters = {ns.cluster for ns in self.nodes_of.values()}
            for page in pages:
                for lt in page["LaunchTemplates"]:
                    tags = {t["Key"]: t["Value"] for t in lt.get("Tags", [])}
                    name = lt["LaunchTemplateName"]
                    owner = tags.get(CLUSTER_TAG_KEY)
                    if owner is None:
                        m = re.fullmatch(r"(.+)-lt(-[a-z0-9]{7})?", name)
                        owner = m.group(1) if m and m.group(1) in clusters else None
                    if owner is not None:
                        self._templates.setdefault(owner, lt["LaunchTemplateId"])
        if cluster not in self._templates:
            raise LookupError(cluster)
        return self._templates[cluster]

    # -- resume ---------------------------------------------------------------------------
    def subnets(self) -> dict[str, str]:
        """zone -> the stack's private subnet there (tagged by infra/components/network.py),
        read once; only needed for clusters with more than one zone."""
        if self._subnets is None:
            self._subnets = {}
            pages = self.ec2.get_paginator("describe_subnets").paginate(
                Filters=[
                    {"Name": f"tag:{STACK_TAG_KEY}", "Values": [self.stack.name]},
                    {"Name": f"tag:{PRIVATE_SUBNET_TAG}", "Values": ["private"]},
                ]
            )
            for page in pages:
                for sn in page["Subnets"]:
                    self._subnets.setdefault(sn["AvailabilityZone"], sn["SubnetId"])
        return self._subnets

    def choices(self, ns: NodeSet) -> tuple[list[tuple[str, str]], dict[tuple[str, str], str]]:
        """The (instance type, zone) launch choices of a node set in the order to try them
        (zones first, then types: a p5e beside the file system before a p5 in another
        zone, whose traffic to it crosses zones), less
        those backed off after a capacity error; and the backed-off ones with their code."""
        zones = list(ns.zones) or [self.stack.config.availability_zone]
        types = list(ns.instance_types) or [ns.instance_type]
        every = [(t, z) for z in zones for t in types]
        off = self.claims.backed_off(ns.cluster)
        return [c for c in every if c not in off], {c: off[c][0] for c in every if c in off}

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
        """The CreateFleet request for ``count`` nodes of one set (EC2 API reference,
        CreateFleet; botocore's ec2 model checks the shape in tests). ``token``: the
        ClientToken (the same request with the same token launches nothing new), also
        tagged on the instances.

        ``choices`` (instance type, zone), in order, become ``Overrides``: on-demand takes
        them by ``Priority`` (``prioritized``), spot by ``price-capacity-optimized`` (EC2
        User Guide, "Allocation strategies for Spot Instances": the pools least likely to be
        interrupted, at a low price). A zone is given as its subnet when the set has more
        than one zone (the launch template then names none). ``strict`` (one multi-node
        job): all-or-nothing (``MinTargetCapacity``) of one type in one zone, as EFA and the
        placement need."""
        market = ns.market
        capacity_type = {"spot": "spot", "capacity-block": "capacity-block"}.get(
            market, "on-demand"
        )
        choices = choices or [(ns.instance_type, self.stack.config.availability_zone)]
        tags = {
            STACK_TAG_KEY: self.stack.name,
            CLUSTER_TAG_KEY: ns.cluster,
            **self.stack.config.tags.as_aws_tags(),
            **({LAUNCH_TAG_KEY: token} if token else {}),
        }
        multi_zone = len(ns.zones) > 1
        overrides = []
        for i, (itype, zone) in enumerate(choices):
            o: dict[str, Any] = {"InstanceType": itype}
            if multi_zone:
                o["SubnetId"] = self.subnets()[zone]
            if capacity_type != "spot":
                o["Priority"] = float(i)
            overrides.append(o)
        req: dict[str, Any] = {
            "Type": "instant",
            "LaunchTemplateConfigs": [
                {
                    "LaunchTemplateSpecification": {
                        "LaunchTemplateId": template_id,
                        "Version": "$Latest",
                    },
                    "Overrides": overrides,
                }
            ],
            "TargetCapacitySpecification": {
                "TotalTargetCapacity": count,
                "DefaultTargetCapacityType": capacity_type,
            },
            "TagSpecifications": [
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                }
            ],
        }
        # MinTargetCapacity makes the call all-or-nothing; it needs a single instance type.
        opts: dict[str, Any] = {}
        if strict:
            opts = {
                "SingleInstanceType": True,
                "SingleAvailabilityZone": True,
                "MinTargetCapacity": count,
            }
        if token:
            req["ClientToken"] = token
        if capacity_type == "spot":
            # EC2's default is lowest-price, the pool most likely to be interrupted.
            req["SpotOptions"] = {"AllocationStrategy": "price-capacity-optimized", **opts}
            req["TargetCapacitySpecification"]["SpotTargetCapacity"] = count
        else:
            opts["AllocationStrategy"] = "prioritized"
            if market == "capacity-reservation":
                opts["CapacityReservationOptions"] = {
                    "UsageStrategy": "use-capacity-reservations-first"
                }
            req["OnDemandOptions"] = opts
            if capacity_type == "on-demand":
                req["TargetCapacitySpecification"]["OnDemandTargetCapacity"] = count
        return req

    def _choice_of(self, item: dict[str, Any], ns: NodeSet) -> tuple[str, str] | None:
        """The (type, zone) a CreateFleet instance or error entry names, when it does."""
        o = (item.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        itype = o.get("InstanceType") or item.get("InstanceType")
        zone = o.get("AvailabilityZone")
        if zone is None and o.get("SubnetId"):
            zone = next((z for z, sn in self.subnets().items() if sn == o["SubnetId"]), None)
        if zone is None and len(ns.zones) <= 1:
            zone = ns.zones[0] if ns.zones else self.stack.config.availability_zone
        return (itype, zone) if itype and zone else None

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
        """node -> instance id for what launched, and an error code for the rest. An answer
        that leaves it unknown whether EC2 launched (no reply, a 5xx, throttling) puts the
        nodes in ``result.unsure``: their claims keep the token, so the next run sends the
        same request again and EC2 answers with what this one launched, if anything.

        Every choice EC2 reports a capacity error for is backed off
        (``coreburst:burst.capacityBackoffS``); the code returned is the real one behind
        ``UnfulfillableCapacity`` (coreburst/burst/ec2errors.py)."""
        try:
            template = self.launch_template(ns.cluster)
        except LookupError:
            log.error(
                "no launch template tagged %s=%s for cluster %s",
                STACK_TAG_KEY,
                self.stack.name,
                ns.cluster,
            )
            return {}, "LaunchTemplateNotFound"
        choices = choices or [(ns.instance_type, self.stack.config.availability_zone)]
        try:
            req = self.fleet_request(ns, template, len(nodes), strict, token, choices=choices)
        except KeyError as exc:  # a zone without a tagged subnet
            log.error("no private subnet tagged for zone %s of cluster %s", exc, ns.cluster)
            return {}, "SubnetNotFound"
        result.fleet_calls += 1
        try:
            resp = self.ec2.create_fleet(**req)
        except (ClientError, BotoCoreError) as exc:
            log.error("CreateFleet for %s failed: %s", compress(nodes), exc)
            status = (
                exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
                if isinstance(exc, ClientError)
                else 0
            )
            if not isinstance(exc, ClientError) or status >= 500 or "Limit" in _error_code(exc):
                result.unsure.update(nodes)
            return {}, _error_code(exc)
        ids: list[str] = []
        type_of: dict[str, str] = {}
        for item in resp.get("Instances", []):
            got = item.get("InstanceIds", [])
            ids += got
            type_of.update(dict.fromkeys(got, item.get("InstanceType") or ns.instance_type))
            where = self._choice_of(item, ns)
            if where is not None:
                for _ in got:
                    result.placed.append(where)
        errors = resp.get("Errors", [])
        code = None
        if len(ids) < len(nodes):
            code = resolve(e.get("ErrorCode") for e in errors) or "InsufficientInstanceCapacity"
            failed_choices: dict[tuple[str, str], str] = {}
            for e in errors:
                c = e.get("ErrorCode")
                where = self._choice_of(e, ns)
                if c and c != UNFULFILLABLE and where is not None:
                    failed_choices.setdefault(where, c)
            if classify(code) == "capacity":
                # Only the choices an error names; an answer naming none: every one offered.
                off = [c for c in choices if classify(failed_choices.get(c, "")) == "capacity"]
                if not failed_choices:
                    off = list(choices)
                self.claims.back_off(ns.cluster, off, code, self.stack.settings.capacity_backoff_s)
                self.audit(
                    "resume.backoff",
                    pool=ns.cluster,
                    choices=[f"{t}@{z}" for t, z in off],
                    code=code,
                    seconds=self.stack.settings.capacity_backoff_s,
                )
            log.warning(
                "CreateFleet for %s: %d of %d instances (%s; %s)",
                compress(nodes),
                len(ids),
                len(nodes),
                code,
                ", ".join(f"{t}@{z}: {c}" for (t, z), c in failed_choices.items()) or "-",
            )
        launched = dict(zip(nodes, ids, strict=False))
        result.types.update({n: type_of[i] for n, i in launched.items()})
        return launched, code

    def _terminate(self, ids: list[str]) -> None:
        for chunk in _chunks(ids, 1000):
            self.ec2.terminate_instances(InstanceIds=chunk)

    def _launch_group(self, group: LaunchGroup, result: ResumeResult) -> None:
        by_set: dict[str, list[str]] = {}
        for n in group.nodes:
            by_set.setdefault(self.nodes_of[n].cluster, []).append(n)
        got: dict[str, str] = {}
        failed: dict[str, str] = {}
        for cluster_nodes in by_set.values():
            ns = self.nodes_of[cluster_nodes[0]]
            for batch in _chunks(cluster_nodes, FLEET_BATCH):
                if group.all_or_nothing and failed:
                    failed.update(dict.fromkeys(batch, next(iter(failed.values()))))
                    continue
                choices, off = self.choices(ns)
                if not choices:  # every type and zone backed off: do not ask EC2 again
                    log.warning(
                        "%s: every choice of pool %s is backed off (%s)",
                        compress(batch),
                        ns.cluster,
                        ", ".join(f"{t}@{z}: {c}" for (t, z), c in off.items()),
                    )
                    failed.update(dict.fromkeys(batch, BACKOFF_CODE))
                    continue
                token = new_token()
                self.claims.prepare(batch, token, group.all_or_nothing, choices)
                launched, code = self._launch_batch(
                    ns, batch, group.all_or_nothing, result, token, choices=choices
                )
                got.update(launched)
                if code is not None:
                    failed.update({n: code for n in batch if n not in launched})
        if group.all_or_nothing and failed and got:
            # EC2 may not honour MinTargetCapacity across batches: undo the partial launch.
            code = next(iter(failed.values()))
            log.warning("%s: all-or-nothing, terminating %d launched", group.label, len(got))
            self._terminate(list(got.values()))
            failed.update(dict.fromkeys(got, code))
            got = {}
        self._keep(got, result)
        result.failed.update(failed)

    def _launch_resumed(self, batch: Batch, result: ResumeResult) -> None:
        """Send a dead run's request again with its token: EC2 answers with the instances
        that call launched (or launches them now if it never arrived). Instances for nodes
        suspended since go again."""
        ns = self.nodes_of[batch.nodes[0]]
        log.warning(
            "taking over %s from a run that stopped mid-launch (ClientToken %s)",
            compress(batch.members),
            batch.token,
        )
        self.audit("resume.takeover", nodes=compress(batch.members), token=batch.token)
        launched, code = self._launch_batch(
            ns, batch.nodes, batch.strict, result, batch.token, choices=batch.choices
        )
        extra = [iid for n, iid in launched.items() if n not in batch.members]
        if extra:
            self._terminate(extra)
        got = {n: iid for n, iid in launched.items() if n in batch.members}
        if code is not None:
            result.failed.update({n: code for n in batch.members if n not in got})
        self._keep(got, result)

    def _keep(self, got: dict[str, str], result: ResumeResult) -> None:
        """Tag what launched with its node, record it in the node's claim; an instance
        whose node was suspended (or failed) meanwhile is terminated, not kept."""
        if not got:
            return
        self._tag_nodes(got)
        lost = self.claims.launched(got)
        if lost:
            ids = [got.pop(n) for n in lost]
            log.warning("%s suspended while launching: terminating %s", compress(lost), ids)
            self._terminate(ids)
            self.audit("resume.cancelled", nodes=compress(lost), instances=sorted(ids))
        result.launched.update(got)

    def _tag_nodes(self, got: dict[str, str]) -> None:
        """One CreateTags per instance (each carries its own node name), in parallel, each
        retried on throttling and on an id EC2 does not show yet until a deadline
        (coreburst/burst/ec2io.py). Until its tag lands an instance carries only the stack,
        cluster and launch tags. A node whose tag never landed leaves ``got`` (its claim is
        not recorded): it is failed back to Slurm with the error code and its instance
        terminated, since suspend and the reconciler find instances by that tag."""
        deadline = ec2io.deadline("tags", len(got), self.stack.settings.resume_timeout)
        if self._owner_tags is None:
            self._owner_tags = self.owner_tags([n for _, jn in self._jobs for n in jn], self._jobs)
        owners = {n: self._owner_tags[n] for n in got if n in self._owner_tags}
        res = ec2io.tag_nodes(
            self.ec2,
            got,
            self.node_tag,
            deadline_s=deadline,
            workers=TAG_WORKERS,
            extra=owners,
        )
        if res.counts.throttled or res.counts.not_found:
            log.info(
                "CreateTags: %d calls for %d instances (%d throttled, %d not found yet)",
                res.counts.calls, len(got), res.counts.throttled, res.counts.not_found,
            )  # fmt: skip
        if not res.failed:
            return
        ids = [got.pop(n) for n in res.failed]
        log.error(
            "node tag not set on %s within %.0fs (%s): failing them, terminating %s",
            compress(res.failed), deadline, ",".join(sorted(set(res.failed.values()))), ids,
        )  # fmt: skip
        self.audit("resume.untagged", nodes=compress(res.failed), instances=sorted(ids))
        try:
            self._terminate(ids)
        except (ClientError, BotoCoreError) as exc:  # untagged: the reconciler's orphan later
            log.error("cannot terminate untagged %s: %s", ids, exc)
        self.fail_nodes({n: f"CreateTags:{code}" for n, code in res.failed.items()})

    def tell_addresses(self, node_ids: dict[str, str]) -> None:
        """Tell Slurm each node's private IP and DNS name, read until EC2 shows every instance
        with one (eventual consistency: coreburst/burst/ec2io.py); each round's finds go to
        Slurm at once. A node still without an address at the deadline is never left unset
        silently: it is logged, audited (``resume.no_address``), its instance terminated and
        the node failed back to Slurm with the reason (``InstanceNotVisible``,
        ``NoPrivateIpAddress``, or the error code)."""
        if self.stack.settings.node_address != "private-ip" or not node_ids:
            return

        def tell(found: dict[str, tuple[str, str]]) -> None:
            rows = [(n, *found[n]) for n in node_ids if n in found]  # the caller's order
            for chunk in _chunks(rows, 100):
                self.slurm.scontrol(
                    "update",
                    "nodename=" + ",".join(r[0] for r in chunk),
                    "nodeaddr=" + ",".join(r[1] for r in chunk),
                    "nodehostname=" + ",".join(r[2] for r in chunk),
                )

        deadline = ec2io.deadline("addresses", len(node_ids), self.stack.settings.resume_timeout)
        res = ec2io.read_addresses(self.ec2, node_ids, deadline_s=deadline, report=tell)
        if res.rounds > 1:
            log.info(
                "addresses of %d instances read in %d rounds (%d DescribeInstances calls)",
                len(node_ids), res.rounds, res.counts.calls,
            )  # fmt: skip
        if not res.missing:
            return
        ids = [node_ids[n] for n in res.missing]
        log.error(
            "no private address for %s after %.0fs (%s): failing them, terminating %s",
            compress(res.missing), deadline, ",".join(sorted(set(res.missing.values()))), ids,
        )  # fmt: skip
        self.audit(
            "resume.no_address",
            nodes=compress(res.missing),
            instances=sorted(ids),
            reasons=sorted(set(res.missing.values())),
        )
        try:
            self._terminate(ids)
        except (ClientError, BotoCoreError) as exc:  # tagged: suspend and the reconciler end it
            log.error("cannot terminate %s: %s", ids, exc)
        self.fail_nodes(res.missing)

    def owner_tags(
        self, names: list[str], jobs: list[tuple[str, list[str]]]
    ) -> dict[str, dict[str, str]]:
        """node -> {coreburst-job, coreburst-user, coreburst-account} for the first job of the
        resume file that wants it; user and account from one ``scontrol -o show job`` (all
        jobs: one call whatever their number). A job Slurm no longer shows keeps its id only;
        unreadable output leaves the tags out, never the launch."""
        wanted = set(names)
        first: dict[str, str] = {}
        for job, job_nodes in jobs:
            for n in job_nodes:
                if n in wanted:
                    first.setdefault(n, job)
        if not first:
            return {}
        who: dict[str, tuple[str, str]] = {}
        out = self.all_jobs()
        read = self._jobs_read
        if not read:
            log.warning("job owners unknown: instances get their job id only")
        ids = set(first.values())
        for line in out.splitlines():
            f = dict(t.partition("=")[::2] for t in line.split() if "=" in t)
            if f.get("JobId") in ids:
                user = f.get("UserId", "").partition("(")[0]
                account = f.get("Account", "")
                who[f["JobId"]] = (user, "" if account == "(null)" else account)
                self._hours.setdefault(f["JobId"], self._limit_hours(f.get("TimeLimit")))
        if read:  # a job missing from the whole list is one Slurm no longer knows
            for job in ids:
                self._hours.setdefault(job, self._limit_hours(None))

        def clean(v: str) -> str:
            return _TAG_VALUE_BAD.sub("_", v)[:256]

        tags: dict[str, dict[str, str]] = {}
        for n, job in first.items():
            user, account = who.get(job, ("", ""))
            t = {JOB_TAG_KEY: clean(job)}
            if user:
                t[USER_TAG_KEY] = clean(user)
            if account:
                t[ACCOUNT_TAG_KEY] = clean(account)
            tags[n] = t
        return tags

    def all_jobs(self) -> str:
        """``scontrol -o show job`` of every job, read once per run (the owners, time limits
        and AdminComments of the jobs this run acts for); "" when Slurm could not say."""
        if self._all_jobs is None:
            try:
                self._all_jobs = self.slurm.scontrol("-o", "show", "job")
                self._jobs_read = True
                for job, comment in admin_comment.comments(self._all_jobs).items():
                    self._comments.setdefault(job, comment)
            except RuntimeError as exc:  # guardrails.adapters.slurm.SlurmError: one line
                log.warning("cannot read the jobs (scontrol -o show job): %s", exc)
                self._all_jobs = ""
        return self._all_jobs

    def note_jobs(self, jobs: Iterable[str], kind: str, text: str) -> None:
        """Say on each job why it waits (``scontrol show job`` shows ``AdminComment=``; only
        an administrator can set it, so a user cannot overwrite it): ``text`` replaces the
        job's previous coreburst note of ``kind`` and the rest is kept (a site's own text,
        coreburst's other notes; coreburst.burst.admin_comment). Each job's AdminComment
        comes from a read this run already made (its one read of all jobs, or of the job's
        time limit), else from one read of all jobs. A job whose comment cannot be read is
        not noted (its text is never overwritten blind); one Slurm does not list is noted
        from empty (the update then fails if Slurm does not know it)."""
        wanted = list(dict.fromkeys(jobs))
        if not wanted:
            return
        if any(j not in self._comments for j in wanted):
            self.all_jobs()
        for job in wanted:
            value = admin_comment.merged_for(self._comments, self._jobs_read, job, kind, text)
            if value is None:
                log.warning("job %s: AdminComment unreadable or full; not noted: %s", job, text)
                continue
            try:
                self.slurm.scontrol("update", f"jobid={job}", f"AdminComment={value}")
            except RuntimeError as exc:  # guardrails.adapters.slurm.SlurmError: one line
                log.warning("cannot note job %s: %s", job, exc)
                continue
            self._comments[job] = value

    def fail_nodes(
        self, failed: dict[str, str], jobs: list[tuple[str, list[str]]] | None = None
    ) -> None:
        """DOWN with the error code (the job requeues now), then POWER_DOWN_FORCE so the node
        is idle~ again (REFERENCE.md, Slurm power saving: about 1 s in 22.05). The jobs
        waiting for the nodes say why; the nodes' claims and commitments go."""
        by_code: dict[str, list[str]] = {}
        for node, code in failed.items():
            by_code.setdefault(code, []).append(node)
        for code, nodes in by_code.items():
            hl = compress(nodes)
            self.slurm.scontrol(
                "update", f"nodename={hl}", "state=down", f"reason=(Code:{code}){FAIL_REASON}"
            )
            self.slurm.scontrol("update", f"nodename={hl}", "state=power_down_force")
            cls = classify(code.removeprefix("CreateTags:"))
            self.audit("resume.failed", nodes=hl, code=code, error_class=cls)
            mine = set(nodes)
            self.note_jobs(
                [j for j, jn in jobs or [] if mine.intersection(jn)],
                "requeue",
                f"coreburst: burst launch for {hl} failed ({code}: {cls}); requeued "
                f"{self.now():%Y-%m-%d %H:%M:%SZ}",
            )
        self.release(list(failed), keep_unsure=True)
        self.hold_pools(by_code)

    def hold_pools(self, by_code: dict[str, list[str]]) -> None:
        """Hold a pool whose launch failed so Slurm stops choosing its nodes and the jobs
        start elsewhere now (coreburst/burst/ec2errors.py): out of every (type, zone)
        choice after capacity errors, a MAINT reservation ``coreburst-backoff-<pool>-<ms>``
        that ends by itself after ``capacityBackoffS``; a quota or an invalid request,
        ``coreburst-protect-<pool>`` until an operator lifts it (``coreburst burst
        release-hold``). The guardrails' burst-reconcile rule tells Slack about each. Nodes
        that have an instance are left out (their jobs keep running)."""
        wanted: dict[str, tuple[str, str]] = {}  # pool -> (reservation, why)
        minutes = max(1, math.ceil(self.stack.settings.capacity_backoff_s / 60))
        sets = {ns.cluster: ns for ns in self.nodes_of.values()}
        for code, nodes in by_code.items():
            cls = classify(code.removeprefix("CreateTags:"))
            for pool in {self.nodes_of[n].cluster for n in nodes}:
                if cls == "capacity" and pool not in wanted:
                    if not self.choices(sets[pool])[0]:
                        ms = int(self.now().timestamp() * 1000)
                        wanted[pool] = (f"{BACKOFF_RESERVATION}{pool}-{ms}", code)
                elif cls in ("quota", "invalid"):
                    wanted[pool] = (f"{PROTECT_RESERVATION}{pool}", code)
        if not wanted:
            return
        launched = {row[0] for row in self.claims.rows() if row[2] == "launched"}
        for pool, (resv, code) in sorted(wanted.items()):
            targets = [
                n for n, ns in self.nodes_of.items() if ns.cluster == pool and n not in launched
            ]
            if not targets:
                continue
            timed = resv.startswith(BACKOFF_RESERVATION)
            try:
                self.slurm.scontrol(
                    "create", "reservation", f"ReservationName={resv}",
                    f"Nodes={compress(targets)}", "Users=root", "Flags=MAINT,IGNORE_JOBS",
                    "StartTime=now", f"Duration={minutes if timed else 'UNLIMITED'}",
                )  # fmt: skip
            except RuntimeError as exc:  # held already, or Slurm refused: the reconciler retries
                log.warning("cannot hold pool %s (%s): %s", pool, resv, exc)
                continue
            log.warning("pool %s held: %s (%s)", pool, resv, code)
            self.audit(
                "resume.pool_held",
                pool=pool,
                reservation=resv,
                code=code,
                error_class=classify(code.removeprefix("CreateTags:")),
                minutes=minutes if timed else None,
                nodes=compress(targets),
            )

    def release(self, nodes: list[str], *, keep_unsure: bool = False) -> None:
        """Drop the nodes' claims and spend commitments (never stops a terminate or a
        power-down: a failure here is logged). ``keep_unsure``: claims of this run whose
        CreateFleet got no clear answer stay, with their token, for the next run."""
        unsure = self._unsure if keep_unsure else set()
        try:
            self.claims.release([n for n in nodes if n not in unsure])
        except Exception as exc:
            log.error("cannot release the claims of %s: %s", compress(nodes), exc)
        gate = self.stack.settings.spend_gate
        if gate is None:
            return
        try:
            limits = gate_limits(gate)
            if self.spend is None:
                self.spend = open_spend_state(limits.state_path)
            freed = SpendLedger(self.spend, limits.scope).release(nodes, self.now())
        except Exception as exc:
            log.error("spend gate: cannot release the commitments of %s: %s", compress(nodes), exc)
            return
        if freed:
            self.audit("spend.released", nodes=compress(nodes), usd=round(freed, 2))

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

    def refuse(
        self, names: list[str], why: str, jobs: list[tuple[str, list[str]]] | None = None
    ) -> None:
        """DOWN with HEARTBEAT_REASON (the jobs requeue now), then a forced power-down."""
        hl = compress(names)
        self.slurm.scontrol("update", f"nodename={hl}", "state=down", f"reason={HEARTBEAT_REASON}")
        self.slurm.scontrol("update", f"nodename={hl}", "state=power_down_force")
        log.error("resume refused for %s: %s", hl, why)
        self.audit("resume.refused", nodes=hl, reason=why)
        mine = set(names)
        self.note_jobs(
            [j for j, jn in jobs or [] if mine.intersection(jn)],
            "burst",
            f"coreburst: burst paused ({why}); requeued, waits for the core or a retry",
        )
        self.release(names)

    # -- spend gate -----------------------------------------------------------------------
    def _job_hours(self, job_id: str) -> float:
        """The job's time limit in hours (``scontrol show job``); no limit, or a job Slurm
        no longer knows: the burst partition's MaxTime, the most it may run there."""
        if job_id in self._hours:
            return self._hours[job_id]
        try:
            out = self.slurm.scontrol("-o", "show", "job", job_id)
        except RuntimeError:  # guardrails.adapters.slurm.SlurmError: one line
            return self._limit_hours(None)
        m = re.search(r"\bTimeLimit=(\S+)", out)
        self._hours[job_id] = self._limit_hours(m.group(1) if m else None)
        for job, comment in admin_comment.comments(out).items():  # for a note on it later
            self._comments.setdefault(job, comment)
        return self._hours[job_id]

    def _limit_hours(self, time_limit: str | None) -> float:
        hours = slurm_hours(time_limit) if time_limit else None
        return hours if hours is not None else slurm_hours(self.stack.settings.max_time) or 24 * 7

    def note_bursting(self, result: ResumeResult, jobs: list[tuple[str, list[str]]]) -> None:
        """Tell each job whose nodes were launched what it costs (``scontrol show job``:
        ``AdminComment=``): the $/h of the types launched, from the catalog, and that rate over
        its time limit (the spend gate reserves the dearest type a node may launch as, so
        this is at most what it reserved). A price the catalog lacks is said to be
        unknown, never $0."""
        cat = load_catalog()
        region = self.stack.config.region
        for job_id, job_nodes in jobs:
            mine = [n for n in job_nodes if n in result.launched]
            if not mine:
                continue
            hours = self._job_hours(job_id)
            rate, unknown = 0.0, []
            kinds: dict[str, int] = {}
            for n in mine:
                ns = self.nodes_of[n]
                itype = result.types.get(n, ns.instance_type)
                kinds[f"{itype} {ns.market}"] = kinds.get(f"{itype} {ns.market}", 0) + 1
                try:
                    rate += instance_rate(cat, itype, region, ns.market)[0]
                except CatalogError:
                    unknown.append(itype)
            what = ", ".join(f"{c} x {k}" for k, c in sorted(kinds.items()))
            money = (
                f"price unknown for {', '.join(sorted(set(unknown)))}"
                if unknown
                else f"${rate:,.2f}/h, projected ${rate * hours:,.2f} over its {hours:g} h limit"
            )
            self.note_jobs(
                [job_id], "burst", f"coreburst: bursting on {compress(mine)} ({what}): {money}"
            )

    def _left(self, limits: GateLimits) -> dict[str, float] | str:
        """USD the scope has left per period, or why that cannot be known (fail closed)."""
        try:
            if self.spend is None:
                self.spend = open_spend_state(limits.state_path)
            row = self.spend.last_spend(limits.scope)
        except Exception as exc:  # any store failure holds, it never launches blind
            log.error("spend gate: cannot read the guardrails state: %s", exc)
            return f"guardrails spend state unreadable ({type(exc).__name__})"
        return spend_left(
            limits.daily_limit_usd,
            limits.monthly_limit_usd,
            row,
            now=self.now(),
            max_age=limits.max_snapshot_age,
            scope=limits.scope,
        )

    def spend_check(
        self, names: list[str], jobs: list[tuple[str, list[str]]]
    ) -> tuple[float, str | None]:
        """(projected USD, why it may not launch or None). Each node costs its instance's
        $/h (coreburst.common.pricing) times the longest time limit of the jobs it is resumed for.
        An
        approval commits that cost in the scope's ledger (coreburst/burst/commitments.py)
        atomically with
        the check: limit - accrued - committed must hold it."""
        gate = self.stack.settings.spend_gate
        assert gate is not None
        wanted = set(names)
        hours: dict[str, float] = {}
        for job_id, job_nodes in jobs:
            mine = [n for n in job_nodes if n in wanted]
            if mine:
                h = self._job_hours(job_id)
                for n in mine:
                    hours[n] = max(hours.get(n, 0.0), h)
        cat = load_catalog()
        asks: dict[str, tuple[float, float]] = {}
        for n in names:
            ns = self.nodes_of[n]
            try:  # the dearest type the node may launch as (fallbacks included)
                rate = max(
                    instance_rate(cat, t, self.stack.config.region, ns.market)[0]
                    for t in ns.instance_types or (ns.instance_type,)
                )
            except CatalogError as exc:
                cost = sum(r * h for r, h in asks.values())
                return cost, f"no price for {ns.instance_type} {ns.market} ({exc})"
            asks[n] = (rate, hours.get(n, gate.default_hours))
        cost = sum(r * h for r, h in asks.values())
        try:
            limits = gate_limits(gate)
        except StackConfigError as exc:  # a broken gate holds: it never launches unchecked
            log.error("spend gate: %s", exc)
            return cost, str(exc)
        left = self._left(limits)
        if isinstance(left, str):
            return cost, left
        assert self.spend is not None
        try:
            r = SpendLedger(self.spend, limits.scope).reserve(
                asks, left, self.now(), jobs=[j for j, jn in jobs if wanted.intersection(jn)]
            )
        except Exception as exc:  # LedgerBusyError or any store failure holds
            log.error("spend gate: cannot commit: %s", exc)
            return cost, f"spend ledger unavailable ({type(exc).__name__})"
        if not r.ok:
            return cost, r.why
        self.audit(
            "spend.committed",
            nodes=compress(names),
            usd=round(cost, 2),
            committed_before_usd=round(r.committed_usd, 2),
            scope=limits.scope,
        )
        return cost, None

    def hold(
        self, names: list[str], why: str, cost: float, jobs: list[tuple[str, list[str]]]
    ) -> None:
        """A MAINT reservation on the nodes (Slurm neither gives them to pending jobs nor
        powers them up, REFERENCE.md "Slurm power saving"), then DOWN with the gate's reason
        (the jobs requeue now) and a forced power-down (the nodes are idle~ again). Each
        waiting job says why, with its projected cost."""
        hl = compress(names)
        # The projected cost goes into the name (22.05 reservations carry no comment), so the
        # release knows whether this hold fits what is left.
        stamp = f"{int(self.now().timestamp() * 1000)}-{os.getpid()}"
        resv = f"{SPEND_HOLD_RESERVATION}{math.ceil(cost)}usd-{stamp}"
        try:
            self.slurm.scontrol(
                "create", "reservation", f"ReservationName={resv}", f"Nodes={hl}",
                "Users=root", "Flags=MAINT,IGNORE_JOBS", "StartTime=now", "Duration=UNLIMITED",
            )  # fmt: skip
        except RuntimeError as exc:  # still requeue and power down; Slurm asks again later
            log.error("spend gate: cannot reserve %s: %s", hl, exc)
            resv = ""
        reason = f"reason={SPEND_HOLD_REASON}: {why}"
        self.slurm.scontrol("update", f"nodename={hl}", "state=down", reason)
        self.slurm.scontrol("update", f"nodename={hl}", "state=power_down_force")
        wanted = set(names)
        held_jobs = [j for j, jn in jobs if wanted.intersection(jn)]
        log.warning("spend gate holds %s (jobs %s): %s", hl, ",".join(held_jobs) or "-", why)
        self.audit(
            "resume.held",
            nodes=hl,
            jobs=held_jobs or [j for j, _ in jobs],
            cost_usd=round(cost, 2),
            reason=why,
            reservation=resv,
        )
        self.note_jobs(
            held_jobs,
            "burst",
            f"coreburst: held by the burst spend gate, projected ${cost:,.2f} for {hl}: {why}"
            + (f"; waits for reservation {resv} to lift" if resv else ""),
        )
        self.release(names)

    def _gone(self, recorded: dict[str, str]) -> dict[str, str]:
        """Of the instances claims record (node -> id), those EC2 says are not pending or
        running. One it does not know yet (eventual consistency) counts as live."""
        gone: dict[str, str] = {}
        by_id = {iid: n for n, iid in recorded.items()}
        for chunk in _chunks(list(by_id), FILTER_VALUES_MAX):
            resp = self.ec2.describe_instances(Filters=[{"Name": "instance-id", "Values": chunk}])
            for res in resp["Reservations"]:
                for inst in res["Instances"]:
                    if inst["State"]["Name"] not in LIVE_STATES:
                        gone[by_id[inst["InstanceId"]]] = inst["InstanceId"]
        return gone

    def _claim(self, todo: list[str], result: ResumeResult) -> tuple[list[str], list[Batch]]:
        """Claim ``todo``: the nodes this run launches afresh, and dead runs' batches it
        sends again. Nodes a live run is launching are left to it (``result.busy``)."""
        stale = float(self.stack.settings.resume_timeout)
        got = self.claims.claim(todo, stale_after_s=stale)
        if got.recorded:
            gone = self._gone(got.recorded)
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
        names = parse_nodes(hostlist, self.nodes_of)
        jobs = read_resume_file(resume_file) if resume_file else []
        result = ResumeResult()
        self._unsure = result.unsure
        self.audit("resume.request", nodes=compress(names), jobs=[j for j, _ in jobs])
        try:
            live = self.instances_of(names, LIVE_STATES)
        except (ClientError, BotoCoreError) as exc:
            code = _error_code(exc)
            log.error("DescribeInstances failed: %s", exc)
            result.failed = dict.fromkeys(names, code)
            self.fail_nodes(result.failed, jobs)
            return result
        for n, insts in live.items():
            result.already[n] = insts[0]["InstanceId"]
        self._jobs, self._owner_tags, self._hours = jobs, None, {}
        todo = [n for n in names if n not in result.already]
        fresh, resumed = self._claim(todo, result) if todo else ([], [])
        if result.already:
            log.info("already running, not launched again: %s", compress(result.already))
            self.audit("resume.already_running", nodes=compress(result.already))
        taken = [n for b in resumed for n in b.members]
        stale = self.heartbeat_stale() if fresh or taken else None
        if stale is not None:
            self.refuse(fresh + taken, stale, jobs)
            result.refused, fresh, resumed = fresh + taken, [], []
        if fresh and self.stack.settings.spend_gate is not None:
            cost, why = self.spend_check(fresh, jobs)
            if why is not None:
                self.hold(fresh, why, cost, jobs)
                result.held = fresh
                fresh = []
        for batch in resumed:  # approved (and committed) by the run that died
            try:
                self._launch_resumed(batch, result)
            except (ClientError, BotoCoreError) as exc:
                code = _error_code(exc)
                log.error("takeover of %s: %s", compress(batch.members), exc)
                result.failed.update({n: code for n in batch.members if n not in result.launched})
        for group in launch_groups(fresh, jobs):
            try:
                self._launch_group(group, result)
            except (ClientError, BotoCoreError) as exc:
                code = _error_code(exc)
                log.error("%s: %s", group.label, exc)
                result.failed.update({n: code for n in group.nodes if n not in result.launched})
        for node, iid in result.launched.items():
            log.info("launched %s for node %s", iid, node)
        if result.launched:
            self.audit(
                "resume.launched",
                nodes=compress(result.launched),
                instances=sorted(result.launched.values()),
                fleet_calls=result.fleet_calls,
            )
        self.tell_addresses({**result.already, **result.launched})
        if result.launched and jobs:
            self.note_bursting(result, jobs)
        if result.failed:
            self.fail_nodes(result.failed, jobs)
        return result

    # -- suspend / resume-fail ------------------------------------------------------------
    def terminate(self, hostlist: str, event: str) -> list[str]:
        """End the nodes' instances (suspend, resume-fail). Their claims go first, so a
        resume still launching one of them terminates what it launches instead of keeping
        it; then their spend commitments. After resume-fail the nodes go back to the pool
        (:meth:`return_to_pool`)."""
        names = parse_nodes(hostlist, self.nodes_of)
        self.claims.release(names)
        held = self.instances_of(names, HELD_STATES)
        ids = [i["InstanceId"] for insts in held.values() for i in insts]
        if ids:
            self._terminate(ids)
        log.info("%s %s: terminated %s", event, compress(names), ids or "nothing")
        self.audit(event, nodes=compress(names), instances=sorted(ids))
        self.release(names)
        if event == "resume-fail":
            self.return_to_pool(names)
        return ids

    def return_to_pool(self, names: list[str]) -> None:
        """After ResumeTimeout slurmctld leaves the node DOWN and powered down (``down~``,
        "ResumeTimeout reached"), and nothing would bring it back: ``state=resume`` makes it
        ``idle~`` (ready for the next job). The reason is kept in the node's Comment and
        the audit log; protected mode (the reconciler) still counts the failure."""
        hl = compress(names)
        when = f"{self.now():%Y-%m-%d %H:%M:%SZ}"
        try:
            self.slurm.scontrol(
                "update",
                f"nodename={hl}",
                f"comment=coreburst: resume failed {when} (ResumeTimeout reached); "
                "instance terminated, node returned to the pool",
            )
            self.slurm.scontrol("update", f"nodename={hl}", "state=resume")
        except RuntimeError as exc:  # the reconciler repairs down~ cloud nodes
            log.error("cannot return %s to the pool: %s", hl, exc)
            return
        self.audit("resume-fail.returned", nodes=hl)


def resume_file_from_env() -> str | None:
    return os.environ.get("SLURM_RESUME_FILE") or None
