"""Test hooks: environment variables that shift the daemon's clock or pause it mid-cycle, so
that subprocess tests and demos can drive it. Read only by the harness
``python -m coreburst.sandbox.guardrails`` (never by guardrails itself), and only with
``COREBURST_TEST_HOOKS=1``; the harness injects what they ask for into ``guardrails.cli.main``.

    $ COREBURST_TEST_HOOKS=1 COREBURST_CLOCK_START=2026-01-05T10:00:00+00:00 \\
      COREBURST_CLOCK_SPEED=10 python -m coreburst.sandbox.guardrails once --config g.yaml

- ``COREBURST_CLOCK_START``: ISO datetime the clock starts at (real time offset from there).
- ``COREBURST_CLOCK_SPEED``: how many times faster than real time it runs (a number > 0;
  default 1; only with CLOCK_START).
- ``COREBURST_TEST_PAUSE_AT``: ``<point>:<marker file>``: at that point of a cycle
  (after-intent, after-action, after-enqueue) write the marker and wait to be killed.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from coreburst.sandbox.clocks import OffsetClock
from guardrails.actuator import PAUSE_POINTS
from guardrails.clock import Clock

ENABLE_ENV = "COREBURST_TEST_HOOKS"
CLOCK_START_ENV = "COREBURST_CLOCK_START"
CLOCK_SPEED_ENV = "COREBURST_CLOCK_SPEED"
PAUSE_ENV = "COREBURST_TEST_PAUSE_AT"


class TestHookError(ValueError):
    """A test-hook variable with a value it cannot use; the message names the variable."""

    __test__ = False  # not a pytest test class, whatever its name


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "").strip() == "1"


def clock() -> Clock | None:
    """The shifted/sped-up clock the hooks ask for, or None (the system clock)."""
    if not enabled():
        return None
    start = os.environ.get(CLOCK_START_ENV, "").strip()
    speed_text = os.environ.get(CLOCK_SPEED_ENV, "").strip()
    if not start:
        if speed_text:
            raise TestHookError(f"{CLOCK_SPEED_ENV} needs {CLOCK_START_ENV} (an ISO datetime) too")
        return None
    try:
        t0 = datetime.fromisoformat(start)
    except ValueError:
        raise TestHookError(
            f"{CLOCK_START_ENV}={start!r} is not an ISO datetime (e.g. 2026-01-05T10:00:00+00:00)"
        ) from None
    if t0.tzinfo is None:
        raise TestHookError(
            f"{CLOCK_START_ENV}={start!r} has no UTC offset (e.g. 2026-01-05T10:00:00+00:00)"
        )
    speed = 1.0
    if speed_text:
        try:
            speed = float(speed_text)
        except ValueError:
            speed = math.nan
        if not (math.isfinite(speed) and 0 < speed <= 1e6):
            raise TestHookError(
                f"{CLOCK_SPEED_ENV}={speed_text!r} is not a number between 0 (exclusive) and "
                "1000000"
            )
    return OffsetClock(t0, speed)


def pause() -> Callable[[str], None] | None:
    """The pause hook ``COREBURST_TEST_PAUSE_AT`` asks for, or None; a malformed value is
    refused before anything runs."""
    if not enabled():
        return None
    spec = os.environ.get(PAUSE_ENV, "")
    if not spec:
        return None
    point, sep, marker = spec.partition(":")
    if not sep or not marker or point not in PAUSE_POINTS:
        raise TestHookError(
            f"{PAUSE_ENV}={spec!r}: use <point>:<marker file>, point one of "
            f"{', '.join(PAUSE_POINTS)}"
        )
    return pause_at(point, Path(marker))


def pause_at(point: str, marker: Path) -> Callable[[str], None]:
    """A pause hook: at ``point`` of a cycle write ``marker`` and wait (bounded) to be
    SIGKILLed by the test."""

    def hook(at: str) -> None:
        if at == point:
            marker.write_text(point)
            for _ in range(600):
                time.sleep(0.1)

    return hook
