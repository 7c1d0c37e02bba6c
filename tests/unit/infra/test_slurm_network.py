"""Burst nodes reach Slurm, and nothing else reaches them: the flows are read off the rendered
slurm.conf fragment (``coreburst burst slurm-conf``) and the stack file, here, independently of
infra/slurm_network.py, and compared with the security-group rules and routes of the stack as
the Pulumi program declares it (under Pulumi's mocks, infra/offline.py).

Who connects to whom, from Slurm's "Network Configuration Guide"
(https://slurm.schedmd.com/network.html) and slurm.conf(5)
(https://slurm.schedmd.com/slurm.conf.html):

* slurmctld -> slurmd on SlurmdPort (6818) or the node's ``Port=``; srun -> slurmd too
  ("srun forwards credential with task info to slurmd"), from wherever users run it;
* slurmd (and slurmstepd, and an srun inside a batch job) -> slurmctld on SlurmctldPort (6817,
  or the port slurmd's ``--conf-server`` names);
* slurmstepd -> srun on SrunPortRange ("slurmstepd connects I/O", "notifies srun"), and
  slurmctld -> srun on the same range ("The srun creates a set of listening ports to
  communicate with the controller, the slurmstepd and to handle the application I/O").

What AWS does with the rules and routes (the pages relied on):

* Security groups are stateful: a reply is allowed whatever the rules say, so each flow needs
  a rule only where it starts or lands (Amazon VPC user guide, "Control traffic to your AWS
  resources using security groups",
  https://docs.aws.amazon.com/vpc/latest/userguide/vpc-security-groups.html). A group created
  by the provider has no egress rule (pulumi-aws, like Terraform, removes AWS's default
  allow-all egress), so a connection a burst node opens needs an egress rule.
* A rule's description may hold a-z, A-Z, 0-9, spaces and ``._-:/()#,@[]+=&;{}!$*``, up to
  255 characters (EC2 API reference, IpRange,
  https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_IpRange.html).
* Traffic takes the most specific route that matches (Amazon VPC user guide, "Route priority",
  https://docs.aws.amazon.com/vpc/latest/userguide/route-tables-priority.html): the on-prem
  routes beat the NAT's 0.0.0.0/0.
* A Site-to-Site VPN with static routing needs the on-prem prefixes as static routes on the VPN
  connection and a route to the virtual private gateway in the subnets' route table (AWS
  Site-to-Site VPN user guide, "Route tables and VPN route priority",
  https://docs.aws.amazon.com/vpn/latest/s2svpn/VPNRoutingTypes.html, and "Configure routing"
  in "Get started", https://docs.aws.amazon.com/vpn/latest/s2svpn/SetUpVPNConnections.html).
* Over a Direct Connect private VIF, on-prem prefixes arrive by BGP and reach the subnets by
  route propagation from the virtual private gateway (Direct Connect user guide, "Virtual
  private gateway associations",
  https://docs.aws.amazon.com/directconnect/latest/UserGuide/virtualgateways.html).
"""

from __future__ import annotations

import copy
import ipaddress
import re
from pathlib import Path
from typing import Any

import pytest

from coreburst.burst.config import load_burst_stack, parse_burst
from coreburst.burst.slurmconf import render_slurm_include
from infra.config import StackConfigError
from infra.offline import Evaluation, evaluate_config, load_stack_yaml
from tests.helpers.burst import write_stack

ROOT = Path(__file__).resolve().parents[3]
# slurm.conf(5) defaults: SlurmdPort, SlurmctldPort.
SLURMD_DEFAULT, SLURMCTLD_DEFAULT = 6818, 6817
SG = "aws:ec2/securityGroup:SecurityGroup"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
ROUTE = "aws:ec2/route:Route"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
# Allowed in a rule description (EC2 API reference, IpRange Description).
DESCRIPTION = re.compile(r"^[a-zA-Z0-9 ._\-:/()#,@\[\]+=&;{}!$*]{0,255}$")

Rule = tuple[str, str, str, int, int]  # (direction, peer, protocol, from port, to port)

# The burst nodes' rules that are not Slurm's, each with why it is there.
NOT_SLURM_CIDR: set[Rule] = {
    # HTTPS to AWS APIs (SSM, CloudWatch, S3, Secrets Manager for the munge key) and package
    # mirrors, through the NAT gateway; the only rule to 0.0.0.0/0, and no ingress.
    ("egress", "0.0.0.0/0", "tcp", 443, 443),
}
NOT_SLURM_GROUPS: set[Rule] = {
    # EFA: all traffic from and to the EFA group itself, both ways (OS bypass needs both); it
    # also carries Slurm among burst nodes (slurmd fan-out, srun in a batch job and its steps).
    ("ingress", "group net-efa", "-1", 0, 0),
    ("egress", "group net-efa", "-1", 0, 0),
    # Lustre's LNet ports (988, 1018-1023) among clients and with the file system's group
    # (FSx for Lustre user guide, "File system access control with Amazon VPC").
    *(
        (way, f"group {peer}", "tcp", low, high)
        for way in ("ingress", "egress")
        for peer in ("net-node", "net-lustre")
        for low, high in ((988, 988), (1018, 1023))
    ),
}


# -- what the rendered fragment and the stack file say -------------------------------------------


def _spans(ports: set[int]) -> set[tuple[int, int]]:
    """Ports as the fewest contiguous (low, high) spans."""
    out: list[list[int]] = []
    for p in sorted(ports):
        if out and p == out[-1][1] + 1:
            out[-1][1] = p
        else:
            out.append([p, p])
    return {(a, b) for a, b in out}


def needed_flows(fragment: str, config: dict[str, Any]) -> set[Rule]:
    """The flows Slurm needs between the on-prem blocks and the burst nodes, from the rendered
    fragment (SrunPortRange=, the cloud nodes' Port= or SlurmdPort's default) and the stack
    file (confServer's ports, or slurmctldPort; onPrem's blocks)."""
    (srun_line,) = [x for x in fragment.splitlines() if x.startswith("SrunPortRange=")]
    low, high = map(int, srun_line.removeprefix("SrunPortRange=").split("-"))
    srun = (low, high)
    node_lines = [x for x in fragment.splitlines() if x.startswith("NodeName=")]
    assert node_lines and all("State=CLOUD" in x for x in node_lines)
    ports = {int(m.group(1)) for x in node_lines if (m := re.search(r" Port=(\d+) ", x))}
    named = [" Port=" in x for x in node_lines]
    assert all(named) or not any(named), "every cloud node line names its port, or none does"
    slurmd = _spans(ports or {SLURMD_DEFAULT})
    burst = config["coreburst:burst"]
    if "slurmctldPort" in burst:
        a, _, b = str(burst["slurmctldPort"]).partition("-")
        slurmctld = {(int(a), int(b or a))}
    else:
        server = burst["node"]["confServer"]
        slurmctld = {
            (p, p)
            for p in (
                int(e.partition(":")[2]) if ":" in e else SLURMCTLD_DEFAULT
                for e in server.split(",")
            )
        }
    controllers = burst["onPrem"]["controllerCidrs"]
    cores = burst["onPrem"].get("coreCidrs", [])
    flows: set[Rule] = set()
    for lo, hi in slurmd:
        flows |= {("ingress", c, "tcp", lo, hi) for c in [*controllers, *cores]}
    flows |= {("ingress", c, "tcp", *srun) for c in controllers}
    for lo, hi in slurmctld:
        flows |= {("egress", c, "tcp", lo, hi) for c in controllers}
    flows |= {("egress", c, "tcp", *srun) for c in cores}
    return flows


# -- what the evaluated stack declares -----------------------------------------------------------


def _by_id(ev: Evaluation) -> dict[str, str]:
    # infra/offline.py's mocks give every resource the id "<name>-id".
    return {f"{r.name}-id": r.name for r in ev.resources}


def node_groups(ev: Evaluation) -> set[str]:
    """Names of the security groups every interface of every launch template carries."""
    by_id = _by_id(ev)
    seen: list[set[str]] = []
    for lt in ev.of_type(LT):
        for nic in lt.inputs["networkInterfaces"]:
            seen.append({by_id[g] for g in nic["securityGroups"]})
    assert seen and all(s == seen[0] for s in seen), "interfaces carry different groups"
    return seen[0]


def node_rules(ev: Evaluation) -> tuple[set[Rule], set[Rule], list[str]]:
    """(rules naming a CIDR block, rules naming a group, descriptions) of the burst nodes'
    groups."""
    by_id = _by_id(ev)
    groups = node_groups(ev)
    for g in groups:
        sg = ev.named(g).inputs
        assert not sg.get("ingress") and not sg.get("egress"), f"{g} has inline rules"
    cidr: set[Rule] = set()
    referenced: set[Rule] = set()
    descriptions = []
    for typ, way in ((INGRESS, "ingress"), (EGRESS, "egress")):
        for r in ev.of_type(typ):
            i = r.inputs
            if by_id[i["securityGroupId"]] not in groups:
                continue
            assert not i.get("cidrIpv6") and not i.get("prefixListId"), r.name
            rule = (
                way,
                i.get("cidrIpv4") or f"group {by_id[i['referencedSecurityGroupId']]}",
                str(i["ipProtocol"]),
                int(i.get("fromPort", 0)),
                int(i.get("toPort", 0)),
            )
            assert rule not in cidr | referenced, f"{r.name} repeats a rule (EC2 refuses it)"
            (cidr if "cidrIpv4" in i else referenced).add(rule)
            descriptions.append(i.get("description", ""))
    return cidr, referenced, descriptions


def _routes(ev: Evaluation) -> list[dict[str, Any]]:
    private = f"net-private-rt-{ev.config.availability_zone}-id"
    return [r.inputs for r in ev.of_type(ROUTE) if r.inputs["routeTableId"] == private]


def _net(cidr: str) -> ipaddress.IPv4Network:
    net = ipaddress.ip_network(cidr)
    assert isinstance(net, ipaddress.IPv4Network)
    return net


def assert_routed_over_the_vpn(ev: Evaluation, cidrs: list[str]) -> None:
    conn = ev.named("vpn-connection").inputs
    assert conn["staticRoutesOnly"] is True and conn["type"] == "ipsec.1"
    assert conn["vpnGatewayId"] == "vpn-vgw-id" and conn["customerGatewayId"] == "vpn-cgw-id"
    assert ev.named("vpn-vgw").inputs["vpcId"] == "net-vpc-id"
    static = [
        _net(r.inputs["destinationCidrBlock"])
        for r in ev.of_type("aws:ec2/vpnConnectionRoute:VpnConnectionRoute")
        if r.inputs["vpnConnectionId"] == "vpn-connection-id"
    ]
    routes = _routes(ev)
    for cidr in map(_net, cidrs):
        assert any(cidr.subnet_of(s) for s in static), f"{cidr}: no static route on the VPN"
        matching = [r for r in routes if cidr.subnet_of(_net(r["destinationCidrBlock"]))]
        best = max(matching, key=lambda r: _net(r["destinationCidrBlock"]).prefixlen)
        assert best.get("gatewayId") == "vpn-vgw-id", f"{cidr} goes to {best}, not the VPN"
        assert sum(_net(r["destinationCidrBlock"]) == _net(best["destinationCidrBlock"])
                   for r in matching) == 1  # fmt: skip


def assert_routed_over_direct_connect(ev: Evaluation, cidrs: list[str]) -> None:
    """Private VIF: the prefixes come by BGP; what the stack declares is the propagation into
    the private route table and the prefixes it lets on-prem use (only a real account shows the
    propagated routes themselves)."""
    (prop,) = ev.of_type("aws:ec2/vpnGatewayRoutePropagation:VpnGatewayRoutePropagation")
    private = f"net-private-rt-{ev.config.availability_zone}-id"
    assert prop.inputs == {"vpnGatewayId": "link-vgw-id", "routeTableId": private}
    assert ev.config.hybrid_link is not None
    prefixes = [_net(p) for p in ev.config.hybrid_link.on_prem_prefixes]
    for cidr in map(_net, cidrs):
        assert any(cidr.subnet_of(p) for p in prefixes)
        # Nothing declared sends it elsewhere more specifically than the default route.
        assert all(_net(r["destinationCidrBlock"]).prefixlen == 0 for r in _routes(ev)
                   if cidr.subnet_of(_net(r["destinationCidrBlock"])))  # fmt: skip


# -- the stacks -------------------------------------------------------------------------------


def _shipped() -> dict[str, Any]:
    return copy.deepcopy(load_stack_yaml("burst", ROOT))


def _ports_variant() -> dict[str, Any]:
    """A lab-style stack: one slurmd port per node (Port=), a backup controller, and a
    controller listening on a port range."""
    cfg = _shipped()
    burst = cfg["coreburst:burst"]
    burst["slurmdPortBase"] = 30000
    burst["slurmctldPort"] = "6817-6818"
    burst["srunPortRange"] = "50001-51000"
    burst["node"]["confServer"] = "ctl1.example.internal:6817,ctl2.example.internal"
    burst["onPrem"] = {
        "controllerCidrs": ["10.20.0.10/32", "10.20.0.11/32"],
        "coreCidrs": ["10.20.16.0/24", "10.20.32.0/23"],
    }
    return cfg


def _slurmd_port_variant() -> dict[str, Any]:
    cfg = _shipped()
    cfg["coreburst:burst"]["slurmdPort"] = 7018
    return cfg


def _direct_connect_variant() -> dict[str, Any]:
    cfg = _shipped()
    del cfg["coreburst:vpn"]
    cfg["coreburst:hybridLink"] = copy.deepcopy(
        load_stack_yaml("prod", ROOT)["coreburst:hybridLink"]
    )  # private VIF, on-prem 10.0.0.0/14 and 172.20.0.0/16
    cfg["coreburst:burst"]["onPrem"] = {
        "controllerCidrs": ["10.1.0.10/32"],
        "coreCidrs": ["172.20.4.0/24"],
    }
    return cfg


VARIANTS = {
    "shipped": _shipped,
    "per-node-ports": _ports_variant,
    "slurmd-port": _slurmd_port_variant,
    "direct-connect": _direct_connect_variant,
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_burst_nodes_open_exactly_what_the_rendered_slurm_conf_uses(
    variant: str, tmp_path: Path
) -> None:
    config = VARIANTS[variant]()
    write_stack(tmp_path, "b", config)
    fragment = render_slurm_include(load_burst_stack("b", tmp_path))
    ev = evaluate_config("b", config)

    needed = needed_flows(fragment, config)
    cidr_rules, group_rules, descriptions = node_rules(ev)
    assert cidr_rules == needed | NOT_SLURM_CIDR
    assert group_rules == NOT_SLURM_GROUPS
    assert all(DESCRIPTION.fullmatch(d) for d in descriptions), descriptions
    # Nothing but HTTPS is open to the internet, and nothing at all from it.
    assert {r for r in cidr_rules if r[1] == "0.0.0.0/0"} == NOT_SLURM_CIDR

    on_prem = config["coreburst:burst"]["onPrem"]
    cidrs = [*on_prem["controllerCidrs"], *on_prem.get("coreCidrs", [])]
    if "coreburst:vpn" in config:
        assert_routed_over_the_vpn(ev, cidrs)
    else:
        assert_routed_over_direct_connect(ev, cidrs)


def test_the_shipped_burst_stack_carries_its_link_and_the_ports_it_renders() -> None:
    """The example burst stack declares a hybrid link (the VPN) and the fragment it renders
    names the srun ports its security group opens; the flows are the five of docs/burst.md."""
    config = _shipped()
    assert "coreburst:vpn" in config and "coreburst:hybridLink" not in config
    fragment = render_slurm_include(load_burst_stack("burst", ROOT))
    assert "SrunPortRange=60001-63000" in fragment.splitlines()
    assert sorted(needed_flows(fragment, config)) == [
        ("egress", "10.20.0.10/32", "tcp", 6817, 6817),
        ("egress", "10.20.16.0/24", "tcp", 60001, 63000),
        ("ingress", "10.20.0.10/32", "tcp", 6818, 6818),
        ("ingress", "10.20.0.10/32", "tcp", 60001, 63000),
        ("ingress", "10.20.16.0/24", "tcp", 6818, 6818),
    ]


def test_stacks_without_burst_get_no_slurm_group() -> None:
    """dev and prod are not burst stacks: their nodes carry the EFA and node groups only."""
    for stack in ("dev", "prod"):
        ev = evaluate_config(stack, load_stack_yaml(stack, ROOT))
        assert node_groups(ev) == {"net-efa", "net-node"}
        assert not [r for r in ev.resources if r.name.startswith("net-slurm")]


# -- bad settings: one line, before anything is declared -------------------------------------


def _set(config: dict[str, Any], path: str, value: Any) -> None:
    """Set ``coreburst:burst.onPrem.coreCidrs`` style paths; value None deletes the key."""
    key, *rest = path.split(".")
    node = config
    parts = [key, *rest]
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    if value is None:
        node.pop(parts[-1], None)
    else:
        node[parts[-1]] = value


BAD = [
    (
        "coreburst:burst.onPrem.controllerCidrs",
        ["10.20.0.300/32"],
        "coreburst:burst.onPrem.controllerCidrs[0]: '10.20.0.300/32' is not a CIDR block "
        "(expected e.g. 10.0.0.0/16)",
    ),
    (
        "coreburst:burst.onPrem.coreCidrs",
        ["0.0.0.0/0"],
        "coreburst:burst.onPrem.coreCidrs[0]: '0.0.0.0/0' is broader than an on-prem network: "
        "list the IPv4 blocks of the hosts themselves, /8 or narrower (e.g. 10.20.0.10/32)",
    ),
    (
        "coreburst:burst.onPrem.coreCidrs",
        ["10.20.16.0/24", "10.20.16.128/25"],
        "coreburst:burst.onPrem: coreCidrs: 10.20.16.0/24 overlaps 10.20.16.128/25; list each "
        "block once",
    ),
    (
        "coreburst:burst.onPrem.coreCidrs",
        ["10.72.1.0/24"],
        "coreburst: burst.onPrem.coreCidrs[0] 10.72.1.0/24 overlaps the VPC CIDR 10.72.0.0/16: "
        "it is not on-prem",
    ),
    (
        "coreburst:burst.onPrem.controllerCidrs",
        ["10.30.0.10/32"],
        "coreburst: burst.onPrem.controllerCidrs[0] 10.30.0.10/32 is not inside "
        "vpn.onPremPrefixes (10.20.0.0/16): no route would take burst nodes there; add its "
        "block to onPremPrefixes",
    ),
    (
        "coreburst:burst.onPrem",
        None,
        "coreburst:burst: onPrem is missing: burst nodes reach slurmctld over the hybrid link "
        "only where the stack knows the on-prem blocks; set onPrem.controllerCidrs (and "
        "coreCidrs for login and core nodes)",
    ),
    (
        "coreburst:burst.srunPortRange",
        "6000-7000",
        "coreburst: burst: srunPortRange 6000-7000 overlaps slurmctld's port 6817: srun would "
        "take the daemon's port; move the range (e.g. 60001-63000)",
    ),
    (
        "coreburst:burst.srunPortRange",
        "60001-61000",
        None,  # fine: a narrower range than the default
    ),
    (
        "coreburst:burst.srunPortRange",
        "63000-60001",
        "coreburst:burst.srunPortRange: '63000-60001' is not allowed: ports must lie in "
        "1024-65535 with the lower port first",
    ),
    (
        "coreburst:burst.srunPortRange",
        "60001",
        "coreburst:burst.srunPortRange: '60001' is not a port range: use LOW-HIGH "
        "(e.g. 60001-63000)",
    ),
    (
        "coreburst:burst.slurmctldPort",
        7817,
        "coreburst:burst: slurmctldPort 7817 does not include port 6817 of node.confServer "
        "'slurmctld.example.internal:6817': make them agree",
    ),
    (
        "coreburst:burst.slurmdPort",
        60500,
        "coreburst: burst: srunPortRange 60001-63000 overlaps slurmd's port 60500: srun would "
        "take the daemon's port; move the range (e.g. 60001-63000)",
    ),
    (
        "coreburst:vpn",
        None,
        "coreburst: burst.onPrem needs a hybrid link to reach: declare vpn (Site-to-Site VPN: "
        "customerGatewayIp, onPremPrefixes) or hybridLink (Direct Connect)",
    ),
    (
        "coreburst:vpn.customerGatewayIp",
        "10.20.0.1",
        "coreburst:vpn.customerGatewayIp: 10.20.0.1 is not an internet address: give the public "
        "IPv4 address of the on-prem VPN device (its tunnels to AWS run over the internet)",
    ),
    (
        "coreburst:vpn.onPremPrefixes",
        ["10.20.0.0/16", "10.72.0.0/20"],
        "coreburst: vpn.onPremPrefixes 10.72.0.0/20 overlaps the VPC CIDR 10.72.0.0/16",
    ),
    (
        "coreburst:hybridLink",
        {
            "connections": [{"location": "EqDC2", "bandwidth": "10Gbps", "vlan": 101}],
            "customerAsn": 65010,
            "onPremPrefixes": ["10.20.0.0/16"],
        },
        "coreburst: set hybridLink (Direct Connect) or vpn (Site-to-Site VPN), not both: the "
        "private routes to on-prem go over one link",
    ),
]


@pytest.mark.parametrize(("path", "value", "message"), BAD, ids=[b[0] + str(b[1]) for b in BAD])
def test_bad_network_settings_are_one_line_errors(
    path: str, value: Any, message: str | None
) -> None:
    config = _shipped()
    _set(config, path, value)
    if message is None:
        evaluate_config("burst", config)
        return
    with pytest.raises(StackConfigError) as err:
        evaluate_config("burst", config)
    assert str(err.value) == message


def test_slurm_conf_refuses_ports_that_collide_in_one_line(tmp_path: Path) -> None:
    """`coreburst burst slurm-conf` reads the same keys and refuses the same collision (here
    one slurmd port per node running into the srun range)."""
    config = _shipped()
    config["coreburst:burst"]["slurmdPortBase"] = 59998  # 8 nodes: 59998-60005
    write_stack(tmp_path, "b", config)
    with pytest.raises(StackConfigError) as err:
        load_burst_stack("b", tmp_path)
    assert str(err.value) == (
        "coreburst:burst: srunPortRange 60001-63000 overlaps slurmd's port 59998-60005: srun "
        "would take the daemon's port; move the range (e.g. 60001-63000)"
    )
    # The same map through parse_burst, without a file: the same line.
    with pytest.raises(StackConfigError, match="overlaps slurmd's port 59998-60005"):
        parse_burst("b", config)
