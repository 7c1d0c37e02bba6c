"""Rich consoles made for people wherever the output goes.

On a terminal Rich wraps at its width. Off one (a pipe, ``| tee``, a CI log, slurmctld's
programs) Rich assumes 80 columns and breaks lines mid-sentence; here a line is never broken
(``soft_wrap``) and tables get room to lay out on one line each.

    >>> import io
    >>> c = console(file=io.StringIO())
    >>> c.print("x" * 120); len(c.file.getvalue().splitlines())
    1
"""

from __future__ import annotations

import os
import sys
from typing import IO

from rich.console import Console

# Width tables may use off a terminal: wide enough for every table this product prints.
PIPE_WIDTH = 240


def console(*, stderr: bool = False, file: IO[str] | None = None) -> Console:
    """A console that never hard-wraps: the terminal's width on a TTY; off one PIPE_WIDTH, or
    ``COLUMNS`` when that is wider."""
    stream = file or (sys.stderr if stderr else sys.stdout)
    tty = hasattr(stream, "isatty") and stream.isatty()
    cols = os.environ.get("COLUMNS", "")
    # COLUMNS may only widen it: CI runners and make set it to 80 with no terminal behind.
    width = None if tty else max(PIPE_WIDTH, int(cols) if cols.isdigit() else 0)
    return Console(stderr=stderr, file=file, soft_wrap=True, width=width)
