"""Validation errors as the one line a user sees, with secrets redacted.

Every product turns a bad input (stack config, guardrails config, fleet file, TCO scenario,
catalog) into one line naming the field path, what is wrong and how to fix it, and never echoes
a secret: a value under a secret-like key (``webhook_url``, ``token``, ``password``,
``api_key``...), a :class:`pydantic.SecretStr`, or a value that looks like a secret wherever it
appears (Slack webhook URLs and tokens, ``user:password@`` URLs, AWS access key ids)::

    >>> from pydantic import BaseModel, ConfigDict, ValidationError
    >>> class Slack(BaseModel):
    ...     model_config = ConfigDict(extra="forbid")
    ...     channel: str
    >>> try:
    ...     Slack.model_validate({"channel": "#ops", "webhook_url": "https://hooks.slack.com/T/B"})
    ... except ValidationError as e:
    ...     print(one_line(e, "g.yaml"))  # doctest: +NORMALIZE_WHITESPACE
    g.yaml: webhook_url: Extra inputs are not permitted (got <redacted>);
    remove it or fix its spelling

Each product keeps the framing its users know (``coreburst:clusters[0].instanceType`` for a
Pulumi stack, ``nodes.0.gpus`` for a fleet file) through the keyword arguments; the rules for
what is shown and what is redacted are the same everywhere.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, SecretBytes, SecretStr, ValidationError

REDACTED = "<redacted>"
# Keys whose values are secrets or may carry one (a URL can hold credentials or a token). A bare
# "key" is not one: tag keys and InfiniBand partition keys (pkey) are names the user must see.
_SECRET_KEY_RE = re.compile(
    r"url|token|secret|password|passwd|passphrase|webhook|credential"
    r"|(?:api|access|private|signing|auth)[_-]?key",
    re.I,
)
# Values that are secrets wherever they appear: Slack webhook URLs and tokens, URLs with
# user:password@, AWS access key ids.
_SECRET_VALUE_RE = re.compile(
    r"https?://hooks\.slack(?:-gov)?\.com/[^\s'\":]*"
    r"|\bxox[abposre]-[A-Za-z0-9-]+"
    r"|\bxapp-[A-Za-z0-9-]+"
    r"|\b[a-z][a-z0-9+.-]*://[^/\s:@'\"]+:[^/\s@'\"]+@\S*"
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    re.I,
)
# How to fix the errors whose pydantic wording says what is wrong but not what to do; the other
# kinds say what is expected already ("Input should be less than or equal to 100000").
_FIXES = {
    "extra_forbidden": "remove it or fix its spelling",
    "missing": "add it",
}
# Kinds whose message names the value already (a validator's own words) or has none.
_NAMES_VALUE = ("value_error", "assertion_error", "missing")
_PREFIXES = ("Value error, ", "Assertion failed, ")
_MAX_SHOWN = 80

PathStyle = Literal["dots", "brackets"]
ValueStyle = Literal["after", "before", "none"]


def redact(text: str) -> str:
    """``text`` with every secret-looking value replaced by ``<redacted>``.

    >>> redact("got 'https://hooks.slack.com/services/T0/B0/XYZ'")
    "got '<redacted>'"
    """
    return _SECRET_VALUE_RE.sub(REDACTED, text)


def is_secret_key(name: str) -> bool:
    """Whether a field named ``name`` holds (or may hold) a secret."""
    return bool(_SECRET_KEY_RE.search(name))


def field_path(loc: Iterable[str | int], style: PathStyle = "dots") -> str:
    """``("clusters", 0, "instanceType")`` as ``clusters.0.instanceType`` (dots) or
    ``clusters[0].instanceType`` (brackets)."""
    if style == "dots":
        return ".".join(str(p) for p in loc)
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def secret_fields(model: type[BaseModel]) -> frozenset[str]:
    """Names (and aliases) of the fields of ``model`` and the models nested in it that are
    typed :class:`~pydantic.SecretStr` or :class:`~pydantic.SecretBytes`."""
    found: set[str] = set()
    seen: set[type[BaseModel]] = set()

    def walk(cls: type[BaseModel]) -> None:
        if cls in seen:
            return
        seen.add(cls)
        for name, info in cls.model_fields.items():
            for t in _types_in(info.annotation):
                if isinstance(t, type) and issubclass(t, SecretStr | SecretBytes):
                    found.update(n for n in (name, info.alias) if n)
                elif isinstance(t, type) and issubclass(t, BaseModel):
                    walk(t)

    walk(model)
    return frozenset(found)


def _types_in(annotation: Any) -> Iterable[Any]:
    yield annotation
    for arg in typing.get_args(annotation):
        if isinstance(arg, type | types.UnionType) or typing.get_origin(arg) is not None:
            yield from _types_in(arg)


@dataclass(frozen=True)
class Problem:
    """The first error of a :class:`~pydantic.ValidationError`, ready to print.

    ``message`` and ``got`` are redacted already; ``got`` is the rejected value's repr
    (shortened), or None when there is nothing useful to show (a whole section, a missing key,
    or a message that quotes it already)."""

    loc: tuple[str | int, ...]
    kind: str
    message: str
    got: str | None
    secret: bool
    more: int

    def path(self, style: PathStyle = "dots") -> str:
        return field_path(self.loc, style)

    @property
    def fix(self) -> str | None:
        return _FIXES.get(self.kind)


def first_problem(exc: ValidationError, *, secrets: Iterable[str] = ()) -> Problem:
    """The first error of ``exc``; ``secrets`` names more fields whose values are secret (see
    :func:`secret_fields`)."""
    errors = exc.errors()
    err = errors[0]
    loc = tuple(err["loc"])
    extra = set(secrets)
    raw = err.get("input")
    secret = (
        any(isinstance(p, str) and (is_secret_key(p) or p in extra) for p in loc)
        or isinstance(raw, SecretStr | SecretBytes)
        or (isinstance(raw, str) and bool(_SECRET_VALUE_RE.search(raw)))
    )
    message = str(err["msg"])
    for prefix in _PREFIXES:
        message = message.removeprefix(prefix)
    if secret and isinstance(raw, str) and raw:
        message = message.replace(repr(raw), REDACTED).replace(raw, REDACTED)
    got: str | None
    if isinstance(raw, dict | list | tuple | timedelta) or raw is None or "input" not in err:
        got = None  # a whole section, or nothing was given
    elif secret:
        got = REDACTED
    elif repr(raw) in message:
        got = None  # the message quotes it already
    else:
        text = repr(raw)
        got = text[:_MAX_SHOWN] + "..." if len(text) > _MAX_SHOWN else text
    return Problem(loc, err["type"], redact(message), got, secret, len(errors) - 1)


def one_line(
    exc: ValidationError,
    origin: str | None = None,
    *,
    root: str = "(top level)",
    path: PathStyle = "dots",
    value: ValueStyle = "after",
    more: bool = True,
    fixes: bool = True,
    messages: Mapping[str, str] | None = None,
    secrets: Iterable[str] = (),
    sep: str = ": ",
) -> str:
    """``exc`` as one line: ``origin: field.path: what is wrong (got 'value'); how to fix it``.

    - ``root``: the path of an error about the whole document ("" leaves it out);
    - ``path``: list indexes as ``.0`` (dots) or ``[0]`` (brackets);
    - ``value``: the rejected value after the message, before it (``'x' is not allowed: ...``)
      or not at all;
    - ``more``: count the further errors; ``fixes``: add the fix where the wording lacks one;
    - ``messages``: wording per error kind, used as it is (``{"extra_forbidden": "..."}``);
    - ``secrets``: more secret field names (:func:`secret_fields`);
    - ``sep``: joins ``origin`` and the path (``coreburst:clusters[0]``).
    """
    p = first_problem(exc, secrets=secrets)
    if messages and p.kind in messages:
        what = messages[p.kind]  # the caller's own words, as they are
    elif value == "before" and p.got is not None and p.kind not in _NAMES_VALUE:
        what = (
            f"{p.got} is not allowed: {p.message}"
            if p.kind.startswith("literal_error") or p.kind == "enum"
            else f"{p.got}: {p.message}"
        )
    else:
        what = p.message
        if value == "after" and p.got is not None:
            what = f"{what} (got {p.got})"
    if fixes and p.fix and not (messages and p.kind in messages):
        what = f"{what}; {p.fix}"
    if more and p.more:
        what = f"{what} (+{p.more} more)"
    where = p.path(path) or root
    head = where
    if origin is not None:
        head = f"{origin}{sep}{where}" if where else origin
    return redact(" ".join(f"{head}: {what}".split()))
