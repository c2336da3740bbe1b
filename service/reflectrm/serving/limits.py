"""The server's defaults and limits for a call (TGI's ``validation.rs``): what a call left unset
takes from the settings, and what it asks beyond them is refused before any judgment is admitted.

Every operation of ``JudgingService`` turns its ask into judging specs here: the ask's
``Options`` (one value from the request on) become its ``Judging`` with the defaults filled in
(num_candidates, max_tokens; a seed drawn where none was asked), the counts bounded (items,
samples, completions, a cohort's size and timeout), and the whole call's engine work (judgments
x candidates x max_tokens) held to REFLECTRM_MAX_CALL_WORK_TOKENS. A refusal is an
``InvalidRequestError`` or a ``TooMuchWorkError`` naming the setting that bounds it. An OpenRLHF
sample's response is told apart from its query here too (``split_query``), and a query that is
not its prompt's refused.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence

from reflectrm.judging.groups import Strategy, design
from reflectrm.judging.groups import judgments as group_judgments
from reflectrm.judging.modes import mode_spec
from reflectrm.judging.types import JudgmentSpec, Message, Mode
from reflectrm.serving.cohorts import CohortTerms
from reflectrm.serving.errors import InvalidRequestError, TooMuchWorkError
from reflectrm.serving.types import (
    FailedItem,
    GroupAsk,
    GroupSpec,
    Judging,
    MemberAsk,
    Options,
    PairAsk,
    SampleAsk,
    SampleOptions,
)
from reflectrm.settings import Settings

# One part of a call's engine work: judgments, candidates (stage-1 outputs) each, max_tokens.
Work = tuple[int, int, int]
# What the least max_tokens of the enforced output format is made of (Judge.min_max_tokens).
FLOOR_TEXT = "the tags and the longest verdict sentence around a one-character analysis"


def new_seed() -> int:
    return secrets.randbelow(2**31)


def _pair_judgments(ask: PairAsk) -> int:
    return 2 if ask.two_orders else 1


def _asked_work(ask: PairAsk, settings: Settings) -> Work:
    """A batch item's engine work as asked, with the server's defaults for what it left unset
    (its own bounds are checked when it is judged)."""
    o = ask.options
    candidates = mode_spec(o.mode).candidates(o.num_candidates or settings.num_candidates)
    return _pair_judgments(ask), candidates, o.max_tokens or settings.max_tokens


def _group_judgments(spec: GroupSpec) -> int:
    """Judgments the group's design takes (its distinct, non-empty completions)."""
    entries = len(design(spec.strategy, spec.completions, spec.seed, spec.pivot).entries)
    return group_judgments(spec.strategy, entries, spec.judging.debias)


def group_spec(
    judging: Judging,
    conversation: tuple[Message, ...],
    completions: tuple[str, ...],
    reference: str | None,
    strategy: Strategy,
    pivot: int | None,
) -> GroupSpec:
    """A group judged with ``judging``, its seed the asked one or one drawn for it."""
    seed = new_seed() if judging.seed is None else judging.seed
    return GroupSpec(
        conversation, completions, reference, strategy, pivot, judging, seed, judging.seed is None
    )


def _check_count(what: str, count: int, limit: int, setting: str) -> None:
    if count > limit:
        raise InvalidRequestError(f"{count} {what}; this server allows at most {limit} ({setting})")


# --- the response inside an OpenRLHF sample ---------------------------------------------------
# ``query`` minus its prompt, as OpenRLHF builds it.
#
# OpenRLHF (0.11.2, openrlhf/utils/agent.py ``SingleTurnAgentExecutor.execute``) posts
# ``prompts = [prompt]`` (the dataset's prompt text, chat template applied) and
# ``query = [tokenizer.decode(prompt_ids + response_ids, skip_special_tokens=False)]``, where
# ``prompt_ids = tokenizer(prompt, add_special_tokens=False)`` cut from the left to
# ``max_length - max_tokens`` tokens when the prompt is longer. So ``query`` starts with
# ``prompt`` only when decoding the prompt's tokens gives its text back and nothing was cut:
#
# - a prompt cut from the left leaves a *suffix* of the prompt at the start of ``query``; a cut
#   inside a multi-byte character decodes to one to three U+FFFD characters before it;
# - some tokenizers do not decode to the text they encoded: SentencePiece drops or adds a space
#   (at the start, after special tokens), ``clean_up_tokenization_spaces`` removes the space
#   before punctuation (``" ,"`` to ``","``).
#
# ``split_query`` finds where the prompt ends in the query all the same: exactly when the query
# starts with the prompt (the common case, byte-level BPE tokenizers such as Qwen's and Llama
# 3's); else by aligning the two texts with every whitespace character left out, the longest
# suffix of the prompt that starts the query (after at most ``MAX_JUNK`` characters such as
# U+FFFD). It answers None when no such suffix of at least ``MIN_OVERLAP`` characters (or the
# whole prompt, if shorter) is there: the query is not this prompt's.

MIN_OVERLAP = 16  # non-space characters of the prompt that must start the query
MAX_JUNK = 4  # characters before them that may be left of a cut character
MAX_TRIES = 32  # places in the query where the prompt's end is tried, per offset


def _squeezed(text: str) -> tuple[str, list[int]]:
    """``text`` without whitespace, and the index in ``text`` of each character kept."""
    kept = [i for i, ch in enumerate(text) if not ch.isspace()]
    return "".join(text[i] for i in kept), kept


def _overlap(prompt: str, query: str, start: int) -> int:
    """The length of the longest suffix of ``prompt`` that ``query[start:]`` starts with, if it
    is at least ``MIN_OVERLAP`` long or the whole prompt; else 0.

    The suffix ends where the prompt's last ``MIN_OVERLAP`` characters (its tail) occur in the
    query, so the tail's places in the query are tried from the right (the longest first). A
    wrong place is one where the response repeats the prompt's tail, which is rare; repeats
    inside the prompt (few-shot examples, repeated context) cost nothing. After ``MAX_TRIES``
    wrong places the search gives up, so no body can make it quadratic."""
    if query.startswith(prompt, start):
        return len(prompt)
    if len(prompt) <= MIN_OVERLAP:
        return 0
    tail = prompt[-MIN_OVERLAP:]
    # A suffix shorter than the prompt ends in the query before start + len(prompt).
    end = min(len(query), start + len(prompt) - 1)
    at = query.rfind(tail, start, end)
    for _ in range(MAX_TRIES):
        if at == -1:
            break
        length = at + MIN_OVERLAP - start
        if query.startswith(prompt[-length:], start):
            return length
        at = query.rfind(tail, start, at + MIN_OVERLAP - 1)
    return 0


def split_query(query: str, prompt: str) -> str | None:
    """The response in ``query``: what follows the prompt (or the part of it OpenRLHF kept).
    None when the query does not start with (a suffix of) the prompt."""
    if query.startswith(prompt):
        return query[len(prompt) :]
    squeezed_prompt, _ = _squeezed(prompt)
    squeezed_query, positions = _squeezed(query)
    if not squeezed_prompt:
        return None
    for junk in range(min(MAX_JUNK, len(squeezed_query)) + 1):
        matched = _overlap(squeezed_prompt, squeezed_query, junk)
        if matched:
            break
    else:
        return None
    end = positions[junk + matched - 1] + 1  # just past the prompt's last non-space character
    rest = query[end:]
    # The whitespace after the prompt's last character is the prompt's when the prompt ends in
    # whitespace (e.g. the newline after "assistant"); how much of it the decoder gave back
    # varies, so all of it goes. Else it is the response's.
    return rest.lstrip() if prompt[-1:].isspace() else rest


def sample_response(k: int, sample: SampleAsk) -> str:
    """The response of a sample: its query after its prompt (``split_query``)."""
    prompt = sample.prompt
    response = split_query(sample.query, prompt)
    if response is None:
        raise InvalidRequestError(
            f"sample {k}: `query` does not start with its `prompts` entry (nor with the "
            "end of it, as a prompt cut from the left leaves), so the response cannot be "
            "told apart; send query = prompt + response"
        )
    if not prompt.strip():
        raise InvalidRequestError(f"sample {k}: the prompt is empty")
    return response


class Limits:
    """The settings' per-call defaults and bounds, applied to each kind of ask."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # The served judge's least max_tokens per mode (Judge.min_max_tokens: None without
        # format enforcement) and its template, set when a judge is served.
        self.format_floor: Callable[[Mode], int | None] = lambda mode: None
        self.template_version = ""
        # Why the served model cannot judge in a mode (Judge.unavailable), or None.
        self.unavailable: Callable[[Mode], str | None] = lambda mode: None

    # --- a pair, a batch of pairs -------------------------------------------------------------

    def judging(self, options: Options) -> Judging:
        """The options with the server's defaults for what the ask left unset, bounded."""
        if options.ablation != "none" and not self.settings.allow_ablations:
            raise InvalidRequestError(
                f"ablation {options.ablation!r} is for evaluation and this server does not "
                "allow it; start it with REFLECTRM_ALLOW_ABLATIONS=true"
            )
        why = self.unavailable(options.mode)
        if why is not None:
            raise InvalidRequestError(why)
        return Judging(
            mode=options.mode,
            debias=options.debias,
            num_candidates=options.num_candidates or self.settings.num_candidates,
            max_tokens=self.max_tokens(options.max_tokens, options.mode),
            seed=options.seed,
            ablation=options.ablation,
        )

    def pair_request(self, ask: PairAsk) -> JudgmentSpec:
        """The pair's judgment, with the server's defaults for what the ask left unset."""
        judging = self.judging(ask.options)
        seed = new_seed() if judging.seed is None else judging.seed
        return judging.spec(ask.conversation, ask.responses, seed)

    def check_pair(self, ask: PairAsk, request: JudgmentSpec) -> None:
        candidates = mode_spec(request.mode).candidates(request.num_candidates)
        self.check_work([(_pair_judgments(ask), candidates, request.max_tokens)])

    def check_batch(self, items: Sequence[PairAsk | FailedItem]) -> None:
        """The batch's size and its pairs' engine work (an item already failed adds none)."""
        s = self.settings
        _check_count("items", len(items), s.max_batch_items, "REFLECTRM_MAX_BATCH_ITEMS")
        self.check_work([_asked_work(a, s) for a in items if isinstance(a, PairAsk)])

    # --- groups, per-sample calls -------------------------------------------------------------

    def group_spec(self, ask: GroupAsk) -> GroupSpec:
        """The group's spec, with the server's defaults for what the ask left unset."""
        s = self.settings
        _check_count(
            "completions", len(ask.completions), s.max_group_size, "REFLECTRM_MAX_GROUP_SIZE"
        )
        return group_spec(
            self.judging(ask.options),
            conversation=ask.conversation,
            completions=ask.completions,
            reference=ask.reference,
            strategy=ask.strategy,
            pivot=ask.pivot,
        )

    def check_groups(self, specs: Sequence[GroupSpec]) -> None:
        """The engine work of a call's groups, summed."""
        work = [
            (_group_judgments(sp), sp.judging.candidates, sp.judging.max_tokens) for sp in specs
        ]
        self.check_work(work)

    def check_samples(self, count: int) -> None:
        _check_count("samples", count, self.settings.max_batch_items, "REFLECTRM_MAX_BATCH_ITEMS")

    def sample_specs(
        self, samples: Sequence[SampleAsk], per_sample: SampleOptions
    ) -> list[GroupSpec]:
        """Each sample as a reference-strategy group of one: its response against its label."""
        self.check_samples(len(samples))
        specs = []
        for k, sample in enumerate(samples):
            prompt, label = sample.prompt, sample.label
            response = sample_response(k, sample)
            if label is None or not label.strip():
                raise InvalidRequestError(
                    f"sample {k}: no label; each sample is judged against its label as the "
                    "reference answer (OpenRLHF: --data.label_key naming a reference-answer field)"
                )
            ask = GroupAsk(
                conversation=(Message("user", prompt),),
                completions=(response,),
                strategy="reference",
                reference=label,
                options=per_sample.options,
            )
            specs.append(self.group_spec(ask))
        return specs

    def cohort_terms(self, ask: MemberAsk) -> CohortTerms:
        """The terms of the member's cohort, after the server's defaults and bounds; the whole
        cohort's engine work is bounded like a group's."""
        s = self.settings
        if not 2 <= ask.group_size <= s.max_group_size:
            raise InvalidRequestError(
                f"group_size is {ask.group_size}; a cohort has 2 to {s.max_group_size} members "
                "(REFLECTRM_MAX_GROUP_SIZE)"
            )
        if ask.strategy == "reference":
            raise InvalidRequestError(
                "strategy reference judges each completion alone against a reference: send it "
                "without group_size (no cohort is needed)"
            )
        timeout_s = s.cohort_timeout_s if ask.cohort_timeout_s is None else ask.cohort_timeout_s
        if not 0 < timeout_s <= s.max_cohort_timeout_s:
            raise InvalidRequestError(
                f"cohort_timeout_s is {timeout_s:g}; this server allows more than 0 and at most "
                f"{s.max_cohort_timeout_s:g} (REFLECTRM_MAX_COHORT_TIMEOUT_S)"
            )
        judging = self.judging(ask.options)
        terms = CohortTerms(ask.group_size, ask.strategy, judging, timeout_s)
        whole = group_judgments(ask.strategy, ask.group_size, judging.debias)
        self.check_work([(whole, judging.candidates, judging.max_tokens)])
        return terms

    # --- the bounds every ask shares ----------------------------------------------------------

    def max_tokens(self, requested: int | None, mode: Mode) -> int:
        """The call's max_tokens: at most REFLECTRM_MAX_TOKENS_LIMIT, and with the output format
        enforced at least what the format takes in ``mode`` with the served model's tokens."""
        s = self.settings
        max_tokens = requested or s.max_tokens
        if max_tokens > s.max_tokens_limit:
            raise InvalidRequestError(
                f"max_tokens is {max_tokens}; this server allows at most "
                f"{s.max_tokens_limit} (REFLECTRM_MAX_TOKENS_LIMIT)"
            )
        floor = self.format_floor(mode)
        if floor is not None and max_tokens < floor:
            raise InvalidRequestError(
                f"max_tokens is {max_tokens}; an output in the enforced format "
                f"(REFLECTRM_ENFORCE_FORMAT) needs at least {floor} tokens in {mode} mode with "
                f"this model's tokenizer and template {self.template_version} ({FLOOR_TEXT}), so "
                f"none could end in a verdict: ask for at least {floor}, more to leave the "
                "analysis room"
            )
        return max_tokens

    def check_work(self, parts: Sequence[Work]) -> None:
        """One call's engine work, judgments x candidates x max_tokens (summed over its pairs,
        items or samples), within the bound."""
        work, limit = sum(j * c * t for j, c, t in parts), self.settings.max_call_work_tokens
        if work <= limit:
            return
        if len(parts) == 1:
            j, c, t = parts[0]
            asked = f"{j} judgments x {c} candidates x {t} max_tokens = {work}"
        else:
            judgments = sum(j for j, _, _ in parts)
            asked = f"{judgments} judgments, judgments x candidates x max_tokens summed = {work}"
        raise TooMuchWorkError(
            f"this call asks for {asked} tokens of engine work, {work - limit} over this "
            f"server's bound of {limit} (REFLECTRM_MAX_CALL_WORK_TOKENS); split it, or lower "
            "num_candidates or max_tokens"
        )
