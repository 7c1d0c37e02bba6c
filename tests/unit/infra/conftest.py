from __future__ import annotations

import copy
from typing import Any

import pytest

from infra.offline import Evaluation, evaluate_config, evaluate_stack, load_stack_yaml


@pytest.fixture(scope="session")
def dev() -> Evaluation:
    return evaluate_stack("dev")


@pytest.fixture(scope="session")
def prod() -> Evaluation:
    return evaluate_stack("prod")


@pytest.fixture
def dev_config() -> dict[str, Any]:
    """A fresh, mutable copy of the dev stack's config map."""
    return copy.deepcopy(load_stack_yaml("dev"))


@pytest.fixture
def prod_config() -> dict[str, Any]:
    return copy.deepcopy(load_stack_yaml("prod"))


__all__ = ["evaluate_config"]
