"""Test hooks: environment variables that shift the daemon's clock or pause it mid-cycle so
that subprocess tests and demos can drive it. None of them is read unless
``COREBURST_TEST_HOOKS=1`` is set, so a production unit that happens to carry one (a copied
environment file) runs on the real clock and never pauses.

    $ COREBURST_TEST_HOOKS=1 COREBURST_CLOCK_START=2026-01-05T10:00:00+00:00 \\
      COREBURST_CLOCK_SPEED=10 python -m guardrails once --config g.yaml

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
from datetime import datetime
from pathlib import Path

from guardrails.clock import Clock, OffsetClock, SystemClock

ENABLE_ENV = "COREBURST_TEST_HOOKS"
CLOCK_START_ENV = "COREBURST_CLOCK_START"
CLOCK_SPEED_ENV = "COREBURST_CLOCK_SPEED"
PAUSE_ENV = "COREBURST_TEST_PAUSE_AT"
PAUSE_POINTS = ("after-intent", "after-action", "after-enqueue")


class TestHookError(ValueError):
    """A test-hook variable with a value it cannot use; the message names the variable."""

    __test__ = False  # not a pytest test class, whatever its name


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "").strip() == "1"


def clock() -> Clock:
    """The clock the CLI runs on: shifted/sped up by the hooks when enabled, else the system's."""
    if not enabled():
        return SystemClock()
    start = os.environ.get(CLOCK_START_ENV, "").strip()
    speed_text = os.environ.get(CLOCK_SPEED_ENV, "").strip()
    if not start:
        if speed_text:
            raise TestHookError(f"{CLOCK_SPEED_ENV} needs {CLOCK_START_ENV} (an ISO datetime) too")
        return SystemClock()
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


def check_pause_spec() -> None:
    """Refuse a malformed ``COREBURST_TEST_PAUSE_AT`` before anything runs."""
    if not enabled():
        return
    spec = os.environ.get(PAUSE_ENV, "")
    if not spec:
        return
    point, sep, marker = spec.partition(":")
    if not sep or not marker or point not in PAUSE_POINTS:
        raise TestHookError(
            f"{PAUSE_ENV}={spec!r}: use <point>:<marker file>, point one of "
            f"{', '.join(PAUSE_POINTS)}"
        )


def pause_at(point: str) -> None:
    """At ``point`` of a cycle, when asked to: write the marker file and wait (bounded) to be
    SIGKILLed by the test."""
    if not enabled():
        return
    spec = os.environ.get(PAUSE_ENV, "")
    if spec.startswith(point + ":"):
        Path(spec.split(":", 1)[1]).write_text(point)
        for _ in range(600):
            time.sleep(0.1)
