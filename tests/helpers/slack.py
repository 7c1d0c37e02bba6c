"""Slack's Block Kit limits as one check, and text made to break them.

The limits are Slack's, from https://api.slack.com/reference/block-kit/blocks (header text
<= 150 characters of plain_text; section text <= 3000; at most 10 fields of <= 2000 each;
context at most 10 elements; at most 50 blocks; block_id <= 255) and the message reference
(``text`` truncated past 40,000 characters, under 4,000 recommended). They are checked with
slack_sdk's own block models (``Block.parse(...).validate_json()`` raises
``SlackObjectFormationError`` past a limit it knows); the two it does not check (a field's
2000 characters, non-empty text) are asserted from the same page.
"""

from __future__ import annotations

import json
from typing import Any

from slack_sdk.errors import SlackObjectFormationError
from slack_sdk.models.blocks import Block

BLOCK_KIT = "https://api.slack.com/reference/block-kit/blocks"

# Hostile text: emoji (astral plane), CJK, combining marks, Slack control characters and a
# mention that must not ping anyone.
UNI = "Ω漢字🚀e\u0301 <!channel> & <@U123> "


def check_payload(p: dict[str, Any]) -> None:
    """Fail if Slack would refuse ``p`` for a Block Kit limit (see module docstring)."""
    assert 0 < len(p["text"]) <= 4000
    assert 0 < len(p["blocks"]) <= 50, BLOCK_KIT
    for d in p["blocks"]:
        try:
            Block.parse(d).validate_json()  # type: ignore[union-attr]
        except SlackObjectFormationError as exc:  # pragma: no cover - the failure message
            raise AssertionError(f"{exc} in {json.dumps(d)[:300]} ({BLOCK_KIT})") from None
        assert len(d.get("block_id", "")) <= 255
        if d["type"] == "header":
            assert 0 < len(d["text"]["text"]) <= 150
        if d["type"] == "section":
            if "text" in d:
                assert 0 < len(d["text"]["text"]) <= 3000
            assert len(d.get("fields", [])) <= 10
            for f in d.get("fields", []):
                assert 0 < len(f["text"]) <= 2000, "section field over 2000 characters"
        if d["type"] == "context":
            assert 0 < len(d["elements"]) <= 10
            assert all(0 < len(e["text"]) <= 3000 for e in d["elements"])


def section_text(p: dict[str, Any]) -> str:
    return str(p["blocks"][1]["text"]["text"])
