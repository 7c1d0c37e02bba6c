"""The one way coreburst runs Slurm's client commands (``scontrol``, ``squeue``, ``scancel``,
``sacct``, ``sacctmgr``) and the node probes that are run the same way.

Every call has a deadline, finds the tool in ``bin_dir`` (or on PATH), reads ``conf`` (or
``SLURM_CONF`` / Slurm's default), and ends any failure in one :class:`SlurmError` line that
names the command: not installed, not executable, timed out, exited non-zero (with what it
wrote to stderr), or printed output that is not UTF-8 (a job name or comment may hold any
bytes: nothing is read rather than guessed).

:func:`call` runs a command and hands back its exit status and output, failing only when it
could not be run; :func:`run_tool` also fails on a non-zero exit and decodes stdout. Both take
``run`` (``subprocess.run`` by default) so tests can play the tool.

    >>> run_tool("scontrol", "-o", "show", "nodes", timeout_s=30)  # doctest: +SKIP
    'NodeName=od-1 Arch=x86_64 State=IDLE+CLOUD+POWERED_DOWN ...'
    >>> done = call("sh", "-c", "echo oops >&2; exit 3", timeout_s=5)
    >>> done.returncode, done.said
    (3, 'oops')
    >>> done.check()
    Traceback (most recent call last):
    ...
    coreburst.common.slurmcmd.SlurmError: sh -c echo oops >&2; exit 3 failed (3): oops
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The default advice for a tool that is not there.
INSTALL_HINT = "install slurm-client"
# How much of a failing command's stderr goes into the one line. Slurm's clients end with
# their fatal error, so a longer stderr keeps its end.
STDERR_MAX = 300

Runner = Callable[..., subprocess.CompletedProcess[bytes]]
# Slurm's NO_VAL for a 32-bit number (slurm.h; INFINITE is the one above it): a time limit at or
# above it is no limit.
NO_VAL = 0xFFFFFFFE


class SlurmError(RuntimeError):
    """A Slurm command (or node probe) missing, timed out, failed or unreadable; the message
    is one line naming the command."""


def slurm_number(v: Any) -> int | None:
    """A number as ``squeue --json`` prints it: plain (Slurm 22.05, openapi/v0.0.38) or in
    Slurm 23.02+'s ``{"set": bool, "infinite": bool, "number": N}`` wrapper; None when it is
    unset, infinite or not a number.

    >>> slurm_number(90), slurm_number({"set": True, "infinite": False, "number": 90})
    (90, 90)
    >>> slurm_number({"set": False, "infinite": True, "number": 0}), slurm_number(None)
    (None, None)
    """
    if isinstance(v, dict):
        if v.get("infinite") or not v.get("set", True):
            return None
        v = v.get("number")
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return int(v)


def slurm_minutes(v: Any) -> int | None:
    """A time limit in minutes from ``squeue --json`` (``time_limit``); None: no limit (unset,
    infinite, 22.05's ``null``, or Slurm's NO_VAL/INFINITE sentinels).

    >>> slurm_minutes(90), slurm_minutes(None), slurm_minutes(0xFFFFFFFF)
    (90, None, None)
    """
    n = slurm_number(v)
    return None if n is None or n >= NO_VAL else n


def shown(argv: list[str]) -> str:
    """How messages name a command: the tool and its first three arguments."""
    return " ".join(argv[:4])


@dataclass(frozen=True)
class Done:
    """A command that ran: its exit status and raw output."""

    command: str  # as messages name it (:func:`shown`)
    returncode: int
    stdout: bytes
    stderr: bytes = b""

    @property
    def said(self) -> str:
        """stderr on one line, its end kept when it is long; "" when it wrote nothing."""
        text = " ".join(self.stderr.decode("utf-8", "replace").split())
        return text if len(text) <= STDERR_MAX else "..." + text[-STDERR_MAX:]

    def check(self) -> Done:
        """Itself, or :class:`SlurmError` when the command exited non-zero."""
        if self.returncode != 0:
            said = f": {self.said}" if self.said else ""
            raise SlurmError(f"{self.command} failed ({self.returncode}){said}")
        return self

    def text(self) -> str:
        """stdout as text; :class:`SlurmError` when it is not UTF-8."""
        try:
            return self.stdout.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SlurmError(
                f"{self.command} printed bytes that are not UTF-8 (at byte {exc.start}); "
                "nothing was read from it"
            ) from None


def call(
    tool: str,
    *args: str,
    bin_dir: Path | None = None,
    conf: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
    run: Runner = subprocess.run,
    hint: str = INSTALL_HINT,
    timeout_hint: str = "",
) -> Done:
    """Run ``tool`` (from ``bin_dir``, else PATH) with ``args`` under ``env`` (default: this
    process's environment) plus ``SLURM_CONF=conf`` when given. :class:`SlurmError` when it
    cannot be run or does not finish within ``timeout_s``; ``hint`` says how to get a missing
    tool, ``timeout_hint`` what to check after a timeout."""
    exe = str(bin_dir / tool) if bin_dir else tool
    argv = [exe, *args]
    named = shown([tool, *args])
    run_env = dict(env if env is not None else os.environ)
    if conf is not None:
        run_env["SLURM_CONF"] = str(conf)
    try:
        proc = run(argv, capture_output=True, env=run_env, timeout=timeout_s, check=False)
    except FileNotFoundError:
        raise SlurmError(f"{exe} not found: {hint}") from None
    except subprocess.TimeoutExpired:
        after = f"{named} timed out after {timeout_s:g}s"
        raise SlurmError(f"{after}: {timeout_hint}" if timeout_hint else after) from None
    except OSError as exc:
        raise SlurmError(f"{exe}: {exc.strerror}") from None
    return Done(named, proc.returncode, proc.stdout or b"", proc.stderr or b"")


def run_tool(
    tool: str,
    *args: str,
    bin_dir: Path | None = None,
    conf: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
    run: Runner = subprocess.run,
    hint: str = INSTALL_HINT,
) -> str:
    """stdout of a Slurm command that must succeed (see :func:`call`); a non-zero exit or
    output that is not UTF-8 is one :class:`SlurmError` line too."""
    done = call(
        tool, *args, bin_dir=bin_dir, conf=conf, env=env, timeout_s=timeout_s, run=run, hint=hint
    )
    return done.check().text()


@dataclass
class SlurmTools:
    """Slurm's clients from ``bin_dir`` (or PATH), reading ``conf`` (or SLURM_CONF), each call
    within ``timeout_s``; a failure is one :class:`SlurmError` line.

        >>> SlurmTools(timeout_s=10).scontrol("-o", "show", "job", "7")  # doctest: +SKIP
    """

    bin_dir: Path | None = None
    conf: Path | None = None
    timeout_s: float = 30.0

    def tool(self, name: str, *args: str) -> str:
        hint = f"{INSTALL_HINT} or set slurm_bin_dir"
        return run_tool(
            name, *args, bin_dir=self.bin_dir, conf=self.conf, timeout_s=self.timeout_s, hint=hint
        )

    def scontrol(self, *args: str) -> str:
        return self.tool("scontrol", *args)

    def squeue(self, *args: str) -> str:
        return self.tool("squeue", *args)


def parse_release(text: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a Slurm release as ``scontrol -V`` prints it or as given
    (``slurm 22.05.8``, ``slurm-wlm 24.11.5``, ``26.05``); None when there is none.

    >>> parse_release("slurm-wlm 24.11.5"), parse_release("22.05"), parse_release("x")
    ((24, 11), (22, 5), None)
    """
    m = re.search(r"\b(\d{2})\.(\d{2})(?:\.\d+)?\b", text)
    return (int(m[1]), int(m[2])) if m else None


def installed_release(
    bin_dir: Path | None = None, timeout_s: float = 10.0, run: Runner = subprocess.run
) -> tuple[int, int] | None:
    """The release of the Slurm installed here (``slurmctld -V``, which needs no slurm.conf,
    else ``scontrol -V``, which on 22.05 fails without one); None when neither can say."""
    for tool in ("slurmctld", "scontrol"):
        try:
            found = parse_release(
                run_tool(tool, "-V", bin_dir=bin_dir, timeout_s=timeout_s, run=run)
            )
        except SlurmError:
            continue
        if found is not None:
            return found
    return None
