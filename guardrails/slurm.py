"""A small adapter over Slurm's ``scontrol`` for the daemon (the ``burst-reconcile`` rule).

It reads ``scontrol -o show nodes`` (one line per node, ``Key=Value`` fields; scontrol(1),
"-o, --oneliner") and sets nodes' states with ``scontrol update nodename=... state=...``
(scontrol(1), "NODES - SPECIFICATIONS FOR UPDATE COMMAND": ``State=POWER_DOWN_FORCE``,
``State=DOWN Reason=...``). Every call has a timeout; any failure is one ``SlurmError`` line.

Node states as scontrol prints them: a base state (IDLE, ALLOCATED, MIXED, DOWN, ...) joined
with ``+`` to flags (CLOUD, POWERED_DOWN, POWERING_UP, POWERING_DOWN, POWER_DOWN, DRAIN,
NOT_RESPONDING, ...), e.g. ``IDLE+CLOUD+POWERED_DOWN`` (slurm.conf(5) / scontrol(1) on Slurm
22.05; REFERENCE.md "Slurm power saving").

    >>> n = parse_nodes("NodeName=od-1 Arch=x86_64 State=ALLOCATED+CLOUD BootTime=None")["od-1"]
    >>> n.cloud, n.busy, n.powered_down
    (True, True, False)
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

# A field starts at a word followed by '=' after whitespace; its value runs to the next one
# (values such as Reason= and OS= contain spaces).
_FIELD = re.compile(r"(?:^|\s)([A-Za-z_]+)=(.*?)(?=\s+[A-Za-z_]+=|\s*$)")
BUSY = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})
POWERED_DOWN = frozenset({"POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN"})


class SlurmError(RuntimeError):
    """scontrol missing, timed out or failed; the message is one line."""


@dataclass(frozen=True)
class SlurmNode:
    name: str
    states: frozenset[str]
    reason: str = ""
    boot_time: str = ""
    fields: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def cloud(self) -> bool:
        return "CLOUD" in self.states

    @property
    def busy(self) -> bool:
        """Running (or finishing) a job: never take its instance away."""
        return bool(self.states & BUSY)

    @property
    def powered_down(self) -> bool:
        """Powered down, powering down, or queued to: Slurm wants no instance under it."""
        return bool(self.states & POWERED_DOWN)

    @property
    def powering_up(self) -> bool:
        return "POWERING_UP" in self.states


def parse_nodes(text: str) -> dict[str, SlurmNode]:
    """node name -> node, from ``scontrol -o show nodes`` output."""
    out: dict[str, SlurmNode] = {}
    for line in text.splitlines():
        fields = {m.group(1): m.group(2) for m in _FIELD.finditer(line.strip())}
        name = fields.get("NodeName")
        if not name:
            continue
        # scontrol may mark states with a suffix (*, ~, #, %, !, $, @, ^, -) in some views.
        states = frozenset(
            s.strip("*~#%!$@^-") for s in fields.get("State", "").upper().split("+") if s
        )
        out[name] = SlurmNode(
            name, states, fields.get("Reason", ""), fields.get("BootTime", ""), fields
        )
    return out


@dataclass
class Scontrol:
    """``scontrol`` from ``bin_dir`` (or PATH), reading ``conf`` (or SLURM_CONF)."""

    bin_dir: Path | None = None
    conf: Path | None = None
    timeout_s: float = 30.0

    def run(self, *args: str) -> str:
        exe = str(self.bin_dir / "scontrol") if self.bin_dir else "scontrol"
        env = dict(os.environ)
        if self.conf is not None:
            env["SLURM_CONF"] = str(self.conf)
        try:
            proc = subprocess.run(
                [exe, *args],
                check=False,
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                env=env,
            )
        except FileNotFoundError:
            raise SlurmError(
                f"{exe} not found: install slurm-client or set slurm_bin_dir"
            ) from None
        except subprocess.TimeoutExpired:
            raise SlurmError(
                f"scontrol {' '.join(args[:3])} timed out after {self.timeout_s:g}s"
            ) from None
        except OSError as exc:
            raise SlurmError(f"{exe}: {exc.strerror}") from None
        if proc.returncode != 0:
            err = " ".join(proc.stderr.split())[:300]
            raise SlurmError(f"scontrol {' '.join(args[:3])} failed ({proc.returncode}): {err}")
        return proc.stdout

    def nodes(self) -> dict[str, SlurmNode]:
        return parse_nodes(self.run("-o", "show", "nodes"))

    def power_down(self, nodes: list[str]) -> str:
        """Forced power-down (jobs on the node are requeued; SuspendProgram runs)."""
        self.run("update", "nodename=" + ",".join(nodes), "state=power_down_force")
        return "scontrol update state=power_down_force"

    def reservations(self) -> list[str]:
        """Names of the current reservations (``scontrol -o show reservation``)."""
        out = self.run("-o", "show", "reservation")
        return re.findall(r"^ReservationName=(\S+)", out, flags=re.M)

    def reserve(self, name: str, nodes: list[str], minutes: int | None) -> str:
        """A MAINT reservation: Slurm neither gives the nodes to pending jobs nor powers them
        up (scontrol(1), "RESERVATIONS"; REFERENCE.md "Slurm power saving"). OVERLAP: the
        nodes may already be in another reservation (the spend gate's). ``minutes``: it ends by
        itself after that long; None: until deleted."""
        self.run(
            "create", "reservation", f"ReservationName={name}", "Nodes=" + ",".join(nodes),
            "Users=root", "Flags=MAINT,IGNORE_JOBS,OVERLAP", "StartTime=now",
            f"Duration={minutes if minutes is not None else 'UNLIMITED'}",
        )  # fmt: skip
        return "scontrol create reservation"

    def down(self, nodes: list[str], reason: str) -> str:
        self.run("update", "nodename=" + ",".join(nodes), "state=down", f"reason={reason}")
        return "scontrol update state=down"
