"""The EC2 side of the power programs: find the nodes' instances, launch them with CreateFleet,
tag them, tell Slurm their addresses, terminate them.

* **Launch**: each group of nodes (one multi-node job all-or-nothing, the rest best-effort:
  :func:`launch_groups`) goes to EC2 CreateFleet (``instant``) on the cluster's launch
  template, in calls of at most 500 instances (our batch size, not an AWS limit), with the
  (type, zone) choices of its pool that are
  not backed off after a capacity error (:meth:`Launcher.choices`). Each call carries a
  ClientToken recorded in the nodes' claims first (coreburst/burst/claims.py), so a run that
  died mid-launch is taken over by sending the same request again.
* **Tags**: every instance gets its node name (and the job, user and account it was launched
  for); the node tag is how suspend and the reconciler find it.
* **Addresses**: Slurm is told each node's private IP and DNS name.

What Slurm is told about failures goes through the callbacks the resume program passes
(coreburst/burst/slurm_side.py).

    >>> launcher = Launcher(stack, ec2, Scontrol(), audit, nodes_of=node_set_of(stack),
    ...     claims=lambda: claims, fail_nodes=fail, owner_tags=dict)  # doctest: +SKIP
    >>> launcher.launch_group(LaunchGroup("best-effort", ["od-1"], False), result)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from coreburst.burst import ec2io
from coreburst.burst.claims import Batch, Claims, new_token
from coreburst.burst.config import BurstStack
from coreburst.burst.ec2errors import UNFULFILLABLE, backoff_s, classify, resolve
from coreburst.burst.hostlist import compress
from coreburst.burst.slurmconf import NodeSet
from coreburst.common.names import (
    CLUSTER_TAG_KEY,
    LAUNCH_TAG_KEY,
    PRIVATE_SUBNET_TAG,
    STACK_TAG_KEY,
)

if TYPE_CHECKING:
    from coreburst.burst.slurm_side import Slurm

# The power programs' one logger (its name is the log file's, set up by coreburst/burst/cli.py).
log = logging.getLogger("coreburst.burst.power")

# Nodes per CreateFleet call: coreburst's own batch size. No AWS text found limits an instant
# fleet to 500 instances a call (not the CreateFleet API reference nor botocore's model); the
# EC2 Fleet quotas page gives a target capacity of 10,000 per fleet
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/fleet-quotas.html).
FLEET_BATCH = 500
# EC2 API reference, "Filtering": at most 200 values in one filter.
FILTER_VALUES_MAX = 200
TAG_WORKERS = 16
LIVE_STATES = ("pending", "running")
# Instances a terminated node may still hold.
HELD_STATES = ("pending", "running", "stopping", "stopped")
# The code nodes fail with while every (type, zone) choice of their pool is backed off.
BACKOFF_CODE = "CapacityBackoff"
# EC2 tag values: letters, digits, spaces and + - = . _ : / @ (EC2 User Guide, "Tag
# restrictions"), at most 256 characters.
TAG_VALUE_BAD = re.compile(r"[^A-Za-z0-9 +\-=._:/@]")


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


def chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def error_code(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code") or "ClientError")
    return type(exc).__name__


class Launcher:
    """EC2 for the power programs over an injected ``ec2`` client (boto3). What it cannot
    launch, tag or address goes back to Slurm through ``fail_nodes`` (node -> error code);
    ``owner_tags`` gives node -> the job, user and account tags of the run's resume file;
    ``claims`` opens the run's claims (which run owns which node) on first use."""

    def __init__(
        self,
        stack: BurstStack,
        ec2: Any,
        slurm: Slurm,
        audit: Callable[..., None],
        *,
        nodes_of: dict[str, NodeSet],
        claims: Callable[[], Claims],
        fail_nodes: Callable[[dict[str, str]], None],
        owner_tags: Callable[[], dict[str, dict[str, str]]],
        tag_client: Callable[[], Any] | None = None,
    ) -> None:
        self.stack = stack
        self.ec2 = ec2
        self.slurm = slurm
        self.audit = audit
        self.nodes_of = nodes_of
        self.node_tag = stack.settings.node_tag_key
        self._claims = claims
        self.fail_nodes = fail_nodes
        self.owner_tags = owner_tags
        self._templates: dict[str, str] | None = None
        self._subnets: dict[str, str] | None = None
        # node -> instance launched by this run, not tagged yet (start_tagging tags them).
        self.untagged: dict[str, str] = {}
        self.tag_client = tag_client
        # error code -> EC2's message with it (the last one seen): quoted where a pool is held.
        self.messages: dict[str, str] = {}

    @property
    def claims(self) -> Claims:
        return self._claims()

    # -- EC2 lookups ----------------------------------------------------------------------
    def instances_of(
        self, names: Iterable[str], states: tuple[str, ...]
    ) -> dict[str, list[dict[str, Any]]]:
        """node -> its tagged instances of this stack in ``states``."""
        found: dict[str, list[dict[str, Any]]] = {}
        for chunk in chunks(list(names), FILTER_VALUES_MAX):
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

    def gone(self, recorded: dict[str, str]) -> dict[str, str]:
        """Of the instances claims record (node -> id), those EC2 says are not pending or
        running. One it does not know yet (eventual consistency) counts as live."""
        gone: dict[str, str] = {}
        by_id = {iid: n for n, iid in recorded.items()}
        for chunk in chunks(list(by_id), FILTER_VALUES_MAX):
            resp = self.ec2.describe_instances(Filters=[{"Name": "instance-id", "Values": chunk}])
            for res in resp["Reservations"]:
                for inst in res["Instances"]:
                    if inst["State"]["Name"] not in LIVE_STATES:
                        gone[by_id[inst["InstanceId"]]] = inst["InstanceId"]
        return gone

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

    def launch_batch(
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
            if not isinstance(exc, ClientError) or status >= 500 or "Limit" in error_code(exc):
                result.unsure.update(nodes)
            exc_code = error_code(exc)
            if isinstance(exc, ClientError):
                self.messages[exc_code] = str(exc.response.get("Error", {}).get("Message") or "")
                if classify(exc_code) in ("capacity", "unknown"):
                    self._back_off(ns, list(choices), exc_code)
            return {}, exc_code
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
                if c and e.get("ErrorMessage"):
                    self.messages.setdefault(c, str(e["ErrorMessage"]))
                where = self._choice_of(e, ns)
                # A pointer names a choice only when it is the whole answer (spot, mostly).
                if c and (c != UNFULFILLABLE or code == UNFULFILLABLE) and where is not None:
                    failed_choices.setdefault(where, c)
            if classify(code) in ("capacity", "unknown"):
                # Only the choices an error names; an answer naming none: every one offered.
                off = [
                    c
                    for c in choices
                    if c in failed_choices
                    and classify(failed_choices[c]) in ("capacity", "unknown")
                ]
                self._back_off(ns, off if failed_choices else list(choices), code)
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

    def _back_off(self, ns: NodeSet, off: list[tuple[str, str]], code: str) -> None:
        """Back ``off`` (type, zone) choices of the pool off after ``code``: a capacity answer
        for ``capacityBackoffS``; an unknown code for a growing, bounded time
        (coreburst/burst/ec2errors.py ``backoff_s``), with one ``resume.alert`` the first
        time in a row, so a person looks at it without the pool being held for ever."""
        base = self.stack.settings.capacity_backoff_s
        strike = 1
        if classify(code) == "unknown":
            forget = 4 * backoff_s(code, base, 99)  # quiet for long: the count starts again
            strike = self.claims.strike(ns.cluster, code, forget_after_s=forget)
        seconds = backoff_s(code, base, strike)
        self.claims.back_off(ns.cluster, off, code, seconds)
        self.audit(
            "resume.backoff",
            pool=ns.cluster,
            choices=[f"{t}@{z}" for t, z in off],
            code=code,
            seconds=seconds,
        )
        if classify(code) == "unknown" and strike == 1:
            message = self.messages.get(code, "")
            log.error(
                "CreateFleet for pool %s: unknown error %s (%s): backing off %ds, growing "
                "while it repeats; tell coreburst's maintainers what it means",
                ns.cluster, code, message or "no message", seconds,
            )  # fmt: skip
            self.audit("resume.alert", pool=ns.cluster, code=code, message=message, seconds=seconds)

    def terminate(self, ids: list[str]) -> None:
        for chunk in chunks(ids, 1000):
            self.ec2.terminate_instances(InstanceIds=chunk)

    def launch_group(self, group: LaunchGroup, result: ResumeResult) -> None:
        by_set: dict[str, list[str]] = {}
        for n in group.nodes:
            by_set.setdefault(self.nodes_of[n].cluster, []).append(n)
        got: dict[str, str] = {}
        failed: dict[str, str] = {}
        for cluster_nodes in by_set.values():
            ns = self.nodes_of[cluster_nodes[0]]
            for batch in chunks(cluster_nodes, FLEET_BATCH):
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
                launched, code = self.launch_batch(
                    ns, batch, group.all_or_nothing, result, token, choices=choices
                )
                got.update(launched)
                if code is not None:
                    failed.update({n: code for n in batch if n not in launched})
        if group.all_or_nothing and failed and got:
            # EC2 may not honour MinTargetCapacity across batches: undo the partial launch.
            code = next(iter(failed.values()))
            log.warning("%s: all-or-nothing, terminating %d launched", group.label, len(got))
            self.terminate(list(got.values()))
            failed.update(dict.fromkeys(got, code))
            got = {}
        self._keep(got, result)
        result.failed.update(failed)

    def launch_resumed(self, batch: Batch, result: ResumeResult) -> None:
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
        launched, code = self.launch_batch(
            ns, batch.nodes, batch.strict, result, batch.token, choices=batch.choices
        )
        extra = [iid for n, iid in launched.items() if n not in batch.members]
        if extra:
            self.terminate(extra)
        got = {n: iid for n, iid in launched.items() if n in batch.members}
        if code is not None:
            result.failed.update({n: code for n in batch.members if n not in got})
        self._keep(got, result)

    def _keep(self, got: dict[str, str], result: ResumeResult) -> None:
        """What launched: to be tagged with its node (:meth:`start_tagging`, off the path
        that tells Slurm the addresses) and then recorded in the node's claim."""
        self.untagged.update(got)
        result.launched.update(got)

    def start_tagging(self, result: ResumeResult) -> Callable[[], None]:
        """Tag what launched (:meth:`_keep`) with its node (and the job, user and account it
        is for) on a thread of its own, with its own EC2 client (``tag_client``) so that
        CreateTags' throttling slows only itself (botocore's adaptive rate limiter is per
        client) while the addresses are read and told to Slurm. Returns ``finish``: wait for
        the tags, then record the claims; an instance whose node was suspended meanwhile is
        terminated, not kept; one whose tag never landed is terminated and its node failed
        (:meth:`_untagged`)."""
        got, self.untagged = dict(self.untagged), {}
        if not got:
            return lambda: None
        deadline = ec2io.deadline("tags", len(got), self.stack.settings.resume_timeout)
        owner_tags = self.owner_tags()
        owners = {n: owner_tags[n] for n in got if n in owner_tags}
        client = self.tag_client() if self.tag_client is not None else self.ec2
        box: dict[str, Any] = {}

        def tag() -> None:
            try:
                box["res"] = ec2io.tag_nodes(
                    client, got, self.node_tag, deadline_s=deadline, workers=TAG_WORKERS,
                    extra=owners,
                )  # fmt: skip
            except Exception as exc:  # every node fails with it, below
                box["exc"] = exc

        thread = threading.Thread(target=tag, name="coreburst-tags", daemon=True)
        thread.start()

        def finish() -> None:
            thread.join()
            res = box.get("res")
            if res is None:
                res = ec2io.TagResult(failed=dict.fromkeys(got, error_code(box["exc"])))
            if res.counts.throttled or res.counts.not_found:
                log.info(
                    "CreateTags: %d calls for %d instances (%d throttled, %d not found yet)",
                    res.counts.calls, len(got), res.counts.throttled, res.counts.not_found,
                )  # fmt: skip
            tagged = {n: iid for n, iid in got.items() if n not in res.failed}
            if res.failed:
                self._untagged(res.failed, got, deadline, result)
            lost = self.claims.launched(tagged)
            if lost:
                ids = [tagged[n] for n in lost]
                for n in lost:
                    result.launched.pop(n, None)
                log.warning("%s suspended while launching: terminating %s", compress(lost), ids)
                self.terminate(ids)
                self.audit("resume.cancelled", nodes=compress(lost), instances=sorted(ids))

        return finish

    def _untagged(
        self, failed: dict[str, str], got: dict[str, str], deadline: float, result: ResumeResult
    ) -> None:
        """A node whose tag never landed: its claim is not recorded, it is failed back to
        Slurm with the error code and its instance terminated, since suspend and the
        reconciler find instances by that tag. Until its tag lands an instance carries only
        the stack, cluster and launch tags."""
        ids = [got[n] for n in failed]
        for n in failed:
            result.launched.pop(n, None)
        log.error(
            "node tag not set on %s within %.0fs (%s): failing them, terminating %s",
            compress(failed), deadline, ",".join(sorted(set(failed.values()))), ids,
        )  # fmt: skip
        self.audit("resume.untagged", nodes=compress(failed), instances=sorted(ids))
        try:
            self.terminate(ids)
        except (ClientError, BotoCoreError) as exc:  # untagged: the reconciler's orphan later
            log.error("cannot terminate untagged %s: %s", ids, exc)
        self.fail_nodes({n: f"CreateTags:{code}" for n, code in failed.items()})

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
            for chunk in chunks(rows, 100):
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
            self.terminate(ids)
        except (ClientError, BotoCoreError) as exc:  # tagged: suspend and the reconciler end it
            log.error("cannot terminate %s: %s", ids, exc)
        self.fail_nodes(res.missing)
