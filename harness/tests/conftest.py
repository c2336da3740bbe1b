"""The harness's tests use the repository's test doubles (tests/conftest.py: a scripted engine,
judgment outputs; tests/unit/conftest.py: the default model's tokenizer) and its hooks: the
``needs`` prerequisites and the markers set by folder."""

from tests.conftest import pytest_collection_modifyitems, pytest_runtest_setup
from tests.unit.conftest import smol_tokenizer

__all__ = ["pytest_collection_modifyitems", "pytest_runtest_setup", "smol_tokenizer"]
