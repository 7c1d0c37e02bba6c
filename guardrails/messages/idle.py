"""The idle-reclaim wording: a node marked, released or reclaimed, one owner's digest of a
cycle (``idle_digest``), and the nodes without data."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime, timedelta

from guardrails.adapters.slack import (
    ELLIPSIS,
    PRIORITY_URGENT,
    Alert,
    clip,
)
from guardrails.idle import Decision
from guardrails.messages.common import price_text, verb
from guardrails.model import Node
from guardrails.timefmt import iso


# -- idle-reclaim ----------------------------------------------------------------------------
def idle_marked(
    node: Node,
    d: Decision,
    *,
    now: datetime,
    price: str,
    who: str,
    exempt_tag: str,
    max_exemption_days: int,
    dry_run: bool,
) -> Alert:
    exempt_until = (now + timedelta(days=7)).date().isoformat()
    return Alert(
        f"mark:{node.instance_id}:{iso(now)}",
        f"idle:{node.instance_id}",
        f"{'[dry-run] ' if dry_run else ''}Idle node {node.instance_id} will be {verb(d.action)}",
        [
            f"*{node.instance_id}* ({node.instance_type}, {node.market}, {node.region}) "
            f"costs {price}. {d.reason}.",
            f"It will be *{verb(d.action)}* at or after "
            f"{iso(d.act_after) if d.act_after else '?'} unless it becomes busy.",
            f"To exempt it: tag `{exempt_tag}={exempt_until}` (at most {max_exemption_days} days).",
        ],
        fields={"Owner": who, "Idle since": iso(now), "Action": d.action, "Cost": price},
    )


def idle_unmarked(node: Node, d: Decision, *, who: str) -> Alert:
    return Alert(
        f"unmark:{node.instance_id}:{iso(d.marked_at) if d.marked_at else ''}",
        f"idle:{node.instance_id}",
        f"Node {node.instance_id} is no longer scheduled for reclaim",
        [d.reason],
        severity="info",
        fields={"Owner": who},
    )


def reclaimed(key: str, node: Node, d: Decision, *, price: str, who: str) -> Alert:
    return Alert(
        f"act:{key}",
        f"act:{node.instance_id}",
        f"Idle node {node.instance_id} {verb(d.action)}",
        [f"*{node.instance_id}* ({node.instance_type}, {price}): {d.reason}."],
        fields={"Owner": who, "Action": d.action},
    )


# One owner's idle events in one cycle, for ``idle_digest``: (node, decision, $/h or None).
Marked = tuple[Node, Decision, float | None]
# (action key, node, decision, $/h or None): the key is the actuator's, as in ``reclaimed``.
Reclaimed = tuple[str, Node, Decision, float | None]

# How many nodes a digest names; the rest are counted ("and N more"). Ten lines of at most
# DIGEST_LINE_MAX characters, plus the summary lines, stay well inside a section's 3,000
# characters (https://api.slack.com/reference/block-kit/blocks#section), so the payload never
# has to cut a line the counts depend on.
DIGEST_LIST_MAX = 10
DIGEST_IDS_MAX = 10
DIGEST_LINE_MAX = 160


def _usd(total: float, unpriced: int) -> str:
    return f"${total:,.2f}/h" + (f" (+{unpriced} unpriced)" if unpriced else "")


def _ids(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:DIGEST_IDS_MAX])
    more = len(ids) - DIGEST_IDS_MAX
    return shown + (f" {ELLIPSIS} and {more} more" if more > 0 else "")


def idle_digest(
    who: str,
    marked: Sequence[Marked],
    reclaimed_: Sequence[Reclaimed],
    unmarked: Sequence[tuple[Node, Decision]],
    *,
    now: datetime,
    exempt_tag: str,
    max_exemption_days: int,
    dry_run: bool,
) -> Alert:
    """One owner's (or team's: whatever ``reclaim.owner_tags`` resolves) idle events of one
    cycle in one message, instead of one message per node: at 1,000 nodes with 400 idle a cycle
    sends one message per owner, not 400 (incoming webhooks allow about "1 message per second
    per channel": https://api.slack.com/docs/rate-limits).

    It gives the marked nodes (count, up to ``DIGEST_LIST_MAX`` named with $/h each, "and N
    more" for the rest), the total $/h at stake, the earliest and latest reclaim time, how to
    exempt, the nodes reclaimed and those busy again; per-node detail stays in
    ``coreburst guardrails status`` and ``explain``.

    Dedupe: the key is a digest of the owner and the exact events (node, step, mark time), and
    a node is marked, reclaimed or released once per idle episode, so an identical digest is
    never sent twice and an owner whose nodes did not change this cycle gets nothing. A digest
    of a single event is the per-node message it replaces (``idle_marked``, ``reclaimed`` or
    ``idle_unmarked``: same wording and dedupe key as before digests)."""
    marked = sorted(marked, key=lambda m: m[0].instance_id)
    reclaimed_ = sorted(reclaimed_, key=lambda r: r[1].instance_id)
    unmarked = sorted(unmarked, key=lambda u: u[0].instance_id)
    events = sorted(
        [f"mark:{n.instance_id}:{iso(now)}" for n, _, _ in marked]
        + [f"act:{k}" for k, *_ in reclaimed_]
        + [f"unmark:{n.instance_id}:{iso(d.marked_at) if d.marked_at else ''}" for n, d in unmarked]
    )
    if len(events) == 1:  # one event: the per-node message, as before digests
        if marked:
            n, d, p = marked[0]
            return idle_marked(
                n,
                d,
                now=now,
                price=price_text(p),
                who=who,
                exempt_tag=exempt_tag,
                max_exemption_days=max_exemption_days,
                dry_run=dry_run,
            )
        if reclaimed_:
            k, n, d, p = reclaimed_[0]
            return reclaimed(k, n, d, price=price_text(p), who=who)
        return idle_unmarked(unmarked[0][0], unmarked[0][1], who=who)
    dry = "[dry-run] " if dry_run else ""
    who_short = clip(who, 200)
    lines: list[str] = []
    fields: dict[str, str] = {"Owner": who_short}
    if marked:
        lines += _marked_lines(marked, fields, now, exempt_tag, max_exemption_days)
    if reclaimed_:
        saved = sum(p for _, _, _, p in reclaimed_ if p is not None)
        unpriced = sum(1 for *_, p in reclaimed_ if p is None)
        lines.append(
            f"*{len(reclaimed_)} idle node(s) reclaimed* ({_usd(saved, unpriced)} saved): "
            + _ids([f"{n.instance_id} {verb(d.action)}" for _, n, d, _ in reclaimed_])
        )
        fields["Reclaimed"] = str(len(reclaimed_))
    if unmarked:
        lines.append(
            f"{len(unmarked)} node(s) busy again, no longer scheduled for reclaim: "
            + _ids([n.instance_id for n, _ in unmarked])
        )
    lines.append(
        "Per-node detail: `coreburst guardrails status` and "
        "`coreburst guardrails explain <instance-id>`."
    )
    key = "idle-digest:" + hashlib.sha1((who + "\n" + "\n".join(events)).encode()).hexdigest()
    parts = [
        f"{len(marked)} marked" if marked else "",
        f"{len(reclaimed_)} reclaimed" if reclaimed_ else "",
        f"{len(unmarked)} busy again" if unmarked else "",
    ]
    title = f"{dry}Idle nodes of {who_short}: " + ", ".join(x for x in parts if x)
    return Alert(key, f"idle-digest:{who_short}", title, lines, fields=fields)


def _marked_lines(
    marked: Sequence[Marked],
    fields: dict[str, str],
    now: datetime,
    exempt_tag: str,
    max_exemption_days: int,
) -> list[str]:
    """A digest's lines about the nodes marked idle (the first ``DIGEST_LIST_MAX`` named, the
    rest counted), and its Marked / At stake / Reclaim fields, added to ``fields``."""
    lines: list[str] = []
    at_stake = sum(p for _, _, p in marked if p is not None)
    unpriced = sum(1 for _, _, p in marked if p is None)
    afters = sorted(d.act_after for _, d, _ in marked if d.act_after is not None)
    actions = sorted({d.action for _, d, _ in marked})
    when = (
        (
            f"at or after {iso(afters[0])}"
            if afters[0] == afters[-1]
            else f"between {iso(afters[0])} and {iso(afters[-1])}"
        )
        if afters
        else "after the grace period"
    )
    lines.append(
        f"*{len(marked)} idle node(s) marked*, {_usd(at_stake, unpriced)} at stake: they "
        f"will be *{' / '.join(verb(a) for a in actions)}* {when} unless they become busy."
    )
    for n, d, p in marked[:DIGEST_LIST_MAX]:
        lines.append(
            clip(
                f"• {n.instance_id} ({n.instance_type}, {n.market}, {n.region}) "
                f"{price_text(p)}, {verb(d.action)} at or after "
                f"{iso(d.act_after) if d.act_after else '?'}",
                DIGEST_LINE_MAX,
            )
        )
    if len(marked) > DIGEST_LIST_MAX:
        rest = marked[DIGEST_LIST_MAX:]
        rest_usd = sum(p for _, _, p in rest if p is not None)
        rest_unpriced = sum(1 for _, _, p in rest if p is None)
        lines.append(f"{ELLIPSIS} and {len(rest)} more marked ({_usd(rest_usd, rest_unpriced)})")
    exempt_until = (now + timedelta(days=7)).date().isoformat()
    lines.append(
        f"To exempt a node: tag `{exempt_tag}={exempt_until}` (at most {max_exemption_days} days)."
    )
    fields["Marked"] = str(len(marked))
    fields["At stake"] = _usd(at_stake, unpriced)
    if afters:
        fields["Reclaim from"] = iso(afters[0])
        fields["Reclaim until"] = iso(afters[-1])
    return lines


def blind(decisions: Sequence[Decision]) -> Alert:
    """Nodes without usable utilization data (never reclaimed while blind)."""
    ids_sorted = sorted(d.instance_id for d in decisions)
    ids = ", ".join(ids_sorted[:20]) + (
        f" {ELLIPSIS} and {len(decisions) - 20} more" if len(decisions) > 20 else ""
    )
    return Alert(
        "blind:" + hashlib.sha1(",".join(ids_sorted).encode()).hexdigest()[:16],
        "blind",
        f"{len(decisions)} GPU node(s) without usable utilization data",
        [
            f"Never reclaimed while blind: {ids}",
            # all of them: the payload keeps what fits and says how many more
            *(f"• {d.instance_id}: {d.utilization.reason}" for d in decisions),
        ],
        severity="info",
        # never queued behind routine idle digests: a blind node is one we cannot judge
        priority=PRIORITY_URGENT,
    )
