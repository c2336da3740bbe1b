"""The harness: the code that makes and measures judges, beside the serving package.

``evaluation`` is ``reflectrm eval`` (benchmark accuracy and positional consistency, group
rewards per design); ``training`` is ``reflectrm train`` (the recipe of the shipped judges and the
paper's GRPO recipe). Both reach the model through the serving package's engines and judging
code; the serving package knows nothing of them.
"""
