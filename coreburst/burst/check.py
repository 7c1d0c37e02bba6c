"""``coreburst burst check``: ask the account (and the Slurm controller) what only they can say,
before the first job that bursts finds it out as a Slurm failure minutes later.

Read-only: every AWS call is a Describe/List/Get, a ``DryRun`` launch or an IAM policy
simulation; Slurm is read with ``scontrol show config`` and ``scontrol -o show reservation``.
Each check answers with one :class:`Result`: ``ok`` (✔), ``fail`` (✘, with the fix) or
``unknown`` (?, when the credentials may not ask, or nothing answered: never counted as ✔).

What is asked, per stack (``Pulumi.<stack>.yaml``, as the resume program reads it):

* ``identity``: who the credentials are (STS GetCallerIdentity).
* ``offering``: each (instance type, zone) of each pool is offered there
  (EC2 DescribeInstanceTypeOfferings, location type ``availability-zone``).
* ``quota``: the vCPU quota of each (family, market) the pools launch into, against the
  vCPUs of every node of those pools at once (Service Quotas GetServiceQuota; codes in
  :data:`QUOTA_CODES`).
* ``launch-template`` and ``ami``: the template the resume program would pick for each pool
  (tagged with the stack; coreburst/burst/launch.py) and the image its ``$Latest`` version
  names, still available (DescribeLaunchTemplateVersions, DescribeImages).
* ``subnet``: the subnet each zone of each pool launches into: the template's own for a
  one-zone pool, the stack's tagged private subnet of the zone for a pool of several zones
  (what :meth:`Launcher.subnets` finds).
* ``dry-run``: CreateFleet (the resume program's own request for one node) and RunInstances
  from the pool's template with ``DryRun``: EC2 answers ``DryRunOperation`` when the caller
  may, ``UnauthorizedOperation`` when not (EC2 API reference, "Common Errors",
  https://docs.aws.amazon.com/AWSEC2/latest/APIReference/CommonErrors.html), so the
  ``ec2:LaunchTemplate`` / ``ec2:CreateAction`` conditions are read by real EC2, not by us.
* ``permission``: what resume, suspend and the reconciler call that a dry run cannot show
  (Describe*, tag-conditioned CreateTags and TerminateInstances, iam:PassRole), by IAM
  SimulatePrincipalPolicy for the caller (or ``--principal``).
* ``spot-events`` (a stack with a spot pool that deploys the guardrails with the
  spot-interruption rule): the EventBridge rules for the two spot events
  (infra/components/guardrails.py) exist, are enabled and deliver to an SQS queue that exists.
* Slurm (on the controller): the fragment is in effect (slurmctld's ResumeProgram,
  SuspendProgram and ResumeFailProgram are the stack's), each program is executable by
  SlurmUser, ResumeTimeout is at least the stack's ``resumeTimeout`` (the pools' boot
  allowance), the Capacity Block hold reservations exist, the spend gate's guardrails config
  names a usable scope.

    >>> results = run_checks(load_burst_stack("burst"), Clients("us-east-1"))  # doctest: +SKIP
    >>> print(render_text(results))  # doctest: +SKIP
    ✔ offering   od: p5.48xlarge in us-east-1a: offered (ec2:DescribeInstanceTypeOfferings)
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from botocore.exceptions import BotoCoreError, ClientError

from coreburst.burst.config import BurstStack, gate_limits
from coreburst.burst.iam import partition_of
from coreburst.burst.launch import Launcher
from coreburst.burst.slurmconf import NodeSet, node_set_of, node_sets, reservation_commands
from coreburst.common.catalog import Catalog, load_catalog
from coreburst.common.names import OWNER_TAG_KEYS, PRIVATE_SUBNET_TAG, STACK_TAG_KEY
from guardrails.preflight import (
    Caller,
    Clients,
    NoAnswerError,
    Result,
    ask,
    check_identity,
    check_spot_events,
    code_of,
    message_of,
)
from infra.config import StackConfigError

# An IAM role or user ARN (with an optional path), as --principal takes it.
IAM_ARN = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+")

# Service Quotas codes of the EC2 vCPU quotas a pool launches against, by (instance family
# letter group, market). Named as ListServiceQuotas --service-code ec2 names them; the EC2 User
# Guide, "Amazon EC2 service quotas" (https://docs.aws.amazon.com/ec2/latest/instancetypes/
# ec2-instance-quotas.html) says these quotas count vCPUs of running on-demand instances and of
# all spot requests, per family group:
#   L-417A185B  Running On-Demand P instances
#   L-7212CCBC  All P Spot Instance Requests
#   L-2C3B7624  Running On-Demand Trn instances
#   L-6B0D517C  All Trn Spot Instance Requests
# (every family of the catalog is P or Trn: tests/unit/burst/test_check.py holds a new family to
# a code here).
# Capacity reservations are used by running on-demand instances and count against the
# on-demand quota; Capacity Blocks are bought capacity and are not checked here.
QUOTA_CODES: dict[tuple[str, str], tuple[str, str]] = {
    ("P", "on-demand"): ("L-417A185B", "Running On-Demand P instances"),
    ("P", "spot"): ("L-7212CCBC", "All P Spot Instance Requests"),
    ("Trn", "on-demand"): ("L-2C3B7624", "Running On-Demand Trn instances"),
    ("Trn", "spot"): ("L-6B0D517C", "All Trn Spot Instance Requests"),
}
# An ImageId EC2 resolves from an SSM parameter at launch.
SSM_IMAGE = "resolve:ssm:"
_QUOTA_MARKET = {"on-demand": "on-demand", "capacity-reservation": "on-demand", "spot": "spot"}


# -- offerings ------------------------------------------------------------------------------------
def _choices(stack: BurstStack, sets: Iterable[NodeSet]) -> list[tuple[NodeSet, str, str]]:
    out = []
    for ns in sets:
        zones = list(ns.zones) or [stack.config.availability_zone]
        for zone in zones:
            for itype in ns.instance_types or (ns.instance_type,):
                out.append((ns, itype, zone))
    return out


def check_offerings(stack: BurstStack, sets: list[NodeSet], clients: Clients) -> list[Result]:
    asked = "ec2:DescribeInstanceTypeOfferings"
    choices = _choices(stack, sets)
    if not choices:  # no pool with nodes: nothing to ask (an empty filter is refused)
        return []
    types = sorted({t for _, t, _ in choices})
    zones = sorted({z for _, _, z in choices})
    try:
        pages = (
            clients("ec2")
            .get_paginator("describe_instance_type_offerings")
            .paginate(
                LocationType="availability-zone",
                Filters=[
                    {"Name": "instance-type", "Values": types},
                    {"Name": "location", "Values": zones},
                ],
            )
        )
        offered = {
            (o["InstanceType"], o["Location"])
            for page in ask(asked, lambda: list(pages))
            for o in page.get("InstanceTypeOfferings", [])
        }
    except NoAnswerError as exc:
        return [
            Result("offering", f"{ns.cluster}: {t} in {z}", "unknown", asked, exc.detail, exc.fix)
            for ns, t, z in choices
        ]
    except ClientError as exc:
        return [
            Result(
                "offering",
                f"{ns.cluster}: {t} in {z}",
                "unknown",
                asked,
                f"{code_of(exc)}: {message_of(exc)}",
                f"check that {z} is a zone of {clients.region}",
            )
            for ns, t, z in choices
        ]
    out = []
    for ns, t, z in choices:
        subject = f"{ns.cluster}: {t} in {z}"
        if (t, z) in offered:
            out.append(Result("offering", subject, "ok", asked, "offered"))
            continue
        # One more call, only on failure: where the type is offered instead.
        elsewhere = sorted(o for o in _offered_zones(clients, t) if o != z)
        there = ", ".join(elsewhere) or f"none in {clients.region}"
        out.append(
            Result(
                "offering",
                subject,
                "fail",
                asked,
                f"{t} is not offered in {z}",
                f"set the pool's zones to where it is ({there}) or drop {t} from its "
                "instance types",
            )
        )
    return out


def _offered_zones(clients: Clients, itype: str) -> list[str]:
    try:
        resp = clients("ec2").describe_instance_type_offerings(
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": [itype]}],
        )
    except (ClientError, BotoCoreError):
        return []
    return [o["Location"] for o in resp.get("InstanceTypeOfferings", [])]


# -- quotas -----------------------------------------------------------------------------------
def quota_group(family: str) -> str | None:
    """The quota group of an instance family (p5 -> P, trn2 -> Trn), or None.

    >>> quota_group("p5en"), quota_group("trn2"), quota_group("g6e")
    ('P', 'Trn', None)
    """
    if family.startswith("trn"):
        return "Trn"
    if family[:1] == "p":
        return "P"
    return None


def quota_needs(
    sets: list[NodeSet], catalog: Catalog
) -> dict[tuple[str, str], tuple[int, list[str]]]:
    """(group, market) -> (vCPUs of every node of those pools running at once, the pools).
    A pool whose types differ in vCPUs counts its largest."""
    need: dict[tuple[str, str], tuple[int, list[str]]] = {}
    for ns in sets:
        market = _QUOTA_MARKET.get(ns.market)
        if market is None:
            continue
        facts = [catalog.instance(t) for t in ns.instance_types or (ns.instance_type,)]
        group = quota_group(facts[0].family)
        if group is None:
            continue
        vcpus = max(f.vcpus for f in facts) * len(ns.names)
        total, pools = need.get((group, market), (0, []))
        need[(group, market)] = (total + vcpus, [*pools, ns.cluster])
    return need


def check_quotas(sets: list[NodeSet], clients: Clients, catalog: Catalog) -> list[Result]:
    out = []
    for (group, market), (vcpus, pools) in sorted(quota_needs(sets, catalog).items()):
        code, name = QUOTA_CODES[(group, market)]
        asked = f"service-quotas:GetServiceQuota ec2/{code}"
        subject = f"{name} ({', '.join(pools)})"
        try:
            q = ask(
                "servicequotas:GetServiceQuota",
                clients("service-quotas").get_service_quota,
                ServiceCode="ec2",
                QuotaCode=code,
            )
        except NoAnswerError as exc:
            out.append(Result("quota", subject, "unknown", asked, exc.detail, exc.fix))
            continue
        except ClientError as exc:
            out.append(
                Result(
                    "quota",
                    subject,
                    "unknown",
                    asked,
                    f"{code_of(exc)}: {message_of(exc)}",
                    f"look the quota up in the Service Quotas console (ec2, {code})",
                )
            )
            continue
        have = float(q["Quota"]["Value"])
        if have >= vcpus:
            out.append(Result("quota", subject, "ok", asked, f"{have:g} vCPUs >= {vcpus} needed"))
        else:
            out.append(
                Result(
                    "quota",
                    subject,
                    "fail",
                    asked,
                    f"{have:g} vCPUs < {vcpus} the pools need at full size",
                    f"aws service-quotas request-service-quota-increase --service-code ec2 "
                    f"--quota-code {code} --desired-value {vcpus} --region {clients.region}",
                )
            )
    return out


# -- launch templates, images, subnets --------------------------------------------------------
def _launcher(stack: BurstStack, ec2: Any) -> Launcher:
    """The resume program's launcher, for its lookups only (templates, subnets, the fleet
    request): it never launches, tags or talks to Slurm here."""

    def no_claims() -> Any:
        raise RuntimeError("coreburst burst check opens no claims")

    return Launcher(
        stack,
        ec2,
        cast(Any, None),
        lambda *a, **k: None,
        nodes_of=node_set_of(stack),
        claims=no_claims,
        fail_nodes=lambda failed: None,
        owner_tags=dict,
    )


@dataclass
class Template:
    cluster: str
    template_id: str
    data: dict[str, Any]


def check_templates(
    stack: BurstStack, sets: list[NodeSet], launcher: Launcher, clients: Clients
) -> tuple[list[Result], dict[str, Template]]:
    out: list[Result] = []
    found: dict[str, Template] = {}
    asked = "ec2:DescribeLaunchTemplates"
    for ns in sets:
        subject = f"{ns.cluster}"
        try:
            tid = ask(asked, launcher.launch_template, cluster=ns.cluster)
        except NoAnswerError as exc:
            out.append(Result("launch-template", subject, "unknown", asked, exc.detail, exc.fix))
            continue
        except LookupError:
            out.append(
                Result(
                    "launch-template",
                    subject,
                    "fail",
                    asked,
                    f"no launch template {ns.cluster}-lt-* tagged {STACK_TAG_KEY}={stack.name}",
                    f"pulumi up --stack {stack.name} declares it (infra/components/gpu_cluster.py)",
                )
            )
            continue
        except ClientError as exc:
            out.append(
                Result(
                    "launch-template",
                    subject,
                    "unknown",
                    asked,
                    f"{code_of(exc)}: {message_of(exc)}",
                    "",
                )
            )
            continue
        v_asked = "ec2:DescribeLaunchTemplateVersions"
        try:
            versions = ask(
                v_asked,
                clients("ec2").describe_launch_template_versions,
                LaunchTemplateId=tid,
                Versions=["$Latest"],
            )["LaunchTemplateVersions"]
        except NoAnswerError as exc:
            out.append(Result("launch-template", subject, "unknown", v_asked, exc.detail, exc.fix))
            continue
        except ClientError as exc:
            out.append(
                Result(
                    "launch-template",
                    subject,
                    "fail",
                    v_asked,
                    f"{tid} $Latest: {code_of(exc)}: {message_of(exc)}",
                    f"pulumi up --stack {stack.name} restores it",
                )
            )
            continue
        data = versions[0].get("LaunchTemplateData", {}) if versions else {}
        found[ns.cluster] = Template(ns.cluster, tid, data)
        version = versions[0].get("VersionNumber", "?") if versions else "?"
        out.append(
            Result("launch-template", subject, "ok", asked, f"{tid} (version {version} is $Latest)")
        )
        out.append(check_image(stack, ns.cluster, tid, data.get("ImageId"), clients))
    return out, found


def check_image(
    stack: BurstStack, cluster: str, tid: str, image: str | None, clients: Clients
) -> Result:
    asked = "ec2:DescribeImages"
    subject = f"{cluster}: image of {tid}"
    fix = (
        f"set the pool's image in the stack (or restore the AMI) and pulumi up --stack "
        f"{stack.name}: the template's $Latest version must name an available AMI"
    )
    if not image:
        return Result(
            "ami", subject, "fail", "ec2:DescribeLaunchTemplateVersions", "names no ImageId", fix
        )
    if image.startswith(SSM_IMAGE):
        # A template may name its AMI as an SSM parameter EC2 resolves at launch (EC2 User
        # Guide, "Use a Systems Manager parameter instead of an AMI ID"): resolve it as EC2
        # would, then look at that image.
        name = image.removeprefix(SSM_IMAGE)
        try:
            image = ask("ssm:GetParameter", clients("ssm").get_parameter, Name=name)["Parameter"][
                "Value"
            ]
        except NoAnswerError as exc:
            return Result("ami", subject, "unknown", "ssm:GetParameter", exc.detail, exc.fix)
        except ClientError as exc:
            detail = f"parameter {name}: {code_of(exc)}"
            return Result("ami", subject, "fail", "ssm:GetParameter", detail, fix)
    try:
        images = ask(asked, clients("ec2").describe_images, ImageIds=[image])["Images"]
    except NoAnswerError as exc:
        return Result("ami", subject, "unknown", asked, exc.detail, exc.fix)
    except ClientError as exc:
        if code_of(exc).startswith("InvalidAMIID"):
            return Result(
                "ami", subject, "fail", asked, f"{image} does not exist ({code_of(exc)})", fix
            )
        return Result("ami", subject, "unknown", asked, f"{code_of(exc)}: {message_of(exc)}", "")
    if not images:
        return Result(
            "ami", subject, "fail", asked, f"{image} does not exist (or was deregistered)", fix
        )
    state = images[0].get("State", "available")
    if state != "available":
        return Result("ami", subject, "fail", asked, f"{image} is {state}", fix)
    return Result("ami", subject, "ok", asked, f"{image} available")


def check_subnets(
    stack: BurstStack,
    sets: list[NodeSet],
    launcher: Launcher,
    templates: dict[str, Template],
    clients: Clients,
) -> list[Result]:
    """The subnet each zone of each pool launches into, as the resume program picks it."""
    out: list[Result] = []
    tagged: dict[str, str] | None = None
    tag_fix = (
        f"the stack's private subnet in each zone carries {STACK_TAG_KEY}={stack.name} and "
        f"{PRIVATE_SUBNET_TAG}=private (infra/components/network.py); pulumi up --stack "
        f"{stack.name} declares one per zone of the pools"
    )
    for ns in sets:
        zones = list(ns.zones) or [stack.config.availability_zone]
        if len(zones) > 1:
            asked = "ec2:DescribeSubnets"
            if tagged is None:
                try:
                    tagged = ask(asked, launcher.subnets)
                except NoAnswerError as exc:
                    out += [
                        Result(
                            "subnet", f"{ns.cluster}: {z}", "unknown", asked, exc.detail, exc.fix
                        )
                        for z in zones
                    ]
                    tagged = None
                    continue
            for z in zones:
                sn = (tagged or {}).get(z)
                subject = f"{ns.cluster}: {z}"
                if sn:
                    out.append(Result("subnet", subject, "ok", asked, f"{sn} (tagged private)"))
                else:
                    out.append(
                        Result(
                            "subnet",
                            subject,
                            "fail",
                            asked,
                            f"no subnet in {z} tagged {STACK_TAG_KEY}={stack.name}, "
                            f"{PRIVATE_SUBNET_TAG}=private",
                            tag_fix,
                        )
                    )
            continue
        t = templates.get(ns.cluster)
        if t is None:
            continue  # the template's own line says why
        out.append(_template_subnet(stack, ns, zones[0], t, clients))
    return out


def _template_subnet(
    stack: BurstStack, ns: NodeSet, zone: str, t: Template, clients: Clients
) -> Result:
    subject = f"{ns.cluster}: {zone}"
    nics = t.data.get("NetworkInterfaces") or []
    sn = next((n.get("SubnetId") for n in nics if n.get("SubnetId")), None)
    fix = f"pulumi up --stack {stack.name} puts the stack's subnet in {zone} into the template"
    if sn is None:
        return Result(
            "subnet",
            subject,
            "fail",
            "ec2:DescribeLaunchTemplateVersions",
            f"launch template {t.template_id} names no subnet (EC2 would pick the default VPC)",
            fix,
        )
    asked = "ec2:DescribeSubnets"
    try:
        found = ask(asked, clients("ec2").describe_subnets, SubnetIds=[sn])["Subnets"]
    except NoAnswerError as exc:
        return Result("subnet", subject, "unknown", asked, exc.detail, exc.fix)
    except ClientError as exc:
        if code_of(exc).startswith("InvalidSubnetID"):
            return Result(
                "subnet", subject, "fail", asked, f"{sn} of {t.template_id} does not exist", fix
            )
        return Result("subnet", subject, "unknown", asked, f"{code_of(exc)}: {message_of(exc)}", "")
    if not found or found[0].get("AvailabilityZone") != zone:
        where = found[0].get("AvailabilityZone") if found else "nowhere"
        return Result("subnet", subject, "fail", asked, f"{sn} is in {where}, not {zone}", fix)
    return Result("subnet", subject, "ok", asked, f"{sn} (the launch template's)")


# -- what the controller may do -----------------------------------------------------------
def check_dry_runs(
    stack: BurstStack,
    sets: list[NodeSet],
    launcher: Launcher,
    templates: dict[str, Template],
    clients: Clients,
) -> list[Result]:
    """CreateFleet and RunInstances with DryRun, as the caller: DryRunOperation = allowed."""
    out: list[Result] = []
    fix = (
        f"attach `coreburst burst iam-policy --stack {stack.name} --account <id>` to the "
        "controller's credentials; `aws sts decode-authorization-message` reads the reason"
    )
    ec2 = clients("ec2")
    for ns in sets:
        t = templates.get(ns.cluster)
        if t is None:
            continue
        zone = (list(ns.zones) or [stack.config.availability_zone])[0]
        try:
            fleet = launcher.fleet_request(
                ns, t.template_id, 1, False, choices=[(ns.instance_type, zone)]
            )
        except KeyError:
            continue  # no tagged subnet for the zone: the subnet line says so
        calls: list[tuple[str, Callable[..., Any], dict[str, Any]]] = [
            ("ec2:CreateFleet", ec2.create_fleet, {**fleet, "DryRun": True}),
            (
                "ec2:RunInstances",
                ec2.run_instances,
                {
                    "LaunchTemplate": {"LaunchTemplateId": t.template_id, "Version": "$Latest"},
                    "InstanceType": ns.instance_type,
                    "MinCount": 1,
                    "MaxCount": 1,
                    "TagSpecifications": fleet["TagSpecifications"],
                    "DryRun": True,
                },
            ),
        ]
        for action, fn, req in calls:
            subject = f"{ns.cluster}: {action.split(':')[1]} DryRun"
            try:
                fn(**req)
                out.append(
                    Result(
                        "dry-run",
                        subject,
                        "unknown",
                        action,
                        "EC2 answered without DryRunOperation",
                        fix,
                    )
                )
            except ClientError as exc:
                code = code_of(exc)
                if code == "DryRunOperation":
                    out.append(
                        Result("dry-run", subject, "ok", action, "allowed (DryRunOperation)")
                    )
                elif code in ("UnauthorizedOperation", "AccessDenied"):
                    out.append(Result("dry-run", subject, "fail", action, f"refused ({code})", fix))
                else:
                    out.append(
                        Result("dry-run", subject, "fail", action, f"{code}: {message_of(exc)}", "")
                    )
            except BotoCoreError as exc:
                out.append(
                    Result(
                        "dry-run",
                        subject,
                        "unknown",
                        action,
                        f"no answer ({exc})",
                        "check the network",
                    )
                )
    return out


def simulated_actions(
    stack: BurstStack, caller: Caller
) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(action, resource ARN, context entries) for what resume, suspend and the reconciler
    call that a dry run cannot show, with the condition keys the controller policy
    (coreburst/burst/iam.py) reads, as the real request would carry them."""
    region = stack.config.region
    p = partition_of(region)
    ec2 = f"arn:{p}:ec2:{region}:{caller.account}"

    def ctx(key: str, values: list[str], kind: str = "string") -> dict[str, Any]:
        return {"ContextKeyName": key, "ContextKeyValues": values, "ContextKeyType": kind}

    stack_tag = ctx(f"aws:ResourceTag/{STACK_TAG_KEY}", [stack.name])
    out: list[tuple[str, str, list[dict[str, Any]]]] = [
        (a, "*", [])
        for a in (
            "ec2:DescribeInstances",
            "ec2:DescribeSubnets",
            "ec2:DescribeLaunchTemplates",
            "ec2:DescribeLaunchTemplateVersions",
        )
    ]
    out.append(
        (
            "ec2:CreateTags",
            f"{ec2}:instance/i-00000000000000000",
            [
                stack_tag,
                ctx(
                    "aws:TagKeys",
                    [stack.settings.node_tag_key, *OWNER_TAG_KEYS],
                    "stringList",
                ),
            ],
        )
    )
    out.append(("ec2:TerminateInstances", f"{ec2}:instance/i-00000000000000000", [stack_tag]))
    for c in stack.config.clusters:
        if c.nodes > 0:
            out.append(
                (
                    "iam:PassRole",
                    f"arn:{p}:iam::{caller.account}:role/{c.name}-node-role-0000000",
                    [ctx("iam:PassedToService", ["ec2.amazonaws.com"])],
                )
            )
    return out


def check_simulation(
    stack: BurstStack, caller: Caller, principal: str, clients: Clients
) -> list[Result]:
    asked = "iam:SimulatePrincipalPolicy"
    out: list[Result] = []
    fix = (
        f"attach `coreburst burst iam-policy --stack {stack.name} --account {caller.account}` "
        f"to {principal}"
    )
    iam = clients("iam")
    for action, resource, context in simulated_actions(stack, caller):
        subject = f"{action} on {resource.rsplit(':', 1)[-1] if resource != '*' else '*'}"
        try:
            resp = ask(
                asked,
                iam.simulate_principal_policy,
                PolicySourceArn=principal,
                ActionNames=[action],
                ResourceArns=[resource],
                ContextEntries=context,
            )
        except NoAnswerError as exc:
            # One line for all: the same permission is missing for every action.
            return [Result("permission", f"{principal}", "unknown", asked, exc.detail, exc.fix)]
        except ClientError as exc:
            return [
                Result(
                    "permission",
                    principal,
                    "unknown",
                    asked,
                    f"{code_of(exc)}: {message_of(exc)}",
                    "name the controller's role or user ARN with --principal",
                )
            ]
        results = resp.get("EvaluationResults") or []
        decision = results[0].get("EvalDecision", "unknown") if results else "unknown"
        if decision == "allowed":
            out.append(Result("permission", subject, "ok", asked, "allowed"))
        elif decision in ("implicitDeny", "explicitDeny"):
            out.append(
                Result("permission", subject, "fail", asked, f"{decision} for {principal}", fix)
            )
        else:
            out.append(
                Result("permission", subject, "unknown", asked, f"decision {decision!r}", fix)
            )
    return out


# -- Slurm ------------------------------------------------------------------------------------
def parse_show_config(text: str) -> dict[str, str]:
    """``scontrol show config`` (every release: its ``--json`` form is not in 22.05) as
    key -> value.

    >>> parse_show_config("Configuration data as of x\\nResumeTimeout           = 1800 sec\\n")
    {'ResumeTimeout': '1800 sec'}
    """
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"^(\S+)\s*=\s?(.*)$", line)
        if m:
            out.setdefault(m.group(1), m.group(2).strip())
    return out


def _seconds(value: str) -> int | None:
    m = re.match(r"^(\d+)", value)
    return int(m.group(1)) if m else None


def _user(value: str) -> tuple[str, int | None]:
    """``slurm(64030)`` -> ("slurm", 64030)."""
    m = re.fullmatch(r"(\S+?)\((\d+)\)", value.strip())
    if m:
        return m.group(1), int(m.group(2))
    try:
        return value, pwd.getpwnam(value).pw_uid
    except KeyError:
        return value, None


def executable_by(path: Path, uid: int, gids: set[int]) -> str | None:
    """Why ``uid`` (in ``gids``) cannot run ``path``, or None when it can: the file
    executable for it and every directory above it searchable."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return f"{path} does not exist"
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a file"

    def allowed(s: os.stat_result, owner: int, group: int, other: int) -> bool:
        if uid == 0:
            return bool(s.st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH))
        if s.st_uid == uid:
            return bool(s.st_mode & owner)
        if s.st_gid in gids:
            return bool(s.st_mode & group)
        return bool(s.st_mode & other)

    if not allowed(st, stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH):
        return f"{path} is mode {stat.filemode(st.st_mode)} owned by {st.st_uid}:{st.st_gid}"
    for d in path.parents:
        ds = d.stat()
        if not allowed(ds, stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH):
            return f"directory {d} is mode {stat.filemode(ds.st_mode)}, not searchable"
    return None


def _gids(name: str, uid: int) -> set[int]:
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return set()
    return set(os.getgrouplist(pw.pw_name, pw.pw_gid)) | {
        g.gr_gid for g in grp.getgrall() if name in g.gr_mem
    }


def check_slurm_config(
    stack: BurstStack, config_text: str, reservations: list[str] | None
) -> list[Result]:
    """The Slurm side from ``scontrol show config`` output and ``reservations`` (names, None
    when they could not be read); the programs are looked at on this host's filesystem."""
    conf = parse_show_config(config_text)
    s = stack.settings
    out: list[Result] = []
    asked = "scontrol show config"
    where = conf.get("SLURM_CONF", "slurm.conf")
    wanted = {
        "ResumeProgram": s.resume_program,
        "SuspendProgram": s.suspend_program,
        "ResumeFailProgram": s.resume_fail_program,
    }
    wrong = {k: conf.get(k, "(null)") for k, v in wanted.items() if conf.get(k) != v}
    if wrong:
        out.append(
            Result(
                "slurm-fragment",
                where,
                "fail",
                asked,
                "; ".join(f"{k} is {v}, not {wanted[k]}" for k, v in wrong.items()),
                f"add `Include <dir>/burst.conf` (coreburst burst slurm-conf --stack {stack.name} "
                "--out <dir>; coreburst burst install does both) at the end of slurm.conf, then "
                "`scontrol reconfigure`",
            )
        )
    else:
        out.append(
            Result("slurm-fragment", where, "ok", asked, "the stack's programs are slurmctld's")
        )
    user, uid = _user(conf.get("SlurmUser", "root(0)"))
    for key, program in wanted.items():
        subject = f"{key} {program}"
        if uid is None:
            out.append(
                Result(
                    "slurm-program",
                    subject,
                    "unknown",
                    f"{asked} SlurmUser",
                    f"SlurmUser {user} is not a user here",
                    "run the check on the controller",
                )
            )
            continue
        why = executable_by(Path(program), uid, _gids(user, uid))
        if why is None:
            out.append(
                Result("slurm-program", subject, "ok", "stat", f"executable by SlurmUser {user}")
            )
        else:
            out.append(
                Result(
                    "slurm-program",
                    subject,
                    "fail",
                    "stat",
                    f"SlurmUser {user} cannot run it: {why}",
                    f"coreburst burst install --stack {stack.name} writes the programs mode 0755",
                )
            )
    live = _seconds(conf.get("ResumeTimeout", ""))
    subject = "ResumeTimeout"
    if live is None:
        out.append(Result("slurm-timeout", subject, "unknown", asked, "not in the output", ""))
    elif live >= s.resume_timeout:
        out.append(
            Result(
                "slurm-timeout",
                subject,
                "ok",
                asked,
                f"{live} s >= the pools' boot allowance {s.resume_timeout} s",
            )
        )
    else:
        out.append(
            Result(
                "slurm-timeout",
                subject,
                "fail",
                asked,
                f"{live} s < the pools' boot allowance {s.resume_timeout} s "
                "(coreburst:burst.resumeTimeout): slurmctld would set booting nodes DOWN",
                "remove the later ResumeTimeout line from slurm.conf (the fragment sets it), or "
                "lower coreburst:burst.resumeTimeout and re-render",
            )
        )
    holds = _hold_names(stack)
    if holds:
        r_asked = "scontrol -o show reservation"
        for name in holds:
            if reservations is None:
                out.append(
                    Result(
                        "slurm-reservation",
                        name,
                        "unknown",
                        r_asked,
                        "reservations not readable",
                        "",
                    )
                )
            elif name in reservations:
                out.append(Result("slurm-reservation", name, "ok", r_asked, "exists"))
            else:
                out.append(
                    Result(
                        "slurm-reservation",
                        name,
                        "fail",
                        r_asked,
                        "missing: the Capacity Block's nodes may be powered up outside the block",
                        "run reservations.sh from `coreburst burst slurm-conf --out` on the "
                        "controller",
                    )
                )
    if s.spend_gate is not None:
        g_asked = f"read {s.spend_gate.guardrails_config}"
        try:
            lim = gate_limits(s.spend_gate)
            out.append(
                Result(
                    "spend-gate",
                    "guardrails scope",
                    "ok",
                    g_asked,
                    f"scope {lim.scope!r}, snapshots in {lim.state_path}",
                )
            )
        except StackConfigError as exc:
            out.append(
                Result(
                    "spend-gate",
                    "guardrails scope",
                    "fail",
                    g_asked,
                    str(exc),
                    "fix the guardrails config it names",
                )
            )
    return out


def _hold_names(stack: BurstStack) -> list[str]:
    names = []
    for cmd in reservation_commands(stack, datetime.now(UTC)):
        m = re.search(r"ReservationName=(\S+)", cmd)
        if m and m.group(1) not in names:
            names.append(m.group(1))
    return names


def slurm_checks(stack: BurstStack, scontrol: Any) -> list[Result]:
    """:func:`check_slurm_config` over a live controller (``scontrol``: guardrails'
    Scontrol); a controller that does not answer is one ? line."""
    from guardrails.adapters.slurm import SlurmError

    try:
        text = scontrol.run("show", "config")
    except SlurmError as exc:
        return [
            Result(
                "slurm",
                "slurmctld",
                "unknown",
                "scontrol show config",
                str(exc),
                "run the check on the controller (or --skip slurm where there is none)",
            )
        ]
    try:
        resv: list[str] | None = scontrol.reservations()
    except SlurmError:
        resv = None
    return check_slurm_config(stack, text, resv)


# The guardrail rule whose queue and EventBridge rules the stack declares
# (coreburst/burst/spot_interruption.py registers it; infra/components/guardrails.py SPOT_RULE).
SPOT_RULE = "spot-interruption"


def deploys_spot_events(stack: BurstStack) -> bool:
    """Whether ``pulumi up`` of the stack declares the spot-event queue and its rules: the
    stack deploys the guardrails (``coreburst:guardrails.enabled``) with the spot rule."""
    g = stack.config.guardrails
    return g.enabled and (g.rules is None or SPOT_RULE in g.rules)


# -- the whole check -------------------------------------------------------------------------
# What --skip may leave out: the account, the controller's permissions (DryRun launches and
# policy simulation: in CI without the controller's ARN they would ask about the wrong
# principal), the Slurm controller.
SECTIONS = ("aws", "permissions", "slurm")


def run_checks(
    stack: BurstStack,
    clients: Clients,
    *,
    scontrol: Any = None,
    principal: str | None = None,
    skip: Iterable[str] = (),
    catalog: Catalog | None = None,
) -> list[Result]:
    """Every check of the stack, in the order a reader fixes them."""
    catalog = catalog or load_catalog()
    skip = set(skip)
    sets = node_sets(stack, catalog)
    out: list[Result] = []
    if "aws" not in skip:
        who, caller = check_identity(clients)
        out.append(who)
        if caller is not None:
            out += check_offerings(stack, sets, clients)
            out += check_quotas(sets, clients, catalog)
            launcher = _launcher(stack, clients("ec2"))
            results, templates = check_templates(stack, sets, launcher, clients)
            out += results
            out += check_subnets(stack, sets, launcher, templates, clients)
            if "permissions" not in skip:
                if principal is None:  # a dry run asks as the caller: only then the controller
                    out += check_dry_runs(stack, sets, launcher, templates, clients)
                out += check_simulation(stack, caller, principal or caller.principal, clients)
            if any(ns.market == "spot" for ns in sets) and deploys_spot_events(stack):
                out += check_spot_events(clients)
    if "slurm" not in skip and scontrol is not None:
        out += slurm_checks(stack, scontrol)
    return out
