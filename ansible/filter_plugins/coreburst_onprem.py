"""Ansible filters that judge on-prem probe output with coreburst's parsers.

Each filter takes a registered ``ansible.builtin.command`` result (stdout, stderr, rc, msg)
and returns a list of plain dicts: check, node, device, status, measured, expected, message.
The parsing lives in ``coreburst.onprem.parsers`` so the CLI and unit tests share it.

Example::

    acceptance_results: "{{ _probe | coreburst_ib_checks(inventory_hostname, hcas) }}"
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

try:
    from coreburst.onprem import parsers as _p
except ImportError as exc:  # pragma: no cover - depends on how ansible was started
    _p = None
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None


def _parsers() -> Any:
    if _p is None:
        raise AnsibleFilterError(
            "coreburst filters need the coreburst package (onprem) importable by the "
            f"Python that runs ansible-playbook: pip install -e . in that venv ({_IMPORT_ERROR})"
        )
    return _p


def _text(probe: Any, with_stderr: bool = False) -> str:
    if isinstance(probe, str):
        return probe
    if not isinstance(probe, Mapping):
        raise AnsibleFilterError(
            f"expected a registered command result, got {type(probe).__name__}"
        )
    out = str(probe.get("stdout", ""))
    if with_stderr:
        out += "\n" + str(probe.get("stderr", ""))
    return out


def _probe_error(probe: Any, node: str, what: str) -> list[dict[str, Any]]:
    """A failed result when the probe itself could not run (binary missing, timeout)."""
    if not isinstance(probe, Mapping) or probe.get("skipped"):
        return []
    rc = probe.get("rc", 0)
    if rc in (0, None) or str(probe.get("stdout", "")).strip():
        return []
    why = str(probe.get("stderr") or probe.get("msg") or "").strip().splitlines()
    detail = why[-1] if why else "no output"
    return [
        {
            "check": "probe",
            "node": node,
            "device": what,
            "status": "fail",
            "measured": f"rc={rc}",
            "expected": "rc=0",
            "message": f"{node} {what}: probe failed with rc={rc} ({detail}), expected rc=0",
        }
    ]


def _dicts(results: Iterable[Any]) -> list[dict[str, Any]]:
    return [r.as_dict() for r in results]


# Jinja passes filter arguments positionally.
def gpu_checks(  # noqa: PLR0917
    probe: Any, node: str, count: Any, model: str, driver: str, width: Any
) -> list[dict[str, Any]]:
    p = _parsers()
    gpus = p.parse_nvidia_smi_csv(_text(probe))
    return _probe_error(probe, node, "nvidia-smi") + _dicts(
        p.judge_gpus(
            node,
            gpus,
            expected_count=int(count),
            expected_model=str(model),
            expected_driver=str(driver),
            expected_pcie_width=int(width),
        )
    )


def xid_checks(probe: Any, node: str, since: str = "1 hour ago") -> list[dict[str, Any]]:
    p = _parsers()
    events = p.parse_xid_journal(_text(probe))
    return _probe_error(probe, node, "journalctl") + _dicts(p.judge_xid(node, events, str(since)))


def ib_checks(probe: Any, node: str, hcas: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    p = _parsers()
    parsed = p.parse_ibstat(_text(probe))
    return _probe_error(probe, node, "ibstat") + _dicts(p.judge_ib_ports(node, parsed, hcas))


def sm_checks(probe: Any, node: str) -> list[dict[str, Any]]:
    # sminfo exits non-zero when no SM answers; that is the finding, not a probe error.
    p = _parsers()
    return _dicts(p.judge_sminfo(node, p.parse_sminfo(_text(probe, with_stderr=True))))


def dcgm_checks(
    probe: Any, node: str, level: Any = 1, allowed: Iterable[str] = ("Pass",)
) -> list[dict[str, Any]]:
    # dcgmi diag exits non-zero when a test fails; the table still says which one.
    p = _parsers()
    tests = p.parse_dcgmi_diag(_text(probe))
    extra = [] if tests else _probe_error(probe, node, "dcgmi")
    return extra + _dicts(p.judge_dcgmi(node, tests, int(level), list(allowed)))


def nccl_checks(
    probe: Any, node: str, theoretical: Any, fraction: Any = 0.8
) -> list[dict[str, Any]]:
    p = _parsers()
    result = p.parse_all_reduce_perf(_text(probe))
    return _probe_error(probe, node, "all_reduce_perf") + _dicts(
        p.judge_nccl(node, result, float(theoretical), float(fraction))
    )


def fabricmanager_checks(
    probe: Any, node: str, driver: str, smi_probe: Any = None
) -> list[dict[str, Any]]:
    # The driver build the node runs (first GPU of the nvidia-smi probe), when that probe ran.
    p = _parsers()
    version = p.parse_fabricmanager_version(_text(probe, with_stderr=True))
    running = None
    if smi_probe:
        try:
            gpus = p.parse_nvidia_smi_csv(_text(smi_probe))
        except ValueError:
            gpus = []
        running = gpus[0].driver_version if gpus else None
    return _dicts(p.judge_fabricmanager(node, version, str(driver), running))


def failures(results: Any) -> list[str]:
    return list(_parsers().failures(results or []))


class FilterModule:
    """coreburst on-prem acceptance filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "coreburst_gpu_checks": gpu_checks,
            "coreburst_xid_checks": xid_checks,
            "coreburst_ib_checks": ib_checks,
            "coreburst_sm_checks": sm_checks,
            "coreburst_dcgm_checks": dcgm_checks,
            "coreburst_nccl_checks": nccl_checks,
            "coreburst_fabricmanager_checks": fabricmanager_checks,
            "coreburst_failures": failures,
        }
