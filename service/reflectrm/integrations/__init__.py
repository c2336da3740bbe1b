"""Adapters for RLHF trainers; none imports its trainer, so each loads without it installed.

- ``openrlhf``: ``reward_func`` for ``--reward.remote_url /path/to/file.py`` (the service also
  answers OpenRLHF's HTTP protocol itself at ``POST /get_reward``);
- ``verl``: ``compute_score`` for ``reward.custom_reward_function``;
- ``trl``: ``ReflectRMReward``, a reward function class for ``GRPOTrainer(reward_funcs=...)``;
- ``slime``: ``group_rm`` for ``--custom-rm-path`` with ``--group-rm`` (and ``reference_rm``
  without it).

Each reads the service's address and judging settings from ``RewardConfig`` (environment
variables ``REFLECTRM_URL`` and ``REFLECTRM_REWARD_*``; see docs/rlhf.md).
"""
