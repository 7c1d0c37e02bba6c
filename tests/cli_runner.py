"""``python -m <cli module> ...`` for tests, as real processes without the second of imports.

A test that runs the CLI per case pays a Python start-up and about a second of imports
(typer, pydantic, boto3, ...) each time. Here a warm server per (command prefix, CLI module,
start-up environment) has imported the CLI once and forks one process per case, in the way
coreburst/burst/agent.py serves the power programs: the case is still its own process (its
own pid, signals, exit status, real fds 0/1/2), so what a test proves about a process still
holds. :func:`run` and :func:`popen` take ``subprocess.run``/``subprocess.Popen``'s arguments
and return theirs (a ``subprocess.Popen`` subclass: ``poll``, ``wait``, ``communicate``,
``send_signal``, ``kill``, ``returncode`` as for a child of this process).

Each case's process, forked from the server, is made what ``[*prefix, python, -m, module,
*args]`` would have started:

* fds 0/1/2 are the test's (pipes, files, /dev/null, or this process's own when not given),
  no other fd is open; argv, ``sys.orig_argv``, environment and working directory are the
  test's; ``sys.path[0]`` is that directory (as ``-m`` makes it);
* the module runs as ``-m`` runs it (``runpy._run_module_as_main`` into a new ``__main__``),
  so click's program name and ``sys.argv[0]`` are the same;
* then as the interpreter ends: ``SystemExit`` gives the exit code (a non-int code printed,
  exit 1), an uncaught exception is printed by ``sys.excepthook`` (typer's, when typer set
  one) from the same first frame, exit 1; KeyboardInterrupt ends by SIGINT; non-daemon
  threads are waited for, atexit handlers run (logging's flush), stdout is flushed (exit 120
  if that fails).

What only start-up reads cannot be changed per case: the variables in :func:`startup_env`
(interpreter, locale, site and the libraries that read one at import) pick the server, so a
case with other values gets a server started with them. Commands that are not ``python -m
<a module of SERVED>`` (or that use Popen options a fork cannot honour, e.g. ``preexec_fn``)
run as plain subprocesses; so does everything with ``CLI_RUNNER=subprocess`` in the environment (to
compare the two ways). tests/integration/guardrails/test_cli_process.py compares both for
the same cases, byte for byte.

Internals: the test connects to the server's Unix socket and sends one JSON line with the
fds (SCM_RIGHTS); the server forks a monitor, the monitor forks the case's process, answers
``pid <n>``, waits for it and answers ``status <wait status>``.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# The CLI modules served, each with what its server imports before forking: what the module
# and its commands import (never a module the CLI would not import; not the module itself,
# which runs as __main__ in each case, as -m runs it).
SERVED: dict[str, tuple[str, ...]] = {
    "coreburst.sandbox.guardrails": (
        "coreburst.sandbox.hooks",
        "guardrails.cli",
        "guardrails.config",
        "guardrails.daemon",
        "guardrails.loop",
        "guardrails.stores.sqlite",
        "guardrails.adapters.aws",
        "guardrails.adapters.slack",
        "coreburst.common.console",
        "structlog",
        "rich.table",
        "rich.markup",
        "botocore.exceptions",
    ),
    "coreburst.burst.cli": (
        "typer",
        "coreburst.burst.config",
        "coreburst.burst.power",
        "coreburst.burst.slurmconf",
        "coreburst.common.catalog",
        "infra.config",
        "boto3",
        "coreburst.burst.agent",
        "coreburst.burst.ec2io",
    ),
    "tests.cli_runner": (),  # the probe (see _probe): how a case's process looks
}
# Read at start-up (by the interpreter, site, or a library at import): they select the server.
STARTUP_PREFIXES = ("PYTHON", "LC_")
STARTUP_NAMES = (
    "LANG",
    "LANGUAGE",
    "TZ",
    "HOME",  # the user site directory on sys.path
    "SETUPTOOLS_USE_DISTUTILS",  # distutils-precedence.pth
    "NO_COLOR",  # structlog
    "FORCE_COLOR",
    "TYPER_USE_RICH",  # typer
    "TERMINAL_WIDTH",
    "_TYPER_FORCE_DISABLE_TERMINAL",
)
# Popen options a forked case cannot honour (their defaults are fine): run as a subprocess.
UNSERVED_OPTIONS = {
    "preexec_fn": None,
    "pass_fds": (),
    "start_new_session": False,
    "process_group": None,
    "user": None,
    "group": None,
    "extra_groups": None,
    "umask": -1,
    "executable": None,
    "shell": False,
    "close_fds": True,
    "restore_signals": True,
}
START_TIMEOUT_S = 120.0
# Why a call ran as a plain subprocess (the faithfulness test checks its cases were served).
fallbacks: list[str] = []


def startup_env(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(
        sorted(
            (k, v) for k, v in env.items() if k.startswith(STARTUP_PREFIXES) or k in STARTUP_NAMES
        )
    )


# -- the test's side ---------------------------------------------------------------------
class _Server:
    def __init__(self, prefix: tuple[str, ...], module: str, env: dict[str, str]) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="cli-runner-"))  # 0700
        self.path = self.dir / "s"
        self.err = bytearray()
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "tests.cli_runner", "serve", str(self.path), module],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for stream in (self.proc.stdout, self.proc.stderr):
            threading.Thread(target=self._drain, args=(stream,), daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.path.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the CLI fork server did not start: {self.err.decode()}")
            time.sleep(0.01)

    def _drain(self, stream: Any) -> None:
        while chunk := stream.read1(65536):
            self.err += chunk

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


_servers: dict[tuple[Any, ...], _Server] = {}
_servers_lock = threading.Lock()


@atexit.register
def _stop_servers() -> None:
    for s in _servers.values():
        s.stop()
    _servers.clear()


def _server(prefix: tuple[str, ...], module: str, env: dict[str, str]) -> _Server:
    key = (prefix, module, startup_env(env))
    with _servers_lock:
        s = _servers.get(key)
        if s is None or s.proc.poll() is not None:
            s = _servers[key] = _Server(prefix, module, env)
        return s


def _served(args: Any, kwargs: dict[str, Any]) -> tuple[tuple[str, ...], str, list[str]] | None:
    """(prefix, module, the module's args) when this command can be served, else None (the
    reason appended to ``fallbacks``)."""

    def no(why: str) -> None:
        fallbacks.append(f"{why}: {args!r}")

    if os.environ.get("CLI_RUNNER") == "subprocess":
        return None
    if isinstance(args, (str, bytes, os.PathLike)):
        return no("not an argument list")
    argv = [os.fsdecode(a) for a in args]
    if sys.executable not in argv:
        return no("not this Python")
    i = argv.index(sys.executable)
    if argv[i + 1 : i + 2] != ["-m"] or len(argv) < i + 3 or argv[i + 2] not in SERVED:
        return no("not python -m <a served module>")
    for name, default in UNSERVED_OPTIONS.items():
        if name in kwargs and kwargs[name] != default:
            return no(f"Popen option {name}")
    return tuple(argv[:i]), argv[i + 2], argv[i + 3 :]


class ServedPopen(subprocess.Popen):  # type: ignore[type-arg]
    """A Popen whose process the server forks (CPython 3.11's Popen internals: the start,
    poll and wait of a child; everything else is Popen's own)."""

    def __init__(self, served: tuple[tuple[str, ...], str, list[str]], *a: Any, **kw: Any):
        self._served = served
        self._conn: socket.socket | None = None
        self._buf = b""
        super().__init__(*a, **kw)

    def _execute_child(  # noqa: PLR0917 (Popen's signature)
        self,
        args: Any,
        executable: Any,
        preexec_fn: Any,
        close_fds: Any,
        pass_fds: Any,
        cwd: Any,
        env: Any,
        startupinfo: Any,
        creationflags: Any,
        shell: Any,
        p2cread: int,
        p2cwrite: int,
        c2pread: int,
        c2pwrite: int,
        errread: int,
        errwrite: int,
        *rest: Any,
    ) -> None:
        prefix, module, margs = self._served
        env = dict(os.environ) if env is None else env
        env = {os.fsdecode(k): os.fsdecode(v) for k, v in env.items()}
        server = _server(prefix, module, env)
        # -1: inherited, as a child of this process would inherit it
        fds = [p2cread, c2pwrite, errwrite]
        fds = [f if f != -1 else n for n, f in enumerate(fds)]
        request = {
            "module": module,
            "argv": ["-m", *margs],
            "orig_argv": [sys.executable, "-m", module, *margs],
            "env": env,
            "cwd": os.path.abspath(os.fsdecode(cwd)) if cwd is not None else os.getcwd(),
        }
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(str(server.path))
            data = json.dumps(request).encode("ascii") + b"\n"
            sent = socket.send_fds(conn, [data], fds)
            conn.sendall(data[sent:])
            line = self._line(conn, block=True)
        except BaseException:
            conn.close()
            raise
        finally:
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)
        if line is None or not line.startswith("pid "):
            conn.close()
            raise RuntimeError(f"the CLI fork server answered {line!r}: {server.err.decode()}")
        self._conn = conn
        self.pid = int(line[4:])
        self._child_created = True

    def _line(self, conn: socket.socket, *, block: bool) -> str | None:
        """The next line from the monitor; None when not there yet (``block`` False)."""
        while b"\n" not in self._buf:
            conn.setblocking(block)
            try:
                chunk = conn.recv(4096)
            except BlockingIOError:
                return None
            if not chunk:
                raise RuntimeError(f"the fork server's monitor of {self.args!r} ended early")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode()

    def _try_wait(self, wait_flags: int) -> tuple[int, int]:
        assert self._conn is not None
        line = self._line(self._conn, block=not wait_flags & os.WNOHANG)
        if line is None:
            return (0, 0)
        self._conn.close()
        return (self.pid, int(line.removeprefix("status ")))

    def _internal_poll(self, _deadstate: int | None = None, **_: Any) -> int | None:
        if self.returncode is None and self._conn is not None:
            if not self._waitpid_lock.acquire(False):
                return None
            try:
                if self.returncode is None:
                    pid, sts = self._try_wait(os.WNOHANG)
                    if pid == self.pid:
                        self._handle_exitstatus(sts)
            except (OSError, RuntimeError):
                if _deadstate is not None:
                    self.returncode = _deadstate
            finally:
                self._waitpid_lock.release()
        return self.returncode


def popen(args: Any, **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(args, **kwargs)``, the process forked by a warm server when it can."""
    served = _served(args, kwargs)
    if served is None:
        return subprocess.Popen(args, **kwargs)
    return ServedPopen(served, args, **kwargs)


def run(
    args: Any,
    *,
    input: Any = None,
    capture_output: bool = False,
    timeout: float | None = None,
    check: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run`` (its code, with :func:`popen`)."""
    if input is not None:
        if kwargs.get("stdin") is not None:
            raise ValueError("stdin and input arguments may not both be used.")
        kwargs["stdin"] = subprocess.PIPE
    if capture_output:
        if kwargs.get("stdout") is not None or kwargs.get("stderr") is not None:
            raise ValueError("stdout and stderr arguments may not be used with capture_output.")
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    with popen(args, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        except BaseException:
            process.kill()
            raise
        retcode = process.poll()
        assert retcode is not None
        if check and retcode:
            raise subprocess.CalledProcessError(retcode, process.args, stdout, stderr)
    return subprocess.CompletedProcess(process.args, retcode, stdout, stderr)


# -- the server's side -------------------------------------------------------------------
def _serve(path: str, module: str) -> None:
    import gc
    import importlib

    atexit.unregister(_stop_servers)  # the test side's, not a case's
    for name in SERVED[module]:
        importlib.import_module(name)
    if module in sys.modules:  # runpy would warn, and run a second copy
        raise RuntimeError(f"{module} was imported by the preload")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    listener.listen(64)
    os.rename(path + ".new", path)  # the client waits for the name: listening by then
    listener.settimeout(0.2)
    parent = os.getppid()
    monitors: set[int] = set()
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stop.append(signum))
    gc.collect()
    gc.freeze()  # the children's collections leave the server's heap alone (as the agent)
    while not stop and os.getppid() == parent:  # gone with the test process
        _reap(monitors)
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        pid = os.fork()
        if pid == 0:
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                listener.close()
                _monitor(conn)
            finally:
                os._exit(0)
        conn.close()
        monitors.add(pid)
    # Stopped: the monitors of finished cases (their CPU time then counts in this process's
    # children's, and so in the test process's); one still waiting is left to init.
    deadline = time.monotonic() + 2
    while monitors and time.monotonic() < deadline:
        _reap(monitors)
        time.sleep(0.01)


def _reap(monitors: set[int]) -> None:
    while monitors:
        pid, _ = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        monitors.discard(pid)


def _monitor(conn: socket.socket) -> None:
    conn.settimeout(30)
    buf = b""
    fds: list[int] = []
    while b"\n" not in buf:
        chunk, more, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        fds += more
        if not chunk:
            return
        buf += chunk
    request = json.loads(buf.partition(b"\n")[0])
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            conn.close()
            code = _case(request, fds)
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    conn.settimeout(None)
    conn.sendall(f"pid {pid}\n".encode())
    _, status = os.waitpid(pid, 0)
    with contextlib.suppress(OSError):
        conn.sendall(f"status {status}\n".encode())


def _case(request: dict[str, Any], fds: list[int]) -> int:
    """The case's process: made what ``python -m module`` would be, run, ended; its code."""
    import runpy
    import types

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for name in os.listdir("/proc/self/fd"):
        if int(name) > 2:
            with contextlib.suppress(OSError):
                os.close(int(name))
    sys.stdin, sys.stdout, sys.stderr = (_stdio(fd) for fd in (0, 1, 2))
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = list(request["argv"])
    sys.orig_argv = list(request["orig_argv"])
    sys.path[0] = os.getcwd()
    sys.modules["__main__"] = types.ModuleType("__main__")
    interrupted = False
    try:
        runpy._run_module_as_main(request["module"])  # type: ignore[attr-defined]
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:  # what the interpreter does with it
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code is not runpy._run_module_as_main.__code__:  # type: ignore[attr-defined]
            tb = tb.tb_next
        exc.__traceback__ = tb
        sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
        try:
            sys.excepthook(type(exc), exc, tb)
        except SystemExit as hook_exit:
            code = _exit_code(hook_exit)
        else:
            code = 1
        interrupted = isinstance(exc, KeyboardInterrupt)
    code = _finalize(code)
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


def _stdio(fd: int) -> io.TextIOWrapper:
    """sys.stdin/stdout/stderr as start-up makes them for ``fd`` now (CPython's create_stdio,
    with this interpreter's settings: encoding, errors, -u), replacing the server's."""
    old = (sys.stdin, sys.stdout, sys.stderr)[fd]
    assert isinstance(old, io.TextIOWrapper)
    unbuffered = old.write_through  # -u / PYTHONUNBUFFERED: the only way it is set
    mode = "rb" if fd == 0 else "wb"
    buf = open(fd, mode, buffering=0 if unbuffered and fd else -1, closefd=False)  # noqa: SIM115
    raw = buf if isinstance(buf, io.FileIO) else buf.raw  # type: ignore[attr-defined]
    raw.name = ("<stdin>", "<stdout>", "<stderr>")[fd]
    stream = io.TextIOWrapper(
        buf,  # type: ignore[arg-type]
        encoding=old.encoding,
        errors=old.errors,
        newline="\n",
        line_buffering=not unbuffered and (fd == 2 or os.isatty(fd)),
        write_through=unbuffered,
    )
    stream.mode = mode[0]  # type: ignore[misc]
    return stream


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    with contextlib.suppress(Exception):
        print(exc.code, file=sys.stderr)
    return 1


def _finalize(code: int) -> int:
    """Py_FinalizeEx's part that a program can see: threads, atexit, flushed stdio."""
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None and not stream.closed:
                stream.flush()
        except (OSError, ValueError):
            if stream is sys.stdout:
                code = 120
    return code


# -- the probe: what a case's process looks like (the faithfulness test) --------------------
def _probe(what: str) -> None:
    import logging

    if what == "state":
        fds = sorted(int(n) for n in os.listdir("/proc/self/fd"))
        main = sys.modules["__main__"]
        doc = {
            "argv": sys.argv,
            "orig_argv": sys.orig_argv,
            "path0": sys.path[0],
            "cwd": os.getcwd(),
            "env": dict(os.environ),
            "flags": list(sys.flags),
            "stdio": [
                [
                    s.encoding,
                    s.errors,
                    s.line_buffering,
                    s.write_through,
                    s.isatty(),
                    s.seekable(),
                    s.name,
                    s.mode,
                    s.newlines,
                    type(s.buffer).__name__,
                ]
                for s in (sys.stdin, sys.stdout, sys.stderr)
            ],
            "fds": [*fds[:3], len(fds)],  # one more: listdir's own
            "signals": {
                s.name: str(signal.getsignal(s))
                for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGCHLD)
            },
            "main": [main.__name__, main.__package__, main.__spec__.name, main.__file__],
            "pgrp": os.getpgrp() == int(os.environ.get("PROBE_PGRP", "0")),
            "umask": os.umask(0o022),
            "threads": threading.active_count(),
        }
        print(json.dumps(doc, sort_keys=True, default=str))
    elif what == "raise":
        print("before the exception")
        sys.stderr.write("partial line on stderr")
        raise ValueError("a probe that fails") from KeyError("its cause")
    elif what == "logging":
        logging.getLogger("probe").warning("no handler: the last resort writes this")
        logging.basicConfig(format="%(levelname)s %(name)s %(message)s")
        logging.getLogger("probe.child").error("through basicConfig's handler")
        print("stdout, block-buffered, after the log lines")
    elif what == "interrupt":
        raise KeyboardInterrupt
    elif what == "exit-message":
        sys.exit("a message instead of a code")
    elif what == "thread":
        threading.Thread(target=lambda: (time.sleep(0.2), print("the thread's last word"))).start()
        atexit.register(print, "atexit ran")
        sys.exit(3)
    elif what == "sleep":
        print("ready", flush=True)
        time.sleep(60)
    elif what == "stdin":
        data = sys.stdin.read()
        print(f"read {len(data)} chars: {data[:20]!r}")
    else:
        raise SystemExit(f"unknown probe {what!r}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        _serve(sys.argv[2], sys.argv[3])
    else:
        _probe(sys.argv[1] if len(sys.argv) > 1 else "state")
