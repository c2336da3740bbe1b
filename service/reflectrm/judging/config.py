"""How the judge runs: the knobs of the two-stage judgment that are not part of a request.

A leaf (imports only the prompt template's version), so that ``Settings`` can take its defaults
from here and build it (``Settings.judge_config()``) without importing the judge.
"""

from __future__ import annotations

from dataclasses import dataclass

from reflectrm.judging.prompts import TEMPLATE_VERSION
from reflectrm.judging.types import Scoring


@dataclass(frozen=True)
class JudgeConfig:
    # The prompt wording; a model trained on one version must be judged with it.
    template_version: str = TEMPLATE_VERSION
    # Stage-1 sampling temperature (paper: 1.0): the candidates must differ to be worth a vote.
    temperature: float = 1.0
    # Constrain outputs to <Analysis>..</Analysis><Result>verdict</Result> (structured outputs),
    # so that a model not trained on the template still ends in a parsable verdict.
    enforce_format: bool = True
    # With enforce_format, the analysis's bound in characters, so that outputs end in a verdict
    # within max_tokens. None: max_tokens minus VERDICT_RESERVE_TOKENS (see judge.py).
    max_analysis_chars: int | None = None
    # Skip reflection when every parsed stage-1 verdict agrees (it could not change the result)
    # or every analysis is one text up to the response it names (it could only echo a position:
    # the reply is then the stage-1 vote, never more certain than it).
    early_exit: bool = True
    # Pass each request's seed to the engine, so that stage 1 is reproducible.
    seeded_sampling: bool = True
    # Scores as the voters' mean verdict probabilities ("probability"), or the paper's vote
    # shares ("votes"); docs/method-choices.md.
    scoring: Scoring = "probability"
    # Margin mode's score of response 1 is sigmoid(verdict_weight * z + likelihood_weight * d):
    # z the log-odds of the verdict digits, d the difference of the two responses' mean token
    # log-probs given the conversation (one prefill each, cached per response). A shipped judge
    # names its fitted weights in its manifest; 0 skips the likelihood requests.
    margin_verdict_weight: float = 1.0
    margin_likelihood_weight: float = 0.0
