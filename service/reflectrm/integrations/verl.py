"""verl: an async ``compute_score`` for ``reward.custom_reward_function``.

verl (0.9.1, verl/trainer/ppo/reward.py ``get_custom_reward_fn`` and
verl/experimental/reward_loop/reward_manager/naive.py ``run_single``) calls
``await compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=...)``
for one sample at a time (an ``async def`` is detected and awaited); a dict result needs
``"score"``, its other keys are logged.

The response (``solution_str``) is judged against ``ground_truth`` as the reference answer. The
prompt comes from the dataset's ``extra_info``: ``extra_info["prompt"]`` (a string or a list of
``{role, content}`` messages) or else ``extra_info["question"]`` (what verl's example
preprocessing scripts store).
"""

from __future__ import annotations

from typing import Any

from reflectrm.integrations.common import (
    RewardConfig,
    as_number,
    async_client,
    conversation_from_prompt,
    first_reward_details,
)

PROMPT_KEYS = ("prompt", "question")


def prompt_of(extra_info: dict[str, Any] | None) -> Any:
    for key in PROMPT_KEYS:
        if extra_info and extra_info.get(key):
            return extra_info[key]
    raise ValueError(
        "reflectrm needs the prompt to judge a response: store it in the dataset's extra_info "
        "as 'prompt' (a string or a list of {role, content} messages) or 'question'"
    )


async def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    config = RewardConfig.from_env()
    result = await async_client(config.url).rewards(
        conversation_from_prompt(prompt_of(extra_info)),
        [solution_str],
        reference=str(ground_truth),
        strategy="reference",
        **config.judging_fields(),
    )
    return {"score": as_number(result.rewards[0]), **first_reward_details(result)}
