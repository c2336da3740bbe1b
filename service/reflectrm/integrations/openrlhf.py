"""OpenRLHF: the reward as a Python function, for ``--reward.remote_url /path/to/reward.py``.

OpenRLHF (0.11.2, openrlhf/utils/agent.py ``SingleTurnAgentExecutor``) loads ``reward_func``
from a ``.py`` path and calls ``reward_func(queries, prompts, labels)`` in a thread, one sample
per call, right after the sample is generated; it reads ``rewards``, ``scores`` and
``extra_logs`` from the returned dict. This function forwards the call to the service's
``POST /get_reward`` (with the client's retries), which answers OpenRLHF's HTTP protocol: with a
URL instead of a file, OpenRLHF calls that endpoint directly.

OpenRLHF's query is ``tokenizer.decode(prompt_ids + response_ids)`` with the prompt's tokens cut
from the left when it is too long, so it need not start with the prompt text; the service tells
the response apart all the same (``reflectrm.serving.limits.split_query``). Its HTTP client
gives each try 180 s in all and tries five times, 1 s apart; a retry joins the judgment its
first try started (the service keeps it ``REFLECTRM_RETRY_GRACE_S``, 5 s, after a disconnect),
so the five tries together wait about 900 s for one judgment (see docs/rlhf.md).

The file given to OpenRLHF can be one line::

    from reflectrm.integrations.openrlhf import reward_func  # noqa: F401
"""

from __future__ import annotations

from typing import Any

from reflectrm.integrations.common import RewardConfig, sync_client


def reward_func(
    queries: list[str], prompts: list[str], labels: list[str], **kwargs: Any
) -> dict[str, Any]:
    """Each query (prompt + response) judged against its label as the reference answer.

    Not for cohorts: OpenRLHF runs this function in its event loop's default thread pool (32
    threads at most), and cohort members block their threads until their groups are whole, so
    the pool fills with members of different prompts that wait for each other until the cohort
    timeout cuts them all. Cohorts go through the URL (``--reward.remote_url
    http://host:8000/get_reward?group_size=N``), where every call is a request of its own."""
    config = RewardConfig.from_env()
    if config.group_size is not None:
        raise ValueError(
            "REFLECTRM_GROUP_SIZE is set, but OpenRLHF's reward_func runs in a thread pool of at "
            "most 32 threads, which cohort members waiting for each other fill: give OpenRLHF "
            "the URL instead, --reward.remote_url "
            f"'{config.url}/get_reward?group_size={config.group_size}&strategy=knockout'"
        )
    body = {"query": list(queries), "prompts": list(prompts), "labels": list(labels)}
    params = config.judging_fields()
    reply: dict[str, Any] = sync_client(config.url).post("/get_reward", body, params=params or None)
    return reply
