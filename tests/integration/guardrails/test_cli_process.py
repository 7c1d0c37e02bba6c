"""The CLI as a user runs it, in processes of its own: SIGKILL mid-cycle and restart, bad
configs, an unreachable endpoint. The processes are forked by a warm server
(tests/cli_runner.py); the last tests hold it to what a plain subprocess does."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from coreburst.sandbox.emulator import (
    FleetNode,
    MotoProcess,
    WebhookReceiver,
    fake_session,
    free_port,
    launch,
    publish,
)
from tests import cli_runner
from tests.helpers.guardrails_loopback import METRICS, config_text
from tests.helpers.guardrails_processes import env

pytestmark = pytest.mark.integration


def once(cfg: Path, e: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return cli_runner.run(
        [sys.executable, "-m", "coreburst.sandbox.guardrails", "once", "--config", str(cfg)],
        env=e,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def killed_at(cfg: Path, e: dict[str, str], point: str, marker: Path) -> None:
    """Run one cycle, wait until it reaches ``point``, then SIGKILL it."""
    e = {**e, "COREBURST_TEST_PAUSE_AT": f"{point}:{marker}"}
    p = cli_runner.popen(
        [sys.executable, "-m", "coreburst.sandbox.guardrails", "once", "--config", str(cfg)],
        env=e,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert p.poll() is None, p.stderr.read() if p.stderr else ""
        assert time.monotonic() < deadline, "never reached the pause point"
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=10)
    marker.unlink()


def audit(tmp: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (tmp / "audit.jsonl").read_text().splitlines()]


def test_sigkill_mid_cycle_neither_repeats_an_action_nor_loses_an_alert(
    moto: MotoProcess, hook: WebhookReceiver, tmp_path: Path, t0: datetime
) -> None:
    cfg = tmp_path / "g.yaml"
    cfg.write_text(config_text(moto.url, tmp_path))
    sess = fake_session()
    ec2 = sess.client("ec2", region_name="us-east-1", endpoint_url=moto.url)
    cw = sess.client("cloudwatch", region_name="us-east-1", endpoint_url=moto.url)
    node = FleetNode(
        launch(ec2, "p5.48xlarge", {"owner": "alice"})[0], "us-east-1", "nvidia", 8, "idle"
    )
    publish(
        {"us-east-1": cw},
        [node],
        t0 - timedelta(minutes=40),
        t0 + timedelta(minutes=30),
        metric_defs=METRICS,
    )
    marker = tmp_path / "paused"

    # 1. killed right after the mark alert was stored, before it was sent
    killed_at(cfg, env(t0, hook), "after-enqueue", marker)
    assert hook.posts == []
    r = once(cfg, env(t0 + timedelta(minutes=1), hook))
    assert r.returncode == 0, r.stderr
    assert [t for t in hook.titles() if "will be stopped" in t] == [
        f"Idle node {node.instance_id} will be stopped"
    ]

    # 2. after the grace: killed after StopInstances returned, before it was recorded done
    t_act = t0 + timedelta(minutes=21)
    killed_at(cfg, env(t_act, hook), "after-action", marker)
    state = ec2.describe_instances(InstanceIds=[node.instance_id])
    assert state["Reservations"][0]["Instances"][0]["State"]["Name"] in ("stopping", "stopped")
    r = once(cfg, env(t_act + timedelta(minutes=1), hook))
    assert r.returncode == 0, r.stderr
    events = audit(tmp_path)
    executed = [e for e in events if e["event"] == "action.executed"]
    assert executed == []  # the killed run never got to record it...
    confirmed = [e for e in events if e["event"] == "action.confirmed-after-restart"]
    assert [e["instance_id"] for e in confirmed] == [node.instance_id]  # ...the restart did
    # a third run does nothing more
    r = once(cfg, env(t_act + timedelta(minutes=5), hook))
    assert r.returncode == 0, r.stderr
    assert not [e for e in audit(tmp_path) if e["event"] == "action.executed"]
    titles = hook.titles()
    assert titles.count(f"Idle node {node.instance_id} stopped") == 1
    assert len(titles) == len(set(titles))


def test_sigkill_after_intent_acts_once_after_restart(
    moto: MotoProcess, hook: WebhookReceiver, tmp_path: Path, t0: datetime
) -> None:
    cfg = tmp_path / "g.yaml"
    cfg.write_text(config_text(moto.url, tmp_path))
    sess = fake_session()
    ec2 = sess.client("ec2", region_name="us-east-1", endpoint_url=moto.url)
    cw = sess.client("cloudwatch", region_name="us-east-1", endpoint_url=moto.url)
    node = FleetNode(launch(ec2, "p5.48xlarge", {}, spot=True)[0], "us-east-1", "nvidia", 8, "idle")
    publish(
        {"us-east-1": cw},
        [node],
        t0 - timedelta(minutes=40),
        t0 + timedelta(minutes=30),
        metric_defs=METRICS,
    )
    assert once(cfg, env(t0, hook)).returncode == 0
    marker = tmp_path / "paused"
    killed_at(cfg, env(t0 + timedelta(minutes=21), hook), "after-intent", marker)
    st = ec2.describe_instances(InstanceIds=[node.instance_id])
    assert st["Reservations"][0]["Instances"][0]["State"]["Name"] == "running"
    r = once(cfg, env(t0 + timedelta(minutes=22), hook))
    assert r.returncode == 0, r.stderr
    kinds = [e["event"] for e in audit(tmp_path) if e["event"].startswith("action.")]
    assert kinds == ["action.intent-dropped", "action.executed"]
    assert hook.titles().count(f"Idle node {node.instance_id} terminated") == 1


@pytest.mark.parametrize(
    ("yaml_text", "needle"),
    [
        ("idle: {window: 30 minutes}\n", "idle.window"),
        ("reclaim: {action: nuke}\n", "reclaim.action"),
        ("safety: {max_actions_per_cycle: lots}\n", "safety.max_actions_per_cycle"),
    ],
)
def test_bad_config_one_line_no_action(tmp_path: Path, yaml_text: str, needle: str) -> None:
    cfg = tmp_path / "g.yaml"
    cfg.write_text(yaml_text)
    r = cli_runner.run(
        [sys.executable, "-m", "coreburst.sandbox.guardrails", "once", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_unreachable_endpoint_clear_error_and_no_action(tmp_path: Path, t0: datetime) -> None:
    cfg = tmp_path / "g.yaml"
    cfg.write_text(config_text(f"http://127.0.0.1:{free_port()}", tmp_path))
    r = once(cfg, env(t0, None))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach AWS" in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert (
        not [e for e in audit(tmp_path) if e["event"].startswith("action")]
        if (tmp_path / "audit.jsonl").exists()
        else True
    )


def test_bad_cli_args(tmp_path: Path) -> None:
    r = cli_runner.run(
        [sys.executable, "-m", "coreburst.sandbox.guardrails", "explain", "not-an-id"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={
            **os.environ,
            "COREBURST_STATE__PATH": str(tmp_path / "s.db"),
            "COREBURST_STATE__AUDIT_LOG": str(tmp_path / "a.jsonl"),
        },
    )
    assert r.returncode == 2
    assert "not an instance id" in r.stderr and "Traceback" not in r.stderr


def test_status_and_explain_show_the_numbers(
    moto: MotoProcess, hook: WebhookReceiver, tmp_path: Path, t0: datetime
) -> None:
    cfg = tmp_path / "g.yaml"
    cfg.write_text(config_text(moto.url, tmp_path))
    sess = fake_session()
    ec2 = sess.client("ec2", region_name="us-east-1", endpoint_url=moto.url)
    cw = sess.client("cloudwatch", region_name="us-east-1", endpoint_url=moto.url)
    idle = FleetNode(
        launch(ec2, "p5.48xlarge", {"owner": "a"})[0], "us-east-1", "nvidia", 8, "idle"
    )
    blind = launch(ec2, "p5.48xlarge", {"owner": "b"})[0]
    publish(
        {"us-east-1": cw},
        [idle],
        t0 - timedelta(minutes=40),
        t0 + timedelta(minutes=1),
        metric_defs=METRICS,
    )
    assert once(cfg, env(t0, hook)).returncode == 0
    e = {**env(t0, hook), "COLUMNS": "200"}
    st = cli_runner.run(
        [sys.executable, "-m", "coreburst.sandbox.guardrails", "status", "--config", str(cfg)],
        env=e,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert st.returncode == 0, st.stderr
    assert idle.instance_id in st.stdout and "blind nodes 1" in st.stdout
    assert blind in st.stdout
    ex = cli_runner.run(
        [
            sys.executable,
            "-m",
            "coreburst.sandbox.guardrails",
            "explain",
            idle.instance_id,
            "--config",
            str(cfg),
        ],
        env=e,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ex.returncode == 0, ex.stderr
    assert "state: idle" in ex.stdout and "below 5%" in ex.stdout
    assert "2.0" in ex.stdout  # the per-device peak


def test_run_serves_metrics_on_the_configured_address(tmp_path: Path, t0: datetime) -> None:
    """``metrics_endpoint.address`` (here through its env override, as the container sets it)
    is where `run` listens. 127.0.0.2 is loopback too, so nothing leaves this machine, but it
    is not the old hard-wired 127.0.0.1: that one must refuse."""
    import socket
    import urllib.request

    cfg = tmp_path / "g.yaml"
    # An unreachable AWS: the cycle fails, is logged, and the loop (and endpoint) stay up.
    cfg.write_text(config_text(f"http://127.0.0.1:{free_port()}", tmp_path))
    port = free_port()
    e = env(
        t0,
        None,
        COREBURST_METRICS_ENDPOINT__ENABLED="true",
        COREBURST_METRICS_ENDPOINT__ADDRESS="127.0.0.2",
        COREBURST_METRICS_ENDPOINT__PORT=str(port),
    )
    proc = cli_runner.popen(
        [sys.executable, "-m", "coreburst.sandbox.guardrails", "run", "--config", str(cfg)],
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        body = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.2:{port}/metrics", timeout=2) as r:
                    body = r.read().decode()
                break
            except OSError:
                time.sleep(0.2)
        assert "coreburst_guardrails_cycle_seconds" in body, proc.poll()
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
    finally:
        proc.kill()
        _, err = proc.communicate(timeout=10)
    assert '"metrics.listening"' in err and '"127.0.0.2"' in err


# -- tests/cli_runner.py: a forked case is what a plain subprocess is --------------------------
GUARDRAILS = [sys.executable, "-m", "coreburst.sandbox.guardrails"]
PROBE = [sys.executable, "-m", "tests.cli_runner"]  # its probe: argv, env, stdio, fds, signals
REPO = Path(__file__).resolve().parents[3]


def _both(
    argv: list[Any], **kw: Any
) -> tuple[subprocess.CompletedProcess[bytes], subprocess.CompletedProcess[bytes]]:
    """The same command through the runner (asserted to be served, not run as a subprocess)
    and as a plain subprocess."""
    before = list(cli_runner.fallbacks)
    served = cli_runner.run(argv, capture_output=True, timeout=60, check=False, **kw)
    assert cli_runner.fallbacks == before, cli_runner.fallbacks[len(before) :]
    plain = subprocess.run(argv, capture_output=True, timeout=60, check=False, **kw)
    return served, plain


def _same(
    served: subprocess.CompletedProcess[bytes], plain: subprocess.CompletedProcess[bytes]
) -> None:
    assert (served.returncode, served.stdout, served.stderr) == (
        plain.returncode,
        plain.stdout,
        plain.stderr,
    )


def _outbox_without_id(tmp: Path) -> Path:
    """A config whose state has an outbox table without its columns: `status` fails with an
    uncaught sqlite3.OperationalError (exit 1, a traceback)."""
    cfg = tmp / "g.yaml"
    cfg.write_text(config_text(f"http://127.0.0.1:{free_port()}", tmp))
    with sqlite3.connect(tmp / "state.sqlite") as db:
        db.execute("CREATE TABLE outbox (x)")
    return cfg


RUNNER_CASES = {
    "valid config": (["check-config", "{cfg}"], "", {}),
    "refused config": (["check-config", "{cfg}"], "interval: 0s\n", {}),
    "usage error": (["no-such-command"], "", {}),
    "help": (["status", "--help"], "", {}),
    "bad test hook": (["once", "--config", "{cfg}"], "", {"COREBURST_CLOCK_SPEED": "x"}),
    "unreachable AWS": (["once", "--config", "{cfg}"], "@unreachable", {}),
    "uncaught, typer's traceback": (["status", "--config", "{cfg}"], "@outbox", {}),
    "uncaught, Python's traceback": (
        ["status", "--config", "{cfg}"],
        "@outbox",
        {"_TYPER_STANDARD_TRACEBACK": "1"},
    ),
}


@pytest.mark.parametrize("case", RUNNER_CASES)
def test_runner_cli_cases_are_what_a_subprocess_gives(
    tmp_path: Path, t0: datetime, case: str
) -> None:
    args, text, extra_env = RUNNER_CASES[case]
    if text == "@outbox":
        cfg = _outbox_without_id(tmp_path)
    elif text == "@unreachable":
        cfg = tmp_path / "g.yaml"
        cfg.write_text(config_text(f"http://127.0.0.1:{free_port()}", tmp_path))
    else:
        cfg = tmp_path / "g.yaml"
        cfg.write_text(text)
    argv = [*GUARDRAILS, *(a.format(cfg=cfg) for a in args)]
    served, plain = _both(argv, env=env(t0, None, **extra_env))
    _same(served, plain)
    if "uncaught" in case:
        assert served.returncode == 1 and b"OperationalError: no such column: id" in served.stderr
    if "Python's" in case:  # the same first frame, runpy's, as the interpreter prints it
        assert served.stderr.startswith(b'Traceback (most recent call last):\n  File "<frozen')


def test_runner_logging_to_stderr_is_what_a_subprocess_gives(tmp_path: Path, t0: datetime) -> None:
    """The daemon's JSON log lines on stderr (structlog), timestamps aside."""
    cfg = tmp_path / "g.yaml"
    cfg.write_text(config_text(f"http://127.0.0.1:{free_port()}", tmp_path))
    argv = [*GUARDRAILS, "run", "--max-cycles", "1", "--log-level", "debug", "--config", str(cfg)]
    served, plain = _both(argv, env=env(t0, None))
    stamp = re.compile(rb'"timestamp": "[^"]+"')
    assert served.returncode == plain.returncode and served.stdout == plain.stdout
    assert stamp.sub(b"T", served.stderr) == stamp.sub(b"T", plain.stderr)
    assert b'"cycle.failed"' in served.stderr


@pytest.mark.parametrize(
    "probe", ["state", "raise", "logging", "interrupt", "exit-message", "thread", "stdin"]
)
@pytest.mark.parametrize("where", ["repo", "elsewhere"])
def test_runner_process_is_what_a_subprocess_gives(tmp_path: Path, probe: str, where: str) -> None:
    """Interpreter state (argv, environment, cwd, sys.path[0], stdio, fds, signal handlers,
    __main__), an uncaught exception with its cause, stdlib logging (the last resort and a
    handler), KeyboardInterrupt (a SIGINT death), sys.exit(str), a non-daemon thread and
    atexit, stdin; run in the checkout and elsewhere (then PYTHONPATH, a start-up variable)."""
    e = {**os.environ, "PROBE_PGRP": str(os.getpgrp())}
    cwd = REPO
    if where == "elsewhere":
        e["PYTHONPATH"] = str(REPO)
        cwd = tmp_path
    kw: dict[str, Any] = {"input": b"lines\nof input\n"} if probe == "stdin" else {}
    served, plain = _both([*PROBE, probe], env=e, cwd=cwd, **kw)
    _same(served, plain)
    assert served.returncode == {"state": 0, "logging": 0, "stdin": 0, "thread": 3}.get(
        probe, -2 if probe == "interrupt" else 1
    ), served.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_runner_signals_end_a_case_as_they_end_a_subprocess(sig: signal.Signals) -> None:
    results = []
    for start in (cli_runner.popen, subprocess.Popen):
        p = start([*PROBE, "sleep"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert p.stdout is not None and p.stdout.readline() == b"ready\n"
            # in its sleep (a signal still in the print would end a different line)
            while Path(f"/proc/{p.pid}/stat").read_text().split(") ")[1][0] != "S":
                time.sleep(0.01)
            time.sleep(0.2)
            p.send_signal(sig)
            out, err = p.communicate(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        results.append((p.returncode, out, err))
    assert results[0] == results[1]
    assert results[0][0] == -sig


def test_runner_burst_cli_with_bytes_argv_in_a_c_locale(tmp_path: Path) -> None:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "PYTHON", "LANG"))}
    argv = [os.fsencode(sys.executable), b"-m", b"coreburst.burst.cli", b"slurm-conf"]
    argv += [b"-s", b"od-\xff", b"--stack-dir", os.fsencode(tmp_path)]
    served, plain = _both(argv, env={**e, "LC_ALL": "C"})
    _same(served, plain)
    assert served.returncode == 2, served.stderr
