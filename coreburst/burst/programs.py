"""The power programs as slurmctld starts them: resume, suspend, resume-fail, without typer.

slurmctld starts the resume program for every resume, and what it burns before its first AWS
call is paid each time (issue 33 item 5: at most 0.3 s of CPU). The rendered programs run
``coreburst burst <kind> --stack S --stack-dir D <hostlist>`` (coreburst/burst/slurmconf.py
``render_program``); :func:`main` runs exactly that layout with no command-line framework and
botocore's own session (boto3 would add its resource layer and s3transfer); anything else
(``--help``, another order) goes to the typer command in coreburst/burst/cli.py, which runs
the same :func:`build` and :func:`run`.

What the programs say: slurmctld discards their output, so the log file and the audit log
get every error; stderr gets one ``error: ...`` line (exit 2 for bad input, 1 for a failure).

    $ python -m coreburst burst resume --stack prod --stack-dir /etc/coreburst 'p5-[1-4]'
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coreburst.burst.config import BurstStack
    from coreburst.burst.power import Audit, Power

KINDS = ("resume", "suspend", "resume-fail")


class ProgramExit(Exception):  # noqa: N818 (an exit status, as typer.Exit)
    """End the program with ``code`` (its one line is already on stderr)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def escaped(text: str) -> str:
    """``text`` with what is not UTF-8 written as ``\\xNN``: Python decodes such argv bytes
    to lone surrogates (PEP 383), which neither a UTF-8 log file nor a terminal can take."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that stands for no byte (e.g. from JSON)
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def say(line: str) -> None:
    print(escaped(line), file=sys.stderr, flush=True)


def fail(msg: str) -> ProgramExit:
    say(f"error: {msg}")
    return ProgramExit(2)


def load_stack(stack: str, stack_dir: Path) -> BurstStack:
    from coreburst.burst.config import load_burst_stack
    from coreburst.common.catalog import CatalogError
    from infra.config import StackConfigError

    try:
        return load_burst_stack(stack, stack_dir)
    except (StackConfigError, CatalogError) as exc:
        raise fail(str(exc)) from None


def setup_logs(s: BurstStack) -> Audit:
    from coreburst.burst.power import Audit

    try:
        for p in (s.settings.log_file, s.settings.audit_log):
            p.parent.mkdir(parents=True, exist_ok=True)
        # backslashreplace: a record is never lost to "--- Logging error ---" on stderr.
        handler = logging.FileHandler(
            s.settings.log_file, encoding="utf-8", errors="backslashreplace"
        )
        with s.settings.audit_log.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise fail(f"cannot write the burst logs ({exc.filename}): {exc.strerror}") from None
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(message)s"))
    logger = logging.getLogger("coreburst.burst")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    return Audit(s.settings.audit_log)


def build(stack: str, stack_dir: Path, kind: str) -> Power:
    """The power program ``kind`` for the stack, its EC2 client made as described in the
    module docstring, with the AWS deadline of its Slurm limit (coreburst/burst/ec2io.py)."""
    s = load_stack(stack, stack_dir)
    audit = setup_logs(s)
    from coreburst.burst import ec2io, ec2model
    from coreburst.burst.agent import botocore_session  # the agent's warm models (a child)
    from coreburst.burst.fast import FALLBACK_ENV
    from coreburst.burst.power import Power
    from guardrails.adapters.slurm import Scontrol

    if why := os.environ.pop(FALLBACK_ENV, None):
        logging.getLogger("coreburst.burst.agent").warning("agent not used: %s", escaped(why))
    # Every AWS call ends before Slurm gives up on the program (its ResumeTimeout or
    # SuspendTimeout, counted from the program's start).
    limits = ec2io.budget(kind, s.settings.resume_timeout, s.settings.suspend_timeout)
    # EC2's model cut to the power programs' calls, cached beside the claims (ec2model.py).
    claims = s.settings.claims_file or s.settings.audit_log.with_name("burst-claims.sqlite")
    session = botocore_session() or ec2model.session(claims.parent / "coreburst-botocore")

    def client() -> object:
        return session.create_client(
            "ec2", region_name=s.config.region, config=ec2io.client_config(limits=limits)
        )

    ec2 = client()
    deadline = ec2io.Deadline(limits, started_s_ago=ec2io.process_age_s())
    deadline.install(ec2)
    # The node tags' client: its own adaptive rate limiter, made after the launch.
    power = Power(s, ec2, Scontrol(), audit, tag_client=lambda: deadline.install(client()))
    power.deadline = deadline
    return power


def run(program: str, power: Power, action: str, hostlist: str) -> int:
    """Run ``action`` for ``hostlist``; the exit status (one line on stderr unless 0)."""
    from coreburst.burst.ec2io import DeadlineExceeded
    from coreburst.burst.hostlist import compress
    from coreburst.burst.power import PowerInputError, resume_file_from_env

    log = logging.getLogger("coreburst.burst.power")
    shown = escaped(hostlist)
    try:
        if shown != hostlist:
            raise PowerInputError(
                f"hostlist '{shown}' is not UTF-8: Slurm node names are letters, digits and "
                ". _ - (e.g. p5-[1-4]); check the NodeName lines slurmctld reads"
            )
        if action == "resume":
            result = power.resume(hostlist, resume_file_from_env())
            if result.failed:
                if power.deadline is not None and power.deadline.spent:
                    why = f"{program}: {power.deadline.spent}; nodes failed: "
                    say(f"error: {why}{compress(result.failed)}")
                return 1
        else:
            power.terminate(hostlist, action)
    except DeadlineExceeded as exc:  # one line: Slurm's limit is near, nothing more is tried
        log.error("%s %s: %s", program, shown, exc)
        power.audit(f"{action}.deadline", hostlist=shown[:200], error=str(exc))
        say(f"error: {program}: {exc}")
        return 1
    except PowerInputError as exc:
        # Slurm discards stderr: the log file is where an operator finds the rejection.
        msg = escaped(str(exc))
        log.error("%s %s: %s", program, shown, msg)
        power.audit(f"{action}.rejected", hostlist=shown[:200], error=msg)
        say(f"error: {msg}")
        return 2
    except Exception as exc:  # Slurm discards stderr: the log must say what went wrong.
        log.exception("%s %s failed", program, shown)
        power.audit(f"{action}.error", hostlist=shown[:200], error=type(exc).__name__)
        say(f"error: {program}: {type(exc).__name__}: {exc}")
        return 1
    return 0


def main(argv: list[str]) -> int | None:
    """Run ``argv`` (after ``burst``) when it is a rendered power program's
    ``<kind> --stack S --stack-dir D <hostlist>``; None for anything else (typer's)."""
    if len(argv) != 6:
        return None
    kind, o_stack, stack, o_dir, stack_dir, hostlist = argv
    if kind not in KINDS or o_stack != "--stack" or o_dir != "--stack-dir":
        return None
    if hostlist.startswith("-") or stack.startswith("-") or stack_dir.startswith("-"):
        return None
    try:
        return run(kind, build(stack, Path(stack_dir), kind), kind, hostlist)
    except ProgramExit as exc:
        return exc.code
