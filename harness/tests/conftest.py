"""The harness's fixtures and its tests' markers (the folder's name: ``unit``); its doubles and
prerequisites are in ``support``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reflectrm.checkpoints.base import default_cache_dir, smollm2_dir
from support.prerequisites import require

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath)).resolve()
        if HERE in path.parents and path.parent.name == "unit":
            item.add_marker(pytest.mark.unit)


@pytest.fixture(scope="session")
def smol_tokenizer() -> Any:
    """SmolLM2's tokenizer and chat template (what the tiny judges are made with), from the
    folder set-up prepares."""
    from transformers import AutoTokenizer

    folder = smollm2_dir(default_cache_dir())
    require(
        (folder / "tokenizer.json").exists(),
        f"SmolLM2 is not prepared at {folder}: run `make setup`",
    )
    return AutoTokenizer.from_pretrained(folder, local_files_only=True)
