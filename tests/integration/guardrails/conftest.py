"""Loopback fixtures: one moto server process per session (reset per test) and a webhook
receiver per test. Real HTTP both ways; nothing leaves 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from coreburst.sandbox.clocks import FakeClock
from coreburst.sandbox.emulator import MotoProcess, WebhookReceiver, fake_session
from guardrails.adapters.aws import Aws
from guardrails.config import GuardrailsConfig
from guardrails.configfile import parse_config
from guardrails.daemon import Daemon
from guardrails.stores.dynamodb import create_table
from guardrails.stores.sqlite import State
from tests.helpers.guardrails_lambda import LambdaStack, lambda_config
from tests.helpers.guardrails_loopback import config_text


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoProcess]:
    m = MotoProcess().start()
    yield m
    m.stop()


@pytest.fixture
def moto(moto_server: MotoProcess) -> MotoProcess:
    moto_server.reset()
    return moto_server


@pytest.fixture
def hook() -> Iterator[WebhookReceiver]:
    h = WebhookReceiver().start()
    yield h
    h.stop()


@pytest.fixture
def t0() -> datetime:
    # Two hours in the past, on a minute, and never the first day of a month (so Cost
    # Explorer has complete days to answer for).
    t = (datetime.now(UTC) - timedelta(hours=2)).replace(second=0, microsecond=0)
    if t.day == 1:
        t = t.replace(day=2)
    return t


class Harness:
    def __init__(self, cfg: GuardrailsConfig, clock: FakeClock, hook: WebhookReceiver) -> None:
        self.cfg = cfg
        self.clock = clock
        self.aws = Aws(cfg.aws, session=fake_session())
        self.state = State(cfg.state.path)
        self.daemon = Daemon(cfg, self.aws, self.state, clock=clock, webhook_url=hook.url)

    def client(self, service: str, region: str = "us-east-1") -> Any:
        return self.aws.client(service, region)

    def close(self) -> None:
        self.daemon.close()
        self.state.close()


@pytest.fixture
def harness(
    moto: MotoProcess, hook: WebhookReceiver, tmp_path: Path, t0: datetime
) -> Iterator[Any]:
    made: list[Harness] = []

    def make(extra: str = "") -> Harness:
        cfg = parse_config(config_text(moto.url, tmp_path, extra), "<test>")
        h = Harness(cfg, FakeClock(t0), hook)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


@pytest.fixture
def lambda_stack(
    moto: Any, hook: WebhookReceiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., LambdaStack]:
    def deploy(**config: Any) -> LambdaStack:
        env = {
            "AWS_ENDPOINT_URL": moto.url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        table = create_table(boto3.resource("dynamodb"), "guardrails-state")
        secret = boto3.client("secretsmanager").create_secret(
            Name="slack-webhook", SecretString=hook.url
        )["ARN"]
        sns, sqs = boto3.client("sns"), boto3.client("sqs")
        topic = sns.create_topic(Name="budget-alerts")["TopicArn"]
        queue = sqs.create_queue(QueueName="budget-events")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
        fn_env = {
            "COREBURST_CONFIG_JSON": json.dumps(lambda_config(moto.url, tmp_path, **config)),
            "COREBURST_STATE_TABLE": "guardrails-state",
            "COREBURST_SLACK_WEBHOOK_SECRET_ARN": secret,
            "COREBURST_BUDGET_QUEUE_URL": queue,
        }
        for k, v in fn_env.items():
            monkeypatch.setenv(k, v)
        return LambdaStack(moto.url, table, queue, topic, {**env, **fn_env})

    return deploy
