"""The metrics endpoint's bind address: loopback by default, every interface in the container
image, and the image's EXPOSE agrees with the port the daemon listens on.

The Containerfile is read with the Dockerfile reference's rules for the two instructions that
matter here (https://docs.docker.com/reference/dockerfile/#env: ``ENV <key>=<value> ...``,
several pairs per instruction, lines continued with a backslash; #expose: ``EXPOSE <port>``).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from guardrails.config import ConfigError
from guardrails.configfile import parse_config

CONTAINERFILE = Path(__file__).parents[3] / "guardrails" / "deploy" / "Containerfile"


def instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)  # line continuations
    out = []
    for raw in joined.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def container_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in instructions(CONTAINERFILE.read_text()):
        if word == "ENV":
            for pair in shlex.split(rest):
                k, _, v = pair.partition("=")
                env[k] = v
    return env


def test_container_listens_beyond_loopback_on_the_exposed_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exposed = [rest for word, rest in instructions(CONTAINERFILE.read_text()) if word == "EXPOSE"]
    assert exposed == ["9108"]
    env = container_env()
    assert env["COREBURST_METRICS_ENDPOINT__ADDRESS"] == "0.0.0.0"
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    # What the daemon in the image reads, with the example config mounted as the image expects.
    cfg = parse_config("metrics_endpoint: {enabled: true}")
    assert str(cfg.metrics_endpoint.address) == "0.0.0.0"
    assert str(cfg.metrics_endpoint.port) == exposed[0]


def test_default_outside_a_container_is_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COREBURST_METRICS_ENDPOINT__ADDRESS", raising=False)
    assert str(parse_config("").metrics_endpoint.address) == "127.0.0.1"
    assert str(parse_config("metrics_endpoint: {address: '::1'}").metrics_endpoint.address) == "::1"
    monkeypatch.setenv("COREBURST_METRICS_ENDPOINT__ADDRESS", "127.0.0.3")
    assert str(parse_config("").metrics_endpoint.address) == "127.0.0.3"


def test_a_bad_address_is_one_line() -> None:
    with pytest.raises(ConfigError) as e:
        parse_config("metrics_endpoint: {address: my-laptop}", "g.yaml")
    assert str(e.value).startswith("g.yaml: metrics_endpoint.address:")
    assert "\n" not in str(e.value)
