"""The network flows Slurm needs between the on-prem controller and core and the burst nodes
(pure: plain data in, plain data out; infra/components/network.py declares one security-group
rule per flow, ``coreburst burst slurm-conf`` renders the same ports into slurm.conf).

Slurm's "Network Configuration Guide" (https://slurm.schedmd.com/network.html) and
slurm.conf(5) name the listeners:

* slurmctld listens on ``SlurmctldPort`` (6817; a range such as 6817-6818 is allowed);
  slurmd, slurmstepd and every command connect to it.
* slurmd listens on ``SlurmdPort`` (6818), or on each node's own ``Port=``: slurmctld connects
  to it, and so does srun, which hands the step's credential to slurmd itself ("srun forwards
  credential with task info to slurmd").
* srun listens on ``SrunPortRange`` (ephemeral ports when unset): slurmctld reaches srun there,
  and slurmstepd on the job's nodes connects back to it for the tasks' I/O and exit ("slurmstepd
  connects I/O and launches tasks", "slurmstepd notifies srun").

Security groups are stateful (Amazon VPC user guide, "Security groups": responses to allowed
traffic flow back whatever the rules say), so each flow is one rule on the side that is not
the initiator's, plus, because the burst nodes' groups have no allow-all egress, one egress
rule for each connection a burst node opens.

    >>> flows = slurm_flows(controller_cidrs=["10.20.0.10/32"], core_cidrs=["10.20.16.0/24"],
    ...                     slurmd=(6818, 6818), slurmctld=[(6817, 6817)], srun=(60001, 63000))
    >>> [(f.direction, f.cidr, f.ports) for f in flows]  # doctest: +NORMALIZE_WHITESPACE
    [('ingress', '10.20.0.10/32', (6818, 6818)), ('ingress', '10.20.16.0/24', (6818, 6818)),
     ('ingress', '10.20.0.10/32', (60001, 63000)), ('egress', '10.20.0.10/32', (6817, 6817)),
     ('egress', '10.20.16.0/24', (60001, 63000))]
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

# slurm.conf(5) defaults.
SLURMCTLD_PORT = 6817
SLURMD_PORT = 6818
# Slurm's own example value in slurm.conf(5) (SrunPortRange): 3,000 ports. "A single srun opens
# 3 listening ports plus 2 more for every 48 hosts", so this covers about 1,000 sruns at once
# on one submit host.
SRUN_PORT_RANGE = "60001-63000"
# Ports below 1024 are privileged: srun runs as the user and cannot bind them.
UNPRIVILEGED_MIN = 1024
PORT_MAX = 65535

PortSpan = tuple[int, int]
Direction = Literal["ingress", "egress"]


def parse_span(text: str | int, *, single: bool = True) -> PortSpan:
    """``"60001-63000"`` -> ``(60001, 63000)``; ``"6817"`` or ``6817`` -> ``(6817, 6817)`` when
    ``single``. Raises ValueError with the rule that was broken.

    >>> parse_span("60001-63000"), parse_span(6817)
    ((60001, 63000), (6817, 6817))
    """
    raw = str(text).strip()
    m = re.fullmatch(r"(\d{1,5})(?:-(\d{1,5}))?", raw)
    if not m or (m.group(2) is None and not single):
        shape = "LOW-HIGH (e.g. 60001-63000)" if not single else "PORT or LOW-HIGH"
        raise ValueError(f"{raw!r} is not a port range: use {shape}")
    low = int(m.group(1))
    high = int(m.group(2)) if m.group(2) is not None else low
    if not UNPRIVILEGED_MIN <= low <= high <= PORT_MAX:
        raise ValueError(
            f"{raw!r} is not allowed: ports must lie in {UNPRIVILEGED_MIN}-{PORT_MAX} with the "
            "lower port first"
        )
    return low, high


def span_text(span: PortSpan) -> str:
    low, high = span
    return f"{low}" if low == high else f"{low}-{high}"


def overlaps(a: PortSpan, b: PortSpan) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def conf_server_ports(conf_server: str) -> list[int]:
    """The slurmctld port of each controller in a ``slurmd --conf-server`` value
    (``host[:port]``, comma-separated; a host without a port uses 6817), each once, in order.

    >>> conf_server_ports("ctl1.corp:6817,ctl2.corp")
    [6817]
    """
    ports: list[int] = []
    for entry in conf_server.split(","):
        _, _, port = entry.partition(":")
        p = int(port) if port else SLURMCTLD_PORT
        if p not in ports:
            ports.append(p)
    return ports


@dataclass(frozen=True)
class Flow:
    """One security-group rule of the burst nodes: ``direction`` as the burst node sees it
    (ingress: the peer connects to the node), TCP ``ports`` on the listener's side, the peer's
    ``cidr``, and why Slurm needs it (one reason per Slurm connection it carries)."""

    direction: Direction
    cidr: str
    ports: PortSpan
    why: tuple[str, ...]

    @property
    def key(self) -> str:
        """A stable resource-name suffix: direction, ports and peer (never a list position)."""
        way = "in" if self.direction == "ingress" else "out"
        return f"{way}-{span_text(self.ports)}-{self.cidr.replace('/', '_')}"

    @property
    def description(self) -> str:
        # EC2 allows a-z A-Z 0-9, spaces and ._-:/()#,@[]+=&;{}!$* in a rule description, at
        # most 255 characters (EC2 API reference, IpRange Description).
        return "; ".join(self.why)[:255]


def slurm_flows(
    *,
    controller_cidrs: Iterable[str],
    core_cidrs: Iterable[str],
    slurmd: PortSpan | None,
    slurmctld: Iterable[PortSpan],
    srun: PortSpan,
) -> list[Flow]:
    """Every flow between the on-prem side and the burst nodes, merged so no two have the
    same direction, peer and ports (EC2 refuses a duplicate rule). ``slurmd`` is None when the
    stack declares no burst node. Traffic among burst nodes (slurmd fan-out, slurmstepd to an
    srun on another burst node, MPI) stays inside the EFA group's self-referencing rules."""
    controllers = list(dict.fromkeys(controller_cidrs))
    cores = list(dict.fromkeys(core_cidrs))
    wanted: list[tuple[Direction, str, PortSpan, str]] = []
    if slurmd is not None:
        port = span_text(slurmd)
        wanted += [("ingress", c, slurmd, f"slurmctld to slurmd {port}") for c in controllers] + [
            ("ingress", c, slurmd, f"srun on core/login to slurmd {port}") for c in cores
        ]
    srun_text = span_text(srun)
    wanted += [
        ("ingress", c, srun, f"slurmctld to srun on a burst node {srun_text}") for c in controllers
    ]
    for span in slurmctld:
        wanted += [
            ("egress", c, span, f"slurmd and srun to slurmctld {span_text(span)}")
            for c in controllers
        ]
    wanted += [("egress", c, srun, f"slurmstepd to srun on core/login {srun_text}") for c in cores]
    merged: dict[tuple[Direction, str, PortSpan], list[str]] = {}
    for direction, cidr, ports, why in wanted:
        reasons = merged.setdefault((direction, cidr, ports), [])
        if why not in reasons:
            reasons.append(why)
    return [Flow(d, c, p, tuple(w)) for (d, c, p), w in merged.items()]
