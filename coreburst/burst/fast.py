"""The thin power program: ask the burst agent (coreburst/burst/agent.py) to run it.

slurmctld starts the resume program for every resume. The full program spends about a second
of CPU importing and building (typer, pydantic models, botocore's EC2 model) before its first
AWS call; the agent has done that once, so this client only sends the request and waits. It
imports the standard library only (keep it so: ``coreburst/__init__.py`` and
``coreburst/burst/__init__.py`` are docstrings).

    $ python -P -m coreburst.burst.fast --socket /run/coreburst/burst-agent.sock -- \\
          coreburst burst resume --stack prod --stack-dir /etc/coreburst 'p5-[1-4]'

Everything after ``--`` is today's program, in the layout ``render_program`` writes
(``<cli...> <kind> --stack S --stack-dir D <hostlist>``). The agent forks one child per
request; the child runs that program's code with its own pid, this client's environment,
working directory and stdin/stdout/stderr (passed over the socket), and this client exits
with the child's exit code.

When the agent is absent, refuses the request (one ``error: ...`` line) or does not accept it
within ``--timeout`` seconds, the client runs the command after ``--`` itself (``exec``): a
resume never fails because the agent is down. The reason goes to stderr and, through
``COREBURST_AGENT_FALLBACK``, into the power programs' log.

Protocol (one Unix stream socket per run; lines of UTF-8 text):

1. client -> agent: one JSON object and a newline (``PROTOCOL``, ``kind``, ``stack``,
   ``stack_dir``, ``hostlist``, ``cwd``, ``env``, ``fds``), with the descriptors named in
   ``fds`` (of 0, 1, 2) attached (SCM_RIGHTS);
2. agent -> client: ``run <pid> <limit_s>`` (accepted; the child's pid, and how long the client
   waits for it at most) or ``error: <why>`` (refused);
3. client -> agent: ``go`` (the client is committed: it will not fall back after this; a child
   that gets no ``go`` runs nothing);
4. agent -> client: ``exit <code>``, then the agent closes the connection.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time

PROTOCOL = 1
KINDS = ("resume", "suspend", "resume-fail")
# Set for the fallback run: the full program logs it (coreburst/burst/cli.py, _power).
FALLBACK_ENV = "COREBURST_AGENT_FALLBACK"
# Seconds from connect to the agent's "run" line; past it the client runs the program itself.
ACCEPT_TIMEOUT_S = 3.0
# The most bytes of one protocol line the client reads (the agent answers short lines).
MAX_ANSWER = 4096
USAGE = "usage: python -m coreburst.burst.fast --socket PATH [--timeout S] -- <program argv...>"


class Fallback(Exception):  # noqa: N818 (a reason, not a failure)
    """The agent cannot run this request; the message says why (one line)."""


def request_of(command: list[str]) -> dict[str, object] | None:
    """The request for ``command`` (``<cli...> <kind> --stack S --stack-dir D <hostlist>``, as
    rendered), or None when it is not in that layout (then the command runs directly)."""
    if len(command) < 7:
        return None
    kind, o_stack, stack, o_dir, stack_dir, hostlist = command[-6:]
    if kind not in KINDS or o_stack != "--stack" or o_dir != "--stack-dir":
        return None
    return {
        "protocol": PROTOCOL,
        "kind": kind,
        "stack": stack,
        "stack_dir": stack_dir,
        "hostlist": hostlist,
    }


def _readline(sock: socket.socket, buf: bytearray, deadline: float) -> str | None:
    """One line from ``sock`` by ``deadline`` (monotonic), or None at end of stream."""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        chunk = sock.recv(MAX_ANSWER)
        if not chunk:
            return None
        buf += chunk
        if len(buf) > MAX_ANSWER:
            raise Fallback(f"agent answered a line over {MAX_ANSWER} bytes")
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line.decode("utf-8", "backslashreplace")


def _open_fds() -> list[int]:
    out = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            continue
        out.append(fd)
    return out


def via_agent(path: str, request: dict[str, object], timeout: float = ACCEPT_TIMEOUT_S) -> int:
    """Run ``request`` in the agent at ``path``; the child's exit code. Raises Fallback (with
    the reason) when the agent did not accept it, so the caller may run it itself."""
    deadline = time.monotonic() + timeout
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise Fallback(f"no agent at {path} ({exc.strerror})") from None
        except OSError as exc:
            raise Fallback(f"cannot reach the agent at {path}: {exc.strerror or exc}") from None
        fds = _open_fds()
        try:
            cwd = os.getcwd()
        except OSError as exc:
            raise Fallback(f"no working directory to pass on ({exc.strerror})") from None
        payload = {**request, "cwd": cwd, "env": dict(os.environ), "fds": fds}
        # ASCII: json escapes what is not (argv or environment bytes that are not UTF-8 arrive
        # as lone surrogates, written \udcXX, and come back the same in the agent).
        data = json.dumps(payload).encode("ascii") + b"\n"
        buf = bytearray()
        try:
            sent = socket.send_fds(sock, [data], fds) if fds else sock.send(data)
            sock.sendall(data[sent:])
            line = _readline(sock, buf, deadline)
        except TimeoutError:
            raise Fallback(
                f"the agent at {path} did not accept the request in {timeout:g} s"
            ) from None
        except OSError as exc:
            raise Fallback(
                f"the agent at {path} dropped the request: {exc.strerror or exc}"
            ) from None
        if line is None:
            raise Fallback(f"the agent at {path} closed the connection without an answer")
        if line.startswith("error: "):
            raise Fallback(f"the agent refused: {line.removeprefix('error: ')}")
        word, _, rest = line.partition(" ")
        pid_s, _, limit_s = rest.partition(" ")
        if word != "run" or not pid_s.isdigit():
            raise Fallback(f"the agent answered {line[:200]!r}, not 'run <pid> <limit>'")
        try:
            limit = float(limit_s)
            sock.settimeout(timeout)
            sock.sendall(b"go\n")
        except (ValueError, OSError):
            raise Fallback(f"the agent's answer {line[:200]!r} could not be confirmed") from None
        # Committed: the child runs; from here on the client never runs the program itself.
        try:
            end = _readline(sock, buf, time.monotonic() + limit)
        except TimeoutError:
            _say(f"agent child {pid_s} still running after {limit:g} s; not waiting longer")
            return 1
        except (OSError, Fallback) as exc:
            _say(f"agent child {pid_s} ended without an exit code ({exc})")
            return 1
        if end is None or not end.startswith("exit ") or not end[5:].lstrip("-").isdigit():
            _say(f"agent child {pid_s} ended without an exit code (killed?)")
            return 1
        return int(end[5:])
    finally:
        sock.close()


def _say(msg: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # stderr closed: slurmctld discards it
        print(f"coreburst burst agent: {msg}", file=sys.stderr, flush=True)


def run_directly(command: list[str], reason: str) -> int:
    """Exec ``command`` (today's program) with the reason in its environment for its log."""
    _say(f"not used: {reason}; running {command[0]} directly")
    os.environ[FALLBACK_ENV] = reason.replace("\n", " ")[:500]
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        _say(f"cannot run {command[0]}: {exc.strerror}")
        return 127
    return 127  # not reached: execvp replaces this process


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    path = None
    timeout = ACCEPT_TIMEOUT_S
    while args and args[0] != "--":
        opt = args.pop(0)
        if opt in ("--socket", "--timeout") and args and args[0] != "--":
            value = args.pop(0)
        else:
            print(f"error: unknown or incomplete option {opt!r}; {USAGE}", file=sys.stderr)
            return 2
        if opt == "--socket":
            path = value
        else:
            try:
                timeout = float(value)
            except ValueError:
                timeout = -1.0
            if not 0 < timeout <= 60:
                print(f"error: --timeout {value!r}: give seconds, 0 < S <= 60", file=sys.stderr)
                return 2
    command = args[1:]
    if not command or path is None:
        print(f"error: --socket and a program after -- are required; {USAGE}", file=sys.stderr)
        return 2
    request = request_of(command)
    if request is None:
        return run_directly(command, "arguments not in the rendered layout")
    try:
        return via_agent(path, request, timeout)
    except Fallback as exc:
        return run_directly(command, str(exc))


if __name__ == "__main__":
    sys.exit(main())
