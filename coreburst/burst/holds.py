"""Which burst pools the resume program's audit log says to back off or protect.

The resume program (coreburst/burst/power.py) writes every launch, failure and hold to a
JSON-lines audit log; the ``burst-reconcile`` rule (coreburst/burst/reconcile.py) reads it each
cycle and places or lifts the Slurm reservations these :class:`Hold` s describe:

* a capacity error (coreburst/burst/ec2errors.py ``capacity``) backs the pool off for the
  ``backoff_s`` the resume program wrote on the failure (``coreburst:burst.capacityBackoffS``;
  :data:`CAPACITY_BACKOFF_S` on an event that has none), reservation
  ``coreburst-backoff-<pool>-<ms>``;
* a hold the resume program placed itself (``resume.pool_held``) is reported once;
* ``bootstrap_failures_before_protect`` boot failures within ``bootstrap_window`` protect the
  pool until an operator deletes ``coreburst-protect-<pool>``;
* ``coreburst burst release-hold POOL`` (event :data:`OPERATOR_RELEASED`) forgets the pool's
  earlier failures.

Pure: events in, holds out (the audit log is read by :func:`read_events`).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coreburst.burst.ec2errors import CHOICE_ONLY, classify
from coreburst.common.names import BACKOFF_PREFIX, CAPACITY_BACKOFF_S, PROTECT_PREFIX
from coreburst.common.textio import read_text

if TYPE_CHECKING:
    from coreburst.burst.reconcile import BurstReconcileConfig

ICE = "InsufficientInstanceCapacity"
# The burst audit log's event for ``coreburst burst release-hold POOL``: failures of the pool
# before it no longer count (the backoff and protected mode stay lifted until a new failure).
OPERATOR_RELEASED = "operator.released"

# Burst node names are <cluster>-<n> (coreburst/burst/slurmconf.py node_names); in a hostlist
# <cluster>-[..].
_POOL = re.compile(r"^(.+?)-(?:\d+$|\[)")


def pool_of(node: str) -> str | None:
    m = _POOL.match(node)
    return m.group(1) if m else None


def pools_of(hostlist: str) -> set[str]:
    """The pools in a Slurm hostlist such as ``od-[1-2],sp-1`` (commas inside [] belong to
    the range)."""
    items, depth, cur = [], 0, ""
    for ch in hostlist:
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        depth += {"[": 1, "]": -1}.get(ch, 0)
        cur += ch
    items.append(cur)
    return {p for it in items if (p := pool_of(it.strip()))}


def read_events(path: Path) -> list[dict[str, Any]]:
    """The events of the resume program's JSON-lines audit log (coreburst/burst/power.py Audit:
    ``{"ts": epoch seconds, "event": ..., ...}``); none while it does not exist yet, and
    unreadable lines are skipped. Raises TextFileError (one line) for a file that is not
    UTF-8 text. Read whole each cycle: rotate it (logrotate ``copytruncate``)."""
    if not path.exists():
        return []
    out = []
    for line in read_text(path, "burst audit log").splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict) and isinstance(e.get("ts"), int | float):
            out.append(e)
    return out


def _backoff_s(event: dict[str, Any]) -> float:
    """The capacity back-off a failure carries (the stack's capacityBackoffS when the resume
    program wrote it); an event from before it did so: the key's default."""
    value = event.get("backoff_s")
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return float(CAPACITY_BACKOFF_S)


@dataclass(frozen=True)
class Hold:
    pool: str
    reservation: str
    minutes: int | None  # None: until an operator deletes it
    why: str
    key: str


def holds(events: list[dict[str, Any]], now: datetime, p: BurstReconcileConfig) -> list[Hold]:
    """Capacity backoffs and protected pools the resume program's events call for."""
    t = now.timestamp()
    last_ice: dict[str, float] = {}
    backoff_of: dict[str, float] = {}
    ice_code: dict[str, str] = {}
    fails: dict[str, list[float]] = {}
    released: dict[str, float] = {}
    for e in events:
        if e.get("event") == OPERATOR_RELEASED:
            pool = str(e.get("pool", ""))
            released[pool] = max(released.get(pool, 0.0), float(e["ts"]))
    for e in events:
        age = t - float(e["ts"])
        if age < 0:
            continue
        pools = {
            p for p in pools_of(str(e.get("nodes", ""))) if float(e["ts"]) > released.get(p, -1)
        }
        backoff = _backoff_s(e)
        if (
            e.get("event") == "resume.failed"
            and classify(str(e.get("code", ""))) == "capacity"
            and str(e.get("code", "")) not in CHOICE_ONLY
            and age < backoff
        ):
            for pool in pools:
                if float(e["ts"]) >= last_ice.get(pool, 0.0):
                    last_ice[pool] = float(e["ts"])
                    ice_code[pool] = str(e.get("code"))
                    backoff_of[pool] = backoff
        if e.get("event") == "resume-fail" and age < p.bootstrap_window.total_seconds():
            for pool in pools:
                fails.setdefault(pool, []).append(float(e["ts"]))
    out = []
    for pool, ts in sorted(last_ice.items()):
        ms = int(ts * 1000)
        backoff = backoff_of[pool]
        out.append(
            Hold(
                pool,
                f"{BACKOFF_PREFIX}{pool}-{ms}",
                max(1, math.ceil((backoff - (t - ts)) / 60)),
                f"{ice_code.get(pool, ICE)} for pool {pool}: no launches for "
                f"{timedelta(seconds=backoff)}",
                f"burst-backoff:{pool}:{ms}",
            )
        )
    for e in events:  # holds the resume program placed itself: Slack hears of each
        if e.get("event") != "resume.pool_held" or not e.get("reservation"):
            continue
        if e.get("alert") is False:  # an unknown code's repeat: its first hold told already
            continue
        pool, resv = str(e.get("pool", "")), str(e["reservation"])
        if float(e["ts"]) <= released.get(pool, -1):
            continue
        minutes = e.get("minutes")
        if isinstance(minutes, int) and t - float(e["ts"]) >= minutes * 60:
            continue  # ended by itself
        out.append(
            Hold(
                pool,
                resv,
                minutes if isinstance(minutes, int) else None,
                f"{e.get('code')} ({e.get('error_class')}) for pool {pool}, held at once by "
                "the resume program"
                + (f' (EC2: "{e["message"]}")' if e.get("message") else "")
                + (
                    ""
                    if isinstance(minutes, int)
                    else f": until an operator runs `coreburst burst release-hold {pool}`"
                ),
                f"burst-held:{resv}",
            )
        )
    n = p.bootstrap_failures_before_protect
    for pool, times in sorted(fails.items()):
        if len(times) >= n:
            out.append(
                Hold(
                    pool,
                    f"{PROTECT_PREFIX}{pool}",
                    None,
                    f"{len(times)} bootstrap failures of pool {pool} within {p.bootstrap_window}:"
                    f" protected until an operator deletes reservation {PROTECT_PREFIX}{pool}",
                    f"burst-protect:{pool}:{int(sorted(times)[-n] * 1000)}",
                )
            )
    return out
