"""The judge recipe: what built the `smollm2` judge (``service/reflectrm/artifacts/smollm2``).

In order: ``split`` holds out whole prompts of the training pool; ``sft`` (``reflectrm train
judge``) teaches the output format with LoRA, every pair in both orders; ``verdict_layer``
(``reflectrm train verdict``) fits an added decoder layer on that run's states; ``ship``
(``reflectrm train ship-judge``) writes the artifact and its manifest. ``heldout`` writes the
held-out pairs for ``reflectrm eval``. What the steps share: ``items`` (the training
items and their tokens), ``model`` (the run's model as the steps after ``sft`` read it, and the
precision they compute in) and ``figures`` (the figures of a set of verdicts).
"""
