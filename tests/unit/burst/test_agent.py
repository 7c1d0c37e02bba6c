"""The burst agent (coreburst/burst/agent.py) and its thin client (coreburst/burst/fast.py).

One agent per module, started as an operator would (``python -m coreburst.burst.cli agent``),
with EC2 on a moto server on 127.0.0.1 (the agent crosses processes, so moto's in-process mock
cannot serve its children). The agent's own environment points EC2 at a closed port: a run
that reaches moto got the client's environment. Suspend is the run used (it needs no Slurm:
the nodes have no instances, so nothing is terminated and scontrol is not called).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coreburst.burst import agent as burst_agent
from coreburst.burst import fast
from coreburst.burst.agent import BadRequest, parse_request
from coreburst.burst.config import load_burst_stack
from coreburst.burst.slurmconf import render_program
from coreburst.sandbox.emulator import MotoProcess
from tests.helpers.burst import CLUSTERS, stack_map, write_stack

REPO = Path(__file__).resolve().parents[3]
CLI = [sys.executable, "-m", "coreburst.burst.cli"]
WAIT_S = 60.0


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _wait(cond: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Agent:
    def __init__(self, root: Path, moto: MotoProcess) -> None:
        self.root = root
        self.sock = root / "agent.sock"
        self.moto = moto
        self.err = root / "agent.err"
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(REPO),
            # Not where the runs must go: they use the client's environment.
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
            "AWS_ACCESS_KEY_ID": "agent",
            "AWS_SECRET_ACCESS_KEY": "agent",
        }
        with self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                [
                    *CLI,
                    "agent",
                    "--stack",
                    "t",
                    "--stack-dir",
                    str(root),
                    "--socket",
                    str(self.sock),
                ],
                env=env,
                cwd=root,
                stdout=err,
                stderr=err,
            )
        _wait(lambda: self.sock.exists() or self.proc.poll() is not None, "the agent's socket")
        assert self.proc.poll() is None, self.err.read_text()

    def client_env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(REPO),
            "AWS_ENDPOINT_URL": self.moto.url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "SLURM_CONF": str(self.root / "no-slurm.conf"),
        }

    def program(self, kind: str, stack: str = "t") -> list[str]:
        return [*CLI, kind, "--stack", stack, "--stack-dir", str(self.root)]

    def run(self, kind: str, hostlist: str, stack: str = "t") -> subprocess.CompletedProcess[str]:
        """The thin client as the rendered program runs it."""
        return subprocess.run(
            [
                sys.executable,
                "-P",
                "-m",
                "coreburst.burst.fast",
                "--socket",
                str(self.sock),
                "--",
                *self.program(kind, stack),
                hostlist,
            ],
            env=self.client_env(),
            check=False,
            capture_output=True,
            text=True,
            timeout=WAIT_S,
        )


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    root = tmp_path_factory.mktemp("agent")
    cfg = stack_map(
        CLUSTERS,
        {"logFile": str(root / "power.log"), "auditLog": str(root / "audit.jsonl")},
    )
    write_stack(root, "t", cfg)
    moto = MotoProcess().start()
    a = Agent(root, moto)
    try:
        yield a
    finally:
        a.proc.send_signal(signal.SIGTERM)
        try:
            a.proc.wait(10)
        finally:
            if a.proc.poll() is None:
                a.proc.kill()
                a.proc.wait(10)
            moto.stop()
    assert not a.sock.exists()  # removed on SIGTERM


def _log_pids(agent: Agent, text: str) -> list[int]:
    lines = (agent.root / "power.log").read_text().splitlines()
    return [int(line.split()[2]) for line in lines if text in line]


def test_run_through_agent_exits_with_the_childs_code(agent: Agent) -> None:
    ok = agent.run("suspend", "od-1")
    assert ok.returncode == 0, ok.stderr + agent.err.read_text()
    assert "not used" not in ok.stderr
    (pid,) = _log_pids(agent, "suspend od-1: terminated nothing")
    assert pid not in (agent.proc.pid, os.getpid())
    # Bad input: the child's one line reaches the client's own stderr, exit 2, no traceback.
    bad = agent.run("suspend", "nope-1")
    assert bad.returncode == 2
    assert re.search(r"^error: .*nope-1", bad.stderr, re.M), bad.stderr
    assert "Traceback" not in bad.stderr and "not used" not in bad.stderr
    # Not UTF-8 (argv bytes): carried to the child as they are; the same one line as without.
    odd = agent.run("suspend", os.fsdecode(b"od-\xff"))
    assert odd.returncode == 2, odd.stderr
    assert "error: hostlist 'od-\\xff' is not UTF-8" in odd.stderr
    assert "not used" not in odd.stderr


def test_concurrent_requests_run_in_distinct_processes(agent: Agent) -> None:
    nodes = ["sp-1", "sp-2", "sp-3"]
    codes: dict[str, int] = {}
    old = dict(os.environ)
    os.environ.update(agent.client_env())  # via_agent sends this process's environment
    try:
        threads = [
            threading.Thread(
                target=lambda n=n: codes.__setitem__(
                    n,
                    fast.via_agent(
                        str(agent.sock), fast.request_of([*agent.program("suspend"), n])
                    ),  # type: ignore[arg-type]
                )
            )
            for n in nodes
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT_S)
    finally:
        os.environ.clear()
        os.environ.update(old)
    assert codes == dict.fromkeys(nodes, 0)
    pids = [p for n in nodes for p in _log_pids(agent, f"suspend {n}: terminated")]
    assert len(pids) == 3 and len(set(pids)) == 3 and agent.proc.pid not in pids
    # Every child reaped (no zombie left under the agent).
    _wait(lambda: not _children(agent.proc.pid), "the agent to reap its children")


def test_killed_child_is_exit_1_and_reaped(agent: Agent, tmp_path: Path) -> None:
    fifo = tmp_path / "resume.json"
    os.mkfifo(fifo)  # the run blocks opening it: a run in flight to kill
    env = {**agent.client_env(), "SLURM_RESUME_FILE": str(fifo)}
    client = subprocess.Popen(
        [
            sys.executable,
            "-P",
            "-m",
            "coreburst.burst.fast",
            "--socket",
            str(agent.sock),
            "--",
            *agent.program("resume"),
            "od-2",
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait(lambda: _children(agent.proc.pid), "the agent's child")
        (child,) = _children(agent.proc.pid)
        # Running (past the handshake; blocked opening the FIFO), then killed.
        _wait(lambda: f"pid {child}: resume od-2" in agent.err.read_text(), "the run to start")
        os.kill(child, signal.SIGKILL)
        _, err = client.communicate(timeout=WAIT_S)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait(10)
    assert client.returncode == 1
    assert f"agent child {child} ended without an exit code" in err
    _wait(lambda: not _children(agent.proc.pid), "the agent to reap the killed child")


def test_socket_is_0600_and_a_second_agent_is_refused(agent: Agent) -> None:
    assert agent.sock.stat().st_mode & 0o777 == 0o600
    out = subprocess.run(
        [
            *CLI,
            "agent",
            "--stack",
            "t",
            "--stack-dir",
            str(agent.root),
            "--socket",
            str(agent.sock),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert out.returncode == 2
    assert (
        out.stderr
        == f"error: --socket {agent.sock}: another agent is listening there; stop it first\n"
    )
    assert agent.run("suspend", "od-2").returncode == 0  # the first agent still serves


def _stale_socket(path: Path) -> None:
    """A socket file with no one listening: what an agent that died leaves."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))


def test_a_regular_file_at_the_socket_path_is_never_deleted(agent: Agent) -> None:
    """Issue 33: --socket naming an existing regular file deleted it and bound there."""
    precious = agent.root / "precious.txt"
    precious.write_text("not the agent's\n")
    out = subprocess.run(
        [*CLI, "agent", "--stack", "t", "--stack-dir", str(agent.root), "--socket", str(precious)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert out.returncode == 2
    assert out.stderr == (
        f"error: --socket {precious}: a regular file stands there; remove it yourself or give "
        "another --socket\n"
    )
    assert precious.read_text() == "not the agent's\n"


@pytest.mark.parametrize("what", ["directory", "symbolic link", "other user's socket"])
def test_the_agent_binds_only_over_its_own_stale_socket(tmp_path: Path, what: str) -> None:
    path = tmp_path / "agent.sock"
    if what == "directory":
        path.mkdir()
        said = "a directory stands there"
    elif what == "symbolic link":  # even to a stale socket: the link is not the agent's
        _stale_socket(tmp_path / "elsewhere.sock")
        path.symlink_to(tmp_path / "elsewhere.sock")
        said = "a symbolic link stands there"
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a socket to another user needs root")
        _stale_socket(path)
        os.chown(path, 4242, 4242, follow_symlinks=False)
        said = f"a socket of uid 4242 stands there, not this user's (uid {os.geteuid()})"
    before = path.lstat()
    with pytest.raises(burst_agent.AgentError) as err:
        burst_agent.bind(path)
    assert str(err.value) == f"--socket {path}: {said}; remove it yourself or give another --socket"
    after = path.lstat()
    assert (after.st_ino, after.st_mode, after.st_uid) == (
        before.st_ino, before.st_mode, before.st_uid,
    )  # fmt: skip

    stale = tmp_path / "stale.sock"  # its own stale socket is replaced, and served
    _stale_socket(stale)
    with burst_agent.bind(stale) as listener, socket.socket(socket.AF_UNIX) as client:
        client.connect(str(stale))
        assert stale.stat().st_mode & 0o777 == 0o600 and listener.accept()


def test_bad_request_answered_with_one_line(agent: Agent) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(WAIT_S)
        s.connect(str(agent.sock))
        s.sendall(b"\xffnot json\n")
        answer = b""
        while chunk := s.recv(4096):
            answer += chunk
    assert answer.count(b"\n") == 1
    assert answer.startswith(b"error: the request is not one JSON object")


def test_refused_request_runs_the_program_directly(agent: Agent) -> None:
    # Another stack than the agent's: refused, so the client runs the program itself.
    out = agent.run("suspend", "od-1", stack="nosuch")
    assert out.returncode == 2
    assert "not used: the agent refused: this agent serves stack 't', not 'nosuch'" in out.stderr
    assert "error: no stack 'nosuch'" in out.stderr


def test_absent_agent_falls_back_with_the_reason(tmp_path: Path) -> None:
    script = f"import os, sys; print(os.environ[{fast.FALLBACK_ENV!r}]); sys.exit(7)"
    out = subprocess.run(
        [
            sys.executable,
            "-P",
            "-m",
            "coreburst.burst.fast",
            "--socket",
            str(tmp_path / "none.sock"),
            "--",
            sys.executable,
            "-c",
            script,
            "resume",
            "--stack",
            "t",
            "--stack-dir",
            str(tmp_path),
            "od-1",
        ],
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO)},
        check=False,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert out.returncode == 7  # the program's own code
    assert out.stdout.startswith(f"no agent at {tmp_path / 'none.sock'}")
    assert "running" in out.stderr and "directly" in out.stderr


def test_silent_agent_falls_back_after_the_timeout(tmp_path: Path) -> None:
    path = tmp_path / "silent.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv:
        srv.bind(str(path))
        srv.listen(1)  # accepts (in the backlog), never answers
        req = fast.request_of([*CLI, "resume", "--stack", "t", "--stack-dir", "/x", "od-1"])
        assert req is not None
        t0 = time.monotonic()
        with pytest.raises(fast.Fallback, match=r"did not accept the request in 0\.3 s"):
            fast.via_agent(str(path), req, timeout=0.3)
        assert time.monotonic() - t0 < WAIT_S


def test_client_imports_only_the_standard_library() -> None:
    code = (
        "import sys, coreburst.burst.fast; "
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('coreburst', 'infra', 'guardrails', 'typer', 'click', 'rich', 'pydantic', 'yaml', "
        "'boto3', 'botocore'))))"
    )
    out = subprocess.run(
        [sys.executable, "-P", "-c", code],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=True,
    )
    assert out.stdout.split() == ["coreburst", "coreburst.burst", "coreburst.burst.fast"]


def _req(tmp_path: Path, **over: object) -> bytes:
    doc: dict[str, object] = {
        "protocol": fast.PROTOCOL,
        "kind": "resume",
        "stack": "t",
        "stack_dir": str(tmp_path),
        "hostlist": "od-1",
        "cwd": "/",
        "env": {"A": "b"},
        "fds": [0, 1, 2],
    }
    doc.update(over)
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"protocol": 0}, "protocol 0, this agent speaks 1"),
        ({"kind": "reboot"}, "kind 'reboot' is not one of resume, suspend, resume-fail"),
        ({"hostlist": ""}, "lacks hostlist"),
        ({"env": {"A": 1}}, "env must map names to strings"),
        ({"fds": [0, 1, 7]}, "fds must list the 3 descriptors"),
        ({"fds": [0, 1]}, "fds must list the 3 descriptors"),
        ({"cwd": "relative"}, "cwd 'relative' is not an absolute directory"),
        ({"stack": "prod"}, "this agent serves stack 't', not 'prod'"),
        ({"stack_dir": "/etc"}, "not '/etc'"),
    ],
)
def test_parse_request_rejects(tmp_path: Path, over: dict[str, object], message: str) -> None:
    with pytest.raises(BadRequest, match=re.escape(message)):
        parse_request(_req(tmp_path, **over), stack="t", stack_dir=tmp_path, nfds=3)


def test_parse_request_accepts_the_clients_request(tmp_path: Path) -> None:
    req = parse_request(_req(tmp_path, hostlist="-x"), stack="t", stack_dir=tmp_path, nfds=3)
    # "--" before the hostlist: a hostlist is never read as an option.
    assert req.argv() == ["resume", "--stack", "t", "--stack-dir", str(tmp_path), "--", "-x"]


def test_rendered_program_asks_the_agent_and_keeps_the_direct_command(stack_dir: Path) -> None:
    plain = load_burst_stack("t", stack_dir)
    direct = render_program("resume", plain, ["coreburst", "burst"], "/srv/s", "/etc/e.env")
    assert "coreburst.burst.fast" not in direct  # without agentSocket: today's program
    cfg = stack_map(CLUSTERS, {"agentSocket": "/run/coreburst/agent.sock"})
    write_stack(stack_dir, "a", cfg)
    text = render_program(
        "resume",
        load_burst_stack("a", stack_dir),
        ["coreburst", "burst"],
        "/srv/s",
        "/etc/e.env",
        python="/opt/cb/bin/python",
    )
    line = text.splitlines()[-1].replace('"$@"', "p5-1")
    argv = shlex.split(line)
    assert argv[:8] == [
        "exec",
        "/opt/cb/bin/python",
        "-P",
        "-m",
        "coreburst.burst.fast",
        "--socket",
        "/run/coreburst/agent.sock",
        "--",
    ]
    assert argv[8:] == [
        "coreburst",
        "burst",
        "resume",
        "--stack",
        "a",
        "--stack-dir",
        "/srv/s",
        "p5-1",
    ]
    assert fast.request_of(argv[8:]) == {
        "protocol": fast.PROTOCOL,
        "kind": "resume",
        "stack": "a",
        "stack_dir": "/srv/s",
        "hostlist": "p5-1",
    }
