"""``coreburst burst agent``: a warm fork server for the power programs.

The full resume program spends about a second of CPU before its first AWS call (typer, the
pydantic models of the stack, botocore reading the EC2 service model). The agent does that
once: it imports the programs, validates the stack and loads botocore's EC2 model into its
loader's cache. For each request from the thin client (coreburst/burst/fast.py, what the
rendered programs run when ``coreburst:burst.agentSocket`` is set) it forks; the child is one
run of ``coreburst burst <kind>``, exactly as slurmctld would have started it:

* its own process (pid and start time: coreburst/burst/claims.py names a run's owner
  host:pid:start-time), its own log lines (``%(process)d``) and audit records;
* the client's environment (SLURM_RESUME_FILE, AWS_*, SLURM_CONF, PATH ...), working directory
  and stdin/stdout/stderr (passed over the socket);
* the stack file read again (an edit applies at the next run, as without the agent), a fresh
  botocore session (credentials and config resolved from that environment) that only reads
  the service models from the agent's warm loader.

The child reports its exit code to the client itself, so a run in flight survives an agent
restart. The agent reaps its children, bounds each request (size, time to read it, children
at once) and answers a bad one with one ``error: ...`` line; the client then runs the program
itself. An upgrade of coreburst needs an agent restart (its children run the code and the
packaged catalog the agent loaded); stack file edits apply at the next run.

Run it as SlurmUser on the controller; the socket is created 0600 and only a peer with the
agent's uid (or root) is served. A systemd unit (``KillMode=process`` lets runs in flight
finish when the agent stops or restarts):

    [Service]
    User=slurm
    ExecStart=/opt/coreburst/bin/coreburst burst agent --stack prod --stack-dir /etc/coreburst \\
        --socket /run/coreburst/burst-agent.sock
    RuntimeDirectory=coreburst
    KillMode=process
    Restart=always
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import signal
import socket
import stat
import struct
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coreburst.burst.fast import KINDS, PROTOCOL

if TYPE_CHECKING:
    import botocore.loaders
    import botocore.session

log = logging.getLogger("coreburst.burst.agent")

# A request is one JSON line: argv fields and the client's environment (a Linux environment is
# at most a few hundred KiB; ARG_MAX covers argv and environment together).
MAX_REQUEST = 512 * 1024
# Seconds a child waits for the whole request, then for the client's "go".
REQUEST_TIMEOUT_S = 2.0
# Children at once; past it a request is refused (the client runs the program itself).
MAX_CHILDREN = 64
# How often the accept loop wakes to reap children and notice SIGTERM.
TICK_S = 0.5
# The client waits this long past the slowest program's own bound (the stack's resume timeout).
LIMIT_MARGIN_S = 300
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid (unix(7), SO_PEERCRED)

# Set in the agent process (inherited by its children): the loader holding the parsed models,
# and coreburst/burst/cli.py's app as the click command typer makes of it.
_warm_loader: botocore.loaders.Loader | None = None
_warm_data_path: str | None = None  # AWS_DATA_PATH / data_path the loader searched
_command: Any = None  # typer.main.get_command(cli.app): the click Command typer vendors


class AgentError(Exception):
    """The agent cannot start (one line: what and how to fix it)."""


class BadRequest(Exception):  # noqa: N818 (answered to the client as "error: ...")
    """A request the agent does not run; the message is the one-line answer."""


def botocore_session() -> botocore.session.Session | None:
    """In an agent's child: a new botocore session (this process's environment and config
    files, as boto3 would make) reading service models from the agent's warm loader. Outside
    an agent: None (boto3 makes its own)."""
    if _warm_loader is None:
        return None
    import botocore.session

    session = botocore.session.get_session()
    # A run whose environment names other model directories loads its own (cold) models.
    if session.get_config_variable("data_path") == _warm_data_path:
        session.register_component("data_loader", _warm_loader)
    return session


def warm(region: str) -> None:
    """Load what every run needs into this process: the power programs' modules and
    botocore's EC2 service model, endpoint rules and defaults (in the loader the children
    reuse). Creates a client once with placeholder credentials: nothing is sent, and no
    credential lookup (IMDS, files) runs in the agent."""
    global _warm_loader, _warm_data_path, _command
    import boto3.session
    import botocore.session
    import pydantic.type_adapter  # noqa: F401 (imported lazily on the way to the first call)
    import typer.main

    from coreburst.burst import cli
    from coreburst.burst.ec2io import client_config

    # The click command typer builds from coreburst/burst/cli.py's functions, built once.
    _command = typer.main.get_command(cli.app)

    from botocore.exceptions import BotoCoreError

    session = botocore.session.get_session()
    try:
        # The children's path (coreburst/burst/cli.py _power): boto3's session and client.
        client = boto3.session.Session(botocore_session=session).client(
            "ec2",
            region_name=region,
            config=client_config(),
            aws_access_key_id="agent-warm-up",
            aws_secret_access_key="agent-warm-up",
        )
        client.get_paginator("describe_instances")  # the paginators' model (power.py pages)
        client.get_waiter("instance_running")  # and the waiters', should a run use one
        data_path = session.get_config_variable("data_path")
    except BotoCoreError as exc:  # e.g. AWS_PROFILE names no profile in the AWS config
        raise AgentError(f"botocore: {exc}") from None
    _warm_loader = session.get_component("data_loader")
    _warm_data_path = data_path


@dataclass(frozen=True)
class Request:
    kind: str
    stack: str
    stack_dir: str
    hostlist: str
    cwd: str
    env: dict[str, str]
    fds: tuple[int, ...]

    def argv(self) -> list[str]:
        """The program's arguments (``--`` first: a hostlist is never read as an option)."""
        return [
            self.kind,
            "--stack",
            self.stack,
            "--stack-dir",
            self.stack_dir,
            "--",
            self.hostlist,
        ]


def _str_map(value: Any) -> dict[str, str] | None:
    if not isinstance(value, dict):
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return None
    return value


def parse_request(data: bytes, *, stack: str, stack_dir: Path, nfds: int) -> Request:
    """Validate one request line against the agent's stack; raises BadRequest (one line)."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest(
            "the request is not one JSON object (python -m coreburst.burst.fast sends it)"
        ) from None
    if not isinstance(doc, dict):
        raise BadRequest(
            "the request is not one JSON object (python -m coreburst.burst.fast sends it)"
        )
    if doc.get("protocol") != PROTOCOL:
        raise BadRequest(
            f"protocol {doc.get('protocol')!r}, this agent speaks {PROTOCOL}: restart the agent "
            "after upgrading coreburst"
        )
    fields = {k: doc.get(k) for k in ("kind", "stack", "stack_dir", "hostlist", "cwd")}
    missing = [k for k, v in fields.items() if not isinstance(v, str) or not v]
    if missing:
        raise BadRequest(f"the request lacks {', '.join(missing)} (non-empty strings)")
    if fields["kind"] not in KINDS:
        raise BadRequest(f"kind {fields['kind']!r} is not one of {', '.join(KINDS)}")
    env = _str_map(doc.get("env"))
    if env is None:
        raise BadRequest("env must map names to strings")
    fds = doc.get("fds")
    if (
        not isinstance(fds, list)
        or len(fds) != nfds
        or not all(isinstance(f, int) and f in (0, 1, 2) for f in fds)
        or len(set(fds)) != len(fds)
    ):
        raise BadRequest(f"fds must list the {nfds} descriptors sent with the request (of 0, 1, 2)")
    cwd = Path(str(fields["cwd"]))
    if not cwd.is_absolute() or not cwd.is_dir():
        raise BadRequest(f"cwd {fields['cwd']!r} is not an absolute directory")
    if fields["stack"] != stack:
        raise BadRequest(f"this agent serves stack {stack!r}, not {fields['stack']!r}")
    if (cwd / str(fields["stack_dir"])).resolve() != stack_dir:
        raise BadRequest(f"this agent serves stacks from {stack_dir}, not {fields['stack_dir']!r}")
    return Request(
        kind=str(fields["kind"]),
        stack=stack,
        stack_dir=str(fields["stack_dir"]),
        hostlist=str(fields["hostlist"]),
        cwd=str(cwd),
        env=env,
        fds=tuple(fds),
    )


def _read_request(conn: socket.socket) -> tuple[bytes, list[int]]:
    """The request line and the descriptors sent with it, within REQUEST_TIMEOUT_S."""
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    buf = bytearray()
    fds: list[int] = []
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise BadRequest(f"no complete request line in {REQUEST_TIMEOUT_S:g} s")
        conn.settimeout(left)
        try:
            chunk, more, _flags, _addr = socket.recv_fds(conn, 65536, 3)
        except TimeoutError:
            raise BadRequest(f"no complete request line in {REQUEST_TIMEOUT_S:g} s") from None
        fds += more
        if not chunk:
            raise BadRequest("the request ended before its newline")
        buf += chunk
        if len(buf) > MAX_REQUEST:
            raise BadRequest(f"the request is over {MAX_REQUEST} bytes")
    line, _, rest = bytes(buf).partition(b"\n")
    if rest.strip():
        raise BadRequest("one request per connection")
    return line, fds


def _peer_ok(conn: socket.socket) -> tuple[bool, int]:
    pid, uid, _gid = _UCRED.unpack(
        conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    )
    return uid in (0, os.getuid()), pid


def _send(conn: socket.socket, line: str) -> bool:
    try:
        conn.settimeout(REQUEST_TIMEOUT_S)
        conn.sendall(line.encode("utf-8", "backslashreplace") + b"\n")
    except OSError:
        return False
    return True


def _run_program(req: Request) -> int:
    """One run of ``coreburst burst <kind>`` in this (forked) process; its exit code."""
    from coreburst.burst import cli

    os.chdir(req.cwd)
    os.environ.clear()
    os.environ.update(req.env)
    argv = req.argv()
    sys.argv = ["coreburst burst", *argv]
    try:
        if _command is None:  # not warmed (tests)
            cli.app(args=argv, prog_name="coreburst burst")
        else:  # what cli.app() runs: typer.main.get_command(app).main(...), here prebuilt
            _command.main(args=argv, prog_name="coreburst burst")
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except BaseException:  # as an uncaught exception ends the direct program: traceback, 1
        traceback.print_exc()
        return 1
    return 0


def _child(conn: socket.socket, stack: str, stack_dir: Path, limit_s: int) -> int:
    """The forked child: read, check and run one request; its exit code."""
    received: list[int] = []
    try:
        ok, peer_pid = _peer_ok(conn)
        if not ok:
            _send(conn, "error: only the agent's user (or root) may use this socket")
            return 2
        data, received = _read_request(conn)
        req = parse_request(data, stack=stack, stack_dir=stack_dir, nfds=len(received))
    except BadRequest as exc:
        log.warning("bad request: %s", exc)
        _send(conn, f"error: {exc}")
        return 2
    except OSError as exc:
        log.warning("request not read: %s", exc)
        return 2
    if not _send(conn, f"run {os.getpid()} {limit_s}"):
        return 2
    try:
        conn.settimeout(REQUEST_TIMEOUT_S)
        go = conn.recv(16)
    except OSError:
        go = b""
    if go != b"go\n":
        log.warning("client (pid %s) did not confirm; %s not run", peer_pid, req.kind)
        return 2
    log.info("pid %d: %s %s for client pid %s", os.getpid(), req.kind, req.hostlist, peer_pid)
    # Now the run, in this process as the direct program would be: its stdio, no agent logging.
    for fd, target in zip(received, req.fds, strict=True):
        os.dup2(fd, target)
        os.close(fd)
    received = []
    log.handlers.clear()
    log.propagate = True
    logging.getLogger().handlers.clear()
    code = _run_program(req)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed by the program
            stream.flush()
    logging.shutdown()
    _send(conn, f"exit {code}")
    return code


def _what_stands(mode: int) -> str:
    for test, what in (
        (stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
    ):  # fmt: skip
        if test(mode):
            return what
    return "a file that is not a socket"


def _clear_stale(path: Path) -> None:
    """Remove what stands at ``path`` only when it is this user's socket with no one listening
    (an agent that died): a file, a directory, a link, another user's socket or a live one is
    left as it is, and AgentError (one line) says what stands there."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise AgentError(f"--socket {path}: cannot look at it: {exc.strerror}") from None
    fix = "remove it yourself or give another --socket"
    if not stat.S_ISSOCK(st.st_mode):  # never deleted: it is not an agent's socket
        raise AgentError(f"--socket {path}: {_what_stands(st.st_mode)} stands there; {fix}")
    if st.st_uid != os.geteuid():
        raise AgentError(
            f"--socket {path}: a socket of uid {st.st_uid} stands there, not this user's "
            f"(uid {os.geteuid()}); {fix}"
        )
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except ConnectionRefusedError:
        pass  # a stale socket from an agent that died: replace it
    except OSError as exc:
        raise AgentError(
            f"--socket {path}: cannot tell whether the socket there is in use "
            f"({exc.strerror or exc}); {fix}"
        ) from None
    else:
        raise AgentError(f"--socket {path}: another agent is listening there; stop it first")
    finally:
        probe.close()
    try:
        again = path.lstat()
        if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
            raise AgentError(f"--socket {path}: it changed while it was checked; start again")
        path.unlink()
    except OSError as exc:
        raise AgentError(f"--socket {path}: cannot remove the old socket: {exc.strerror}") from None


def bind(path: Path) -> socket.socket:
    """Listen on ``path``, created 0600; raises AgentError (one line) when it cannot. Only the
    agent's own stale socket (this user's, no one listening) is replaced.

        >>> listener = bind(Path("/run/coreburst/burst-agent.sock"))  # doctest: +SKIP
    """
    if not path.parent.is_dir():
        raise AgentError(
            f"--socket {path}: no directory {path.parent} (create it, owned by SlurmUser)"
        )
    _clear_stale(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # created 0600: no window in which others may connect
    try:
        listener.bind(str(path))
    except OSError as exc:
        listener.close()
        raise AgentError(f"--socket {path}: cannot listen there: {exc.strerror}") from None
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    listener.listen(MAX_CHILDREN)
    return listener


def _reap(children: dict[int, float]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        started = children.pop(pid, None)
        code = os.waitstatus_to_exitcode(status)
        took = f" after {time.monotonic() - started:.1f} s" if started is not None else ""
        log.info("child %d exited %d%s", pid, code, took)


def serve(
    listener: socket.socket,
    path: Path,
    stack: str,
    stack_dir: Path,
    *,
    limit_s: int,
    max_children: int = MAX_CHILDREN,
) -> int:
    """Accept requests on ``listener`` (from :func:`bind`, at ``path``) until SIGTERM or
    SIGINT; fork one child per request. Returns the exit code (0)."""
    ino = path.stat().st_ino
    stop: list[int] = []

    def _stop(signum: int, _frame: Any) -> None:
        stop.append(signum)

    old = {s: signal.signal(s, _stop) for s in (signal.SIGTERM, signal.SIGINT)}
    children: dict[int, float] = {}
    listener.settimeout(TICK_S)
    # What the agent loaded stays out of the collector's sight: a child's collections would
    # otherwise walk (and so copy, page by page) the whole inherited heap.
    gc.collect()
    gc.freeze()
    log.info("agent for stack %s (%s) listening on %s", stack, stack_dir, path)
    try:
        while not stop:
            _reap(children)
            try:
                conn, _ = listener.accept()
            except (TimeoutError, InterruptedError):
                continue
            with conn:
                if len(children) >= max_children:
                    log.warning("busy: %d runs in flight; request refused", len(children))
                    _send(conn, f"error: the agent has {len(children)} runs in flight (its limit)")
                    continue
                try:
                    pid = os.fork()
                except OSError as exc:
                    log.error("fork failed: %s", exc)
                    _send(conn, f"error: the agent cannot fork: {exc.strerror}")
                    continue
                if pid == 0:  # the child: never returns into this loop
                    code = 2
                    try:
                        listener.close()
                        for s, h in old.items():  # a fresh interpreter's handlers
                            signal.signal(s, h)
                        code = _child(conn, stack, stack_dir, limit_s)
                    finally:
                        os._exit(code)
                children[pid] = time.monotonic()
    finally:
        listener.close()
        try:
            if path.stat().st_ino == ino:
                path.unlink()
        except OSError:
            pass
        for s, h in old.items():
            signal.signal(s, h)
        _reap(children)
        if children:
            log.info("stopping; %d runs in flight finish on their own", len(children))
    log.info("agent stopped (signal %s)", stop[0] if stop else "-")
    return 0
