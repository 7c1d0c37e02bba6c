"""A real Prometheus (Debian package ``prometheus``: /usr/bin/prometheus and promtool) on
127.0.0.1 serving a history of recorded metrics, for tests and demos.

The history is backfilled, not scraped: :func:`openmetrics_history` repeats each sample of one
recorded scrape (the exporter's text exposition format) at every step of ``[start, end]`` with
a value from a function, as OpenMetrics with timestamps; ``promtool tsdb
create-blocks-from openmetrics`` turns that into TSDB blocks (Prometheus docs, "Storage:
Backfilling from OpenMetrics format"), and ``prometheus`` is started on those blocks with no
scrape targets. :class:`PrometheusServer` waits (bounded) for ``/-/ready`` and stops the
process on exit.

    >>> with PrometheusServer(tmp, history) as prom:   # doctest: +SKIP
    ...     urllib.request.urlopen(prom.url + "/api/v1/query?query=up")
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from types import TracebackType

from coreburst.sandbox.emulator import free_port

BINARIES = ("prometheus", "promtool")
DEBIAN_PACKAGE = "prometheus"

# name{labels} value [timestamp]; label values may hold spaces and escaped quotes.
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')

ValueFn = Callable[[str, dict[str, str], float], float | None]


def missing_prerequisite() -> str | None:
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        return f"{', '.join(missing)} missing: apt-get install -y {DEBIAN_PACKAGE}"
    return None


def parse_scrape(text: str) -> list[tuple[str, dict[str, str], float]]:
    """The samples of a text-format scrape: (metric, labels, value); comments skipped."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise ValueError(f"not a sample line: {line[:80]!r}")
        labels = {k: v for k, v in _LABEL.findall(m.group(2) or "")}
        out.append((m.group(1), labels, float(m.group(3))))
    return out


def _types(text: str) -> dict[str, str]:
    return dict(re.findall(r"^#\s*TYPE\s+(\S+)\s+(\S+)", text, flags=re.M))


def openmetrics_history(
    scrape: str, start: datetime, end: datetime, step_s: float, value: ValueFn | None = None
) -> str:
    """OpenMetrics text with every sample of ``scrape`` at each step from ``start`` to ``end``.
    ``value(metric, labels, unix_time)`` gives the value at a time (None: no sample then, a
    gap); without it the recorded value is repeated. Families stay contiguous and the text
    ends with ``# EOF``, as the OpenMetrics parser of promtool requires."""
    samples = parse_scrape(scrape)
    types = _types(scrape)
    t0, t1 = start.timestamp(), end.timestamp()
    lines: list[str] = []
    for family in dict.fromkeys(m for m, _, _ in samples):
        lines.append(f"# TYPE {family} {types.get(family, 'gauge')}")
        for metric, labels, recorded in samples:
            if metric != family:
                continue
            lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
            t = t0
            while t <= t1:
                v = recorded if value is None else value(metric, labels, t)
                if v is not None:
                    lines.append(f"{metric}{{{lab}}} {v:g} {t:.3f}")
                t += step_s
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


class PrometheusServer:
    """Backfill ``history`` (OpenMetrics text) under ``work`` and serve it on 127.0.0.1."""

    def __init__(self, work: Path, history: str, *, ready_timeout_s: float = 60.0) -> None:
        self.work = work
        self.history = history
        self.ready_timeout_s = ready_timeout_s
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PrometheusServer:
        why = missing_prerequisite()
        if why:
            raise RuntimeError(why)
        data = self.work / "tsdb"
        data.mkdir(parents=True, exist_ok=True)
        src = self.work / "history.om"
        src.write_text(self.history)
        # Blocks of at most 2 h (the default): Prometheus compacts them itself.
        done = subprocess.run(
            ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(src), str(data)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"promtool backfill failed: {done.stderr.strip()[-500:]}")
        cfg = self.work / "prometheus.yml"
        cfg.write_text("global:\n  scrape_interval: 1m\nscrape_configs: []\n")
        log = (self.work / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={cfg}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=30d",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited ({self.proc.returncode}): {self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"prometheus not ready after {self.ready_timeout_s:g}s")

    def log_tail(self, chars: int = 800) -> str:
        try:
            return (self.work / "prometheus.log").read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM, 10 s to exit, then SIGKILL."""
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            p.wait(timeout=5)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
