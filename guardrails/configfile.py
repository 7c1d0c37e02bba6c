"""The whole guardrails configuration: the daemon's settings (``guardrails.config``) plus one
section per config section a registered rule declares (``guardrails.rules.REGISTRY``), read
from YAML and the environment. A new rule adds its section by registering: neither this module
nor ``guardrails.config`` lists the rules.

    >>> from guardrails.configfile import parse_config
    >>> cfg = parse_config("regions: [us-east-1]\\nidle: {window: 30m}")
    >>> cfg.idle.window.total_seconds()
    1800.0

Nothing the registry imports may import this module at import time: the model is built once
the registry is complete.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from coreburst.common.cloudwatch_cost import Cadence
from coreburst.common.textio import read_text
from guardrails.config import ConfigError, assemble, read_config
from guardrails.rules import REGISTRY

if TYPE_CHECKING:
    from guardrails.config import GuardrailsConfig
else:
    # The daemon's settings and every registered rule's sections (what parse_config returns).
    GuardrailsConfig = assemble(REGISTRY.values())

# The names ``rules:`` may list: the registered rules.
RULE_NAMES = tuple(REGISTRY)


def parse_config(text: str, origin: str = "<config>") -> GuardrailsConfig:
    """``text`` (YAML; empty: the defaults) as the whole configuration, the environment's
    ``COREBURST_*`` overrides applied, then each rule's own checks (``Rule.checks``, in
    registry order); every error is one ``ConfigError`` line that names ``origin``."""
    cfg = read_config(GuardrailsConfig, text, origin)
    for rule in REGISTRY.values():
        for check in rule.checks:
            check(cfg, origin)
    return cfg


def load_config(path: Path | None) -> GuardrailsConfig:
    if path is None:
        return parse_config("", "<defaults>")
    text = read_text(path, "config", ConfigError)
    return parse_config(text, str(path))


def cloudwatch_cadence(cfg: GuardrailsConfig) -> Cadence:
    """How often a daemon with ``cfg`` reads CloudWatch (what ``coreburst.common.cloudwatch_cost``
    prices): the idle rule's schedule and the egress rule's reads, if it is on."""
    idle = cfg.idle
    return Cadence(
        idle.every.total_seconds(),
        cfg.egress.every.total_seconds() if cfg.egress.enabled else None,
        window_s=idle.window.total_seconds(),
        publish_delay_s=idle.publish_delay.total_seconds(),
        period_s=idle.period.total_seconds(),
        partial_idle=idle.report_partial_idle,
    )
