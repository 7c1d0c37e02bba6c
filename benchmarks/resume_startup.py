"""The resume program's CPU from process start to its first AWS request (issue 22 item 6).

slurmctld starts the resume program for every resume; what it burns before its first EC2 call
is paid each time. Measured here as slurmctld would run it: the rendered program
(``render_program``: /bin/sh sourcing its env file, then exec) with one hostlist argument,
EC2's endpoint (``AWS_ENDPOINT_URL``) a loopback HTTP server. When the first request arrives
the server reads utime+stime (proc(5), /proc/<pid>/stat fields 14-15; clock ticks) of:

a. ``direct``: today's program (``coreburst burst resume``, run as ``python -m coreburst burst``,
   the installed console script's code), the one process;
b. ``agent``: the thin client (``python -P -m coreburst.burst.fast``) plus the agent's forked
   child that runs the request, until its first request (the child's counters start at the
   fork). The agent's own CPU per request (accept, fork) is printed beside it, not added:
   the target counts what runs per resume in the program slurmctld starts and its child;
c. ``fallback``: the thin client with no agent listening, which then execs today's program
   (same pid): what a resume costs while the agent is down.

The server answers 500 and the process is killed once measured. The stack is the Slurm lab's
(coreburst/sandbox/slurmlab.py STACK_YAML) with ``agentSocket`` added. Medians of ``--runs``.
The figures are this machine's CPU, not a controller's; the target is <= 0.3 s for (a), the
plain program (issue 33 item 5; coreburst/burst/programs.py), and for (b).

$ python benchmarks/resume_startup.py --runs 5
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from coreburst.burst.config import load_burst_stack  # noqa: E402
from coreburst.burst.slurmconf import render_program  # noqa: E402
from coreburst.sandbox.slurmlab import STACK_YAML  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
TARGET_S = 0.3
WAIT_S = 60.0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


class FirstCall:
    """A loopback HTTP server that runs ``probe`` when a run's first request arrives."""

    def __init__(self) -> None:
        self.probe: Callable[[], dict[str, float]] | None = None
        self.figures: dict[str, float] = {}
        self.seen = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                if outer.probe is not None and not outer.seen.is_set():
                    outer.figures = outer.probe()
                    outer.seen.set()
                self.send_response(500)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def arm(self, probe: Callable[[], dict[str, float]]) -> None:
        self.figures = {}
        self.seen.clear()
        self.probe = probe


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def run_once(
    server: FirstCall, program: Path, env: dict[str, str], agent: subprocess.Popen[bytes] | None
) -> dict[str, float]:
    holder: dict[str, int] = {}
    mine: list[int] = []

    def probe() -> dict[str, float]:
        out = {"client": cpu_s(holder["pid"])}
        if agent is not None:
            kids = children(agent.pid)  # this run's child only (the last one was reaped)
            mine.extend(kids)
            out["child"] = sum(cpu_s(k) for k in kids)
            out["agent"] = cpu_s(agent.pid)
        return out

    if agent is not None:  # the last run's child reaped (a zombie still counts its CPU)
        deadline = time.monotonic() + WAIT_S
        while children(agent.pid):
            if time.monotonic() > deadline:
                raise SystemExit("error: the agent did not reap its last child")
            time.sleep(0.05)
    before = cpu_s(agent.pid) if agent is not None else 0.0
    server.arm(probe)
    proc = subprocess.Popen(
        [str(program), "od-1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    holder["pid"] = proc.pid
    if not server.seen.wait(WAIT_S):
        proc.kill()
        proc.wait(10)
        raise SystemExit(f"error: {program.name} made no AWS request in {WAIT_S:g} s")
    for pid in mine:  # the agent's child (ours: started for this request)
        kill(pid)
    proc.kill()
    proc.wait(10)
    figures = dict(server.figures)
    if agent is not None:
        figures["agent"] -= before
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    server = FirstCall()
    with tempfile.TemporaryDirectory(prefix="resume-startup-") as tmp:
        lab = Path(tmp)
        (lab / "log").mkdir()
        sock = lab / "agent.sock"
        text = STACK_YAML.format(
            lab=lab, burst_port_base=30000, suspend_time=4, resume_timeout=40, suspend_timeout=4
        )
        text += f"    agentSocket: {sock}\n"
        (lab / "Pulumi.bench.yaml").write_text(text)
        stack = load_burst_stack("bench", lab)
        cli = [sys.executable, "-m", "coreburst", "burst"]  # as the installed `coreburst burst`
        no_env = str(lab / "absent.env")
        direct = lab / "resume-direct"
        direct.write_text(
            render_program(
                "resume",
                stack.model_copy(
                    update={"settings": stack.settings.model_copy(update={"agent_socket": None})}
                ),
                cli,
                str(lab),
                no_env,
            )
        )
        fast = lab / "resume-agent"
        fast.write_text(render_program("resume", stack, cli, str(lab), no_env))
        for p in (direct, fast):
            p.chmod(0o755)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(REPO),
            "AWS_ENDPOINT_URL": server.url,
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_MAX_ATTEMPTS": "1",
            "SLURM_CONF": str(lab / "absent-slurm.conf"),
        }
        rows: dict[str, list[dict[str, float]]] = {"direct": [], "fallback": [], "agent": []}
        for _ in range(args.runs):
            rows["direct"].append(run_once(server, direct, env, None))
            rows["fallback"].append(run_once(server, fast, env, None))
        agent = subprocess.Popen(
            [*cli, "agent", "--stack", "bench", "--stack-dir", str(lab), "--socket", str(sock)],
            env=env,
            cwd=lab,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + WAIT_S
            while not sock.exists():
                if agent.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("error: the agent did not start (run it by hand to see why)")
                time.sleep(0.05)
            time.sleep(0.2)
            for _ in range(args.runs):
                rows["agent"].append(run_once(server, fast, env, agent))
        finally:
            agent.terminate()
            agent.wait(10)
    med = {k: {f: statistics.median(r[f] for r in v) for f in v[0]} for k, v in rows.items() if v}
    totals = [r["client"] + r.get("child", 0.0) for r in rows["agent"]]
    spread = {
        k: f"runs {min(r['client'] + r.get('child', 0.0) for r in v):.2f}-"
        f"{max(r['client'] + r.get('child', 0.0) for r in v):.2f}"
        for k, v in rows.items()
    }
    print(f"resume program: CPU seconds to its first AWS request (median of {args.runs} runs)")
    direct = med["direct"]["client"]
    print(
        f"  (a) direct (coreburst burst resume):          {direct:.3f} s "
        f"({'meets' if direct <= TARGET_S else 'MISSES'} <= {TARGET_S} s; {spread['direct']})"
    )
    a = med["agent"]
    total = statistics.median(totals)
    verdict = "meets" if total <= TARGET_S else "MISSES"
    print(
        f"  (b) agent (thin client + forked child):       {total:.3f} s "
        f"(client {a['client']:.3f} + child {a['child']:.3f}; {verdict} <= {TARGET_S} s; "
        f"the agent's own accept+fork {a['agent']:.3f} s; {spread['agent']})"
    )
    print(
        f"  (c) agent down (client, then direct):         {med['fallback']['client']:.3f} s "
        f"({spread['fallback']})"
    )


if __name__ == "__main__":
    main()
