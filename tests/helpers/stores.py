"""The daemon's state stores as the ``open_store`` fixture (tests/unit/conftest.py) hands them
out."""

from __future__ import annotations

from collections.abc import Callable

from guardrails.stores.base import StateStore

StoreOpener = Callable[[str], StateStore]
