"""The Prometheus client's bounds (issue 24): a deadline for the whole answer, not one socket
read, and a size cap. Real HTTP on 127.0.0.1 from a server made up here: one that sends its
headers and then a byte every 0.2 s (a stalled or hostile proxy), one that answers 3 MiB.
Each failure is one PrometheusError line naming the setting to change."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest

from guardrails.adapters.dcgm import Prometheus, PrometheusError

T1 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
T0 = T1 - timedelta(hours=1)


def _read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return
        body += chunk


def _serve(answer: Callable[[socket.socket], None]) -> Iterator[str]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    stop = threading.Event()

    def loop() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    _read_request(conn)  # whole: unread bytes at close would reset it
                    answer(conn)
                    conn.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        t.join(5)
        srv.close()


@pytest.fixture
def trickle() -> Iterator[str]:
    def answer(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100000\r\n\r\n")  # fmt: skip
        for _ in range(100):  # 20 s at most; the client must give up long before
            conn.sendall(b" ")
            time.sleep(0.2)

    yield from _serve(answer)


@pytest.fixture
def huge() -> Iterator[str]:
    def answer(conn: socket.socket) -> None:
        body = b'{"status":"success","data":{"resultType":"matrix","result":[' + b" " * (3 << 20)
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body) + 3).encode()
            + b"\r\n\r\n"
        )
        conn.sendall(body + b"]}}")

    yield from _serve(answer)


def test_a_trickling_answer_is_cut_off_at_the_deadline(trickle: str) -> None:
    started = time.monotonic()
    with pytest.raises(PrometheusError) as err:
        Prometheus(trickle, timeout_s=1.0).query_range("up", T0, T1, 60)
    took = time.monotonic() - started
    # Each byte arrives well within a socket timeout of 1 s: only a deadline ends it.
    assert took < 2.5, took
    msg = str(err.value)
    assert "no complete answer within 1s" in msg and "prometheus_timeout_s" in msg
    assert "\n" not in msg


def test_an_answer_over_the_cap_is_refused_in_one_line(huge: str) -> None:
    with pytest.raises(PrometheusError) as err:
        Prometheus(huge, timeout_s=10, max_bytes=1 << 20).query_range("up", T0, T1, 60)
    msg = str(err.value)
    assert "answer over 1 MiB" in msg and "prometheus_max_mib" in msg and "\n" not in msg
    # Under a larger cap the same answer is read and parsed.
    assert Prometheus(huge, timeout_s=10, max_bytes=8 << 20).query_range("up", T0, T1, 60) == []


def test_nothing_listening_is_one_line() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(PrometheusError, match=r"unreachable .*check core_idle\.prometheus_url"):
        Prometheus(f"http://127.0.0.1:{port}", timeout_s=2).query_range("up", T0, T1, 60)
