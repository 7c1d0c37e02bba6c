"""moto's server with one request handled at a time: DynamoDB's conditional writes are atomic
(Amazon DynamoDB Developer Guide, "Condition expressions" / "Conditional writes": the write
happens only if the condition holds, checked and applied as one operation), while moto's
threaded server checks a PutItem's condition and stores the item in two steps, so two racing
requests can both pass (seen once: 4 of 8 racers approved against a limit that fits 3). Every
request goes through one lock here, which is what DynamoDB guarantees per item and more.

    $ python tests/unit/burst/moto_serial_server.py -H 127.0.0.1 -p 5000
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto import server

_run_simple = server.run_simple


def _serial_run_simple(host: str, port: int, app: Callable[..., Any], **kw: Any) -> None:
    lock = threading.Lock()

    def one_at_a_time(
        environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        with lock:  # the whole answer is built inside the lock
            return list(app(environ, start_response))

    _run_simple(host, port, one_at_a_time, **kw)


server.run_simple = _serial_run_simple  # type: ignore[assignment]

if __name__ == "__main__":
    server.main(sys.argv[1:])
