"""An HTTP server on 127.0.0.1 for the sandbox's stand-ins that sit in front of moto server
(coreburst/sandbox/ec2faults.py, checkproxy.py, slurmlab.py's CapacityProxy): every GET and
POST goes to one function, which answers (status, headers, body); each request on a thread of
its own. Loopback only, a free port; ``url`` says where."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# (method, path, request headers, request body) -> (status, response headers, response body)
Handle = Callable[[str, str, dict[str, str], bytes], tuple[int, dict[str, str], bytes]]
# Set by the server from the body it sends (an upstream's would be wrong after a rewrite).
_OWN_HEADERS = ("content-length", "transfer-encoding", "connection")


class LoopbackServer:
    def __init__(self, handle: Handle) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                status, headers, out = handle(
                    self.command, self.path, dict(self.headers.items()), body
                )
                self.send_response(status)
                for k, v in headers.items():
                    if k.lower() not in _OWN_HEADERS:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def do_GET(self) -> None:
                self.do_POST()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def forward(
    upstream: str, method: str, path: str, headers: dict[str, str], body: bytes
) -> tuple[int, dict[str, str], bytes]:
    """The request as ``upstream`` (moto server) answers it, error statuses included."""
    req = urllib.request.Request(upstream + path, data=body or None, method=method)
    for k, v in headers.items():
        if k.lower() not in ("host", "content-length", "connection"):
            req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()
