"""Read a user's text file: UTF-8 or one clear line saying why not (never a traceback).

Every file coreburst reads (stack files, preview JSON, policy config, demand CSV, TCO scenarios,
fleet files and inventories, the guardrails config and its Slack webhook file, the catalog) goes
through :func:`read_text`; ``tests/unit/test_hostile_inputs.py`` fails when a new reader does not.

    >>> read_text(Path("Pulumi.dev.yaml"), "stack file", StackConfigError)  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

# A file that starts with one of these was saved as UTF-16/32 (PowerShell 5's `>` writes
# UTF-16 LE): say so rather than pointing at byte 0.
_WIDE_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


class TextFileError(ValueError):
    """A file cannot be read as UTF-8 text; the message is one line meant for the user."""


def read_text(path: Path, what: str, error: type[Exception] = TextFileError) -> str:
    """The file's text, decoded as UTF-8 (a leading UTF-8 byte-order mark is dropped).

    Raises ``error`` with one line naming the file, what is wrong and how to fix it: missing,
    a directory, unreadable, or not UTF-8 (the message gives the byte offset and line, never
    the bytes themselves, since the file may hold a secret such as a webhook URL).
    """
    try:
        data = Path(path).read_bytes()
    except IsADirectoryError:
        raise error(f"cannot read {what} {path}: it is a directory; give the file itself") from None
    except FileNotFoundError:
        raise error(f"cannot read {what} {path}: no such file; check the path") from None
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    for bom, name in _WIDE_BOMS:
        if data.startswith(bom):
            raise error(f"{path}: {what} is {name}, not UTF-8; save it as UTF-8")
    skip = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    try:
        return data[skip:].decode("utf-8")
    except UnicodeDecodeError as exc:
        at = skip + exc.start
        line = data.count(b"\n", 0, at) + 1
        raise error(
            f"{path}: not UTF-8 at byte {at} (line {line}); save the {what} as UTF-8"
        ) from None
