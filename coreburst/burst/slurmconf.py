"""The burst side of slurm.conf and gres.conf, rendered from the stack.

Each cluster of the stack becomes a set of ``State=CLOUD`` nodes (``<cluster>-<n>``, one per
node the cluster may run) with the CPUs, memory and GPUs of its instance type from the
catalog; slurmctld powers them up through the resume program and down after ``SuspendTime``.
Policy is written the way Slurm applies it:

* pools are ordered with partitions, not ``Weight`` (Weight does not order powered-down nodes
  the way one expects): the core partition first, then ``burst`` (on-demand and reserved
  capacity), ``spot`` and ``block`` (Capacity Blocks) at a lower ``PriorityTier``; users
  submit ``-p core,burst`` to overflow, low-priority work ``-p core,spot``;
* burst partitions cap ``MaxTime`` (the seed rule: runs over a week stay on-prem);
* Capacity Block nodes are held in a maintenance reservation until the block starts.

    >>> from coreburst.burst.config import parse_burst
    >>> stack = parse_burst("dev", {
    ...     "aws:region": "us-east-1", "coreburst:availabilityZone": "us-east-1a",
    ...     "coreburst:tags": {"team": "t", "project": "p", "costCenter": "c",
    ...                        "environment": "dev"},
    ...     "coreburst:budget": {"monthlyUsd": 1000},
    ...     "coreburst:clusters": [{"name": "p5", "instanceType": "p5.48xlarge", "nodes": 2,
    ...                             "capacity": {"model": "spot"}}],
    ...     "coreburst:burst": {"coreNodes": "dgx[1-2]"}})
    >>> [s.hostlist for s in node_sets(stack)]
    ['p5-[1-2]']
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from datetime import UTC, datetime

from coreburst.burst.config import BurstStack
from coreburst.burst.hostlist import compress
from coreburst.burst.merge import RULES, ConfLine, list_note, merge_list
from coreburst.common.catalog import Catalog, load_catalog
from infra.slurm_network import SLURMD_PORT

# Slurm's largest TreeWidth: slurmctld talks to each cloud node directly, since nodes that are
# powered down cannot forward messages (Slurm's "Cloud Scheduling Guide").
TREE_WIDTH = 65533
BURST_PRIORITY_TIER = 1
# The site's core partition should sit above this (PriorityTier=10 in tests/integration/burst).
CORE_PRIORITY_TIER_MIN = BURST_PRIORITY_TIER + 1


@dataclass(frozen=True)
class NodeSet:
    cluster: str
    instance_type: str
    market: str  # on-demand | spot | capacity-reservation | capacity-block
    names: tuple[str, ...]
    cpus: int
    real_memory_mb: int
    gpus: int
    gpu_type: str | None
    features: tuple[str, ...]
    partition: str
    # Every type the node may be launched as (instance_type first) and its zones, in order.
    instance_types: tuple[str, ...] = ()
    zones: tuple[str, ...] = ()

    @property
    def hostlist(self) -> str:
        return compress(self.names)


def node_names(cluster: str, count: int) -> list[str]:
    return [f"{cluster}-{i}" for i in range(1, count + 1)]


def node_sets(stack: BurstStack, catalog: Catalog | None = None) -> list[NodeSet]:
    """One set of cloud nodes per cluster with at least one node, in stack order."""
    catalog = catalog or load_catalog()
    s = stack.settings
    out = []
    for c in stack.config.clusters:
        if c.nodes == 0:
            continue
        # The cluster's type and its fallbacks (same accelerator and count, checked by
        # infra/config.py): the node is declared with what every one of them has.
        types = tuple(c.instance_types)
        all_facts = [catalog.instance(t) for t in types]
        acc = all_facts[0].accelerator
        market = c.capacity.model
        partition = {
            "spot": s.spot_partition,
            "capacity-block": s.block_partition,
        }.get(market, s.burst_partition)
        models = {f.accelerator.model.lower() for f in all_facts}
        gpus = acc.count if acc.kind == "nvidia" else 0
        # Typed GRES, so a job asking --gres=gpu:h100:8 (as it does on an H100 core) fits. Slurm
        # gives a node one type per name (slurm.conf NodeName Gres=, gres.conf Type=), fixed
        # before the instance exists: a pool whose fallbacks have another model (p5 H100 +
        # p5e H200) is typed by its instanceType's model, the GPU it stands for; a fallback
        # stands in with a same-count, newer GPU of that class (infra/config.py checks the
        # count and EFA layout). Features name the model only when every type has it.
        gpu_type = all_facts[0].accelerator.model.lower() if gpus else None
        # With fallbacks the node may be any of its types: only what they share is a feature.
        features = (
            "burst",
            market,
            *((types[0],) if len(types) == 1 else ()),
            *((next(iter(models)),) if len(models) == 1 else ()),
            acc.kind,
            c.name,
        )
        out.append(
            NodeSet(
                cluster=c.name,
                instance_type=types[0],
                market=market,
                names=tuple(node_names(c.name, c.nodes)),
                cpus=min(f.vcpus for f in all_facts),
                real_memory_mb=int(min(f.memory_gib for f in all_facts) * 1024 * s.memory_fraction),
                gpus=gpus,
                gpu_type=gpu_type,
                features=features,
                partition=partition,
                instance_types=types,
                zones=tuple(c.zones or [stack.config.availability_zone]),
            )
        )
    return out


def node_set_of(stack: BurstStack, catalog: Catalog | None = None) -> dict[str, NodeSet]:
    """Node name -> its set (the power programs' map from a Slurm node to a cluster)."""
    return {n: ns for ns in node_sets(stack, catalog) for n in ns.names}


def _other_models(ns: NodeSet, cat: Catalog) -> list[str]:
    """``type (model)`` of each fallback whose GPU model differs from the node's GRES type."""
    out = []
    for t in ns.instance_types[1:]:
        model = cat.instance(t).accelerator.model
        if model.lower() != ns.gpu_type:
            out.append(f"{t} ({model})")
    return out


def _node_lines(ns: NodeSet, port_of: dict[str, int], port: int | None) -> list[str]:
    common = f"CPUs={ns.cpus} RealMemory={ns.real_memory_mb}"
    if ns.gpus:
        common += f" Gres=gpu:{ns.gpu_type}:{ns.gpus}" if ns.gpu_type else f" Gres=gpu:{ns.gpus}"
    common += f" Features={','.join(dict.fromkeys(ns.features))} State=CLOUD"
    if not port_of:
        at = f" Port={port}" if port is not None else ""
        return [f"NodeName={ns.hostlist}{at} {common}"]
    return [f"NodeName={n} Port={port_of[n]} {common}" for n in ns.names]


# Slurm 23.02 shows powered-down cloud nodes by default ("PrivateData=cloud is no longer
# needed", RELEASE_NOTES at tag slurm-23-02-7-1); a later release takes the line but shows
# ``PrivateData = none`` for it (seen with 24.11.5 and 26.05.5's `scontrol show config`).
CLOUD_SHOWN_SINCE = (23, 2)
# Before 23.02 a job requeued while its cloud nodes were powering up (a failed launch or boot
# check, ResumeTimeout) keeps the node alias list "TBD" slurmctld gave it for them:
# batch_requeue_fini() frees it on requeue only from 23.02 (SchedMD commit 43a7974f2e,
# "alias_list wasn't being free'd on a requeue"), and slurmstepd refuses "TBD" (_step_setup:
# "set_nodes_alias failed"), so the job's next launch on a core node fails and holds it
# (launch_failed_requeued_held). With any PrologSlurmctld, slurmctld rebuilds the list for each
# new allocation before the launch (job_config_fini()). Measured on 22.05.8 in the lab, with or
# without Slurm's requeue hold: the hold only delayed it (coreburst/burst/requeue_hold.py).
PROLOG_SINCE = (23, 2)
PROLOG_PROGRAM = "/bin/true"
# Slurm 25.11 added expedited requeue (sbatch --requeue=expedite), which slurmctld accepts only
# with SlurmctldParameters=enable_expedited_requeue (slurm.conf(5) of 25.11).
EXPEDITED_REQUEUE_SINCE = (25, 11)


def _set(key: str, value: object, site: list[ConfLine] | None = None) -> list[str]:
    """``Key=value`` with the merge rule above it (coreburst/burst/merge.py)."""
    rule = RULES[key]
    note = list_note(site, key) if rule.kind == "list" else ""
    return [f"# merge: {rule.comment}{note}", f"{key}={value}"]


def render_slurm_include(
    stack: BurstStack,
    catalog: Catalog | None = None,
    slurm_release: tuple[int, int] | None = None,
    site: list[ConfLine] | None = None,
) -> str:
    """The text to ``Include`` from the site's slurm.conf, after its own nodes and partitions.
    With ``site`` (the site's slurm.conf, :func:`coreburst.burst.merge.parse_conf`) the comma
    lists it replaces carry the site's entries too."""
    s = stack.settings
    known = site or []
    sets = node_sets(stack, catalog)
    port_of: dict[str, int] = {}
    if s.slurmd_port_base is not None:
        names = [n for ns in sets for n in ns.names]
        port_of = {n: s.slurmd_port_base + i for i, n in enumerate(names)}
    params = [
        "idle_on_node_suspend",
        f"power_save_interval={s.power_save_interval}",
        "power_save_min_interval=0",
    ]
    if slurm_release is not None and slurm_release >= EXPEDITED_REQUEUE_SINCE:
        # a job submitted with --requeue=expedite that loses its burst node (launch or boot
        # check failed) is eligible again at once, first in the queue (docs/burst.md)
        params.append("enable_expedited_requeue")
    if s.node_address == "registration":
        params.append("cloud_reg_addrs")
    if s.node is not None and s.node.conf_mode == "configless":
        # slurm.conf(5): burst nodes started with --conf-server fetch their config from
        # slurmctld only with enable_configless.
        params.append("enable_configless")
    lines = [
        f"# coreburst burst nodes for stack {stack.name!r} (coreburst burst slurm-conf).",
        "# Generated: edit Pulumi.<stack>.yaml (coreburst:clusters, coreburst:burst), not this.",
        "# Include it below the site's own settings, nodes and partitions: slurm.conf keeps the",
        "# last value of a key, so each line marked 'merge:' replaces the site's (docs/burst.md,",
        "# 'Merging with the site's slurm.conf').",
        "# ---- power saving ----",
        *_set("ResumeProgram", s.resume_program),
        *_set("SuspendProgram", s.suspend_program),
        *_set("ResumeFailProgram", s.resume_fail_program),
        *_set("SuspendTime", s.suspend_time),
        *_set("ResumeTimeout", s.resume_timeout),
        *_set("SuspendTimeout", s.suspend_timeout),
        *_set("BatchStartTimeout", s.resume_timeout),
        *_set("ResumeRate", 0),
        *_set("SuspendRate", 0),
    ]
    if s.core_nodes:
        lines += _set("SuspendExcNodes", s.core_nodes)
    lines += [
        *_set("TreeWidth", TREE_WIDTH),
        # Cloud node addresses change with every boot.
        *_set(
            "CommunicationParameters",
            merge_list("NoAddrCache", known, "CommunicationParameters"),
            site,
        ),
        # the burst nodes' security group opens exactly this range to and from
        # coreburst:burst.onPrem (docs/burst.md, Network)
        *_set("SrunPortRange", s.srun_port_range),
    ]
    if slurm_release is not None and slurm_release < CLOUD_SHOWN_SINCE:
        # Slurm 22.05 hides powered-down cloud nodes from sinfo, even from root, without it.
        lines += _set("PrivateData", merge_list("cloud", known, "PrivateData"), site)
    else:
        lines.append(
            "# (no PrivateData=cloud: Slurm 23.02 and later show cloud nodes by default; "
            "on 22.05 add cloud to the site's PrivateData)"
            if slurm_release is None
            else "# (no PrivateData=cloud: Slurm 23.02 and later show cloud nodes by default)"
        )
    if slurm_release is not None and slurm_release < PROLOG_SINCE:
        if any(c.key == "PrologSlurmctld" for c in known):
            lines.append(
                "# (no PrologSlurmctld: the site's own makes Slurm 22.05 rebuild a requeued "
                "job's node list)"
            )
        else:
            lines += _set("PrologSlurmctld", PROLOG_PROGRAM)
    lines += [
        *_set(
            "SlurmctldParameters", merge_list(",".join(params), known, "SlurmctldParameters"), site
        ),
    ]
    if any(ns.gpus for ns in sets):
        # slurm.conf(5) GresTypes: "A comma-delimited list of generic resources to be managed";
        # a node's Gres=gpu:... is refused without gpu in it.
        lines += _set("GresTypes", merge_list("gpu", known, "GresTypes"), site)
    lines += [
        "# ---- cloud nodes (State=CLOUD: powered down until a job needs them) ----",
        f"# merge: {RULES['NodeName'].comment}",
    ]
    cat = catalog or load_catalog()
    for ns in sets:
        lines.append(f"# {ns.cluster}: {len(ns.names)} x {ns.instance_type} ({ns.market})")
        others = _other_models(ns, cat) if ns.gpus else []
        if others:
            lines.append(
                f"# {ns.cluster}: Gres typed {ns.gpu_type} (a job asking gpu:{ns.gpu_type} or "
                f"gpu fits); a node may launch as {', '.join(others)} in its place"
            )
        lines += _node_lines(ns, port_of, None if s.slurmd_port == SLURMD_PORT else s.slurmd_port)
    lines += [
        f"# ---- partitions: below the core partition ({s.core_partition}, PriorityTier >= "
        f"{CORE_PRIORITY_TIER_MIN}); submit -p {s.core_partition},{s.burst_partition} to "
        "overflow ----",
        f"# merge: {RULES['PartitionName'].comment}",
    ]
    by_part: dict[str, list[NodeSet]] = {}
    for ns in sets:
        by_part.setdefault(ns.partition, []).append(ns)
    for part, members in by_part.items():
        hl = compress(n for ns in members for n in ns.names)
        max_time = s.spot_max_time if part == s.spot_partition else s.max_time
        lines.append(
            f"PartitionName={part} Nodes={hl} MaxTime={max_time} "
            f"PriorityTier={BURST_PRIORITY_TIER} State=UP"
        )
    return "\n".join(lines) + "\n"


def render_gres(stack: BurstStack, catalog: Catalog | None = None) -> str:
    """gres.conf lines for the cloud nodes with NVIDIA GPUs (append to the site's gres.conf):
    gres.conf(5) ``NodeName=<hostlist> Name=gpu Type=<model> File=<devices>``, the Type the
    node's slurm.conf ``Gres=gpu:<model>:<count>`` names (Slurm matches them by type)."""
    cat = catalog or load_catalog()
    prefix = stack.settings.gpu_device_prefix
    lines = [f"# coreburst burst nodes for stack {stack.name!r} (coreburst burst slurm-conf)."]
    for ns in node_sets(stack, cat):
        if ns.gpus:
            others = _other_models(ns, cat)
            if others:
                lines.append(
                    f"# {ns.cluster}: typed {ns.gpu_type}; a node may launch as "
                    f"{', '.join(others)} in its place"
                )
            typed = f" Type={ns.gpu_type}" if ns.gpu_type else ""
            lines.append(f"NodeName={ns.hostlist} Name=gpu{typed} File={prefix}[0-{ns.gpus - 1}]")
    return "\n".join(lines) + "\n"


def _slurm_utc(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def reservation_commands(
    stack: BurstStack, now: datetime, catalog: Catalog | None = None
) -> list[str]:
    """``scontrol create reservation`` commands that hold Capacity Block nodes outside their
    block (MAINT: Slurm neither starts jobs on them nor powers them up for a job). Times are
    UTC, so each command runs scontrol with TZ=UTC (scontrol reads times in local time)."""
    out: list[str] = []
    windows = stack.settings.capacity_blocks
    for ns in node_sets(stack, catalog):
        if ns.market != "capacity-block":
            continue
        base = [
            "scontrol",
            "create",
            "reservation",
            f"ReservationName=coreburst-hold-{ns.cluster}",
            f"Nodes={ns.hostlist}",
            "Users=root",
            "Flags=MAINT,IGNORE_JOBS",
        ]
        w = windows.get(ns.cluster)
        if w is None:
            # Block dates unknown: hold indefinitely; lift with
            # `scontrol delete reservation coreburst-hold-<cluster>` when the block starts.
            out.append(shlex.join([*base, "StartTime=now", "Duration=UNLIMITED"]))
            continue
        if now < w.start:
            out.append(
                "TZ=UTC " + shlex.join([*base, "StartTime=now", f"EndTime={_slurm_utc(w.start)}"])
            )
        if w.end is not None:
            after = [*base]
            after[3] = f"ReservationName=coreburst-ended-{ns.cluster}"
            start = "now" if now >= w.end else _slurm_utc(w.end)
            out.append("TZ=UTC " + shlex.join([*after, f"StartTime={start}", "Duration=UNLIMITED"]))
    return out


def render_program(
    kind: str,
    stack: BurstStack,
    cli: list[str],
    stack_dir: str,
    env_file: str,
    *,
    python: str = sys.executable,
) -> str:
    """A program for slurmctld to run (it passes one hostlist argument and a bare environment):
    loads the site's environment file (AWS profile or endpoint), then runs
    ``coreburst burst <kind>``. With ``agentSocket`` set it runs the thin client
    (``python -P -m coreburst.burst.fast``, stdlib only), which asks the agent on that socket
    and runs the same command itself when the agent is down."""
    argv = [*cli, kind, "--stack", stack.name, "--stack-dir", stack_dir]
    sock = stack.settings.agent_socket
    if sock is not None:
        argv = [python, "-P", "-m", "coreburst.burst.fast", "--socket", str(sock), "--", *argv]
    return (
        "#!/bin/sh\n"
        f"# coreburst burst {kind} for stack {stack.name} (rendered by coreburst burst "
        "slurm-conf)\n"
        f"if [ -r {shlex.quote(env_file)} ]; then . {shlex.quote(env_file)}; fi\n"
        f'exec {shlex.join(argv)} "$@"\n'
    )
