"""What every guardrails config model is built from, shared by the daemon's settings
(``guardrails.config``) and the rules' params (each rule's own module): the strict base model,
durations (``30m``, ``1h30m``, ``2d`` or seconds) with their allowed range (``Between``), the
AWS region type, and ``ConfigError``, the one-line error a user sees.

    >>> from guardrails.configtypes import format_duration, parse_duration
    >>> format_duration(parse_duration("90m"))
    '1h30m'
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, GetCoreSchemaHandler
from pydantic_core import core_schema

from coreburst.common.errors import redact
from guardrails.regions import aws_region

# -- secrets never reach a message ----------------------------------------------------------
# The rules (secret-like keys, secret-looking values) live in coreburst.common.errors (redact,
# one_line).


class ConfigError(ValueError):
    """A configuration the daemon refuses to run with; the message is one line for the user,
    with anything that looks like a secret redacted (it goes to terminals and logs)."""

    def __init__(self, message: str) -> None:
        super().__init__(redact(" ".join(str(message).split())))


# -- durations ------------------------------------------------------------------------------
_DURATION_RE = re.compile(
    r"^\s*(?:(\d+)d)?\s*(?:(\d+)h)?\s*(?:(\d+)m)?\s*(?:(\d+)s)?\s*$", re.ASCII
)
_SECONDS_RE = re.compile(r"^\s*\d{1,12}(?:\.\d{1,9})?\s*$", re.ASCII)
# timedelta's own limit is 999999999 days; anything near it is a typo, not a setting.
_DURATION_CAP_S = 10 * 366 * 86400


def parse_duration(value: Any) -> Any:
    """Accept "30m", "1h30m", "2d", "45s" or a number of seconds."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value) or abs(value) > _DURATION_CAP_S:
            raise ValueError(f"duration out of range: {value!r} (use e.g. 45s, 30m, 1h30m, 2d)")
        return timedelta(seconds=value)
    if isinstance(value, str) and _SECONDS_RE.match(value):
        return parse_duration(float(value))  # an environment value: a number of seconds
    if isinstance(value, str):
        m = _DURATION_RE.match(value)
        if m and any(m.groups()):
            d, h, mi, s = (int(g) if g else 0 for g in m.groups())
            if d * 86400 + h * 3600 + mi * 60 + s > _DURATION_CAP_S:
                raise ValueError(f"duration out of range: {value!r} (at most 3660d)")
            return timedelta(days=d, hours=h, minutes=mi, seconds=s)
    raise ValueError(f"not a duration: {value!r} (use e.g. 45s, 30m, 1h30m, 2d)")


def format_duration(td: timedelta) -> str:
    """The shortest ``1d2h3m4s`` form (what the config accepts back)."""
    total = int(td.total_seconds())
    if total < 0:
        return "-" + format_duration(-td)
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        n, total = divmod(total, size)
        if n:
            out += f"{n}{unit}"
    return out or "0s"


@dataclass(frozen=True)
class Between:
    """A duration field's allowed range (inclusive), as ``Annotated[timedelta, Between(...)]``:
    it parses "30m"-style values and refuses anything outside ``[low, high]``. Every duration
    in the config has one (tests walk the models to make sure)."""

    low: str
    high: str

    @property
    def min(self) -> timedelta:
        return parse_duration(self.low)

    @property
    def max(self) -> timedelta:
        return parse_duration(self.high)

    def describe(self) -> str:
        return f"{self.low} to {self.high}"

    def _check(self, value: timedelta) -> timedelta:
        if not self.min <= value <= self.max:
            raise ValueError(f"{format_duration(value)} is out of range; allowed {self.describe()}")
        return value

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_before_validator_function(
            parse_duration,
            core_schema.no_info_after_validator_function(self._check, handler(source)),
        )


class StrictModel(BaseModel):
    """A config section: unknown keys are refused (a typo is an error, not a default), and a
    parsed section is frozen."""

    # A field's docstring is its description (docs/reference/config.md is generated from them).
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


AwsRegion = Annotated[str, AfterValidator(aws_region)]
