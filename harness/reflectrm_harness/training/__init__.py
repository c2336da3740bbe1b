"""``reflectrm train``: three recipes over a small core (docs/training.md).

- ``judge/``: the recipe that built the `smollm2` judge (artifacts/smollm2): a held-out
  split, supervised LoRA training of the output format (``sft``), an added verdict layer fitted
  on that run's states (``verdict_layer``), and shipping the result with its manifest
  (``ship``); ``heldout`` writes the held-out pairs for ``reflectrm eval``. The Qwen judge
  (artifacts/qwen05b) was built by ``states`` (one states pass), ``pool`` (its split),
  ``readout`` and ``marker_layer``.
- ``grpo/``: the paper's recipe: the base model's own judgments built into preference and
  reflection items (``data``), GRPO on them (``train``), an optional format warm-up, the export
  of a servable checkpoint and a quick before/after check.
- ``margin/``: the default judge's margin weights (artifacts/default): counterfactual pairs
  (``counterfactuals``), margin mode's features of each pair on a real engine (``features``) and
  the fit of the two weights written into the judge's manifest (``fit``).
- The core: ``cli`` (``reflectrm train``, composed of each recipe's ``cli``: its commands),
  ``options`` (what the commands share) and ``overrides`` (``--set KEY=VALUE`` and the one
  builder of a recipe's settings from outside values).
"""
