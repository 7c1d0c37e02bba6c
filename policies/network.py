"""Network policies: no ingress from the internet, the EFA group's self-referencing rules, and
Lustre's ports open only to the cluster.

Rules and groups are linked through the engine's property dependencies (a rule's
``securityGroupId`` depends on its group), because ids are still unknown at preview.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyResource,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from policies.common import (
    INSTANCE,
    LAUNCH_TEMPLATE,
    LUSTRE,
    SECURITY_GROUP,
    SG_EGRESS,
    SG_INGRESS,
    SG_RULE,
    as_int,
    deps,
    of_type,
    schema,
    settings,
    truthy,
)

PUBLIC_CIDRS = ("0.0.0.0/0", "::/0")
ALL_PROTOCOLS = ("-1", "all")
# Lustre's LNet ports: 988 and 1018-1023 (opening only some of them breaks clients under load).
LUSTRE_PORTS = frozenset({988, *range(1018, 1024)})

INGRESS_SCHEMA = schema(
    allowPublicIngress={
        "type": "boolean",
        "default": False,
        "description": "Allow ingress from 0.0.0.0/0 or ::/0 (e.g. a public bastion stack)",
    },
)


def _ports(props: Mapping[str, Any], proto_key: str = "ipProtocol") -> str:
    proto = str(props.get(proto_key, props.get("protocol", "")))
    if proto in ALL_PROTOCOLS:
        return "all traffic"
    low, high = as_int(props.get("fromPort")), as_int(props.get("toPort"))
    return f"{proto} {low}" if low == high else f"{proto} {low}-{high}"


def _covered(props: Mapping[str, Any], proto_key: str = "ipProtocol") -> set[int]:
    proto = str(props.get(proto_key, props.get("protocol", "")))
    if proto in ALL_PROTOCOLS:
        return set(LUSTRE_PORTS)
    if proto not in ("tcp", "6"):
        return set()
    low, high = as_int(props.get("fromPort")), as_int(props.get("toPort"))
    return {p for p in LUSTRE_PORTS if low <= p <= high}


def no_public_ingress(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """No security-group ingress from 0.0.0.0/0 or ::/0 unless allowPublicIngress is set.

    >>> # "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule ssh allows ingress from
    >>> #  0.0.0.0/0 on tcp 22"
    """
    if settings(args, INGRESS_SCHEMA)["allowPublicIngress"]:
        return
    label = f"{args.resource_type} {args.name}"
    found: list[tuple[str, str]] = []
    props = args.props
    if args.resource_type == SG_INGRESS:
        for key in ("cidrIpv4", "cidrIpv6"):
            if props.get(key) in PUBLIC_CIDRS:
                found.append((props[key], _ports(props)))
    elif args.resource_type == SG_RULE and props.get("type") == "ingress":
        for cidr in [*(props.get("cidrBlocks") or []), *(props.get("ipv6CidrBlocks") or [])]:
            if cidr in PUBLIC_CIDRS:
                found.append((cidr, _ports(props, "protocol")))
    elif args.resource_type == SECURITY_GROUP:
        for rule in props.get("ingress") or []:
            for cidr in [*(rule.get("cidrBlocks") or []), *(rule.get("ipv6CidrBlocks") or [])]:
                if cidr in PUBLIC_CIDRS:
                    found.append((cidr, _ports(rule, "protocol")))
    for cidr, ports in found:
        report_violation(f"{label} allows ingress from {cidr} on {ports}", None)


def _rules(resources: list[PolicyResource], kind: str) -> list[tuple[PolicyResource, Any, Any]]:
    """(rule, group urns, source group urns) for standalone rules of one direction."""
    typ = SG_INGRESS if kind == "ingress" else SG_EGRESS
    out = []
    for r in of_type(resources, typ):
        groups = {g.urn for g in deps(r, "securityGroupId", SECURITY_GROUP)}
        peers = {g.urn for g in deps(r, "referencedSecurityGroupId", SECURITY_GROUP)}
        out.append((r, groups, peers))
    for r in of_type(resources, SG_RULE):
        if r.props.get("type") == kind:
            groups = {g.urn for g in deps(r, "securityGroupId", SECURITY_GROUP)}
            peers = set(groups) if truthy(r.props.get("self")) else set()
            peers |= {g.urn for g in deps(r, "sourceSecurityGroupId", SECURITY_GROUP)}
            out.append((r, groups, peers))
    return out


def _self_all_traffic(sg: PolicyResource, resources: list[PolicyResource], kind: str) -> bool:
    for rule in sg.props.get(kind) or []:
        if truthy(rule.get("self")) and str(rule.get("protocol")) in ALL_PROTOCOLS:
            return True
    for r, groups, peers in _rules(resources, kind):
        proto = str(r.props.get("ipProtocol", r.props.get("protocol", "")))
        if sg.urn in groups and sg.urn in peers and proto in ALL_PROTOCOLS:
            return True
    return False


def _efa_templates(resources: list[PolicyResource]) -> list[PolicyResource]:
    return [
        lt
        for lt in of_type(resources, LAUNCH_TEMPLATE)
        if any(
            n.get("interfaceType") in ("efa", "efa-only")
            for n in lt.props.get("networkInterfaces") or []
        )
    ]


def efa_security_group_self_referencing(
    args: StackValidationArgs, report_violation: ReportViolation
) -> None:
    """An EFA launch template has a group that allows all traffic from and to itself.

    >>> # "... dev-lt has EFA interfaces but none of its security groups (net-efa, net-node)
    >>> #  allows all traffic to itself (egress); OS-bypass traffic would fail"
    """
    for lt in _efa_templates(args.resources):
        groups = deps(lt, "networkInterfaces", SECURITY_GROUP)
        if not groups:
            continue
        for kind in ("ingress", "egress"):
            if not any(_self_all_traffic(g, args.resources, kind) for g in groups):
                direction = "from" if kind == "ingress" else "to"
                report_violation(
                    f"{LAUNCH_TEMPLATE} {lt.name} has EFA interfaces but none of its security "
                    f"groups ({', '.join(g.name for g in groups)}) allows all traffic {direction} "
                    f"itself ({kind}); OS-bypass traffic would fail",
                    lt.urn,
                )


def _cluster_groups(resources: list[PolicyResource]) -> set[str]:
    urns = set()
    for lt in of_type(resources, LAUNCH_TEMPLATE):
        urns |= {g.urn for g in deps(lt, "networkInterfaces", SECURITY_GROUP)}
        urns |= {g.urn for g in deps(lt, "vpcSecurityGroupIds", SECURITY_GROUP)}
    for i in of_type(resources, INSTANCE):
        urns |= {g.urn for g in deps(i, "vpcSecurityGroupIds", SECURITY_GROUP)}
    return urns


def lustre_ports_cluster_only(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """Lustre's ports (988, 1018-1023) on the file system's groups are open to the cluster's
    groups only, and all of them are open.

    >>> # "... lustre-fs: rule lustre-any opens tcp 988 to 10.0.0.0/8; allow the cluster's
    >>> #  security group instead"
    """
    cluster = _cluster_groups(args.resources)
    for fs in of_type(args.resources, LUSTRE):
        groups = {g.urn for g in deps(fs, "securityGroupIds", SECURITY_GROUP)}
        if not groups:
            continue
        open_to_cluster: set[int] = set()
        for g in deps(fs, "securityGroupIds", SECURITY_GROUP):
            for rule in g.props.get("ingress") or []:
                if _covered(rule, "protocol") and (rule.get("cidrBlocks") or []):
                    report_violation(
                        f"{LUSTRE} {fs.name}: group {g.name} opens {_ports(rule, 'protocol')} to "
                        f"{', '.join(rule['cidrBlocks'])}; allow the cluster's security group "
                        "instead",
                        g.urn,
                    )
        for r, rule_groups, peers in _rules(args.resources, "ingress"):
            if not rule_groups & groups:
                continue
            ports = _covered(r.props)
            if not ports:
                continue
            cidrs = [
                str(r.props[k])
                for k in ("cidrIpv4", "cidrIpv6", "cidrBlocks", "prefixListId")
                if r.props.get(k)
            ]
            if cidrs:
                report_violation(
                    f"{LUSTRE} {fs.name}: rule {r.name} opens {_ports(r.props)} to "
                    f"{', '.join(cidrs)}; allow the cluster's security group instead",
                    r.urn,
                )
            # The file system's own groups are allowed peers: its file servers must reach each
            # other on these ports (FSx for Lustre user guide, "File system access control with
            # Amazon VPC"; CreateFileSystem fails without it).
            elif cluster and not peers <= cluster | groups:
                others = ", ".join(p.rsplit("::", 1)[-1] for p in sorted(peers - cluster - groups))
                report_violation(
                    f"{LUSTRE} {fs.name}: rule {r.name} opens {_ports(r.props)} to {others}, "
                    "which no cluster node uses",
                    r.urn,
                )
            elif peers & cluster:
                open_to_cluster |= ports
        closed = sorted(LUSTRE_PORTS - open_to_cluster)
        if cluster and closed:
            report_violation(
                f"{LUSTRE} {fs.name}: Lustre port(s) {', '.join(map(str, closed))} are not open "
                "to the cluster; open TCP 988 and 1018-1023 from the cluster's group",
                fs.urn,
            )


POLICIES = [
    ResourceValidationPolicy(
        name="no-public-ingress",
        description="Security groups admit no traffic from 0.0.0.0/0 or ::/0.",
        validate=no_public_ingress,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=INGRESS_SCHEMA,
        remediation_steps=(
            "Reach nodes through SSM Session Manager; if a public listener is intended, set "
            "allowPublicIngress in the stack's policy config."
        ),
    ),
    StackValidationPolicy(
        name="efa-security-group-self-referencing",
        description=(
            "Every EFA launch template has a security group with all-traffic self-referencing "
            "rules in both directions."
        ),
        validate=efa_security_group_self_referencing,
        enforcement_level=EnforcementLevel.MANDATORY,
        remediation_steps=(
            "Add ingress and egress rules with ip_protocol -1 and "
            "referenced_security_group_id = the group itself."
        ),
    ),
    StackValidationPolicy(
        name="lustre-ports-cluster-only",
        description="Lustre ports 988 and 1018-1023 are open to the cluster's groups only.",
        validate=lustre_ports_cluster_only,
        enforcement_level=EnforcementLevel.MANDATORY,
        remediation_steps=(
            "Open TCP 988 and 1018-1023 on the Lustre group with referenced_security_group_id "
            "= the cluster's EFA group; no CIDR sources."
        ),
    ),
]
