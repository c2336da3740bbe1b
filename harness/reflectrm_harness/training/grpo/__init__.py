"""The paper's recipe (docs/method.md section 3): ``data`` (``reflectrm train build-data``) has
the base model judge every pair and builds the preference + reflection mix; ``train``
(``reflectrm train grpo``) runs TRL's GRPO on it with ``rewards`` and exports a servable
checkpoint (``trainer``, ``export``); ``warmup`` is an optional supervised format warm-up for
small models (not in the paper); ``check`` measures a judge before and after; ``sources`` reads
the pairs (HelpSteer3 converted); ``config`` holds the job's settings (``grpo_default.yaml``:
the paper's values). ``pairs`` (``reflectrm train grpo-pairs``) builds counterfactual pairs in
which the longer reply is the better one exactly half the time; ``batches`` orders the items so
that each step's prompts hold both positions equally.
"""
