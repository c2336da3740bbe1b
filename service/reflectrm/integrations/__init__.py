"""Adapters for RLHF trainers; none imports its trainer, so each loads without it installed.

- ``openrlhf``: ``reward_func`` for ``--reward.remote_url /path/to/file.py`` (the service also
  answers OpenRLHF's HTTP protocol itself at ``POST /get_reward``);
- ``verl``: ``compute_score`` for ``reward.custom_reward_function`` (verl's reward loop),
  ``compute_score_sync`` (its legacy reward manager), ``compute_score_eval`` (``main_eval.py``);
- ``trl``: ``ReflectRMReward``, a reward function class for ``GRPOTrainer(reward_funcs=...)``;
- ``slime``: ``group_rm`` for ``--custom-rm-path`` with ``--group-rm`` (and ``reference_rm`` or
  ``cohort_rm`` without it).

With ``REFLECTRM_GROUP_SIZE`` set, the per-sample adapters (verl, OpenRLHF's ``reward_func``)
reward each sample against the other samples of its group through a cohort
(``POST /v1/rewards/sample``, ``/get_reward?group_size=...``) instead of a reference answer.

Each reads the service's address and judging settings from ``RewardConfig`` (environment
variables ``REFLECTRM_URL`` and ``REFLECTRM_REWARD_*``; see docs/rlhf.md).
"""
