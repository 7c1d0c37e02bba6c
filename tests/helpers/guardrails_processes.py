"""``coreburst guardrails run``/``once`` as processes of their own (forked by
tests/cli_runner.py) against a moto server and the loopback Slack receiver: their environment,
a daemon whose JSON log lines are read as they come, and an idle fleet for it to act on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO

from coreburst.sandbox.emulator import (
    FleetNode,
    MotoProcess,
    WebhookReceiver,
    fake_session,
    launch,
    publish,
)
from tests import cli_runner
from tests.helpers.guardrails_loopback import METRICS


def env(t: datetime, hook: WebhookReceiver | None, **extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("COREBURST_", "AWS_"))}
    e.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        COREBURST_TEST_HOOKS="1",  # the clock and pause hooks below (coreburst.sandbox.hooks)
        COREBURST_CLOCK_START=t.isoformat(),
        **extra,
    )
    if hook:
        e["COREBURST_SLACK_WEBHOOK_URL"] = hook.url
    return e


class Daemon:
    """`python -m coreburst.sandbox.guardrails run` (the CLI with the test hooks) in a subprocess,
    its
    stderr (JSON log lines) read as it comes."""

    def __init__(self, cfg: Path, e: dict[str, str], *args: str) -> None:
        self.proc = cli_runner.popen(
            [
                sys.executable,
                "-m",
                "coreburst.sandbox.guardrails",
                "run",
                "--config",
                str(cfg),
                *args,
            ],
            env=e,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        assert self.proc.stderr is not None
        self._reader = threading.Thread(target=self._read, args=(self.proc.stderr,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def events(self) -> list[str]:
        out = []
        for x in list(self.lines):
            try:
                out.append(json.loads(x)["event"])
            except (ValueError, KeyError, TypeError):
                continue
        return out

    def wait_for(self, event: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while event not in self.events():
            assert self.proc.poll() is None, "\n".join(self.lines)
            assert time.monotonic() < deadline, f"no {event}: " + "\n".join(self.lines)
            time.sleep(0.05)

    def finish(self, timeout: float) -> int:
        rc = self.proc.wait(timeout=timeout)
        self._reader.join(10)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def idle_fleet(moto: MotoProcess, t0: datetime, idle: int, blind: int) -> list[str]:
    sess = fake_session()
    ec2 = sess.client("ec2", region_name="us-east-1", endpoint_url=moto.url)
    cw = sess.client("cloudwatch", region_name="us-east-1", endpoint_url=moto.url)
    ids = launch(ec2, "p5.48xlarge", {"owner": "alice"}, count=idle)
    launch(ec2, "p5.48xlarge", {"owner": "bob"}, count=blind)
    publish(
        {"us-east-1": cw},
        [FleetNode(i, "us-east-1", "nvidia", 8, "idle") for i in ids],
        t0 - timedelta(minutes=40),
        t0 + timedelta(minutes=5),
        metric_defs=METRICS,
    )
    return ids
