"""Run ``ansible/site.yml`` and ``ansible/validate.yml`` through ansible-runner.

The event handler turns runner events into a live per-host progress display and a report
(per host, per check: status, measured, expected, message) that other tools read as JSON.

>>> outcome = run_playbook("validate", Path("inv.yml"), limit="dgx_nodes")  # doctest: +SKIP
>>> outcome.exit_code  # 0 ok, 1 validation/task failures, 2 bad input or unreachable
0
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn
from rich.table import Table

from coreburst.onprem.fleet import FleetError, inventory_names, load_yaml_mapping

# The playbooks and roles: package data (in a checkout, a link to the top-level ansible/).
ANSIBLE_DIR = Path(__file__).resolve().parent / "playbooks"
PLAYBOOKS: dict[str, str] = {"apply": "site.yml", "validate": "validate.yml"}

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2

Kind = Literal["apply", "validate"]


@dataclass
class HostReport:
    status: str = "ok"
    ok: int = 0
    changed: int = 0
    failed: int = 0
    skipped: int = 0
    unreachable: bool = False
    changed_tasks: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed_checks(self) -> list[dict[str, Any]]:
        return [c for c in self.checks if c.get("status") != "pass"]


@dataclass
class RunOutcome:
    kind: str
    playbook: str
    rc: int
    exit_code: int
    hosts: dict[str, HostReport]
    error: str | None = None

    def to_json(self) -> str:
        return json.dumps(
            {
                "kind": self.kind,
                "playbook": self.playbook,
                "rc": self.rc,
                "exit_code": self.exit_code,
                "error": self.error,
                "hosts": {h: asdict(r) for h, r in sorted(self.hosts.items())},
            },
            indent=2,
            default=str,
        )


class EventTracker:
    """ansible-runner ``event_handler``: per-host counters, checks and a live display."""

    def __init__(self, progress: Progress | None = None) -> None:
        self.hosts: dict[str, HostReport] = {}
        self.progress = progress
        self._rows: dict[str, TaskID] = {}
        self._task = ""

    def _host(self, name: str) -> HostReport:
        if name not in self.hosts:
            self.hosts[name] = HostReport()
            if self.progress is not None:
                self._rows[name] = self.progress.add_task(
                    "starting", total=None, host=name, counts=""
                )
        return self.hosts[name]

    def _show(self, name: str) -> None:
        if self.progress is None:
            return
        r = self.hosts[name]
        counts = f"ok={r.ok} changed={r.changed} failed={r.failed}"
        if r.unreachable:
            counts += " UNREACHABLE"
        self.progress.update(self._rows[name], description=self._task, counts=counts)

    def __call__(self, event: dict[str, Any]) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_task_start":
            self._task = str(data.get("task", ""))
            return True
        host = data.get("host")
        if not host or kind not in {
            "runner_on_ok",
            "runner_on_failed",
            "runner_on_skipped",
            "runner_on_unreachable",
        }:
            return True
        r = self._host(str(host))
        res = data.get("res") or {}
        task = str(data.get("task", self._task))
        if kind == "runner_on_ok":
            r.ok += 1
            if res.get("changed"):
                r.changed += 1
                r.changed_tasks.append(task)
            facts = res.get("ansible_facts") or {}
            if isinstance(facts.get("acceptance_results"), list):
                r.checks = list(facts["acceptance_results"])
        elif kind == "runner_on_skipped":
            r.skipped += 1
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            r.failed += 1
            r.status = "failed"
            r.errors.append(f"{task}: {res.get('msg', 'failed')}")
        elif kind == "runner_on_unreachable":
            r.unreachable = True
            r.status = "unreachable"
            r.errors.append(f"unreachable: {str(res.get('msg', '')).strip()}")
        self._show(str(host))
        return True


_LIMIT_SPLIT = re.compile(r"[:,]")


def check_limit(limit: str | None, groups: set[str], hosts: set[str]) -> None:
    """Reject --limit patterns naming no group or host of the inventory (globs are allowed)."""
    if not limit:
        return
    for raw in _LIMIT_SPLIT.split(limit):
        name = raw.strip().lstrip("!&")
        if not name or any(c in name for c in "*?[~") or name in groups or name in hosts:
            continue
        raise FleetError(
            f"--limit {name!r} matches no group or host; groups: {', '.join(sorted(groups))}"
        )


def resolve_inventory(inventory: Path) -> tuple[set[str], set[str]]:
    """Group and host names of a YAML inventory file (or a directory holding hosts.yml)."""
    path = inventory
    if inventory.is_dir():
        candidates = [inventory / n for n in ("hosts.yml", "hosts.yaml")]
        found = [c for c in candidates if c.exists()]
        if not found:
            raise FleetError(f"{inventory}: no hosts.yml in inventory directory")
        path = found[0]
    return inventory_names(load_yaml_mapping(path, "inventory"))


def _progress(console: Console | None) -> Progress | None:
    if console is None:
        return None
    return Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.fields[host]:<16}"),
        TextColumn("{task.fields[counts]:<32}"),
        TextColumn("{task.description}"),
        console=console,
    )


def _last_error_line(stdout: str) -> str:
    lines = [ln.strip() for ln in stdout.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "ERROR" in ln or "error" in ln:
            return ln
    return lines[-1] if lines else "ansible-playbook failed without output"


def run_playbook(
    kind: Kind,
    inventory: Path,
    *,
    limit: str | None = None,
    tags: str | None = None,
    extravars: dict[str, Any] | None = None,
    check: bool = False,
    console: Console | None = None,
    forks: int = 20,
    artifact_dir: Path | None = None,
) -> RunOutcome:
    """Run the configure (``apply``) or acceptance (``validate``) playbook.

    Raises FleetError for bad input found before ansible starts.
    """
    import ansible_runner  # imported late: it is slow and the CLI's --help should not pay

    groups, hosts = resolve_inventory(inventory)
    check_limit(limit, groups, hosts)
    playbook = ANSIBLE_DIR / PLAYBOOKS[kind]
    bindir = str(Path(sys.executable).parent)
    env = {
        "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"),
        "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
    }
    cmdline = "--check --diff" if check else None
    progress = _progress(console)
    tracker = EventTracker(progress)
    with tempfile.TemporaryDirectory(prefix="coreburst-onprem-") as tmp:
        kwargs: dict[str, Any] = {
            "private_data_dir": tmp,
            "project_dir": str(ANSIBLE_DIR),
            "playbook": str(playbook),
            "inventory": str(inventory.resolve()),
            "extravars": extravars or {},
            "limit": limit,
            "tags": tags,
            "envvars": env,
            "event_handler": tracker,
            "quiet": True,
            "forks": forks,
            "suppress_env_files": True,
            "cmdline": cmdline,
        }
        if artifact_dir is not None:
            kwargs["artifact_dir"] = str(artifact_dir)
        if progress is not None:
            with progress:
                r = ansible_runner.run(**kwargs)
        else:
            r = ansible_runner.run(**kwargs)
        stdout = r.stdout.read() if r.stdout else ""
    rc = int(r.rc if r.rc is not None else 1)
    outcome = RunOutcome(kind, str(playbook), rc, EXIT_OK, tracker.hosts)
    if any(h.unreachable for h in tracker.hosts.values()):
        outcome.exit_code = EXIT_BAD_INPUT
        bad = sorted(h for h, rep in tracker.hosts.items() if rep.unreachable)
        outcome.error = f"unreachable host(s): {', '.join(bad)}"
    elif any(h.failed or h.failed_checks for h in tracker.hosts.values()):
        outcome.exit_code = EXIT_FAILED
    elif rc != 0:
        # ansible failed before any host ran a task (syntax, unknown tag, no hosts matched).
        outcome.exit_code = EXIT_BAD_INPUT
        outcome.error = _last_error_line(stdout)
    elif not tracker.hosts:
        outcome.exit_code = EXIT_BAD_INPUT
        outcome.error = "no hosts matched; check --limit and the inventory"
    elif kind == "validate" and not any(h.checks for h in tracker.hosts.values()):
        outcome.exit_code = EXIT_BAD_INPUT
        outcome.error = f"no acceptance checks ran; check --tags {tags!r}"
    return outcome


def summary_table(outcome: RunOutcome) -> Table:
    """One row per host: counters and failed checks."""
    table = Table(title=f"coreburst onprem {outcome.kind}")
    for col in ("host", "status", "ok", "changed", "failed", "checks", "failed checks / errors"):
        table.add_column(col)
    for host, r in sorted(outcome.hosts.items()):
        bad = [c["message"] for c in r.failed_checks]
        if not bad and r.errors:
            bad = r.errors
        status = r.status if (r.status != "ok" or not bad) else "failed"
        colour = {"ok": "green", "failed": "red", "unreachable": "magenta"}.get(status, "")
        table.add_row(
            host,
            f"[{colour}]{status}[/]" if colour else status,
            str(r.ok),
            str(r.changed),
            str(r.failed),
            f"{len(r.checks) - len(r.failed_checks)}/{len(r.checks)}" if r.checks else "-",
            "\n".join(bad),
        )
    return table
