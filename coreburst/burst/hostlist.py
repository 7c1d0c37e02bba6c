"""Slurm hostlists: ``gpu-[1-3,7],login1`` <-> ``["gpu-1", "gpu-2", "gpu-3", "gpu-7", "login1"]``.

The same expansion as ``scontrol show hostnames`` (tests/integration/burst compares them), in
process: the power programs run on every resume and should not depend on a PATH.

    >>> expand("p5-[1-3],spot-[08-10]")
    ['p5-1', 'p5-2', 'p5-3', 'spot-08', 'spot-09', 'spot-10']
    >>> compress(["p5-1", "p5-2", "p5-3", "p5-7"])
    'p5-[1-3,7]'
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Far above any cluster (Slurm's own limit on one range is 64K hosts).
MAX_HOSTS = 65_536
_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class HostlistError(ValueError):
    """Not a hostlist; the message is one line."""


def _split_top(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"{text!r}: nested '[' is not a hostlist")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"{text!r}: ']' without '['")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise HostlistError(f"{text!r}: '[' without ']'")
    parts.append("".join(cur))
    return parts


def _ranges(body: str, whole: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        m = _RANGE.fullmatch(item)
        if not m:
            raise HostlistError(f"{whole!r}: {item!r} is not a number or range (e.g. 1-4)")
        lo_s, hi_s = m.group(1), m.group(2) or m.group(1)
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise HostlistError(f"{whole!r}: range {item} runs backwards")
        if hi - lo + 1 > MAX_HOSTS:
            raise HostlistError(f"{whole!r}: more than {MAX_HOSTS} hosts")
        width = len(lo_s) if lo_s.startswith("0") and len(lo_s) > 1 else 0
        out.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return out


def _expand_one(expr: str, whole: str) -> list[str]:
    names = [""]
    rest = expr
    while rest:
        i = rest.find("[")
        if i < 0:
            names = [n + rest for n in names]
            break
        j = rest.index("]", i)
        prefix, body, rest = rest[:i], rest[i + 1 : j], rest[j + 1 :]
        values = _ranges(body, whole)
        if len(names) * len(values) > MAX_HOSTS:
            raise HostlistError(f"{whole!r}: more than {MAX_HOSTS} hosts")
        names = [n + prefix + v for n in names for v in values]
    for n in names:
        if not _NAME.fullmatch(n):
            raise HostlistError(
                f"{whole!r}: {n!r} is not a node name (letters, digits, . _ - only)"
            )
    return names


def expand(hostlist: str) -> list[str]:
    """Every host name in ``hostlist``, in order, duplicates removed; raises HostlistError."""
    text = hostlist.strip()
    if not text:
        raise HostlistError("empty hostlist: give node names such as p5-[1-4]")
    seen: dict[str, None] = {}
    for part in _split_top(text):
        if not part:
            raise HostlistError(f"{hostlist!r}: empty name between commas")
        for name in _expand_one(part, hostlist):
            seen.setdefault(name)
            if len(seen) > MAX_HOSTS:
                raise HostlistError(f"{hostlist!r}: more than {MAX_HOSTS} hosts")
    return list(seen)


_TAIL = re.compile(r"^(.*?)(\d+)$")


def compress(names: Iterable[str]) -> str:
    """A compact hostlist for ``names`` (prefix + numeric suffix ranges, order of first use)."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    order: list[tuple[str, int] | str] = []
    for name in dict.fromkeys(names):
        m = _TAIL.fullmatch(name)
        if not m:
            plain.append(name)
            order.append(name)
            continue
        digits = m.group(2)
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        key = (m.group(1), width)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(digits))
    parts: list[str] = []
    for item in order:
        if isinstance(item, str):
            parts.append(item)
            continue
        prefix, width = item
        nums = sorted(set(groups[item]))
        if len(nums) == 1:
            parts.append(f"{prefix}{str(nums[0]).zfill(width)}")
            continue
        spans: list[str] = []
        start = prev = nums[0]
        for n in [*nums[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            lo, hi = str(start).zfill(width), str(prev).zfill(width)
            spans.append(lo if start == prev else f"{lo}-{hi}")
            if n is not None:
                start = prev = n
        parts.append(f"{prefix}[{','.join(spans)}]")
    return ",".join(parts)
