"""OpenRLHF: the reward as a Python function, for ``--reward.remote_url /path/to/reward.py``.

OpenRLHF (0.11.2, openrlhf/utils/agent.py ``SingleTurnAgentExecutor``) loads ``reward_func``
from a ``.py`` path and calls ``reward_func(queries, prompts, labels)`` in a thread, one sample
per call, right after the sample is generated; it reads ``rewards``, ``scores`` and
``extra_logs`` from the returned dict. This function forwards the call to the service's
``POST /get_reward`` (with the client's retries), which answers OpenRLHF's HTTP protocol: with a
URL instead of a file, OpenRLHF calls that endpoint directly.

The file given to OpenRLHF can be one line::

    from reflectrm.integrations.openrlhf import reward_func  # noqa: F401
"""

from __future__ import annotations

from typing import Any

from reflectrm.integrations.common import RewardConfig, sync_client


def reward_func(
    queries: list[str], prompts: list[str], labels: list[str], **kwargs: Any
) -> dict[str, Any]:
    """Each query (prompt + response) judged against its label as the reference answer."""
    config = RewardConfig.from_env()
    body = {"query": list(queries), "prompts": list(prompts), "labels": list(labels)}
    reply: dict[str, Any] = sync_client(config.url).post(
        "/get_reward", body, params=config.judging_fields() or None
    )
    return reply
