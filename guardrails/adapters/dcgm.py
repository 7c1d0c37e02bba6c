"""Per-GPU activity on the on-prem core: DCGM through its Prometheus exporter (dcgm-exporter),
read with Prometheus's HTTP API (``GET/POST /api/v1/query_range``, Prometheus docs "HTTP API").

Which metric: ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (a ratio 0..1 of time the graphics engine was
busy; the profiling field, Volta and later datacenter GPUs) where a GPU reports it,
``DCGM_FI_DEV_GPU_UTIL`` (percent; every GPU) otherwise. Both come as percent from here.

Keyed by ``(host, gpu index)``: the exporter labels every GPU series ``gpu="<index>"`` and, unless
started with ``--no-hostname``, the host. The label is ``hostname`` since dcgm-exporter's
"Rename Hostname label to hostname" (#655, 2026) and ``Hostname`` before it; both are read.

Missing data is never read as zero: a GPU without a series simply has no key here, and the
caller counts it blind.

**Host names.** The exporter's host label is often the FQDN, or otherwise not the Slurm node's
name. :func:`node_activity` keys the data by Slurm node: an exporter host matches the node of
its own name, else the node of its short name (``core1.lab.example`` -> ``core1``), unless
``host_map`` (exporter host -> node) says otherwise. Where two exporter hosts match one node
(or one host two nodes) nothing is guessed: that node is reported in ``Activity.unmapped`` and
its GPUs are blind.

**HPC job mapping.** An exporter started with ``--hpc-job-mapping-dir`` copies each series of a
GPU once per job named in that GPU's mapping file, with an ``hpc_job`` label
(internal/pkg/transformation/hpc.go). Those labels are kept per GPU (``Activity.hpc_jobs``) so
the rule can refuse to judge a job when the exporter names another job on its GPUs.

    >>> # prom = Prometheus("http://prometheus:9090")
    >>> # acts = gpu_activity(prom, {"dgx-01"}, start, end, step_s=60)
    >>> # acts[("dgx-01", 3)].values   # percent
"""

from __future__ import annotations

import http.client
import json
import math
import re
import socket
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from guardrails.model import Sample, Series

GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # ratio 0..1
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent
# dcgm-exporter's host label: ``hostname`` from #655 on, ``Hostname`` before.
HOST_LABELS = ("hostname", "Hostname")
# The label dcgm-exporter's HPC job mapping adds (internal/pkg/transformation/const.go).
HPC_JOB_LABEL = "hpc_job"
# Prometheus refuses a range query of more than 11,000 points per series ("exceeded maximum
# resolution of 11,000 points per timeseries"); stay under it by widening the step.
MAX_POINTS = 10_000

GpuKey = tuple[str, int]  # (host, gpu index)


class PrometheusError(RuntimeError):
    """Prometheus unreachable, not JSON, or an error status; the message is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split())[:400])


@dataclass(frozen=True)
class Prometheus:
    """A Prometheus server's HTTP API at ``url`` (e.g. ``http://prometheus:9090``)."""

    url: str
    # The whole answer's deadline, not one socket read's: a server that sends its headers and
    # then a byte a second is cut off here (core_idle.prometheus_timeout_s).
    timeout_s: float = 30.0
    # The largest answer read: a range query over a big fleet can come back as hundreds of MB,
    # which the daemon must not hold (core_idle.prometheus_max_mib).
    max_bytes: int = 64 * 2**20

    def _post(self, where: str, form: bytes) -> bytes:
        """POST ``form`` to ``where``; the body, read within ``timeout_s`` in all and at most
        ``max_bytes`` long. Every failure is one PrometheusError line."""
        u = urllib.parse.urlsplit(where)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise PrometheusError(
                f"Prometheus {where}: not an http(s) URL; check core_idle.prometheus_url"
            )
        deadline = time.monotonic() + self.timeout_s
        conn_cls = (
            http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        )
        conn = conn_cls(u.hostname, u.port, timeout=self.timeout_s)
        path = u.path + (f"?{u.query}" if u.query else "")
        try:
            conn.request(
                "POST", path, body=form,
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )  # fmt: skip
            resp = conn.getresponse()
            chunks: list[bytes] = []
            size = 0
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PrometheusError(
                        f"Prometheus {where}: no complete answer within {self.timeout_s:g}s "
                        f"({size} bytes so far); check the server or raise "
                        "core_idle.prometheus_timeout_s"
                    )
                if conn.sock is not None:
                    conn.sock.settimeout(left)
                chunk = resp.read1(1 << 16)
                if not chunk:
                    break
                size += len(chunk)
                if size > self.max_bytes:
                    raise PrometheusError(
                        f"Prometheus {where}: answer over {self.max_bytes / 2**20:g} MiB; "
                        "narrow core_idle (fewer hosts per query, a coarser step) or raise "
                        "core_idle.prometheus_max_mib"
                    )
                chunks.append(chunk)
            body = b"".join(chunks)
            status = resp.status
        except PrometheusError:
            raise
        except (OSError, http.client.HTTPException) as exc:
            if isinstance(exc, TimeoutError | socket.timeout) and time.monotonic() >= deadline:
                raise PrometheusError(
                    f"Prometheus {where}: no complete answer within {self.timeout_s:g}s; "
                    "check the server or raise core_idle.prometheus_timeout_s"
                ) from None
            why = getattr(exc, "strerror", None) or type(exc).__name__
            raise PrometheusError(
                f"Prometheus {where} unreachable ({why}); check core_idle.prometheus_url"
            ) from None
        finally:
            conn.close()
        if status >= 400:
            # 400/422/503 carry the API's JSON error body; say what it says.
            try:
                err = json.loads(body)
                detail = f"{err.get('errorType', '')}: {err.get('error', '')}"
            except (ValueError, AttributeError):
                detail = body[:200].decode("utf-8", "replace")
            raise PrometheusError(f"Prometheus {where}: HTTP {status} {detail}")
        return body

    def query_range(
        self, query: str, start: datetime, end: datetime, step_s: float
    ) -> list[dict[str, Any]]:
        """The ``result`` of a range query (``resultType`` matrix): one ``{"metric": labels,
        "values": [[unix seconds, "value"], ...]}`` per series. Sent as a form POST, which the
        API accepts for every query endpoint, so a long host filter never outgrows a URL."""
        form = urllib.parse.urlencode(
            {
                "query": query,
                "start": f"{start.timestamp():.3f}",
                "end": f"{end.timestamp():.3f}",
                "step": f"{step_s:g}",
            }
        ).encode()
        where = f"{self.url.rstrip('/')}/api/v1/query_range"
        body = self._post(where, form)
        try:
            doc = json.loads(body)
        except ValueError:
            raise PrometheusError(
                f"Prometheus {where}: answer is not JSON (is the URL a Prometheus server?)"
            ) from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            err = doc.get("error", "no status") if isinstance(doc, dict) else "not an object"
            raise PrometheusError(f"Prometheus {where}: status error: {err}")
        data = doc.get("data")
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            raise PrometheusError(f"Prometheus {where}: expected a matrix result")
        result = data.get("result")
        if not isinstance(result, list):
            raise PrometheusError(f"Prometheus {where}: result is not a list")
        return result


def _regex_alternatives(names: set[str]) -> str:
    """An RE2 alternation matching exactly ``names`` (Prometheus anchors label regexes)."""
    return "|".join(re.escape(n) for n in sorted(names))


def selector(metric: str, hosts: set[str] | None) -> str:
    """PromQL for ``metric`` on ``hosts`` under either host label (None: every host).

    >>> selector("DCGM_FI_DEV_GPU_UTIL", {"core1"})
    'DCGM_FI_DEV_GPU_UTIL{hostname=~"core1"} or DCGM_FI_DEV_GPU_UTIL{Hostname=~"core1"}'
    """
    if hosts is None:
        return metric
    alt = _regex_alternatives(hosts).replace("\\", "\\\\").replace('"', '\\"')
    return " or ".join(f'{metric}{{{label}=~"{alt}"}}' for label in HOST_LABELS)


def short_name(host: str) -> str:
    """The host name without its domain: ``core1.lab.example`` -> ``core1``."""
    return host.split(".", 1)[0]


def node_selector(metric: str, nodes: set[str], host_map: Mapping[str, str]) -> str:
    """PromQL for ``metric`` on the exporter hosts that may be these Slurm nodes: each node's
    short name with or without a domain, and the ``host_map`` hosts mapped to one of them.

    >>> print(node_selector("DCGM_FI_DEV_GPU_UTIL", {"core1"}, {}).split(" or ")[0])
    DCGM_FI_DEV_GPU_UTIL{hostname=~"core1(\\\\..+)?"}
    """
    alts = {re.escape(short_name(n)) + r"(\..+)?" for n in nodes}
    alts |= {re.escape(h) for h, n in host_map.items() if n in nodes}
    alt = "|".join(sorted(alts)).replace("\\", "\\\\").replace('"', '\\"')
    return " or ".join(f'{metric}{{{label}=~"{alt}"}}' for label in HOST_LABELS)


def match_hosts(
    exporter_hosts: Iterable[str], nodes: Iterable[str], host_map: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """(exporter host -> Slurm node, Slurm node -> why its GPUs are blind) (pure).

    A host in ``host_map`` is the node it names, and a node named there takes only the hosts
    mapped to it. Otherwise a host is the node of its own name, else the node(s) whose short
    name is its short name. A node matched by two hosts, or a host matching two nodes, is not
    guessed: the node goes into the second dict with the reason.

    >>> match_hosts(["core1.lab", "core2"], ["core1", "core2"], {})[0]
    {'core1.lab': 'core1', 'core2': 'core2'}
    >>> match_hosts(["core1", "core1.lab"], ["core1"], {})[1]["core1"]
    'exporter hosts core1 and core1.lab both match Slurm node core1; set core_idle.host_map'
    >>> match_hosts(["core1", "core1.lab"], ["core1"], {"core1.lab": "core1"})[0]
    {'core1.lab': 'core1'}
    """
    wanted = set(nodes)
    pinned = set(host_map.values())
    hosts_of: dict[str, set[str]] = {}
    unmapped: dict[str, str] = {}
    for host in sorted(set(exporter_hosts)):
        if host in host_map:
            cands = [host_map[host]] if host_map[host] in wanted else []
        elif host in wanted:
            cands = [] if host in pinned else [host]
        else:
            cands = sorted(
                n for n in wanted if n not in pinned and short_name(n) == short_name(host)
            )
        if len(cands) > 1:
            for n in cands:
                unmapped[n] = (
                    f"exporter host {host} matches Slurm nodes {' and '.join(cands)}; "
                    "set core_idle.host_map"
                )
            continue
        for n in cands:
            hosts_of.setdefault(n, set()).add(host)
    mapping: dict[str, str] = {}
    for node, hosts in sorted(hosts_of.items()):
        if node in unmapped:
            continue
        if len(hosts) > 1:
            unmapped[node] = (
                f"exporter hosts {' and '.join(sorted(hosts))} both match Slurm node {node}; "
                "set core_idle.host_map"
            )
            continue
        mapping[next(iter(hosts))] = node
    return mapping, unmapped


def step_for(start: datetime, end: datetime, step_s: float) -> float:
    """``step_s``, widened so a series has at most ``MAX_POINTS`` points."""
    span = max(0.0, (end - start).total_seconds())
    return max(step_s, math.ceil(span / MAX_POINTS))


def _read_series(item: dict[str, Any], scale: float) -> Series:
    s = Series()
    for pair in item.get("values") or []:
        try:
            t, v = float(pair[0]), float(pair[1])
        except (TypeError, ValueError, IndexError):
            continue
        if not math.isfinite(v) or v < 0 or v > 1e18:
            continue
        s.timestamps.append(datetime.fromtimestamp(t, UTC))
        s.values.append(v * scale)
    return s


def _merge(a: Series | None, b: Series) -> Series:
    """One GPU's points from several series: the union, the higher value where both have a
    point (copies of one reading carry the same value)."""
    if a is None:
        return b
    points = dict(zip(a.timestamps, a.values, strict=True))
    for t, v in zip(b.timestamps, b.values, strict=True):
        points[t] = max(v, points.get(t, v))
    return Series.of(Sample(t, v) for t, v in sorted(points.items()))


def parse_series(
    result: list[dict[str, Any]], scale: float
) -> tuple[dict[GpuKey, Series], dict[GpuKey, dict[str, Series]]]:
    """``(host, gpu) -> Series`` (values times ``scale``), and per GPU the points of each
    ``hpc_job`` label seen on it. A series without a host or a numeric ``gpu`` label, and a
    value that is not a finite number (NaN, the exporter's blank-value sentinels above 1e18),
    are skipped: never read as zero. Several series of one GPU (one per ``hpc_job`` sharing it,
    or one job after another; two scrape jobs) are merged."""
    out: dict[GpuKey, Series] = {}
    jobs: dict[GpuKey, dict[str, Series]] = {}
    for item in result:
        if not isinstance(item, dict):
            continue
        labels = item.get("metric") or {}
        host = next((labels[k] for k in HOST_LABELS if labels.get(k)), None)
        gpu = str(labels.get("gpu", ""))
        if not host or not gpu.isdigit():
            continue
        s = _read_series(item, scale)
        if not len(s):
            continue
        key = (str(host), int(gpu))
        out[key] = _merge(out.get(key), s)
        job = labels.get(HPC_JOB_LABEL)
        if job:
            per = jobs.setdefault(key, {})
            per[str(job)] = _merge(per.get(str(job)), s)
    return out, jobs


def parse_matrix(result: list[dict[str, Any]], scale: float) -> dict[GpuKey, Series]:
    """``(host, gpu) -> Series`` of a matrix result (see :func:`parse_series`)."""
    return parse_series(result, scale)[0]


def gpu_activity(
    prom: Prometheus,
    hosts: set[str] | None,
    start: datetime,
    end: datetime,
    *,
    step_s: float = 60.0,
) -> dict[GpuKey, Series]:
    """Each GPU's activity in percent over ``[start, end]``: ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``
    x 100 where the GPU has that series, ``DCGM_FI_DEV_GPU_UTIL`` otherwise. Raises
    ``PrometheusError`` (one line) when Prometheus cannot be read."""
    step = step_for(start, end, step_s)
    prof = parse_matrix(prom.query_range(selector(GR_ENGINE_ACTIVE, hosts), start, end, step), 100)
    util = parse_matrix(prom.query_range(selector(GPU_UTIL, hosts), start, end, step), 1)
    return {**util, **prof}


@dataclass
class Activity:
    """GPU activity keyed by Slurm node: ``series`` in percent, ``hpc_jobs`` the points of each
    ``hpc_job`` label per GPU, ``unmapped`` the nodes whose exporter host is ambiguous (and
    why; their GPUs have no series here)."""

    series: dict[GpuKey, Series] = field(default_factory=dict)
    hpc_jobs: dict[GpuKey, dict[str, Series]] = field(default_factory=dict)
    unmapped: dict[str, str] = field(default_factory=dict)


def to_nodes(
    series: dict[GpuKey, Series],
    hpc_jobs: dict[GpuKey, dict[str, Series]],
    nodes: set[str],
    host_map: Mapping[str, str],
) -> Activity:
    """Re-key exporter-host data by Slurm node (:func:`match_hosts`); pure."""
    mapping, unmapped = match_hosts({h for h, _ in series}, nodes, host_map)
    return Activity(
        {(mapping[h], i): s for (h, i), s in series.items() if h in mapping},
        {(mapping[h], i): j for (h, i), j in hpc_jobs.items() if h in mapping},
        unmapped,
    )


def node_activity(
    prom: Prometheus,
    nodes: set[str],
    start: datetime,
    end: datetime,
    *,
    step_s: float = 60.0,
    host_map: Mapping[str, str] | None = None,
) -> Activity:
    """As :func:`gpu_activity`, for Slurm ``nodes`` whatever their exporters call them."""
    host_map = host_map or {}
    step = step_for(start, end, step_s)
    prof, prof_jobs = parse_series(
        prom.query_range(node_selector(GR_ENGINE_ACTIVE, nodes, host_map), start, end, step), 100
    )
    util, util_jobs = parse_series(
        prom.query_range(node_selector(GPU_UTIL, nodes, host_map), start, end, step), 1
    )
    return to_nodes({**util, **prof}, {**util_jobs, **prof_jobs}, nodes, host_map)
