"""Clocks for tests, the demo and benchmarks (production runs on ``guardrails.clock``'s
``SystemClock``; these are injected, never read from the environment by guardrails)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta


class FakeClock:
    """A clock tests and the demo move by hand; ``sleep`` advances it instead of waiting."""

    def __init__(self, start: datetime) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> None:
        with self._lock:
            self._now += delta

    def set(self, when: datetime) -> None:
        with self._lock:
            self._now = when

    def sleep(self, seconds: float) -> None:
        self.advance(timedelta(seconds=seconds))

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        if not stop.is_set():
            self.sleep(seconds)
        return stop.is_set()


class OffsetClock:
    """Real time shifted by a fixed offset and optionally sped up (subprocess tests get one
    through the test hooks, ``coreburst.sandbox.hooks``)."""

    def __init__(self, start: datetime, speed: float = 1.0) -> None:
        self._t0 = time.monotonic()
        self._start = start
        self._speed = speed

    def now(self) -> datetime:
        return self._start + timedelta(seconds=(time.monotonic() - self._t0) * self._speed)

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds) / self._speed)

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        return stop.wait(max(0.0, seconds) / self._speed)
