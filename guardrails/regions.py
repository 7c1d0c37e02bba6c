"""AWS region names, as the daemon config (guardrails) and the stack config (infra, which sits
above guardrails and installs its extra) both accept them: the whole name must match one
partition's ``regionRegex`` in botocore's bundled data (the names the SDKs resolve), in lower
case. ``re.fullmatch``, never ``re.match``: the patterns end in ``$``, which also matches
before a trailing newline. Here rather than in coreburst.common because common's install
carries no botocore.

    >>> aws_region("eu-west-2")
    'eu-west-2'
    >>> aws_region("us-east-1\\n")
    Traceback (most recent call last):
    ...
    ValueError: 'us-east-1\\n' is not an AWS region name (e.g. us-east-1, eu-west-2, us-gov-west-1; lower-case <area>-<direction>-<number> as in botocore's partitions)
"""  # noqa: E501

from __future__ import annotations

import functools
import re


@functools.cache
def region_patterns() -> tuple[re.Pattern[str], ...]:
    """Each partition's ``regionRegex``, from botocore's partitions.json (endpoints.json in
    older releases). ASCII only: Python's \\w and \\d would otherwise admit any script's
    letters and digits."""
    import botocore.loaders

    loader = botocore.loaders.Loader()
    try:
        parts = loader.load_data("partitions")["partitions"]
    except Exception:  # a botocore without partitions.json
        parts = loader.load_data("endpoints")["partitions"]
    return tuple(re.compile(p["regionRegex"], re.ASCII) for p in parts)


@functools.cache
def _partitions() -> tuple[tuple[str, re.Pattern[str]], ...]:
    import botocore.loaders

    loader = botocore.loaders.Loader()
    try:
        parts = loader.load_data("partitions")["partitions"]
    except Exception:  # a botocore without partitions.json
        parts = loader.load_data("endpoints")["partitions"]
    return tuple(
        (p.get("id") or p["partition"], re.compile(p["regionRegex"], re.ASCII)) for p in parts
    )


def partition_of(region: str) -> str:
    """The ARN partition a region belongs to (``aws``, ``aws-cn``, ``aws-us-gov``...), from the
    same botocore data; ValueError when no partition holds it.

    >>> partition_of("us-gov-west-1"), partition_of("cn-north-1"), partition_of("us-east-2")
    ('aws-us-gov', 'aws-cn', 'aws')
    """
    for name, rx in _partitions():
        if rx.fullmatch(aws_region(region)):
            return name
    raise ValueError(f"{region!r}: no AWS partition holds this region")


def aws_region(value: str) -> str:
    """``value`` when it is an AWS region name, else ValueError (one line, for a pydantic
    ``AfterValidator``)."""
    if value != value.lower() or not any(rx.fullmatch(value) for rx in region_patterns()):
        raise ValueError(
            f"{value!r} is not an AWS region name (e.g. us-east-1, eu-west-2, us-gov-west-1; "
            "lower-case <area>-<direction>-<number> as in botocore's partitions)"
        )
    return value
