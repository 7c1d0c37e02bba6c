"""Rule ``idle-reclaim``: mark nodes whose every accelerator stayed below the threshold for the
window, warn the owner, and after the grace period stop, terminate or scale them in (through
the actuator's gate). A node without usable data is blind: reported, never reclaimed.

The decisions are ``guardrails.idle``'s pure functions; this module fetches the series, applies
the decision (tag, alert, act) and reports.

    >>> # run(ctx)   # ctx: guardrails.rules.RuleContext
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Literal

from botocore.exceptions import BotoCoreError, ClientError

from coreburst.common.catalog import Catalog, CatalogError, load_catalog
from coreburst.common.telemetry import NEURON_LNC_TAG, UTILIZATION_METRICS
from guardrails import messages
from guardrails.adapters import aws, cloudwatch
from guardrails.config import ConfigError, GuardrailsConfig
from guardrails.idle import (
    Decision,
    DeviceStat,
    Utilization,
    assess_rollup,
    assess_utilization,
    decide,
)
from guardrails.idle_config import IdleConfig, ReclaimConfig
from guardrails.model import DeviceSeries, Node
from guardrails.rules.base import Rule, RuleContext, idle_params, reclaim_slurm_node
from guardrails.timefmt import iso, parse_iso


def expected_series(node: Node, cfg: GuardrailsConfig, catalog: Catalog | None = None) -> int | str:
    """How many utilization series ``node`` must have before it can be idle: one per GPU, or one
    per logical NeuronCore at the node's LNC (its ``coreburst:neuron-lnc`` tag, else
    ``idle.neuron_lnc``, else the catalog's default size). Never a default of 1. Returns the
    reason instead where the count cannot be known (the node is then never idle).

    >>> from guardrails.configfile import parse_config
    >>> from guardrails.model import Node
    >>> from datetime import UTC, datetime
    >>> trn = Node("i-1", "us-east-2", "us-east-2a", "trn2.48xlarge", "neuron", 16, "on-demand",
    ...            datetime(2026, 1, 1, tzinfo=UTC))
    >>> lnc1 = parse_config("idle: {neuron_lnc: 1}")
    >>> expected_series(trn, parse_config("")), expected_series(trn, lnc1)
    (64, 128)
    """
    cat = catalog or load_catalog()
    try:
        acc = cat.instance(node.instance_type).accelerator
    except CatalogError as exc:
        return str(exc)
    if acc.neuron_cores is None:
        return acc.utilization_series()
    raw = node.tags.get(NEURON_LNC_TAG)
    where = f"tag {NEURON_LNC_TAG}={raw!r}" if raw is not None else "idle.neuron_lnc"
    try:
        lnc = int(raw.strip()) if raw is not None else cfg.idle.neuron_lnc
        return acc.utilization_series(lnc)
    except (ValueError, CatalogError) as exc:
        why = exc if isinstance(exc, CatalogError) else "not a whole number"
        return f"{where}: {why}; the NeuronCore count is unknown"


def utilization(
    clients: aws.Aws,
    cfg: GuardrailsConfig,
    nodes: list[Node],
    now: datetime,
    cache: cloudwatch.SeriesCache | None = None,
    *,
    catalog: Catalog | None = None,
    heartbeats: Literal["blind", "all"] = "blind",
    partial_idle: bool | None = None,
) -> dict[str, Utilization]:
    """Each node's utilization over the window (``unknown`` where it could not be read): from
    the per-instance rollup where its family's metric has one (``idle.metrics.<kind>.rollup``),
    else from every per-device series.

    A publisher heartbeat (trn2) is read only for the nodes the rollup leaves blind, to say
    "publisher dead" rather than "no data" (a live publisher's rollup proves it alive);
    ``heartbeats="all"`` reads it for every such node (``explain``), and a dead one is then
    blind whatever the rollup says. ``partial_idle``: also read the rollup's Minimum (None: as
    ``idle.report_partial_idle`` says; ``explain`` passes True)."""
    out: dict[str, Utilization] = {}
    params = idle_params(cfg)
    spp = cloudwatch.samples_per_period(cfg.idle)
    for region in sorted({n.region for n in nodes}):
        rn = [n for n in nodes if n.region == region]
        cw = clients.client("cloudwatch", region)

        def rolled(n: Node) -> bool:
            m = cfg.idle.metrics.get(n.accelerator_kind)
            return m is None or m.rollup

        by_rollup = [n for n in rn if rolled(n)]
        per_device = [n for n in rn if not rolled(n)]
        if by_rollup:
            periods, errors = cloudwatch.fetch_rollups(
                cw, by_rollup, cfg.idle, now, cache, partial_idle=partial_idle
            )
            for n in by_rollup:
                if n.instance_id in errors:
                    out[n.instance_id] = Utilization("unknown", errors[n.instance_id])
                    continue
                expected = expected_series(n, cfg, catalog)
                out[n.instance_id] = assess_rollup(
                    periods.get(n.instance_id, []), expected, now, params, spp
                )
            check = [
                n
                for n in by_rollup
                if n.instance_id not in errors
                and (heartbeats == "all" or out[n.instance_id].state == "unknown")
            ]
            if check:
                for iid, why in cloudwatch.fetch_heartbeats(cw, check, cfg.idle, now).items():
                    if why:
                        u = out[iid]
                        out[iid] = replace(
                            u,
                            state="unknown",
                            reason=f"{why} (rollup: {u.reason})",
                            idle_devices=[],
                        )
        if per_device:
            series, errors = cloudwatch.fetch_utilization(cw, per_device, cfg.idle, now, cache)
            for n in per_device:
                if n.instance_id in errors:
                    out[n.instance_id] = Utilization("unknown", errors[n.instance_id])
                    continue
                s: DeviceSeries = series.get(n.instance_id, {})
                expected = expected_series(n, cfg, catalog)
                out[n.instance_id] = assess_utilization(s, expected, now, params)
    return out


def per_device_stats(
    clients: aws.Aws, cfg: GuardrailsConfig, node: Node, now: datetime
) -> list[DeviceStat]:
    """Every accelerator's own series over the window (``explain``; the decision itself reads
    the rollup): one row per device found, or one row saying why none could be read."""
    cw = clients.client("cloudwatch", node.region)
    series, errors = cloudwatch.fetch_utilization(cw, [node], cfg.idle, now)
    if node.instance_id in errors:
        return [DeviceStat(f"per-device: {errors[node.instance_id]}", None, 0, None, None, None)]
    got = series.get(node.instance_id, {})
    if not got:
        return [DeviceStat("per-device: no series found", None, 0, None, None, None)]
    return assess_utilization(got, len(got), now, idle_params(cfg)).devices


def _marked_at(n: Node, marks: Mapping[str, Any], mark_tag: str) -> datetime | None:
    row = marks.get(n.instance_id)
    marked_at = parse_iso(row["marked_at"]) if row else None
    if marked_at is None and mark_tag in n.tags:
        try:  # the tag survives a lost state file
            marked_at = parse_iso(n.tags[mark_tag])
        except ValueError:
            marked_at = None
    return marked_at


# kv key: when utilization was last read, each node's state at its own last read and the time
# before which it is not read again, so a fresh process (the Lambda builds one per invocation)
# keeps ``idle.every`` and the schedule, and reports each node's last read between reads. Each
# node id is written once: under "next" (by time, then state) or, read at every read, under
# its state (a busy node always has a next read), so 10,000 nodes fit one DynamoDB item.
LAST_READ_KEY = "idle-reclaim:last-read"
_STATES = ("busy", "idle", "unknown")


def _load_last_read(cache: cloudwatch.SeriesCache, got: Mapping[str, Any]) -> None:
    cache.idle_read_at = parse_iso(got["at"])
    nxt: dict[str, datetime] = {}
    states: dict[str, str] = {}
    for t, by_state in (got.get("next") or {}).items():
        at = parse_iso(t)
        for state, ids in by_state.items():
            for iid in ids:
                nxt[iid], states[iid] = at, state
    for state in _STATES:
        states.update(dict.fromkeys(got.get(state, ()), state))
    cache.idle_next, cache.idle_states = nxt, states


def _last_read_record(
    cache: cloudwatch.SeriesCache, nodes: list[Node], now: datetime
) -> dict[str, Any]:
    here = {n.instance_id for n in nodes}
    for gone in [i for i in cache.idle_states if i not in here]:
        del cache.idle_states[gone]
    for gone in [i for i in cache.idle_next if i not in here]:
        del cache.idle_next[gone]
    st = cache.idle_states
    by_time: dict[str, dict[str, list[str]]] = {}
    for iid, t in cache.idle_next.items():
        by_time.setdefault(iso(t), {}).setdefault(st.get(iid, "busy"), []).append(iid)
    read_next = [k for k in st if k not in cache.idle_next]  # at the next read
    return {
        "at": iso(now),
        **{state: sorted(k for k in read_next if st[k] == state) for state in _STATES},
        "next": {
            t: {state: sorted(ids) for state, ids in sorted(g.items())}
            for t, g in sorted(by_time.items())
        },
    }


def _as_last_read(n: Node, cache: cloudwatch.SeriesCache) -> Utilization:
    """A node not read this cycle, as its own last read left it."""
    iid = n.instance_id
    state = cache.idle_states.get(iid)
    nxt = cache.idle_next.get(iid)
    after = f"; next read after {iso(nxt)}" if nxt is not None else ""
    if state == "idle":
        when = f"; next read at its reclaim time, {iso(nxt)}" if nxt is not None else ""
        return Utilization("idle", f"idle at its last read{when}")
    if state == "unknown":
        return Utilization(
            "unknown",
            f"blind at its last read{after}; `explain {iid}` says why",
            idle_from=nxt,
        )
    if state == "busy":
        return Utilization(
            "busy",
            f"busy at its last read{after}: it cannot have been idle for idle.window before then",
            idle_from=nxt,
        )
    return Utilization("unknown", "not read yet (utilization is read every idle.every)")


def _schedule(
    cache: cloudwatch.SeriesCache, decisions: Mapping[str, Decision], marked: set[str]
) -> None:
    """When each decided node is next read: a busy node (or one with a hole longer than
    max_gap) not before it could be idle for the whole window (``Utilization.idle_from``); an
    idle node that carries a mark at its reclaim time (it is read fresh then, before any
    action); any other node at the next read."""
    for iid, d in decisions.items():
        cache.idle_states[iid] = d.state
        nxt = d.utilization.idle_from
        if d.state == "idle" and d.step in ("mark", "wait") and iid in marked:
            nxt = d.act_after
        if nxt is None:
            cache.idle_next.pop(iid, None)
        else:
            cache.idle_next[iid] = nxt


def run(ctx: RuleContext) -> None:
    """Read utilization every ``idle.every`` (not every cycle: GetMetricData bills per metric
    requested), decide and act. At a read, only the nodes that could be idle by then are read
    (``_schedule``): a node busy at its last read is not read again before its busy period
    has left the window, a node marked idle not before its reclaim time; the others keep their
    last read's decision in the report. On a cycle in between, a node whose grace has run out
    is read fresh and decided at once (an action is delayed by at most one cycle, never
    skipped); nothing else is read, tagged or sent. Before any reclaim the node's whole window
    is read again without the cached periods, so an action never rests on a window pieced
    together from earlier reads alone. The last read's time, each node's state and next read
    are kept in the state store (``LAST_READ_KEY``), so a new process on the same store keeps
    the cadence and the schedule."""
    now = ctx.clock.now()
    params = idle_params(ctx.cfg)
    cache = ctx.series_cache
    if cache.idle_read_at is None:
        got = ctx.state.get(LAST_READ_KEY)
        if got:  # another process read last (or this one before a restart)
            _load_last_read(cache, got)
    marks = ctx.state.marks()
    mark_tag = ctx.cfg.reclaim.mark_tag
    mark_times = {n.instance_id: _marked_at(n, marks, mark_tag) for n in ctx.nodes}
    report = ctx.report
    due = cache.idle_due(now, ctx.cfg.idle.every)
    ripe_now = {
        n.instance_id
        for n in ctx.nodes
        if (m := mark_times[n.instance_id]) is not None and now >= m + params.grace
    }
    if due:
        todo = [
            n
            for n in ctx.nodes
            if n.instance_id in ripe_now
            or (nxt := cache.idle_next.get(n.instance_id)) is None
            or now >= nxt
        ]
        utils = utilization(ctx.aws, ctx.cfg, todo, now, cache, catalog=ctx.catalog) if todo else {}
    else:
        todo = [n for n in ctx.nodes if n.instance_id in ripe_now]
        utils = utilization(ctx.aws, ctx.cfg, todo, now, None, catalog=ctx.catalog) if todo else {}
    decisions = {
        n.instance_id: decide(n, utils[n.instance_id], mark_times[n.instance_id], now, params)
        for n in todo
    }
    ripe = [n for n in todo if decisions[n.instance_id].step == "act"]
    if due and ripe:
        fresh = utilization(ctx.aws, ctx.cfg, ripe, now, None, catalog=ctx.catalog)
        for n in ripe:
            decisions[n.instance_id] = decide(
                n, fresh[n.instance_id], mark_times[n.instance_id], now, params
            )
    cache.idle_decisions.update(decisions)
    digests: dict[str, _Digest] = {}
    for n in ctx.nodes:
        d = decisions.get(n.instance_id)
        if d is None:
            last = cache.idle_decisions.get(n.instance_id)
            if last is None:
                util = _as_last_read(n, cache)
                last = decide(n, util, mark_times[n.instance_id], now, params)
            # as last read; no step is taken between reads
            report.decisions.append(replace(last, step="none"))
            report.states[last.state] += 1
            continue
        report.decisions.append(d)
        report.states[d.state] += 1
        ctx.actuator.audit(
            "decision",
            instance_id=n.instance_id,
            state=d.state,
            step=d.step,
            action=d.action,
            reason=d.reason,
        )
        _apply(ctx, n, d, digests)
    if decisions:
        has_mark = {k for k, m in mark_times.items() if m is not None}
        if any(d.step == "mark" for d in decisions.values()):
            has_mark |= set(ctx.state.marks())  # the marks this cycle made (none when standby)
        _schedule(cache, decisions, has_mark)
    if due:
        cache.idle_read_at = now
        here = {n.instance_id for n in ctx.nodes}
        cache.idle_decisions = {k: v for k, v in cache.idle_decisions.items() if k in here}
        record = _last_read_record(cache, ctx.nodes, now)
        if ctx.actuator.leader:
            # One actor per store: a standby's schedule stays in its own process. Written by a
            # standby that read first, it made the leader skip its reads (seen as a leader
            # that never marked in 4 cycles beside a standby on the same state file).
            ctx.state.put(LAST_READ_KEY, record)
    for who in sorted(digests):
        marked, reclaimed, unmarked = digests[who]
        if not (marked or reclaimed or unmarked):
            continue  # nothing changed for this owner: no message
        ctx.alert(
            messages.idle_digest(
                who,
                marked,
                reclaimed,
                unmarked,
                now=now,
                exempt_tag=ctx.cfg.reclaim.exempt_tag,
                max_exemption_days=ctx.cfg.reclaim.max_exemption.days,
                dry_run=ctx.actuator.dry_run,
            ),
            timedelta(0),
        )
    for st in ("idle", "busy", "unknown"):
        ctx.metrics.nodes.labels(st).set(report.states.get(st, 0))
    blind = [d for d in report.decisions if d.state == "unknown"]
    if blind and due:
        ctx.alert(messages.blind(blind), timedelta(hours=6))


# One owner's events this cycle: marked, reclaimed, busy again (``messages.idle_digest``).
_Digest = tuple[list[messages.Marked], list[messages.Reclaimed], list[tuple[Node, Decision]]]


def _apply(ctx: RuleContext, n: Node, d: Decision, digests: dict[str, _Digest]) -> None:
    """Tag, untag or act on one node; its Slack message goes into its owner's digest."""
    act = ctx.actuator
    if not act.leader and d.step != "none":
        # A standby daemon decides and reports but never tags or acts.
        act.audit("standby.skip", instance_id=n.instance_id, step=d.step)
        return
    now = ctx.clock.now()
    cfg = ctx.cfg
    ec2 = ctx.aws.client("ec2", n.region)
    hourly = ctx.prices.hourly(n)
    dry = act.dry_run
    digest = digests.setdefault(ctx.owner(n), ([], [], []))
    if d.step == "mark":
        if not dry:
            ks = act.kill_switch()
            if ks:
                act.audit("mark.skipped", instance_id=n.instance_id, because=ks)
                return
            try:
                aws.tag_instance(ec2, n.instance_id, cfg.reclaim.mark_tag, iso(now))
            except (ClientError, BotoCoreError) as exc:
                act.api_failure(f"tag {n.instance_id}", exc)
                return
        ctx.state.add_mark(n.instance_id, n.region, now, d.action, reason=d.reason, dry=dry)
        act.audit(
            "mark",
            instance_id=n.instance_id,
            action=d.action,
            reason=d.reason,
            act_after=d.act_after,
            dry_run=dry,
        )
        digest[0].append((n, d, hourly))
    elif d.step == "unmark":
        row = ctx.state.marks().get(n.instance_id)
        if not (row and row["dry_run"]) and not act.kill_switch():
            try:
                aws.untag_instance(ec2, n.instance_id, cfg.reclaim.mark_tag)
            except (ClientError, BotoCoreError) as exc:
                act.api_failure(f"untag {n.instance_id}", exc)
                return
        ctx.state.remove_mark(n.instance_id)
        act.audit("unmark", instance_id=n.instance_id, reason=d.reason)
        digest[2].append((n, d))
    elif d.step == "act":
        if reclaim_slurm_node(ctx, n, d):  # a slurmd runs there: Slurm powers it down
            return
        key = f"reclaim:{n.instance_id}:{iso(d.marked_at) if d.marked_at else ''}"
        asg = ctx.aws.client("autoscaling", n.region)
        ok = act.execute(
            key,
            n.instance_id,
            n.region,
            d.action,
            reason=d.reason,
            call=lambda: aws.reclaim(ec2, asg, n, d.action),
        )
        if ok:
            ctx.state.remove_mark(n.instance_id)
            digest[1].append((key, n, d, hourly))


def _check_metric_coverage(cfg: GuardrailsConfig, origin: str) -> None:
    """Every accelerator family the watched types have needs a utilization metric, and
    ``idle.neuron_lnc`` must be a size each watched Trainium type accepts: otherwise whole
    families would be silently blind (or, with a wrong count, wrongly covered)."""
    cat = load_catalog()
    by_kind: dict[str, list[str]] = {}
    for t in cfg.watched_types():
        by_kind.setdefault(cat.instance(t).accelerator.kind, []).append(t)
    for kind, types in sorted(by_kind.items()):
        if kind not in cfg.idle.metrics:
            default = UTILIZATION_METRICS[kind]  # type: ignore[index]
            raise ConfigError(
                f"{origin}: idle.metrics: no metric for {kind} accelerators, which "
                f"{', '.join(types)} have; remove `{kind}: null` to use the default "
                f"({default.namespace} {default.metric_name} by {default.device_dimension}), "
                "or leave those types out with instance_types"
            )
    lnc = cfg.idle.neuron_lnc
    if lnc is not None:
        for t in by_kind.get("neuron", []):
            nc = cat.instance(t).accelerator.neuron_cores
            if nc is not None and lnc not in nc.logical_core_sizes:
                raise ConfigError(
                    f"{origin}: idle.neuron_lnc: {lnc} is not a logical NeuronCore size of {t}; "
                    f"allowed: {', '.join(map(str, nc.logical_core_sizes))}"
                )


RULE = Rule(
    name="idle-reclaim",
    order=10,
    description=(
        "Mark nodes whose every accelerator stayed below the threshold for the window, "
        "warn the owner, and after the grace period stop, terminate or scale them in."
    ),
    params=IdleConfig,
    iam_actions=(
        "cloudwatch:ListMetrics",
        "cloudwatch:GetMetricData",
        "ec2:CreateTags",
        "ec2:DeleteTags",
        "ec2:StopInstances",
        "ec2:TerminateInstances",
        "autoscaling:TerminateInstanceInAutoScalingGroup",
        "ec2:DescribeSpotPriceHistory",
    ),
    section=lambda c: c.idle,
    enabled=lambda c: c.reclaim.enabled,
    run=run,
    example="idle: {threshold_percent: 5, window: 30m}\nreclaim: {grace: 1h}",
    sections={"idle": IdleConfig, "reclaim": ReclaimConfig},
    checks=(_check_metric_coverage,),
)
