"""verl: ``compute_score`` functions for ``reward.custom_reward_function``.

verl 0.9.1 loads the function with ``verl/trainer/ppo/reward.py`` ``get_custom_reward_fn``
(``pkg://`` paths through ``verl/utils/import_utils.py`` ``load_extern_object``) and calls it
three ways:

- the reward loop (``verl/experimental/reward_loop/reward_manager/naive.py`` ``run_single``),
  one sample per call, the samples of a step concurrently:
  ``compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=...)``,
  awaited when it is an ``async def``, else run in a thread; a dict result needs ``"score"``,
  its other keys are logged (every sample must have the same keys). ``extra_info`` is the
  dataset row's ``extra_info`` plus ``num_turns`` and ``rollout_reward_scores``; the group's
  ``uid`` (``ray_trainer.py``) is not handed over. Use ``compute_score``.
- the legacy reward manager (``verl/workers/reward_manager/naive.py``), the same keywords, one
  sample after another, synchronously (a coroutine would be taken as the score). Use
  ``compute_score_sync``; cohorts cannot fill there (the samples do not arrive together).
- ``verl/trainer/main_eval.py`` ``process_item``: ``reward_fn(data_source, response,
  ground_truth)``, synchronously, positionally, without ``extra_info``, averaging the results
  with ``np.mean`` (numbers only). Use ``compute_score_eval``; as no prompt is handed over, the
  dataset's ``reward_model.ground_truth`` must carry it: ``{"prompt": ..., "reference": ...}``.
  (verl 0.9.1's ``main_eval`` reads ``config.reward.custom_reward_function``: give it as
  ``+reward.custom_reward_function.path=... +reward.custom_reward_function.name=...``.)

Each sample is judged against ``ground_truth`` as the reference answer (a missing one is an
error, not the text "None"), or, with ``REFLECTRM_GROUP_SIZE`` set, against the other samples of
its group: a cohort of ``/v1/rewards/sample`` keyed by ``extra_info[REFLECTRM_GROUP_KEY]`` if
set, else ``extra_info["uid"]`` if the dataset has one, else the prompt (the server's default:
the samples of a prompt share it). The prompt comes from ``extra_info["prompt"]`` (a string or
a list of ``{role, content}`` messages), else ``extra_info["question"]`` (what verl's example
preprocessing scripts store), else ``ground_truth["prompt"]``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from reflectrm.client import Conversation
from reflectrm.integrations.common import (
    COHORT_KEYS,
    RewardConfig,
    as_number,
    async_client,
    cohort_details,
    conversation_from_prompt,
    failed_details,
    failure_of,
    first_reward_details,
    reference_keys,
    reference_of,
    sync_client,
)

logger = logging.getLogger(__name__)

PROMPT_KEYS = ("prompt", "question")
REFERENCE_KEYS = ("reference", "ground_truth", "answer")


def prompt_of(extra_info: Mapping[str, Any] | None, ground_truth: Any = None) -> Any:
    for source in (extra_info, ground_truth):
        if isinstance(source, Mapping):
            for key in PROMPT_KEYS:
                if source.get(key):
                    return source[key]
    raise ValueError(
        "reflectrm needs the prompt to judge a response: store it in the dataset's extra_info "
        "as 'prompt' (a string or a list of {role, content} messages) or 'question'; where no "
        "extra_info is handed over (verl's main_eval.py), in reward_model.ground_truth as "
        "{'prompt': ..., 'reference': ...}"
    )


def reference_in(ground_truth: Any) -> str:
    if isinstance(ground_truth, Mapping):
        for key in REFERENCE_KEYS:
            if key in ground_truth:
                return reference_of(ground_truth[key], f"ground_truth[{key!r}]")
        return reference_of(None, "ground_truth['reference']")
    return reference_of(ground_truth, "reward_model.ground_truth")


def group_id_of(config: RewardConfig, extra_info: Mapping[str, Any] | None) -> str | None:
    info = extra_info or {}
    if config.group_key is not None:
        if info.get(config.group_key) is None:
            raise ValueError(
                f"REFLECTRM_GROUP_KEY={config.group_key!r} names an extra_info field this "
                f"sample does not have (it has {sorted(info)})"
            )
        return str(info[config.group_key])
    return str(info["uid"]) if info.get("uid") is not None else None


def _ask(
    config: RewardConfig, solution_str: str, ground_truth: Any, extra_info: Any
) -> tuple[Conversation, dict[str, Any]]:
    conversation = conversation_from_prompt(prompt_of(extra_info, ground_truth))
    if config.group_size is not None:
        group_id = group_id_of(config, extra_info)
        fields = {"group_id": group_id, **config.cohort_fields()}
        return conversation, fields
    return conversation, {
        "reference": reference_in(ground_truth),
        "strategy": "reference",
        **config.judging_fields(),
    }


async def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """For verl's reward loop (awaited per sample)."""
    config = RewardConfig.from_env()
    conversation, fields = _ask(config, solution_str, ground_truth, extra_info)
    client = async_client(config.url)
    try:
        if config.group_size is not None:
            member = await client.sample_reward(
                conversation, solution_str, config.group_size, **fields
            )
            return cohort_details(member)
        result = await client.rewards(conversation, [solution_str], **fields)
    except Exception as exc:
        return _failed(config, exc)
    return {"score": as_number(result.rewards[0]), **first_reward_details(result)}


def _failed(config: RewardConfig, exc: Exception) -> dict[str, Any]:
    """A judgment that failed for want of the judge, as verl's reward extra info: the same keys
    as a judged sample, ``judge_failed`` 1.0 (any other error is raised)."""
    reason = failure_of(exc)
    if reason is None:
        raise exc
    logger.warning("reflectrm: a sample's judgment failed, flagged judge_failed: %s", reason)
    keys = COHORT_KEYS if config.group_size is not None else reference_keys(config.debias)
    return failed_details(keys, reason)


def compute_score_sync(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """For verl's legacy reward manager (called synchronously, one sample after another; the
    reward loop runs it in a thread). The same answer as ``compute_score``."""
    config = RewardConfig.from_env()
    conversation, fields = _ask(config, solution_str, ground_truth, extra_info)
    client = sync_client(config.url)
    try:
        if config.group_size is not None:
            member = client.sample_reward(conversation, solution_str, config.group_size, **fields)
            return cohort_details(member)
        result = client.rewards(conversation, [solution_str], **fields)
    except Exception as exc:
        return _failed(config, exc)
    return {"score": as_number(result.rewards[0]), **first_reward_details(result)}


def compute_score_eval(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> float:
    """For verl's main_eval.py (positional, synchronous, a number): the score alone."""
    score: float = compute_score_sync(data_source, solution_str, ground_truth, extra_info)["score"]
    return score
