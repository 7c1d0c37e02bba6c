"""moto in process: the environment a test sets before it, and moto's DynamoDB made atomic per
request for tests that race threads on it."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from moto.core.botocore_stubber import BotocoreStubber


def fake_aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto in process: no endpoint or profile from the machine, test credentials."""
    for var in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


def atomic_moto_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """One lock per emulated request (see ``open_store`` in tests/unit/conftest.py), for any
    test that races threads on moto's in-process DynamoDB."""
    request_lock = threading.Lock()
    unlocked = BotocoreStubber.process_request

    def atomic(self: BotocoreStubber, req: Any) -> Any:
        with request_lock:
            return unlocked(self, req)

    monkeypatch.setattr(BotocoreStubber, "process_request", atomic)
