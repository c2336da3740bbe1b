"""The judges shipped in the package, one entry each: the model setting that serves it
(``REFLECTRM_MODEL``), its artifact folder (``artifacts/<setting>``), its base model and that
model's licence, the prompt template it was trained for and the ``reflectrm train`` commands
that built it. The model settings, ``reflectrm prepare-model`` and docs/judges.md read this
register; each judge's figures are its manifest's (``ShippedJudge.manifest``).

Imports nothing of the package but the file names, so any part of it may import this."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reflectrm.checkpoints.files import ARTIFACT_MANIFEST

# Where the shipped judges' folders are, each named after the setting that serves it.
ARTIFACTS = Path(__file__).parents[1] / "artifacts"
# The model setting of the default judge.
DEFAULT_MODEL = "default"


@dataclass(frozen=True)
class ShippedJudge:
    """A judge the package ships; its manifest (``manifest.json`` in ``folder``) records the
    hashes of its files, base model and data, and its figures."""

    # The REFLECTRM_MODEL value that serves it.
    setting: str
    # Its artifact folder: a manifest, and the added weights when it has any.
    folder: Path
    # The base model's name (its manifest's ``base_model.name``).
    backbone: str
    # The base model's licence.
    licence: str
    # The prompt template version it was trained for (its manifest's ``template_version``).
    template: str
    # The ``reflectrm train`` commands that built it, in order, separated by "; ".
    recipe: str

    def manifest(self) -> dict[str, Any]:
        """Its manifest: the hashes of its files, base model and data, and its figures."""
        return dict(json.loads((self.folder / ARTIFACT_MANIFEST).read_text()))

    def commands(self) -> tuple[str, ...]:
        """The recipe's commands, in order."""
        return tuple(c.strip() for c in self.recipe.split(";") if c.strip())


_QWEN_CODER_05B = "Qwen2.5-Coder-0.5B-Instruct"

# The shipped judges by setting, the default first.
SHIPPED: dict[str, ShippedJudge] = {
    j.setting: j
    for j in (
        # Qwen2.5-Coder-0.5B-Instruct as it ships (no weights of its own), served in margin mode
        # with the two weights its manifest names, fitted on the development split and
        # counterfactual pairs built from it.
        ShippedJudge(
            setting=DEFAULT_MODEL,
            folder=ARTIFACTS / DEFAULT_MODEL,
            backbone=_QWEN_CODER_05B,
            licence="Apache-2.0",
            template="v3",
            recipe="reflectrm train pool-split; reflectrm train counterfactuals; "
            "reflectrm train margin-features; reflectrm train margin-fit",
        ),
        # An added decoder layer on the frozen Qwen2.5-Coder-0.5B-Instruct (trained on CC BY-NC
        # data among others).
        ShippedJudge(
            setting="qwen05b",
            folder=ARTIFACTS / "qwen05b",
            backbone=_QWEN_CODER_05B,
            licence="Apache-2.0",
            template="v3",
            recipe="reflectrm train states; reflectrm train pool-split; "
            "reflectrm train readouts; reflectrm train marker-layer",
        ),
        # A LoRA adapter and an added verdict layer on SmolLM2-135M-Instruct.
        ShippedJudge(
            setting="smollm2",
            folder=ARTIFACTS / "smollm2",
            backbone="SmolLM2-135M-Instruct",
            licence="Apache-2.0",
            template="v1",
            recipe="reflectrm train judge; reflectrm train verdict; reflectrm train ship-judge",
        ),
    )
}
