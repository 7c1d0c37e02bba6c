"""Typed description of the on-prem fleet and its rendering into an Ansible inventory.

>>> fleet = load_fleet(Path("ansible/fleet.example.yml"))
>>> sorted(render_inventory(fleet)["all"]["children"])
['dgx_nodes', 'slurm_controller', 'subnet_managers']
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from coreburst.common.errors import one_line
from coreburst.common.textio import read_text

GroupName = Literal["dgx_nodes", "subnet_managers", "slurm_controller"]
GROUPS: tuple[str, ...] = ("dgx_nodes", "subnet_managers", "slurm_controller")


class FleetError(ValueError):
    """Bad fleet or inventory input; the message is one line meant for the user."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Hca(_Strict):
    name: str = Field(pattern=r"^mlx5_\d+$")
    rate: Literal[100, 200, 400, 800] = 400
    ports: list[int] = [1]


class Partition(_Strict):
    name: str
    pkey: str = Field(pattern=r"^0x[0-9a-fA-F]{1,4}$")
    ipoib: bool = True
    mtu: Literal[1, 2, 3, 4, 5] = 5
    members: str = "ALL=full"


# RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens.
_HOSTNAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")


def _host_address(value: str) -> str:
    """An IP address (checked with :mod:`ipaddress`) or a DNS name, as ``ansible_host`` takes.

    Anything made only of digits and dots, or holding a colon, is meant as an IP address and
    must be one: ``10.10.0.999`` is refused, not rendered into the inventory.
    """
    text = value.strip()
    if re.fullmatch(r"[\d.]+", text) or ":" in text:
        try:
            return str(ipaddress.ip_address(text))
        except ValueError:
            raise ValueError(
                f"{value!r} is not a valid IP address (each IPv4 part is 0-255, e.g. 10.10.0.11)"
            ) from None
    if len(text) > 253 or not _HOSTNAME.fullmatch(text):
        raise ValueError(f"{value!r} is neither an IP address nor a valid host name")
    return text


def _ipv4_interface(value: str) -> str:
    try:
        iface = ipaddress.IPv4Interface(value)
    except ValueError:
        iface = None
    if iface is None or "/" not in value:
        raise ValueError(
            f"{value!r} is not an IPv4 address with a prefix length (e.g. 10.20.0.11/16)"
        )
    return value


class IpoibInterface(_Strict):
    name: str
    address: Annotated[str, AfterValidator(_ipv4_interface)]


class Expectations(_Strict):
    """What every DGX node must look like; rendered into group vars of dgx_nodes."""

    gpu_count: Annotated[int, Field(ge=1, le=16)] = 8
    gpu_model: str = "NVIDIA H100 80GB HBM3"
    pcie_width: Literal[4, 8, 16] = 16
    nvswitch: bool = True
    hcas: list[Hca]
    nccl_theoretical_busbw_gbps: Annotated[float, Field(gt=0)]
    nccl_min_fraction: Annotated[float, Field(gt=0, le=1)] = 0.8
    dcgm_diag_level: Literal[1, 2, 3, 4] = 1


class Software(_Strict):
    """Pinned versions; rendered into group vars of all."""

    kernel_version: str
    driver_branch: str = Field(pattern=r"^\d+$")
    driver_version: str = Field(pattern=r"^\d+\.\d+(\.\d+)?$")
    fabricmanager_version: str | None = None
    doca_version: str
    ntp_servers: list[str] = ["0.pool.ntp.org", "1.pool.ntp.org"]

    @model_validator(mode="after")
    def _fm_matches_driver(self) -> Software:
        fm = self.fabricmanager_version
        if fm is not None and fm != self.driver_version:
            raise ValueError(
                f"software.fabricmanager_version {fm} must equal driver_version "
                f"{self.driver_version}"
            )
        if not self.driver_version.startswith(self.driver_branch + "."):
            raise ValueError(
                f"software.driver_version {self.driver_version} is not on branch "
                f"{self.driver_branch}"
            )
        return self


class Node(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    address: Annotated[str, AfterValidator(_host_address)] | None = None
    groups: list[GroupName]
    sm_priority: Annotated[int, Field(ge=0, le=15)] | None = None
    ipoib: list[IpoibInterface] = []
    # Extra host vars passed through as-is (ansible_connection, ansible_user, ...).
    vars: dict[str, Any] = {}


class Fleet(_Strict):
    name: str
    software: Software
    expectations: Expectations
    partitions: list[Partition] = [Partition(name="Default", pkey="0x7fff")]
    nodes: list[Node]
    # Extra vars for every host (e.g. coreburst_root for sandbox runs).
    vars: dict[str, Any] = {}

    @model_validator(mode="after")
    def _check_layout(self) -> Fleet:
        names = [n.name for n in self.nodes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate node names: {', '.join(dupes)}")
        sms = [n for n in self.nodes if "subnet_managers" in n.groups]
        missing = [n.name for n in sms if n.sm_priority is None]
        if missing:
            raise ValueError(f"subnet manager nodes without sm_priority: {', '.join(missing)}")
        if len(sms) < 2:
            raise ValueError(
                f"{len(sms)} subnet_managers node(s); need at least 2 so the fabric "
                "survives losing one"
            )
        prios = [n.sm_priority for n in sms]
        if len(set(prios)) != len(prios):
            raise ValueError(f"subnet manager priorities must be distinct, got {prios}")
        return self

    def group_members(self) -> dict[str, list[str]]:
        return {g: [n.name for n in self.nodes if g in n.groups] for g in GROUPS}


def _one_line(exc: ValidationError, source: str) -> str:
    return one_line(exc, source)


def load_yaml_mapping(path: Path, what: str = "YAML file") -> dict[str, Any]:
    """Read a YAML file that must hold a mapping; FleetError with one line otherwise."""
    text = read_text(path, what, FleetError)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise FleetError(
            f"{path}:{where} malformed YAML ({getattr(exc, 'problem', exc)})"
        ) from None
    if not isinstance(data, dict):
        raise FleetError(f"{path}: expected a YAML mapping at the top level")
    return data


def load_fleet(path: Path) -> Fleet:
    """Load and validate a fleet file."""
    data = load_yaml_mapping(path, "fleet file")
    try:
        return Fleet.model_validate(data)
    except ValidationError as exc:
        raise FleetError(_one_line(exc, str(path))) from None


def _hca_vars(hca: Hca) -> dict[str, Any]:
    # Single-port HCAs are written as in the hand-written inventory: ports only when not [1].
    out: dict[str, Any] = {"name": hca.name, "rate": hca.rate}
    if hca.ports != [1]:
        out["ports"] = list(hca.ports)
    return out


def render_inventory(fleet: Fleet) -> dict[str, Any]:
    """Ansible YAML inventory (as a dict) equivalent to the hand-written example inventory."""
    sw, ex = fleet.software, fleet.expectations
    all_vars: dict[str, Any] = {
        "coreburst_fleet": fleet.name,
        "coreburst_root": "/",
        "coreburst_manage_system": True,
        "coreburst_become": True,
        "coreburst_kernel_version": sw.kernel_version,
        "coreburst_driver_branch": sw.driver_branch,
        "coreburst_driver_version": sw.driver_version,
        "coreburst_doca_version": sw.doca_version,
        "coreburst_ntp_servers": list(sw.ntp_servers),
        "coreburst_ib_partitions": [p.model_dump() for p in fleet.partitions],
    }
    if sw.fabricmanager_version:
        all_vars["coreburst_fabricmanager_version"] = sw.fabricmanager_version
    all_vars.update(fleet.vars)
    dgx_vars: dict[str, Any] = {
        "coreburst_gpu_count": ex.gpu_count,
        "coreburst_gpu_model": ex.gpu_model,
        "coreburst_pcie_width": ex.pcie_width,
        "coreburst_nvswitch": ex.nvswitch,
        "coreburst_hcas": [_hca_vars(h) for h in ex.hcas],
        "coreburst_nccl_theoretical_busbw_gbps": ex.nccl_theoretical_busbw_gbps,
        "acceptance_nccl_min_fraction": ex.nccl_min_fraction,
        "acceptance_dcgm_diag_level": ex.dcgm_diag_level,
    }
    children: dict[str, Any] = {}
    for group in GROUPS:
        hosts: dict[str, Any] = {}
        for node in fleet.nodes:
            if group not in node.groups:
                continue
            hv: dict[str, Any] = {}
            # Host vars are merged across groups, so each is written once, in its first group.
            if group == node.groups[0]:
                if node.address:
                    hv["ansible_host"] = node.address
                if node.ipoib:
                    hv["coreburst_ipoib_interfaces"] = [i.model_dump() for i in node.ipoib]
                hv.update(node.vars)
            if group == "subnet_managers":
                hv["coreburst_sm_priority"] = node.sm_priority
            hosts[node.name] = hv or None
        children[group] = {"hosts": hosts}
    children["dgx_nodes"]["vars"] = dgx_vars
    return {"all": {"vars": all_vars, "children": children}}


def write_inventory(fleet: Fleet, path: Path) -> Path:
    """Write the rendered inventory to ``path`` whole or not at all (FleetError, one line)."""
    header = f"# Rendered by coreburst onprem render-inventory from fleet {fleet.name!r}.\n"
    body = header + "---\n" + yaml.safe_dump(render_inventory(fleet), sort_keys=False)
    if path.is_dir():
        raise FleetError(f"cannot write inventory {path}: it is a directory; give a file name")
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # A temporary file renamed into place: a failed write leaves no half inventory behind.
        tmp.write_text(body, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise FleetError(f"cannot write inventory {path}: {exc.strerror or exc}") from None
    return path


def inventory_names(inventory: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(groups, hosts) named anywhere in a YAML inventory mapping."""
    groups: set[str] = set()
    hosts: set[str] = set()

    def walk(name: str, body: Any) -> None:
        groups.add(name)
        if not isinstance(body, dict):
            return
        hosts.update((body.get("hosts") or {}).keys())
        for child, cbody in (body.get("children") or {}).items():
            walk(child, cbody)

    for top, body in inventory.items():
        walk(top, body)
    groups.add("all")
    return groups, hosts
