"""The burst node health gate: ``coreburst burst node-check``, run on a fresh burst instance
before its slurmd starts.

What it checks, against the instance type's figures in the catalog
(coreburst/common/data/catalog.yaml: accelerator count, ``efa_interfaces``):

* **GPUs**: ``nvidia-smi --query-gpu=index,name,driver_version,pcie.link.width.current,
  pcie.link.width.max --format=csv,noheader,nounits`` (the field list the on-prem validate role
  uses, parsed by :mod:`coreburst.onprem.parsers`): exactly the expected count, every GPU at its
  full PCIe width.
* **DCGM**: ``dcgmi diag -r 1 -j`` (the quick deployment suite, seconds). Its JSON is the one
  NVIDIA's DCGM source documents for NVVS (``nvvs/include/NvvsCommon.h``: ``"DCGM GPU
  Diagnostic" -> test_categories[] -> tests[] -> results[] {gpu_ids, status, warnings, info}``,
  status PASS|FAIL|WARN|SKIPPED); every result must be PASS (REFERENCE.md, health checks:
  "PASS only"). DCGM 4's regrouped JSON (no ``test_categories``) is refused as unreadable,
  never read as a pass. ``--no-dcgm`` leaves it out (an image without DCGM).
* **EFA**: ``fi_info -p efa -t FI_EP_RDM`` (the check in the EC2 user guide's "Get started with
  EFA and NCCL"): one ``provider: efa`` block per EFA device, ``domain: <device>-rdm``; newer
  libfabric lists a device twice (fabrics ``efa`` and ``efa-direct``), so distinct domains
  are counted and must equal the type's ``efa_interfaces``.
* **NCCL** (optional, ``--nccl-command``): a command that prints nccl-tests
  ``all_reduce_perf`` output (e.g. ``all_reduce_perf -b 8G -e 8G -g 8``, the node's own GPUs
  over NVLink), judged by :func:`coreburst.onprem.parsers.judge_nccl`: no wrong or
  out-of-bounds values and, with ``--nccl-min-busbw``, the largest size's busbw at least that.
  A multi-node all-reduce over EFA needs its peers' slurmd up, so it cannot gate a node before
  its own slurmd starts; it belongs in the job (or a prolog) and is not run here.

Every probe has a timeout; a tool that is missing, times out, exits non-zero without a
readable answer, prints bytes that are not UTF-8 or output that does not parse is a failure
with one reason line, never a pass.

**The gate (Slurm 22.05).** slurmctld allocates a cloud node to the job it powers the node up
for; the job waits (CONFIGURING) until the node's slurmd registers, and registration is what
makes the node usable. So the node's boot runs this check *before* starting slurmd (a systemd
unit ordered ``Before=slurmd.service`` that slurmd ``Requires=``, or the user-data script):

* pass: slurmd starts and registers; the node takes the job.
* fail (``--gate``): slurmd never starts. The node is set DOWN with the reason (Slurm requeues
  the job at once rather than at ResumeTimeout), its Comment says why, and
  ``state=power_down_force`` makes slurmctld run the SuspendProgram, which terminates the
  instance; the node is ``idle~`` again, so the requeued job gets another node or a fresh
  instance. The job's AdminComment names the failure, and once Slurm has requeued the job its
  requeue hold (credential lifetime + 1 s, REFERENCE.md) is lifted with ``StartTime=now``
  (coreburst/burst/requeue_hold.py): the hold keeps a node that may still hold the old run's
  credential from starting the job again, and this node never ran slurmd, so none reached it.
  On Slurm 25.11+ a job submitted with ``--requeue=expedite`` comes back with no hold: nothing
  is lifted. The audit log gets ``health.failed`` with the jobs whose hold was lifted.
* if even scontrol fails, slurmd still never starts: the node misses ResumeTimeout and the
  ResumeFailProgram ends the instance (slower, but no job ever runs there).

Not HealthCheckProgram: slurm.conf(5) says it also runs "when the slurmd daemon is first started
and before it registers", but it is one program for every node (the core's NHC owns it), it is
killed after 60 s, and whatever it does to the node races the registration it precedes: a
DRAIN leaves the job that is already allocated to start there, and a DOWN is undone by that
registration under ``ReturnToService=2``. Gating slurmd's start has none of these problems.

    $ coreburst burst node-check --node od-1 --stack prod --gate     # exit 0 pass, 1 fail
    $ coreburst burst node-check --instance-type p5.48xlarge --replay DIR   # recorded outputs
"""

from __future__ import annotations

import json
import logging
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from coreburst.burst import admin_comment, node_gate, requeue_hold
from coreburst.common import slurmcmd
from coreburst.common.catalog import CatalogError, load_catalog
from coreburst.common.slurmcmd import SlurmTools
from coreburst.onprem.parsers import (
    NVIDIA_SMI_FIELDS,
    DiagTest,
    judge_dcgmi,
    judge_nccl,
    parse_all_reduce_perf,
)

log = logging.getLogger("coreburst.burst.node_check")

NVIDIA_SMI = [
    "nvidia-smi",
    "--query-gpu=" + ",".join(NVIDIA_SMI_FIELDS),
    "--format=csv,noheader,nounits",
]
DCGMI_DIAG = ["dcgmi", "diag", "-r", "1", "-j"]
FI_INFO = ["fi_info", "-p", "efa", "-t", "FI_EP_RDM"]
# The reason Slurm shows on a node that failed (and the prefix the reconciler may look for).
HEALTH_REASON = "coreburst: health check failed"
REASON_MAX = 200


class HealthInputError(ValueError):
    """Bad input to node-check (unknown type, missing replay directory): one line, exit 2."""


class ProbeFailedError(Exception):
    """A probe gave no usable answer; the message is the one reason line."""


NOT_INSTALLED = "is it installed on the image?"


@dataclass(frozen=True)
class Output:
    rc: int
    out: bytes
    err: bytes = b""


class Runner(Protocol):
    """Runs one probe (``name``: nvidia-smi, dcgmi-diag, fi_info, nccl) as ``argv``."""

    def __call__(self, name: str, argv: Sequence[str], timeout_s: float) -> Output: ...


def run_subprocess(name: str, argv: Sequence[str], timeout_s: float) -> Output:
    """The real tool; missing, timed out or not executable is :class:`ProbeFailedError`."""
    try:
        done = slurmcmd.call(argv[0], *argv[1:], timeout_s=timeout_s, hint=NOT_INSTALLED)
    except slurmcmd.SlurmError as exc:
        raise ProbeFailedError(str(exc)) from None
    return Output(done.returncode, done.stdout, done.stderr)


@dataclass(frozen=True)
class Replay:
    """Recorded outputs instead of the tools (no GPU here): ``<dir>/<probe>.out`` is the
    stdout, ``<probe>.rc`` the exit status (0 when absent), ``<probe>.err`` the stderr (empty
    when absent); no ``.out`` file is a tool that is not installed. tests/fixtures/health/
    holds them, each saying where its format comes from."""

    root: Path

    def __call__(self, name: str, argv: Sequence[str], timeout_s: float) -> Output:
        out = self.root / f"{name}.out"
        if not out.is_file():
            raise ProbeFailedError(f"{argv[0]} not found: {NOT_INSTALLED}")
        rc_file = self.root / f"{name}.rc"
        try:
            rc = int(rc_file.read_text().strip()) if rc_file.is_file() else 0
        except ValueError:
            raise ProbeFailedError(f"replay {rc_file}: not an exit status") from None
        err = self.root / f"{name}.err"
        return Output(rc, out.read_bytes(), err.read_bytes() if err.is_file() else b"")


@dataclass(frozen=True)
class Expect:
    instance_type: str
    gpus: int
    efa: int


def expected(instance_type: str) -> Expect:
    """The GPU and EFA device counts the catalog gives ``instance_type``."""
    try:
        it = load_catalog().instance(instance_type)
    except CatalogError as exc:
        raise HealthInputError(str(exc)) from None
    if it.accelerator.kind != "nvidia":
        raise HealthInputError(
            f"{instance_type} has {it.accelerator.model} ({it.accelerator.kind}) accelerators: "
            "node-check checks NVIDIA GPUs (nvidia-smi, DCGM) only"
        )
    return Expect(instance_type, it.accelerator.count, it.efa_interfaces.value)


@dataclass(frozen=True)
class Finding:
    check: str
    ok: bool
    detail: str


@dataclass
class Report:
    expect: Expect
    findings: list[Finding] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.findings) and all(f.ok for f in self.findings)

    @property
    def reason(self) -> str:
        """The first failure, one line (empty when it passed)."""
        bad = [f for f in self.findings if not f.ok]
        return f"{bad[0].check}: {bad[0].detail}" if bad else ""


def _one_line(text: str, limit: int = REASON_MAX) -> str:
    """Printable ASCII on one line (it goes into Slurm reasons and comments)."""
    flat = " ".join(text.split())
    flat = "".join(c if 32 <= ord(c) < 127 else "?" for c in flat)
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _text(argv: Sequence[str], got: Output) -> str:
    try:
        return got.out.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProbeFailedError(
            f"{argv[0]} printed bytes that are not UTF-8 (at byte {exc.start}); nothing was read"
        ) from None


def _exit(argv: Sequence[str], got: Output) -> ProbeFailedError:
    err = _one_line(got.err.decode("utf-8", "replace"), 120) if got.err else ""
    what = f"{argv[0]} exited {got.rc}"
    if got.rc == 127:  # a shell's (or timeout's, env's) "command not found"
        what = f"{argv[0]} not found (exit 127; is it installed on the image?)"
    return ProbeFailedError(what + (f": {err}" if err else ""))


# -- the checks (pure: text in, one detail line out or ProbeFailedError) -------------------------
def _gate(verdict: Callable[[], tuple[bool, str]]) -> str:
    """A reading of node_gate.py's (the boot gate's own, one copy of it) as this module
    words it: the detail, ``FAIL`` first when it failed."""
    try:
        ok, detail = verdict()
    except node_gate.ProbeError as exc:
        raise ProbeFailedError(str(exc)) from None
    return detail if ok else f"FAIL {detail}"


def judge_gpus(text: str, expect: Expect) -> str:
    return _gate(lambda: node_gate.judge_gpus(text, expect.instance_type, expect.gpus))


def parse_dcgmi_json(text: str) -> list[DiagTest]:
    """One DiagTest per (test, result) of ``dcgmi diag -j`` (DCGM 3 / NVVS layout)."""
    try:
        doc = json.loads(text)
    except ValueError:
        raise ProbeFailedError("dcgmi diag -j printed no JSON document") from None
    root = doc.get("DCGM GPU Diagnostic") if isinstance(doc, dict) else None
    cats = root.get("test_categories") if isinstance(root, dict) else None
    if not isinstance(cats, list) or not cats:
        raise ProbeFailedError(
            "dcgmi diag -j JSON has no 'DCGM GPU Diagnostic'.test_categories (not the DCGM 3 "
            "layout this reads)"
        )
    tests: list[DiagTest] = []
    for cat in cats:
        for test in (cat or {}).get("tests") or []:
            if not isinstance(test, dict):
                continue  # DCGM writes null for a test it did not run
            name = str(test.get("name", "?"))
            for res in test.get("results") or []:
                status = str((res or {}).get("status", "")).strip().capitalize()
                result = {"Skipped": "Skip"}.get(status, status)
                if result not in ("Pass", "Skip", "Warn", "Fail"):
                    raise ProbeFailedError(f"dcgmi diag -j: test {name!r} has status {status!r}")
                notes = [
                    w.get("warning", "") if isinstance(w, dict) else str(w)
                    for w in res.get("warnings") or []
                ]
                gpus = res.get("gpu_ids", res.get("gpu_id", ""))
                detail = f"GPU {gpus}: " + "; ".join(n for n in notes if n)
                code = {"Pass": 0, "Skip": 1, "Warn": 2, "Fail": 3}[result]
                tests.append(DiagTest(name, result, code, detail.strip().rstrip(":")))
    if not tests:
        raise ProbeFailedError("dcgmi diag -j reported no test results")
    return tests


def judge_dcgm(text: str) -> str:
    tests = parse_dcgmi_json(text)
    bad = [r for r in judge_dcgmi("node", tests, 1) if r.status != "pass"]
    if bad:
        t = next(t for t in tests if t.result != "Pass")
        return f"FAIL dcgmi diag -r 1: {t.name} {t.result.upper()} ({_one_line(t.detail, 120)})"
    return f"dcgmi diag -r 1: {len(tests)} results PASS"


def judge_efa(text: str, expect: Expect) -> str:
    return _gate(lambda: node_gate.judge_efa(text, expect.instance_type, expect.efa))


def judge_all_reduce(text: str, min_busbw: float | None) -> str:
    result = parse_all_reduce_perf(text)
    if not result.rows:
        raise ProbeFailedError("all_reduce_perf printed no data rows")
    # Without a floor only correctness is judged (judge_nccl's bandwidth floor set to 0).
    checks = judge_nccl("node", result, min_busbw or 1.0, 1.0 if min_busbw else 0.0)
    bad = [c for c in checks if c.status != "pass"]
    last = max(result.rows, key=lambda r: r.size)
    busbw = min(last.busbw_oop, last.busbw_ip)
    if bad:
        return f"FAIL {bad[0].check} {bad[0].measured} (expected {bad[0].expected})"
    return f"all_reduce_perf {busbw:.1f} GB/s busbw at {last.size} B, no wrong values"


def run_checks(
    expect: Expect,
    runner: Runner = run_subprocess,
    *,
    dcgm: bool = True,
    nccl_command: str | None = None,
    nccl_min_busbw: float | None = None,
    timeout_s: float = 120.0,
    nccl_timeout_s: float = 600.0,
) -> Report:
    """Every check in turn (all are run, so the report names each problem)."""
    report = Report(expect)
    probes: list[tuple[str, str, Sequence[str], Callable[[str], str], bool, float]] = [
        ("gpus", "nvidia-smi", NVIDIA_SMI, lambda t: judge_gpus(t, expect), False, timeout_s),
    ]
    if dcgm:
        # dcgmi exits non-zero when a test fails; its JSON still says which.
        probes.append(("dcgm", "dcgmi-diag", DCGMI_DIAG, judge_dcgm, True, timeout_s))
    probes.append(("efa", "fi_info", FI_INFO, lambda t: judge_efa(t, expect), False, timeout_s))
    if nccl_command:
        nccl_argv = shlex.split(nccl_command)
        probes.append(
            ("nccl", "nccl", nccl_argv, lambda t: judge_all_reduce(t, nccl_min_busbw), True,
             nccl_timeout_s)
        )  # fmt: skip
    for check, name, argv, judge, any_rc, limit in probes:
        try:
            got = runner(name, argv, limit)
            if got.rc != 0 and not any_rc:
                raise _exit(argv, got)
            try:
                detail = judge(_text(argv, got))
            except ProbeFailedError:
                if got.rc != 0:
                    raise _exit(argv, got) from None
                raise
        except ProbeFailedError as exc:
            report.findings.append(Finding(check, False, _one_line(str(exc))))
            continue
        ok = not detail.startswith("FAIL ")
        report.findings.append(Finding(check, ok, _one_line(detail.removeprefix("FAIL "))))
    return report


# -- the gate's Slurm side -------------------------------------------------------------------
class Slurm(Protocol):
    def scontrol(self, *args: str) -> str: ...

    def squeue(self, *args: str) -> str: ...


def fail_node(
    node: str,
    reason: str,
    slurm: Slurm,
    audit: Callable[..., None] | None = None,
    *,
    instance_id: str = "",
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    wait_s: float = 5.0,
) -> list[str]:
    """Take a node that failed its check out of Slurm (module docstring, "The gate"): DOWN
    with the reason (its jobs requeue now), Comment, forced power-down (the SuspendProgram
    ends the instance), each job's AdminComment and, once Slurm has requeued it (up to
    ``wait_s``), its requeue hold lifted. Returns the jobs. Every step is tried even when one
    fails (each failure is logged and audited)."""
    why = _one_line(reason, REASON_MAX - len(HEALTH_REASON) - 2)
    when = f"{now():%Y-%m-%d %H:%M:%SZ}"
    errors: list[str] = []

    def step(*args: str, tool: str = "scontrol") -> str:
        try:
            return slurm.scontrol(*args) if tool == "scontrol" else slurm.squeue(*args)
        except RuntimeError as exc:  # coreburst.common.slurmcmd.SlurmError: one line
            errors.append(str(exc))
            log.error("node-check %s: %s", node, exc)
            return ""

    jobs = step("-h", "-w", node, "-o", "%A", tool="squeue").split()
    # their AdminComments, one read for all (a note replaces only coreburst's own of its kind;
    # squeue --json, coreburst.burst.admin_comment); unreadable, no job is noted
    notes: dict[str, str | None] = {}
    before: dict[str, int] = {}  # their restart counts before this requeue
    read = False
    if jobs:
        try:
            every_job = slurm.squeue(*admin_comment.READ)
            notes, read = admin_comment.comments(admin_comment.parse_jobs(every_job)), True
            before = {j: v.restarts for j, v in requeue_hold.parse_jobs(every_job).items()}
        except RuntimeError as exc:  # coreburst.common.slurmcmd.SlurmError: one line
            errors.append(str(exc))
            log.error("node-check %s: %s", node, exc)
    step("update", f"nodename={node}", "state=down", f"reason={HEALTH_REASON}: {why}")
    step(
        "update",
        f"nodename={node}",
        f"comment={HEALTH_REASON} {when}"
        + (f" on {instance_id}" if instance_id else "")
        + f": {why}; instance terminated, node returned to the pool",
    )
    step("update", f"nodename={node}", "state=power_down_force")
    for job in jobs:
        text = f"coreburst: burst node {node} failed its health check ({why}); requeued {when}"
        value = admin_comment.merged_for(notes, read, job, "requeue", text)
        if value is None:  # never overwrite a comment that could not be read
            errors.append(f"job {job}: AdminComment unreadable or full, not noted")
            log.error("node-check %s: job %s: AdminComment unreadable, not noted", node, job)
        else:
            step("update", f"jobid={job}", f"AdminComment={value}")
    lifted: list[str] = []
    found = requeue_hold.settle(
        slurm.squeue,
        jobs,
        wait_s=wait_s,
        now=lambda: now().timestamp(),
        restarts_before={j: before[j] for j in jobs if j in before},
    )
    for job in found.held:
        failures = len(errors)
        step("update", f"jobid={job}", "StartTime=now")
        if len(errors) == failures:
            lifted.append(job)
    if audit is not None:
        audit(
            "health.failed",
            node=node,
            instance=instance_id,
            reason=why,
            jobs=jobs,
            hold_lifted=lifted,
            **({"slurm_errors": errors} if errors else {}),
        )
    return jobs


def node_check(
    node: str | None,
    expect: Expect,
    *,
    runner: Runner = run_subprocess,
    dcgm: bool = True,
    nccl_command: str | None = None,
    nccl_min_busbw: float | None = None,
    gate: bool = False,
    instance_id: str = "",
    audit: Callable[..., None] | None = None,
    slurm: Slurm | None = None,
    echo: Callable[[str], None] = print,
) -> int:
    """Run the checks, print one line per check and a verdict; with ``gate``, act on a
    failure (:func:`fail_node`). 0 passed, 1 failed."""
    report = run_checks(
        expect, runner, dcgm=dcgm, nccl_command=nccl_command, nccl_min_busbw=nccl_min_busbw
    )
    who = node or expect.instance_type
    for f in report.findings:
        echo(f"  {'ok  ' if f.ok else 'FAIL'} {f.check}: {f.detail}")
    if report.passed:
        echo(f"node-check {who}: passed")
        if audit is not None:
            audit("health.passed", node=who, instance=instance_id)
        return 0
    echo(f"node-check {who}: FAILED: {report.reason}")
    if gate and node:
        jobs = fail_node(node, report.reason, slurm or SlurmTools(), audit, instance_id=instance_id)
        echo(
            f"node-check {node}: set DOWN, powered down (instance replaced)"
            + (f"; requeued {', '.join(jobs)}" if jobs else "")
        )
    elif audit is not None:
        audit("health.failed", node=who, instance=instance_id, reason=report.reason, jobs=[])
    return 1
