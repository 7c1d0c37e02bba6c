"""Burst node boot gate: GPUs, DCGM and EFA checked before slurmd may start (stdlib only).

The user data (infra/userdata.py) writes this file whole onto the node and runs it with the
image's own ``python3``, so it needs no coreburst install and no network: the default image
(Deep Learning Base AMI, Ubuntu 22.04) has Python 3.10, coreburst needs 3.11, and burst nodes
may sit in subnets without internet. It keeps to Python 3.8 and the standard library.

The counts come from the catalog at render time: ``--expect TYPE=GPUS:EFA`` per instance type
the cluster may launch (EFA 0: no EFA interface, not probed). The probes are ``coreburst burst
node-check``'s (coreburst/burst/node_check.py), which reads nvidia-smi and fi_info with this
module's ``judge_gpus`` and ``judge_efa``; DCGM it reads with the on-prem parsers' thresholds,
so a test runs both over every recorded output in tests/fixtures/health and asserts the same
verdicts. On failure, with
``--node``, it asks slurmctld to set the node DOWN and power it down (the job requeues, the
instance is ended); where scontrol cannot reach slurmctld the node just never registers.
Then, as ``node-check --gate`` does (coreburst/burst/node_check.py ``fail_node``), it waits
up to ``LIFT_WAIT_S`` for Slurm to finish requeueing the node's jobs and lifts the requeue hold
(``scontrol update jobid=N StartTime=now``) of each one Slurm holds: their run reached no
slurmd (this node's never started), so the hold guards nothing and another node can take the
job in seconds. The jobs are read from ``squeue --json --states=all`` (every release from
22.05; 22.05 ignores its filters, so every job is read); which job is held is
coreburst/burst/requeue_hold.py ``status``'s decision, which a test holds this one to over
Slurm's recorded output of 22.05, 24.11 and 26.05.

    python3 node-gate.py --node od-1 --instance-type p5.48xlarge --expect p5.48xlarge=8:32

Exit 0 passed, 1 failed, 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: Python 3.8 cannot subscript these at run time
    from collections.abc import Callable, Sequence

    Output = tuple[int, bytes, bytes]  # exit status, stdout, stderr
    Verdict = tuple[bool, str]  # passed, detail
    Finding = tuple[str, bool, str]  # check, passed, detail
    Runner = Callable[[str, Sequence[str], float], Output]

NVIDIA_SMI = [
    "nvidia-smi",
    "--query-gpu=index,name,driver_version,pcie.link.width.current,pcie.link.width.max",
    "--format=csv,noheader,nounits",
]
DCGMI_DIAG = ["dcgmi", "diag", "-r", "1", "-j"]
FI_INFO = ["fi_info", "-p", "efa", "-t", "FI_EP_RDM"]
HEALTH_REASON = "coreburst: health check failed"
TIMEOUT_S = 120.0
SCONTROL_TIMEOUT_S = 30.0
SQUEUE_JSON = ("squeue", "--json", "--states=all")
# How long the gate waits for Slurm to finish requeueing the node's jobs (as node_check.py's
# fail_node), and how often it looks.
LIFT_WAIT_S = 5.0
LIFT_EVERY_S = 0.5


class ProbeError(Exception):
    """A probe gave no usable answer; the message is the one reason line."""


def one_line(text: str, limit: int = 200) -> str:
    flat = "".join(c if 32 <= ord(c) < 127 else "?" for c in " ".join(text.split()))
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def run_tool(name: str, argv: Sequence[str], timeout_s: float) -> Output:
    """(exit status, stdout bytes, stderr bytes) of the real tool."""
    try:
        p = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError:
        raise ProbeError(f"{argv[0]} not found: is it installed on the image?") from None
    except subprocess.TimeoutExpired:
        raise ProbeError(f"{argv[0]} gave no answer in {timeout_s:g} s") from None
    except OSError as exc:
        raise ProbeError(f"{argv[0]}: {exc.strerror}") from None
    return p.returncode, p.stdout, p.stderr


def _exit(argv: Sequence[str], rc: int, err: bytes) -> ProbeError:
    what = f"{argv[0]} exited {rc}"
    if rc == 127:
        what = f"{argv[0]} not found (exit 127; is it installed on the image?)"
    line = one_line(err.decode("utf-8", "replace"), 120)
    return ProbeError(what + (f": {line}" if line else ""))


def _int(value: str) -> int | None:
    try:
        return int(value.split(maxsplit=1)[0], 0)
    except (ValueError, IndexError):
        return None


def judge_gpus(text: str, itype: str, want: int) -> Verdict:
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    rows = [[c.strip() for c in ln.strip().split(", ")] for ln in lines]
    rows = [r for r in rows if len(r) >= 5 and r[0].isdigit()]
    if len(rows) != len(lines):
        raise ProbeError(
            "nvidia-smi output not in the --query-gpu csv,noheader,nounits form "
            f"({len(lines) - len(rows)} of {len(lines)} lines unreadable)"
        )
    if len(rows) != want:
        return False, f"{len(rows)} GPUs, {itype} has {want}"
    narrow = [
        f"GPU{r[0]} x{r[3]} of x{r[4]}"
        for r in rows
        if _int(r[3]) is None or _int(r[3]) != _int(r[4])
    ]
    if narrow:
        return False, "PCIe link below full width: " + ", ".join(narrow)
    return True, f"{len(rows)} GPUs at full PCIe width"


def judge_dcgm(text: str) -> Verdict:
    """``dcgmi diag -j`` in the DCGM 3 (NVVS) layout; every result must be PASS."""
    try:
        doc = json.loads(text)
    except ValueError:
        raise ProbeError("dcgmi diag -j printed no JSON document") from None
    root = doc.get("DCGM GPU Diagnostic") if isinstance(doc, dict) else None
    cats = root.get("test_categories") if isinstance(root, dict) else None
    if not isinstance(cats, list) or not cats:
        raise ProbeError(
            "dcgmi diag -j JSON has no 'DCGM GPU Diagnostic'.test_categories (not the DCGM 3 "
            "layout this reads)"
        )
    results = []
    for cat in cats:
        tests = cat.get("tests") if isinstance(cat, dict) else None
        for test in tests or []:
            if not isinstance(test, dict):
                continue  # DCGM writes null for a test it did not run
            name = str(test.get("name", "?"))
            for item in test.get("results") or []:
                res = item if isinstance(item, dict) else {}
                status = str(res.get("status", "")).strip().capitalize()
                status = {"Skipped": "Skip"}.get(status, status)
                if status not in ("Pass", "Skip", "Warn", "Fail"):
                    raise ProbeError(f"dcgmi diag -j: test {name!r} has status {status!r}")
                notes = [
                    w.get("warning", "") if isinstance(w, dict) else str(w)
                    for w in res.get("warnings") or []
                ]
                gpus = res.get("gpu_ids", res.get("gpu_id", ""))
                detail = f"GPU {gpus}: " + "; ".join(n for n in notes if n)
                results.append((name, status, detail.strip().rstrip(":")))
    if not results:
        raise ProbeError("dcgmi diag -j reported no test results")
    bad = [r for r in results if r[1] != "Pass"]
    if bad:
        name, status, detail = bad[0]
        return False, f"dcgmi diag -r 1: {name} {status.upper()} ({one_line(detail, 120)})"
    return True, f"dcgmi diag -r 1: {len(results)} results PASS"


def judge_efa(text: str, itype: str, want: int) -> Verdict:
    blocks = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = re.match(r"^provider:\s*(\S+)\s*$", line)
        f = re.match(r"^\s+(\w+):\s*(\S.*?)\s*$", line)
        if m:
            blocks.append({"provider": m.group(1)})
        elif f and blocks:
            blocks[-1][f.group(1)] = f.group(2)
        else:
            raise ProbeError(f"fi_info output unreadable at {one_line(line, 60)!r}")
    if not blocks:
        raise ProbeError("fi_info printed no provider")
    domains = {
        b["domain"]
        for b in blocks
        if b.get("provider") == "efa" and b.get("type") == "FI_EP_RDM" and "domain" in b
    }
    if len(domains) != want:
        return False, f"{len(domains)} EFA devices, {itype} has {want}"
    return True, f"{len(domains)} EFA devices"


def run_checks(
    itype: str, gpus: int, efa: int, dcgm: bool = True, runner: Runner = run_tool
) -> list[Finding]:
    """[(check, ok, detail)] for every check (all run, so each problem is named)."""
    probes = [("gpus", "nvidia-smi", NVIDIA_SMI, lambda t: judge_gpus(t, itype, gpus), False)]
    if dcgm:  # dcgmi exits non-zero when a test fails; its JSON still says which
        probes.append(("dcgm", "dcgmi-diag", DCGMI_DIAG, judge_dcgm, True))
    if efa:
        probes.append(("efa", "fi_info", FI_INFO, lambda t: judge_efa(t, itype, efa), False))
    findings = []
    for check, name, argv, judge, any_rc in probes:
        try:
            rc, out, err = runner(name, argv, TIMEOUT_S)
            if rc != 0 and not any_rc:
                raise _exit(argv, rc, err)
            try:
                text = out.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ProbeError(
                    f"{argv[0]} printed bytes that are not UTF-8 (at byte {exc.start}); "
                    "nothing was read"
                ) from None
            try:
                ok, detail = judge(text)
            except ProbeError:
                if rc != 0:
                    raise _exit(argv, rc, err) from None
                raise
        except ProbeError as exc:
            ok, detail = False, str(exc)
        findings.append((check, ok, one_line(detail)))
    return findings


def _slurm(run: Callable[..., Any], argv: Sequence[str]) -> tuple[bool, str]:
    """(ran and exited 0, stdout or the one-line error) of a Slurm command."""
    try:
        p = run(
            list(argv),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=SCONTROL_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, one_line(str(exc), 80)
    if p.returncode != 0:
        return False, f"{argv[0]}: " + one_line(p.stderr.decode("utf-8", "replace"), 80)
    return True, p.stdout.decode("utf-8", "replace")


def _number(value: Any) -> int | None:
    """A number in Slurm's JSON: plain (22.05) or ``{"set", "infinite", "number"}`` (23.02+)."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_jobs(run: Callable[..., Any]) -> dict[str, dict[str, Any]] | None:
    """job id -> its record from ``squeue --json --states=all``; None when unreadable."""
    ok, out = _slurm(run, SQUEUE_JSON)
    try:
        jobs = json.loads(out).get("jobs") if ok else None
    except (ValueError, AttributeError):
        jobs = None
    if not isinstance(jobs, list):
        return None
    return {
        str(_number(j.get("job_id"))): j
        for j in jobs
        if isinstance(j, dict) and _number(j.get("job_id")) is not None
    }


def held(job: dict[str, Any] | None, restarts_before: int, now: float) -> bool:
    """Whether Slurm holds ``job`` after this requeue: pending (its requeue finished: not
    COMPLETING; not 25.11's EXPEDITING, which has no hold), restarted since
    ``restarts_before``, not a scrontab job, and ``Reason=BeginTime`` or a begin time ahead."""
    if job is None:
        return False
    st = job.get("job_state")
    states = set(st) if isinstance(st, list) else set(str(st).split(","))
    if "PENDING" not in states or states & {"COMPLETING", "EXPEDITING"}:
        return False
    restarts = _number(job.get("restart_cnt")) or 0
    if restarts < 1 or restarts <= restarts_before or job.get("cron"):
        return False
    if job.get("state_reason") == "BeginTime":
        return True
    eligible = _number(job.get("eligible_time"))
    return eligible is not None and eligible > now


def lift_holds(
    jobs: dict[str, int],
    run: Callable[..., Any],
    *,
    wait_s: float = LIFT_WAIT_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    now: Callable[[], float] = time.time,
) -> list[str]:
    """Lift the requeue hold of each of ``jobs`` (id -> restart count before the requeue) once
    Slurm holds it, reading every ``LIFT_EVERY_S`` up to ``wait_s``; the jobs lifted. An
    unreadable ``squeue`` ends the wait: nothing is lifted blind."""
    todo, lifted = dict(jobs), []
    deadline = clock() + wait_s
    while todo:
        views = read_jobs(run)
        if views is None:
            break
        for job, before in list(todo.items()):
            if held(views.get(job), before, now()):
                del todo[job]
                if _slurm(run, ["scontrol", "update", f"jobid={job}", "StartTime=now"])[0]:
                    lifted.append(job)
        if not todo or clock() + LIFT_EVERY_S > deadline:
            break
        sleep(LIFT_EVERY_S)
    return lifted


def tell_slurm(
    node: str, reason: str, run: Callable[..., Any] = subprocess.run, **lift: Any
) -> str:
    """Node DOWN with the reason (its job requeues now), then powered down (the suspend
    program ends the instance), then each of its jobs' requeue hold lifted (:func:`lift_holds`,
    ``lift``: its keywords). One line saying what happened."""
    why = one_line(reason, 200 - len(HEALTH_REASON) - 2)
    ok, out = _slurm(run, ["squeue", "-h", "-w", node, "-o", "%A"])
    on_node = out.split() if ok else []
    views = read_jobs(run) if on_node else {}
    before = {j: (_number((views or {}).get(j, {}).get("restart_cnt")) or 0) for j in on_node}
    for state in (f"state=down reason={HEALTH_REASON}: {why}", "state=power_down_force"):
        ok, err = _slurm(run, ["scontrol", "update", f"nodename={node}", *state.split(" ", 1)])
        if not ok:
            return f"slurmctld not told ({err}): {node} times out at ResumeTimeout"
    said = f"{node} set DOWN and powered down: its job requeues, the instance is ended"
    if views is None:  # restart counts unknown: a job's hold is left to Slurm
        return f"{said}; squeue unreadable, requeue holds left to Slurm"
    lifted = lift_holds(before, run, **lift) if before else []
    return said + (f"; requeue hold lifted on job {', '.join(lifted)}" if lifted else "")


def _expect(value: str) -> tuple[str, tuple[int, int]]:
    m = re.fullmatch(r"([a-z0-9.-]+)=(\d+):(\d+)", value)
    if not m:
        raise argparse.ArgumentTypeError(f"{value!r}: give TYPE=GPUS:EFA, e.g. p5.48xlarge=8:32")
    return m.group(1), (int(m.group(2)), int(m.group(3)))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="node-gate", description=__doc__.splitlines()[0])
    ap.add_argument("--instance-type", required=True)
    ap.add_argument("--expect", type=_expect, action="append", required=True)
    ap.add_argument("--node", help="this node's Slurm name: told DOWN on failure")
    ap.add_argument("--no-dcgm", dest="dcgm", action="store_false")
    args = ap.parse_args(argv)
    table = dict(args.expect)
    itype, who = args.instance_type, args.node or args.instance_type
    if itype in table:
        gpus, efa = table[itype]
        findings = run_checks(itype, gpus, efa, dcgm=args.dcgm)
    else:
        known = ", ".join(sorted(table))
        findings = [("type", False, f"{itype} is not a type this cluster launches ({known})")]
    for check, ok, detail in findings:
        print(f"  {'ok  ' if ok else 'FAIL'} {check}: {detail}")
    bad = [f for f in findings if not f[1]]
    if not bad:
        print(f"node-gate {who}: passed")
        return 0
    reason = f"{bad[0][0]}: {bad[0][2]}"
    print(f"node-gate {who}: FAILED: {reason}")
    if args.node:
        print(f"node-gate {who}: {tell_slurm(args.node, reason)}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
