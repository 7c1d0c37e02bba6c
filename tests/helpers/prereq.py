"""A test that runs something real (root, a Slurm lab, MariaDB, Prometheus, a system tool) needs
it installed. On a developer's machine a missing prerequisite skips the test with the reason; on
CI (``CI=true``, as GitHub Actions and GitLab CI set it) it fails the test with the same reason,
so a CI machine that lost root or a package cannot pass without running what it should.

Usage, where the test or its fixture would have skipped::

    from tests.helpers.prereq import require

    require(missing_prerequisite())  # None: all there, the test goes on
"""

from __future__ import annotations

import os

import pytest


def require(why_missing: str | None) -> None:
    """Go on when ``why_missing`` is empty; otherwise skip with it as the reason, or fail with
    it when the environment variable ``CI`` is ``true``."""
    if not why_missing:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(
            f"{why_missing} (CI=true: a missing prerequisite fails here instead of skipping)",
            pytrace=False,
        )
    pytest.skip(why_missing)
