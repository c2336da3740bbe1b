"""What the unit tests of tokenization and of the judge recipe share: the default model's
tokenizer, loaded once."""

from __future__ import annotations

from typing import Any

import pytest

from reflectrm.checkpoints.base import default_cache_dir, smollm2_dir
from tests.conftest import require


@pytest.fixture(scope="session")
def smol_tokenizer() -> Any:
    """The default model's tokenizer and chat template, from the folder set-up prepares."""
    from transformers import AutoTokenizer

    folder = smollm2_dir(default_cache_dir())
    require(
        (folder / "tokenizer.json").exists(),
        f"the default model is not prepared at {folder}: run `make setup`",
    )
    return AutoTokenizer.from_pretrained(folder, local_files_only=True)
