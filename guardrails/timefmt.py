"""How the daemon writes and reads times in its state, audit records and messages: ISO 8601
in UTC, so they sort as text and read the same in SQLite and DynamoDB.

    >>> from datetime import UTC, datetime
    >>> iso(datetime(2026, 12, 4, 9, 30, tzinfo=UTC))
    '2026-12-04T09:30:00+00:00'
    >>> parse_iso("2026-12-04T09:30:00+00:00").hour
    9
"""

from __future__ import annotations

from datetime import UTC, datetime


def iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat()


def parse_iso(s: str) -> datetime:
    return datetime.fromisoformat(s)
