"""How the burst fragment (burst.conf) merges with the site's slurm.conf, key by key.

slurm.conf is read top to bottom with its ``Include`` files inline (slurm.conf(5)). A scalar
key given twice keeps the LAST value: Slurm's parser frees the earlier one and logs
"<key> 1 specified more than once, latest value used" (``_handle_common`` in
src/common/parse_config.c, 22.05 to 26.05). A comma list (``SlurmctldParameters``,
``CommunicationParameters``, ``PrivateData``) is one scalar value: the later line replaces the
whole list, it does not add to it. ``NodeName`` and ``PartitionName`` lines add records: a
name defined twice stops slurmctld ("Duplicated NodeName", "duplicate entry for partition",
both fatal), and a ``NodeName=DEFAULT`` / ``PartitionName=DEFAULT`` line sets defaults for
every later record, the fragment's included.

The site includes burst.conf after its own lines, so the fragment's scalars win. The comma
lists are merged here when the site's slurm.conf is known (``coreburst burst slurm-conf
--site-conf``, ``coreburst burst install``): the fragment's line carries the site's entries
and its own. Everything else the site must settle by hand: :data:`RULES` says what, and
:func:`conflicts` names each line of a site's slurm.conf that the fragment overrides.

    >>> lines = parse_conf("SuspendTime=300  # the site's\\nSlurmctldParameters=enable_configless")
    >>> [(c.key, c.value) for c in lines]
    [('SuspendTime', '300'), ('SlurmctldParameters', 'enable_configless')]
    >>> merge_list("idle_on_node_suspend,power_save_interval=10", lines, "SlurmctldParameters")
    'enable_configless,idle_on_node_suspend,power_save_interval=10'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from coreburst.burst.hostlist import HostlistError, expand

Kind = Literal["scalar", "list", "records"]


@dataclass(frozen=True)
class Rule:
    """What one key of the fragment does to the site's slurm.conf."""

    key: str
    kind: Kind
    # One line rendered above the key in burst.conf (after "# merge: ").
    comment: str
    # What the site does about its own value (docs/burst.md's table, the warnings).
    site: str


# The keys the fragment sets, in the order it sets them (tests/unit/burst/test_merge.py checks
# this against a rendered fragment and against docs/burst.md's table).
RULES: dict[str, Rule] = {
    r.key: r
    for r in (
        Rule(
            "ResumeProgram",
            "scalar",
            "replaces the site's ResumeProgram (the last value wins)",
            "one per cluster: a site that powers other nodes already calls its own program "
            "from the stack's resumeProgram path",
        ),
        Rule(
            "SuspendProgram",
            "scalar",
            "replaces the site's SuspendProgram (the last value wins)",
            "as ResumeProgram (the stack's suspendProgram)",
        ),
        Rule(
            "ResumeFailProgram",
            "scalar",
            "replaces the site's ResumeFailProgram (the last value wins)",
            "as ResumeProgram (the stack's resumeFailProgram)",
        ),
        Rule(
            "SuspendTime",
            "scalar",
            "replaces the site's SuspendTime for every node not in SuspendExcNodes",
            "set coreburst:burst.suspendTime in the stack, not in slurm.conf",
        ),
        Rule(
            "ResumeTimeout",
            "scalar",
            "replaces the site's ResumeTimeout (the last value wins)",
            "set coreburst:burst.resumeTimeout in the stack",
        ),
        Rule(
            "SuspendTimeout",
            "scalar",
            "replaces the site's SuspendTimeout (the last value wins)",
            "set coreburst:burst.suspendTimeout in the stack",
        ),
        Rule(
            "BatchStartTimeout",
            "scalar",
            "replaces the site's BatchStartTimeout with ResumeTimeout (a job waits for its boot)",
            "a longer site value: raise coreburst:burst.resumeTimeout to it",
        ),
        Rule(
            "ResumeRate",
            "scalar",
            "replaces the site's ResumeRate: 0, no limit (resume batches its CreateFleet calls)",
            "nothing to merge; a site limit would delay bursts",
        ),
        Rule(
            "SuspendRate",
            "scalar",
            "replaces the site's SuspendRate: 0, no limit",
            "nothing to merge",
        ),
        Rule(
            "SuspendExcNodes",
            "scalar",
            "replaces the site's SuspendExcNodes list with coreburst:burst.coreNodes",
            "add every node the site keeps powered up to coreburst:burst.coreNodes",
        ),
        Rule(
            "TreeWidth",
            "scalar",
            "replaces the site's TreeWidth for the whole cluster (powered-down nodes forward "
            "nothing)",
            "nothing to merge: the Cloud Scheduling Guide's value for clusters with cloud nodes",
        ),
        Rule(
            "CommunicationParameters",
            "list",
            "replaces the site's whole CommunicationParameters list (the last value wins)",
            "render with the site's slurm.conf (install, slurm-conf --site-conf); again after "
            "editing it",
        ),
        Rule(
            "SrunPortRange",
            "scalar",
            "replaces the site's SrunPortRange (the last value wins); the burst nodes' security "
            "group opens exactly this range",
            "a site range: set coreburst:burst.srunPortRange to it, so the security group matches",
        ),
        Rule(
            "PrivateData",
            "list",
            "(Slurm 22.05 only) replaces the site's whole PrivateData list (the last value wins)",
            "as CommunicationParameters; from 23.02 the fragment leaves PrivateData to the site",
        ),
        Rule(
            "PrologSlurmctld",
            "scalar",
            "(Slurm 22.05 only, when the site sets none) a PrologSlurmctld, so a job requeued "
            "off a cloud node that was powering up can start on a core node",
            "a site PrologSlurmctld does the same: render with --site-conf and burst.conf "
            "leaves it alone",
        ),
        Rule(
            "SlurmctldParameters",
            "list",
            "replaces the site's whole SlurmctldParameters list (the last value wins)",
            "as CommunicationParameters",
        ),
        Rule(
            "GresTypes",
            "list",
            "replaces the site's whole GresTypes list (the last value wins); gpu for the burst "
            "nodes' Gres=gpu:<type>:<count>",
            "as CommunicationParameters (a site GRES such as mps stays only when rendered with "
            "the site's slurm.conf)",
        ),
        Rule(
            "NodeName",
            "records",
            "adds the burst nodes; a name the site defines too stops slurmctld (Duplicated "
            "NodeName); a site NodeName=DEFAULT above the Include applies here too",
            "no site node named like a pool's nodes (<pool>-<n>); reset DEFAULT keys above "
            "the Include",
        ),
        Rule(
            "PartitionName",
            "records",
            "adds the burst partitions; a name the site defines too stops slurmctld "
            "(duplicate entry for partition); a site PartitionName=DEFAULT above the Include "
            "applies here too",
            "rename clashing partitions with coreburst:burst.burstPartition / spotPartition / "
            "blockPartition",
        ),
    )
}
_CANONICAL = {k.lower(): k for k in RULES}
_INCLUDE_OF_FRAGMENT = re.compile(r"^\s*include\s+(\S*/)?burst\.conf\s*$", re.IGNORECASE)
_PAIR = re.compile(r'([A-Za-z][A-Za-z0-9_]*)=("[^"]*"|\S*)')
# Record keys slurm.conf(5) accepts under two names (a DEFAULT's Feature= is the Features= a
# burst node line sets).
_ALIASES = {"feature": "features", "procs": "cpus"}


@dataclass(frozen=True)
class ConfLine:
    """One ``Key=Value`` of a slurm.conf line (a NodeName/PartitionName line is one record:
    ``value`` its name, ``rest`` its other keys)."""

    where: str  # file:line
    key: str  # as RULES spells it when it is one of the fragment's keys
    value: str
    rest: dict[str, str]
    after_fragment: bool  # below the line that includes burst.conf: it wins over the fragment


def is_fragment_include(line: str) -> bool:
    """The line that includes burst.conf (by bare name or a path)."""
    return bool(_INCLUDE_OF_FRAGMENT.match(line))


def parse_conf(
    text: str, name: str = "slurm.conf", *, after: bool = False, start: int = 1
) -> list[ConfLine]:
    """The ``Key=Value`` pairs of a slurm.conf text (comments dropped, keys case-insensitive
    as slurm.conf(5) reads them). ``Include`` lines are not followed here: the caller reads
    them (:func:`include_target`); ``after``: the text follows the Include of burst.conf."""
    out: list[ConfLine] = []
    for no, raw in enumerate(text.splitlines(), start):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if is_fragment_include(line):
            after = True
            continue
        pairs = [(k, v.strip('"')) for k, v in _PAIR.findall(line)]
        if not pairs:
            continue
        where = f"{name}:{no}"
        first = _CANONICAL.get(pairs[0][0].lower(), pairs[0][0])
        if first in ("NodeName", "PartitionName"):
            rest = {_ALIASES.get(k.lower(), k.lower()): v for k, v in pairs[1:]}
            out.append(ConfLine(where, first, pairs[0][1], rest, after))
            continue
        for k, v in pairs:
            out.append(ConfLine(where, _CANONICAL.get(k.lower(), k), v, {}, after))
    return out


def include_target(line: str) -> str | None:
    """The file an ``Include`` line names (not burst.conf's), else None."""
    m = re.match(r"^\s*include\s+(\S+)\s*$", line.split("#", 1)[0], re.IGNORECASE)
    if not m or is_fragment_include(line):
        return None
    return m.group(1)


def _last(site: list[ConfLine], key: str) -> ConfLine | None:
    """The site's value of ``key`` that the fragment replaces (the last one above it)."""
    found = [c for c in site if c.key == key and not c.after_fragment]
    return found[-1] if found else None


def _entry_name(entry: str) -> str:
    return entry.split("=", 1)[0].strip().lower()


def list_note(site: list[ConfLine] | None, key: str) -> str:
    """What the fragment's line of a comma list holds of the site's (its comment's end)."""
    if site is None:
        return "; render with the site's slurm.conf (--site-conf) to carry its entries"
    line = _last(site, key)
    return f"; it carries the entries of {line.where}" if line else "; the site sets none"


def merge_list(ours: str, site: list[ConfLine], key: str) -> str:
    """``ours`` (a comma list) with the site's entries of ``key`` that it does not set itself,
    the site's first: the fragment's line replaces the site's, so it must carry both."""
    line = _last(site, key)
    if line is None:
        return ours
    mine = [e for e in ours.split(",") if e]
    names = {_entry_name(e) for e in mine}
    kept = [e for e in line.value.split(",") if e and _entry_name(e) not in names]
    return ",".join(dict.fromkeys([*kept, *mine]))


def _names(value: str) -> set[str]:
    try:
        return set(expand(value))
    except HostlistError:
        return {value}


def conflicts(fragment: str, site: list[ConfLine]) -> list[str]:
    """One line per site setting the fragment overrides or clashes with, naming the site's
    line and what to do (the fragment rendered with the site's lists merged)."""
    ours = parse_conf(fragment, "burst.conf")
    scalars = {c.key: c.value for c in ours if c.key in RULES and RULES[c.key].kind != "records"}
    out: list[str] = []
    for key, value in scalars.items():
        rule = RULES[key]
        for c in (c for c in site if c.key == key):
            if c.after_fragment:
                out.append(
                    f"{c.where}: {key}={c.value} comes after the Include of burst.conf, so it "
                    f"replaces burst.conf's {key}={value}: move it above the Include or drop it"
                )
            elif rule.kind == "list":
                have = set(value.split(","))
                lost = [e for e in c.value.split(",") if e and e not in have]
                out.append(
                    f"{c.where}: {key}={c.value} is replaced by burst.conf's {key}={value}, "
                    + (
                        f"which sets {', '.join(lost)} its own way"
                        if lost
                        else "which carries its entries; render again after editing it"
                    )
                )
            elif c.value != value:
                out.append(
                    f"{c.where}: {key}={c.value} is replaced by burst.conf's {key}={value} "
                    f"(the last value wins): {rule.site}"
                )
    for kind in ("NodeName", "PartitionName"):
        records = [c for c in ours if c.key == kind]
        mine = {n for c in records for n in _names(c.value)}
        set_keys = {k for c in records for k in c.rest} | {kind.lower()}
        for c in (c for c in site if c.key == kind):
            if c.value.upper() == "DEFAULT":
                leak = sorted(k for k in c.rest if k not in set_keys)
                if leak and not c.after_fragment:
                    out.append(
                        f"{c.where}: {kind}=DEFAULT sets {', '.join(leak)} for the burst "
                        f"{'nodes' if kind == 'NodeName' else 'partitions'} too (they follow "
                        f"it): move them onto the site's own {kind} lines"
                    )
                continue
            clash = sorted(mine & _names(c.value))
            if clash:
                what = "node" if kind == "NodeName" else "partition"
                out.append(
                    f"{c.where}: {kind}={c.value} defines the burst {what} "
                    f"{', '.join(clash[:3])}{' ...' if len(clash) > 3 else ''} again: slurmctld "
                    f"will not start; {RULES[kind].site}"
                )
    return out
