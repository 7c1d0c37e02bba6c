"""Injectable clocks: every component asks one of these for "now", never datetime.now().

Production runs on ``SystemClock``; tests, the demo and benchmarks inject the clocks of
``coreburst.sandbox.clocks`` (``FakeClock``, ``OffsetClock``)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...

    def sleep(self, seconds: float) -> None: ...

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        """Sleep ``seconds`` of this clock's time or until ``stop`` is set, whichever comes
        first; True when stopped. A daemon asked to stop (SIGTERM) between cycles goes at
        once instead of waiting out its interval."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        return stop.wait(max(0.0, seconds))
