"""Hostlist expansion and compression (the integration suite compares expand() with the real
`scontrol show hostnames`)."""

from __future__ import annotations

import pytest

from coreburst.burst.hostlist import MAX_HOSTS, HostlistError, compress, expand


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("p5-1", ["p5-1"]),
        ("p5-[1-3]", ["p5-1", "p5-2", "p5-3"]),
        ("a[01-03,7],b-9", ["a01", "a02", "a03", "a7", "b-9"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("x-[8-11],x-1,x-8", ["x-8", "x-9", "x-10", "x-11", "x-1"]),
        (" od-[1-2] ", ["od-1", "od-2"]),
    ],
)
def test_expand(text: str, names: list[str]) -> None:
    assert expand(text) == names


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "empty hostlist"),
        ("od-[1-", "'[' without ']'"),
        ("od-1]", "']' without '['"),
        ("od-[[1]]", "nested"),
        ("od-[3-1]", "backwards"),
        ("od-[a-b]", "not a number"),
        ("od-1,,od-2", "empty name"),
        ("od 1", "not a node name"),
        ("od-1;rm", "not a node name"),
        (f"n[1-{MAX_HOSTS + 1}]", "more than"),
        ("a[1-300]b[1-300]", "more than"),
    ],
)
def test_expand_rejects(text: str, needle: str) -> None:
    with pytest.raises(HostlistError, match=None) as exc:
        expand(text)
    assert needle in str(exc.value)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    ("names", "text"),
    [
        (["p5-1", "p5-2", "p5-3", "p5-7"], "p5-[1-3,7]"),
        (["a01", "a02", "b"], "a[01-02],b"),
        (["od-1"], "od-1"),
        (["od-2", "sp-1", "od-1"], "od-[1-2],sp-1"),
    ],
)
def test_compress(names: list[str], text: str) -> None:
    assert compress(names) == text
    assert sorted(expand(text)) == sorted(set(names))
