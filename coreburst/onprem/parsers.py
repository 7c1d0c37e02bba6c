"""Parse and judge the output of on-prem DGX / InfiniBand health probes.

Pure functions over plain text, so the same code backs the Ansible filter plugin
(``ansible/filter_plugins/coreburst_onprem.py``), the CLI report and the unit tests.

>>> hcas = parse_ibstat("CA 'mlx5_0'\\n\\tPort 1:\\n\\t\\tState: Active\\n"
...                     "\\t\\tPhysical state: LinkUp\\n\\t\\tRate: 400\\n")
>>> [c.status for c in judge_ib_ports("dgx-01", hcas, [{"name": "mlx5_0", "rate": 400}])]
['pass']
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["pass", "fail"]

# nvidia-smi --query-gpu field list the validate role asks for; the parser keys on it.
NVIDIA_SMI_FIELDS: tuple[str, ...] = (
    "index",
    "name",
    "driver_version",
    "pcie.link.width.current",
    "pcie.link.width.max",
)

# DCGM diagnostic result codes (dcgmDiagResult_t).
DCGM_RESULT_CODES: dict[str, int] = {"pass": 0, "skip": 1, "warn": 2, "fail": 3}


@dataclass(frozen=True)
class CheckResult:
    """One judged check: what the report and the Ansible assert messages are built from."""

    check: str
    node: str
    device: str
    status: Status
    measured: Any
    expected: Any
    message: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# Private, called positionally all over this module; keywords would only add noise.
def _result(  # noqa: PLR0917
    check: str, node: str, device: str, measured: Any, expected: Any, ok: bool, what: str
) -> CheckResult:
    status: Status = "pass" if ok else "fail"
    message = f"{node} {device}: {what} is {measured}, expected {expected}"
    if ok:
        message = f"{node} {device}: {what} {measured} ok"
    return CheckResult(check, node, device, status, measured, expected, message)


# --------------------------------------------------------------------------- ibstat


@dataclass(frozen=True)
class IbPort:
    number: int
    state: str = ""
    physical_state: str = ""
    rate: int | None = None
    link_layer: str = ""
    base_lid: int | None = None


@dataclass
class Hca:
    name: str
    ca_type: str = ""
    firmware: str = ""
    ports: dict[int, IbPort] = field(default_factory=dict)


_CA_RE = re.compile(r"^CA '(?P<name>[^']+)'")
_PORT_RE = re.compile(r"^\s*Port (?P<num>\d+):\s*$")
_KV_RE = re.compile(r"^\s*(?P<key>[^:]+):\s*(?P<value>.*?)\s*$")


def _int_or_none(value: str) -> int | None:
    try:
        return int(value.split(maxsplit=1)[0], 0)
    except (ValueError, IndexError):
        return None


def parse_ibstat(text: str) -> dict[str, Hca]:
    """Parse ``ibstat`` output into HCAs keyed by name (``mlx5_0``)."""
    hcas: dict[str, Hca] = {}
    hca: Hca | None = None
    port: dict[str, str] | None = None
    port_num = 0

    def close_port() -> None:
        if hca is not None and port is not None:
            hca.ports[port_num] = IbPort(
                number=port_num,
                state=port.get("State", ""),
                physical_state=port.get("Physical state", ""),
                rate=_int_or_none(port.get("Rate", "")),
                link_layer=port.get("Link layer", ""),
                base_lid=_int_or_none(port.get("Base lid", "")),
            )

    for line in text.splitlines():
        if m := _CA_RE.match(line):
            close_port()
            port = None
            hca = Hca(name=m["name"])
            hcas[hca.name] = hca
        elif m := _PORT_RE.match(line):
            close_port()
            port, port_num = {}, int(m["num"])
        elif hca is not None and (m := _KV_RE.match(line)):
            if port is not None:
                port[m["key"].strip()] = m["value"]
            elif m["key"].strip() == "CA type":
                hca.ca_type = m["value"]
            elif m["key"].strip() == "Firmware version":
                hca.firmware = m["value"]
    close_port()
    return hcas


def judge_ib_ports(
    node: str, hcas: Mapping[str, Hca], expected: Sequence[Mapping[str, Any]]
) -> list[CheckResult]:
    """Every expected HCA port must be Active / LinkUp at its expected rate (Gb/s)."""
    results: list[CheckResult] = []
    for want in expected:
        name = str(want["name"])
        rate = int(want["rate"])
        port_nums = [int(p) for p in want.get("ports", [1])]
        hca = hcas.get(name)
        if hca is None:
            results.append(_result("ib_port", node, name, "absent", "present", False, "HCA"))
            continue
        for num in port_nums:
            dev = f"{name}/{num}"
            p = hca.ports.get(num)
            if p is None:
                results.append(_result("ib_port", node, dev, "absent", "present", False, "port"))
                continue
            hint = " (Initializing means no subnet manager)" if p.state == "Initializing" else ""
            results.append(
                _result(
                    "ib_port", node, dev, p.state, "Active", p.state == "Active", "state" + hint
                )
            )
            results.append(
                _result(
                    "ib_port",
                    node,
                    dev,
                    p.physical_state,
                    "LinkUp",
                    p.physical_state == "LinkUp",
                    "physical state",
                )
            )
            results.append(_result("ib_rate", node, dev, p.rate, rate, p.rate == rate, "rate"))
    return results


# --------------------------------------------------------------------------- nvidia-smi


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    driver_version: str
    pcie_width_current: int | None
    pcie_width_max: int | None


def parse_nvidia_smi_csv(text: str) -> list[Gpu]:
    """Parse ``nvidia-smi --query-gpu=<NVIDIA_SMI_FIELDS> --format=csv[,noheader][,nounits]``.

    Header lines and units (``16``, ``[N/A]``) are tolerated because the format is not
    guaranteed stable between driver branches.
    """
    gpus: list[Gpu] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.lower().startswith("index"):
            continue
        cols = [c.strip() for c in line.split(", ")]
        if len(cols) < len(NVIDIA_SMI_FIELDS) or not cols[0].isdigit():
            continue
        gpus.append(
            Gpu(
                index=int(cols[0]),
                name=cols[1],
                driver_version=cols[2],
                pcie_width_current=_int_or_none(cols[3]),
                pcie_width_max=_int_or_none(cols[4]),
            )
        )
    return gpus


def driver_matches(found: str, expected: str) -> bool:
    """``expected`` is an exact build ("550.144.03") or a branch ("550"): the nvidia_driver
    role locks apt to a branch, so a node gets the newest build the repository serves.

    >>> driver_matches("550.144.03", "550"), driver_matches("560.35.03", "550")
    (True, False)
    """
    if "." in expected:
        return found == expected
    return found.split(".", 1)[0] == expected


def judge_gpus(
    node: str,
    gpus: Sequence[Gpu],
    *,
    expected_count: int,
    expected_model: str,
    expected_driver: str,
    expected_pcie_width: int,
) -> list[CheckResult]:
    """GPU count, then model, driver version and PCIe width of every GPU."""
    results = [
        _result(
            "gpu_count",
            node,
            "gpus",
            len(gpus),
            expected_count,
            len(gpus) == expected_count,
            "count",
        )
    ]
    for g in gpus:
        dev = f"GPU{g.index}"
        results.append(
            _result(
                "gpu_model", node, dev, g.name, expected_model, g.name == expected_model, "model"
            )
        )
        results.append(
            _result(
                "driver_version",
                node,
                dev,
                g.driver_version,
                expected_driver,
                driver_matches(g.driver_version, expected_driver),
                "driver version",
            )
        )
        width = g.pcie_width_current
        results.append(
            _result(
                "pcie_width",
                node,
                dev,
                f"x{width}",
                f"x{expected_pcie_width}",
                width == expected_pcie_width,
                "PCIe width",
            )
        )
    return results


# --------------------------------------------------------------------------- XID (journal)


@dataclass(frozen=True)
class XidEvent:
    pci: str
    code: int
    detail: str


_XID_RE = re.compile(r"NVRM: Xid \((?P<pci>[^)]*)\): (?P<code>\d+),?\s*(?P<detail>.*)$")


def parse_xid_journal(text: str) -> list[XidEvent]:
    """Find ``NVRM: Xid (PCI:0000:18:00): 79, ...`` lines in kernel journal output."""
    return [
        XidEvent(m["pci"], int(m["code"]), m["detail"].strip())
        for line in text.splitlines()
        if (m := _XID_RE.search(line))
    ]


def judge_xid(
    node: str, events: Sequence[XidEvent], since: str = "1 hour ago"
) -> list[CheckResult]:
    """No XID errors at all since ``since`` (a journalctl --since value)."""
    if not events:
        return [_result("xid", node, "gpus", 0, 0, True, f"XID errors since {since}")]
    return [
        CheckResult(
            "xid",
            node,
            e.pci,
            "fail",
            f"Xid {e.code}",
            "no XID",
            f"{node} {e.pci}: XID {e.code} since {since} ({e.detail}), expected none",
        )
        for e in events
    ]


# --------------------------------------------------------------------------- sminfo


@dataclass(frozen=True)
class SmInfo:
    lid: int
    guid: str
    priority: int
    state: str


_SMINFO_RE = re.compile(
    r"sm lid (?P<lid>\d+) sm guid (?P<guid>0x[0-9a-fA-F]+), activity count \d+ "
    r"priority (?P<prio>\d+) state \d+ (?P<state>SMINFO_\w+)"
)


def parse_sminfo(text: str) -> SmInfo | None:
    """Parse ``sminfo``; ``None`` when no subnet manager answered."""
    m = _SMINFO_RE.search(text)
    if m is None:
        return None
    return SmInfo(int(m["lid"]), m["guid"], int(m["prio"]), m["state"])


def judge_sminfo(node: str, info: SmInfo | None) -> list[CheckResult]:
    """The fabric must have an OpenSM in state SMINFO_MASTER."""
    if info is None:
        return [
            CheckResult(
                "sm_master",
                node,
                "fabric",
                "fail",
                "no SM answered",
                "SMINFO_MASTER",
                f"{node} fabric: no subnet manager answered sminfo, expected an SMINFO_MASTER",
            )
        ]
    dev = f"sm lid {info.lid} ({info.guid})"
    return [
        _result(
            "sm_master",
            node,
            dev,
            info.state,
            "SMINFO_MASTER",
            info.state == "SMINFO_MASTER",
            "SM state",
        )
    ]


# --------------------------------------------------------------------------- dcgmi diag


@dataclass(frozen=True)
class DiagTest:
    name: str
    result: str
    code: int
    detail: str


_DIAG_ROW_RE = re.compile(
    r"^\|\s*(?P<name>[^|]+?)\s*\|\s*(?P<result>Pass|Skip|Warn|Fail)\b(?P<detail>[^|]*)\|",
    re.IGNORECASE,
)


def parse_dcgmi_diag(text: str) -> list[DiagTest]:
    """Parse the table printed by ``dcgmi diag -r N`` into one entry per test row."""
    tests: list[DiagTest] = []
    for line in text.splitlines():
        if m := _DIAG_ROW_RE.match(line.strip()):
            result = m["result"].capitalize()
            detail = m["detail"].strip().lstrip("-").strip()
            tests.append(DiagTest(m["name"], result, DCGM_RESULT_CODES[result.lower()], detail))
    return tests


def judge_dcgmi(
    node: str, tests: Sequence[DiagTest], level: int, allowed: Iterable[str] = ("Pass",)
) -> list[CheckResult]:
    """Every diagnostic row must be in ``allowed`` (PASS only, by default)."""
    ok_set = {a.capitalize() for a in allowed}
    if not tests:
        return [
            CheckResult(
                "dcgm_diag",
                node,
                f"dcgmi diag -r {level}",
                "fail",
                "no results",
                "PASS",
                f"{node} dcgmi diag -r {level}: no test results parsed, expected PASS",
            )
        ]
    results = []
    for t in tests:
        measured = f"{t.result} ({t.code})" + (f" {t.detail}" if t.detail else "")
        results.append(
            _result(
                "dcgm_diag",
                node,
                f"diag -r {level} {t.name}",
                measured,
                "/".join(sorted(ok_set)),
                t.result in ok_set,
                "result",
            )
        )
    return results


# --------------------------------------------------------------------------- all_reduce_perf


@dataclass(frozen=True)
class NcclRow:
    size: int
    busbw_oop: float
    wrong_oop: int | None
    busbw_ip: float
    wrong_ip: int | None


@dataclass(frozen=True)
class NcclResult:
    rows: list[NcclRow]
    out_of_bounds: int | None
    avg_busbw: float | None


_OOB_RE = re.compile(r"#\s*Out of bounds values\s*:\s*(?P<n>\d+)")
_AVG_RE = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(?P<bw>[\d.]+)")


def _wrong(value: str) -> int | None:
    """A ``#wrong`` cell: nccl-tests prints the count with ``%6g``, so a million or more wrong
    elements read ``1e+06`` or ``2.14748e+09`` (rounded to 6 digits); ``N/A`` without -c."""
    return None if value == "N/A" else int(float(value))


def parse_all_reduce_perf(text: str) -> NcclResult:
    """Parse nccl-tests data rows (out-of-place then in-place) and the trailer."""
    rows: list[NcclRow] = []
    oob: int | None = None
    avg: float | None = None
    for line in text.splitlines():
        if m := _OOB_RE.search(line):
            oob = int(m["n"])
            continue
        if m := _AVG_RE.search(line):
            avg = float(m["bw"])
            continue
        cols = line.split()
        # size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong
        if len(cols) == 13 and cols[0].isdigit():
            try:
                rows.append(
                    NcclRow(
                        int(cols[0]),
                        float(cols[7]),
                        _wrong(cols[8]),
                        float(cols[11]),
                        _wrong(cols[12]),
                    )
                )
            except (ValueError, OverflowError):
                continue
    return NcclResult(rows, oob, avg)


def judge_nccl(
    node: str, result: NcclResult, theoretical_busbw: float, min_fraction: float = 0.8
) -> list[CheckResult]:
    """busbw at the largest size >= fraction x theoretical; no wrong or out-of-bounds values.

    The tool's own "Avg bus bandwidth" averages every size swept, so it is not used.
    """
    dev = "all_reduce_perf"
    if not result.rows:
        return [
            CheckResult(
                "nccl_busbw",
                node,
                dev,
                "fail",
                "no data rows",
                f">= {min_fraction * theoretical_busbw:.1f} GB/s",
                f"{node} {dev}: no data rows parsed, expected a bandwidth sweep",
            )
        ]
    last = max(result.rows, key=lambda r: r.size)
    busbw = min(last.busbw_oop, last.busbw_ip)
    need = min_fraction * theoretical_busbw
    size_dev = f"{dev} size {last.size}B"
    results = [
        CheckResult(
            "nccl_busbw",
            node,
            size_dev,
            "pass" if busbw >= need else "fail",
            f"{busbw:.2f} GB/s",
            f">= {need:.2f} GB/s ({min_fraction:.0%} of {theoretical_busbw:g})",
            f"{node} {size_dev}: busbw is {busbw:.2f} GB/s "
            f"({busbw / theoretical_busbw:.0%} of theoretical), expected >= {need:.2f} GB/s "
            f"({min_fraction:.0%} of {theoretical_busbw:g})",
        )
    ]
    wrong = sum((r.wrong_oop or 0) + (r.wrong_ip or 0) for r in result.rows)
    results.append(_result("nccl_wrong", node, dev, wrong, 0, wrong == 0, "#wrong values"))
    oob = result.out_of_bounds
    results.append(
        _result(
            "nccl_out_of_bounds",
            node,
            dev,
            "missing" if oob is None else oob,
            0,
            oob == 0,
            "out of bounds values",
        )
    )
    return results


# --------------------------------------------------------------------------- fabric manager

_FM_RE = re.compile(r"Fabric Manager version is\s*:\s*(?P<v>[\w.\-]+)", re.IGNORECASE)


def parse_fabricmanager_version(text: str) -> str | None:
    """Parse ``nv-fabricmanager --version`` (``Fabric Manager version is : 550.90.07``)."""
    m = _FM_RE.search(text)
    return m["v"] if m else None


def judge_fabricmanager(
    node: str, fm_version: str | None, driver_version: str, running_driver: str | None = None
) -> list[CheckResult]:
    """Fabric manager must be installed at exactly the driver's version: the build the node
    runs (``running_driver``, from nvidia-smi) when known, else ``driver_version`` (an exact
    build, or a branch when only that is known)."""
    measured = fm_version or "not installed"
    expected = running_driver or driver_version
    ok = fm_version is not None and (
        fm_version == expected if running_driver else driver_matches(fm_version, expected)
    )
    return [
        _result(
            "fabricmanager_version", node, "nv-fabricmanager", measured, expected, ok, "version"
        )
    ]


def failures(results: Iterable[CheckResult | Mapping[str, Any]]) -> list[str]:
    """Messages of failed checks, for assert output."""
    out = []
    for r in results:
        d = r.as_dict() if isinstance(r, CheckResult) else r
        if d["status"] != "pass":
            out.append(str(d["message"]))
    return out
