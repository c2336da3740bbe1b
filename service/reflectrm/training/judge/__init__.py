"""The judge recipe: what built the served default judge (``service/reflectrm/artifacts/judge``).

In order: ``split`` holds out whole prompts of the training pool; ``sft`` (``reflectrm train
judge``) teaches the output format with LoRA, every pair in both orders; ``verdict_layer``
(``reflectrm train verdict``) fits an added decoder layer on that run's states; ``ship``
(``reflectrm train ship-judge``) writes the artifact and its manifest. ``heldout`` writes the
held-out pairs for ``reflectrm eval``. ``probe`` (``reflectrm train probe``) is a linear
verdict head that was tried and not shipped.
"""
