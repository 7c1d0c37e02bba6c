"""The daemon's SIGTERM handler (guardrails.loop.stop_handler) never waits on the stop event's
lock. A signal handler runs in the main thread between two of its bytecodes; when that thread
is inside ``Event.wait()`` holding the event's lock (between taking it and waiting), a handler
that calls ``stop.set()`` itself waits for that lock for ever. One fresh-clone run saw the
daemon ignore SIGTERM for 30 s and get killed, at the moment the test sent it: just after
"cycle.done", as the loop entered its wait.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

import pytest

from guardrails.loop import stop_handler


class _Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def info(self, event: str, **kw: Any) -> None:
        self.events.append((event, kw))


def test_a_signal_while_the_main_thread_holds_the_events_lock_still_stops() -> None:
    stop, log = threading.Event(), _Log()
    handle = stop_handler(stop, log)
    returned = threading.Event()

    def main_thread_in_wait() -> None:
        # what Event.wait does first: take the condition's lock; the signal arrives here
        with stop._cond:  # type: ignore[attr-defined]
            handle(signal.SIGTERM, None)
            returned.set()

    t = threading.Thread(target=main_thread_in_wait, daemon=True)
    t.start()
    t.join(5)
    assert returned.is_set(), "the handler blocked on the stop event's lock"
    assert stop.wait(5)
    for _ in range(500):  # the log line is written by the same thread, just after the set
        if log.events:
            break
        threading.Event().wait(0.01)
    assert log.events == [("daemon.stopping", {"signal": "SIGTERM"})]


def test_a_second_signal_stops_mid_step() -> None:
    stop = threading.Event()
    handle = stop_handler(stop, _Log())
    stop.set()
    with pytest.raises(SystemExit) as e:
        handle(signal.SIGTERM, None)
    assert e.value.code == 128 + signal.SIGTERM
