"""The ReflectRM two-stage judgment, and the single and vote modes.

Pure: talks to an ``Engine`` and returns frozen dataclasses. See docs/method.md section 2; each
decision the paper leaves open is a ``JudgeConfig`` field (judging/config.py; importable from
here too) or a named constant here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import math
import random
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from reflectrm.aio import gather_all
from reflectrm.engines.base import Engine, Generation, GenerationResult, Prompt, SamplingSpec
from reflectrm.engines.request_ids import reflection_request_id, rollout_request_id
from reflectrm.judging.confidence import bottom_fraction_confidence
from reflectrm.judging.config import JudgeConfig
from reflectrm.judging.modes import mode_spec
from reflectrm.judging.parsing import parse_output
from reflectrm.judging.prompts import (
    CRITIQUE_VERDICTS,
    RESPONSE_VERDICTS,
    answer_chat,
    get_template,
    margin_chat,
    output_regex,
    preference_chat,
    reflection_chat,
    shortest_output,
)
from reflectrm.judging.types import (
    Candidate,
    EngineUsage,
    Judgment,
    JudgmentSpec,
    Message,
    Mode,
    Reflection,
    Scoring,
    Trace,
)
from reflectrm.judging.verdicts import (
    TOP_LOGPROBS,
    digit_pair,
    digit_probabilities,
    mean_probabilities,
    verdict_probabilities,
)

# Tokens kept free for the closing tags and the verdict sentence when the analysis is bounded.
VERDICT_RESERVE_TOKENS = 24
STOP = ("</Result>",)
REFLECTION_MARGIN_TOKENS = 16
# Responses whose likelihood (margin mode) a judge keeps: a cohort's or a group's responses are
# each compared with several others.
LIKELIHOOD_CACHE_SIZE = 4096
# Reflections go before waiting stage-1 requests where the engine schedules by priority, so a
# judgment that has reached stage 2 finishes before new ones take the engine.
REFLECTION_PRIORITY = -1


@dataclass
class _Pass:
    """A likelihood pass in flight: its task, how many callers await it, and whether one of
    them has reported its engine work."""

    task: asyncio.Task[tuple[float, EngineUsage]]
    waiters: int = 0
    reported: bool = False


class MarginUnavailableError(ValueError):
    """The model's tokenizer does not write a verdict as one token that differs between the two
    verdicts, so margin mode cannot read the judge's decision from one position."""


class PromptTooLongError(ValueError):
    """The conversation and the requested generation do not fit the model's context."""

    def __init__(self, needed: int, limit: int, what: str) -> None:
        super().__init__(
            f"{what} needs {needed} tokens (prompt plus generation) but the model's context is "
            f"{limit} tokens; shorten the conversation or responses, or lower max_tokens"
        )
        self.needed = needed
        self.limit = limit


@dataclass(frozen=True)
class PreparedJudgment:
    """A request whose stage-1 prompt is rendered and whose prompts all fit the context."""

    request: JudgmentSpec
    prompt: Prompt


@dataclass(frozen=True)
class DrawnCandidates:
    """The candidates (stage-1 outputs) of one engine request, and that request's usage and
    wall time."""

    candidates: tuple[Candidate, ...]
    usage: EngineUsage
    seconds: float = 0.0

    def first(self, n: int) -> DrawnCandidates:
        """The first ``n`` candidates, with the usage a request for ``n`` alone reports. With a
        seed, they are the outputs such a request samples: vLLM seeds the i-th output of a request
        with ``seed + i`` whatever ``n`` is (vllm/v1/engine/parallel_sampling.py)."""
        if n >= len(self.candidates):
            return self
        kept = self.candidates[:n]
        usage = dataclasses.replace(
            self.usage, generated_tokens=sum(c.num_tokens for c in kept), engine_requests=1
        )
        return DrawnCandidates(kept, usage, self.seconds)


class Judge:
    """Runs judgments against one engine. Construct once; safe to share between requests.
    ``on_run``, when given, is told of every judgment ``run`` completes (the service's metrics),
    whoever started it."""

    def __init__(
        self,
        engine: Engine,
        config: JudgeConfig,
        on_run: Callable[[Judgment], None] | None = None,
    ) -> None:
        self.engine = engine
        self.config = config
        self.on_run = on_run
        self.template = get_template(config.template_version)
        self._reflection_extra_tokens = self._measure_reflection_extra_tokens()
        self._format_tokens = self._measure_format_tokens() if config.enforce_format else None
        # Where an output's deciding digit stands: the decision-first lead, which the enforced
        # format ties to the verdict, else the <Result> sentence that the parser reads.
        self._at_result = not (self.template.decision_first and config.enforce_format)
        # The token ids of verdict digits 1 and 2 where margin mode reads them, or None.
        self._digit_ids = self._margin_digit_ids()
        self.margin_error = self._check_margin()
        self._likelihoods: OrderedDict[str, float] = OrderedDict()
        # The likelihood passes running, by key: every caller of one (conversation, response)
        # awaits the one pass (see ``likelihood``).
        self._passes: dict[str, _Pass] = {}

    def _candidate(self, index: int, g: Generation) -> Candidate:
        p = parse_output(g.text, "Response", truncated=g.finish_reason == "length")
        return Candidate(
            index=index,
            verdict=p.verdict,
            confidence=bottom_fraction_confidence(g.token_logprobs),
            analysis=p.analysis,
            text=g.text,
            num_tokens=g.num_tokens,
            parse_error=p.error,
            probabilities=verdict_probabilities(g, p.verdict, self._at_result),
        )

    def _margin_digit_ids(self) -> tuple[int, int] | None:
        """The two verdict digits' token ids where margin mode reads them (the last token of the
        chat ending in each verdict), or None where the two verdicts do not render as one token
        sequence that differs in its last token alone."""
        conv = (Message("user", "q"),)
        ones = self.engine.render_chat(margin_chat(self.template, conv, "a", "b", 1)).token_ids
        twos = self.engine.render_chat(margin_chat(self.template, conv, "a", "b", 2)).token_ids
        if len(ones) != len(twos) or ones[:-1] != twos[:-1] or ones[-1] == twos[-1]:
            return None
        return ones[-1], twos[-1]

    def _check_margin(self) -> str | None:
        """Why margin mode cannot run on this engine's model, or None: the two verdicts must
        render as one token sequence that differs in its last token alone."""
        if self._digit_ids is None:
            return (
                "margin mode needs each verdict digit to be one token of the tokenizer of "
                f"{self.engine.model_name} after the same prefix; it is not: use mode single or "
                "reflect"
            )
        return None

    @property
    def scoring(self) -> Scoring:
        return self.config.scoring

    def _measure_reflection_extra_tokens(self) -> int:
        """How many more tokens a reflection prompt (critiques empty) has than the judging prompt
        for the same pair: the template's difference, measured once instead of per request."""
        conv = (Message("user", "q"),)
        base = self.engine.render_chat(preference_chat(self.template, conv, "a", "b"))
        refl = self.engine.render_chat(reflection_chat(self.template, conv, "a", "b", "", ""))
        # Token boundaries around the inserted texts can shift by a few tokens.
        return refl.num_tokens - base.num_tokens + REFLECTION_MARGIN_TOKENS

    def _measure_format_tokens(self) -> dict[tuple[str, str], int]:
        """Per verdict set (stage 1's, the reflections'), the tokens of the shortest output the
        format admits with its longest verdict, in this model's tokens: what a message holding
        that text adds to the rendered prompt (after a newline, so that no token spans the
        text's start)."""
        base = self.engine.render_chat([{"role": "user", "content": "q\n"}]).num_tokens

        def tokens(verdict: str) -> int:
            content = "q\n" + shortest_output(verdict, self.template.decision_first)
            return self.engine.render_chat([{"role": "user", "content": content}]).num_tokens

        return {
            verdicts: max(tokens(v) for v in verdicts) - base
            for verdicts in (RESPONSE_VERDICTS, CRITIQUE_VERDICTS)
        }

    def min_max_tokens(self, mode: Mode) -> int | None:
        """With the format enforced, the least ``max_tokens`` in which every output of ``mode``
        can end in a verdict: the tags and the longest verdict sentence (a reflection's too, in
        reflect mode) around a one-character analysis, in this model's tokens. Below it no
        output has a verdict, whatever the model. None when the format is not enforced."""
        spec = mode_spec(mode)
        if self._format_tokens is None or spec.reads_digit:
            return None  # margin mode writes one token, the verdict digit, with no format
        stage1 = self._format_tokens[RESPONSE_VERDICTS]
        return max(stage1, self._format_tokens[CRITIQUE_VERDICTS]) if spec.reflects else stage1

    def unavailable(self, mode: Mode) -> str | None:
        """Why this judge's model cannot judge in ``mode``, or None: the one check of a mode's
        availability (the service's limits refuse a call with it before admission)."""
        return self.margin_error if mode_spec(mode).reads_digit else None

    # --- preparation (cheap, synchronous: run it in a thread for long inputs) -----------------

    def prepare(self, request: JudgmentSpec) -> PreparedJudgment:
        """Render the stage-1 prompt and check every prompt of the judgment fits the context."""
        r1, r2 = request.responses
        mode = mode_spec(request.mode)
        why = self.unavailable(request.mode)
        if why is not None:
            raise MarginUnavailableError(why)
        if mode.reads_digit:
            # The judging prompt and the output's lead up to its verdict digit: the chat that
            # ends in digit 1, less that digit (checked at start to be its last token).
            chat = margin_chat(self.template, request.conversation, r1, r2, 1)
            full = self.engine.render_chat(chat)
            text = full.text[:-1] if full.text.endswith("1") else ""
            prompt = Prompt(text=text, token_ids=full.token_ids[:-1])
        else:
            prompt = self.engine.render_chat(
                preference_chat(self.template, request.conversation, r1, r2)
            )
        limit = self.engine.max_model_len
        needed = prompt.num_tokens + (1 if mode.reads_digit else request.max_tokens)
        if needed > limit:
            raise PromptTooLongError(needed, limit, "the judging prompt")
        if mode.reflects and request.num_candidates > 1:
            # Each critique is at most one output long; the reflection writes one more.
            needed = prompt.num_tokens + self._reflection_extra_tokens + 3 * request.max_tokens
            if needed > limit:
                raise PromptTooLongError(needed, limit, "a reflection prompt (with two critiques)")
        return PreparedJudgment(request, prompt)

    def _regex(self, verdicts: tuple[str, str], max_tokens: int) -> str | None:
        if not self.config.enforce_format:
            return None
        bound = self.config.max_analysis_chars
        if bound is None:
            bound = max(1, max_tokens - VERDICT_RESERVE_TOKENS)
        return output_regex(verdicts, bound, self.template.decision_first)

    # --- the judgment -------------------------------------------------------------------------

    async def judge(self, request: JudgmentSpec, request_id: str) -> Judgment:
        prepared = await asyncio.to_thread(self.prepare, request)
        return await self.run(prepared, request_id)

    async def run(self, prepared: PreparedJudgment, request_id: str) -> Judgment:
        drawn = await self.draw_candidates(prepared, request_id)
        judgment = await self.run_from(prepared.request, drawn, request_id)
        if self.on_run is not None:
            self.on_run(judgment)
        return judgment

    def stage1_spec(self, request: JudgmentSpec, n: int | None = None) -> SamplingSpec:
        """The stage-1 request: the verdict digit's alternatives alone in margin mode, one greedy
        output in single mode, else ``n`` (default the request's num_candidates) seeded
        candidates."""
        mode = mode_spec(request.mode)
        if mode.reads_digit:
            # Both digits' own log-probs, whatever their rank; the likeliest 20 where the
            # engine cannot give those (``_margin_candidate`` reads what came back).
            return SamplingSpec(
                n=1,
                temperature=0.0,
                max_tokens=1,
                top_logprobs=TOP_LOGPROBS,
                logprob_token_ids=self._digit_ids or (),
            )
        greedy = mode.greedy
        return SamplingSpec(
            n=mode.candidates(n or request.num_candidates),
            temperature=0.0 if greedy else self.config.temperature,
            max_tokens=request.max_tokens,
            seed=request.seed if (self.config.seeded_sampling and not greedy) else None,
            regex=self._regex(RESPONSE_VERDICTS, request.max_tokens),
            stop=STOP,
            top_logprobs=TOP_LOGPROBS if self.scoring == "probability" else 0,
        )

    async def draw_candidates(
        self, prepared: PreparedJudgment, request_id: str, n: int | None = None
    ) -> DrawnCandidates:
        """Stage 1 alone: one engine request for the request's candidates, or for ``n``
        candidates so that several judgments of the same pair, order and seed can start from
        them (see ``DrawnCandidates.first``)."""
        spec = self.stage1_spec(prepared.request, n)
        started = time.monotonic()
        result = await self.engine.generate(prepared.prompt, spec, rollout_request_id(request_id))
        if mode_spec(prepared.request.mode).reads_digit:
            candidate, usage = await self._margin(prepared.request, result, request_id)
            return DrawnCandidates((candidate,), usage, time.monotonic() - started)
        return DrawnCandidates(
            candidates=tuple(self._candidate(i, g) for i, g in enumerate(result.generations)),
            usage=EngineUsage.of(result),
            seconds=time.monotonic() - started,
        )

    async def _margin(
        self, request: JudgmentSpec, result: GenerationResult, request_id: str
    ) -> tuple[Candidate, EngineUsage]:
        """Margin mode's candidate: the verdict digit's log-odds, weighted, plus (with a
        likelihood weight) the weighted difference of the two responses' likelihoods."""
        candidate, usage = _margin_candidate(0, result.generations[0]), EngineUsage.of(result)
        a, w = self.config.margin_verdict_weight, self.config.margin_likelihood_weight
        if candidate.probabilities is None or (a == 1.0 and w == 0.0):
            return candidate, usage
        p1, p2 = candidate.probabilities
        z = a * (math.log(p1) - math.log(p2))
        likelihoods = None
        if w:
            (l1, u1), (l2, u2) = await gather_all(
                [
                    self.likelihood(request.conversation, r, f"{request_id}-l{k}")
                    for k, r in enumerate(request.responses, 1)
                ]
            )
            z, usage, likelihoods = z + w * (l1 - l2), usage + u1 + u2, (l1, l2)
        q1 = 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))
        verdict = 1 if q1 > 0.5 else 2 if q1 < 0.5 else None
        combined = dataclasses.replace(
            candidate,
            verdict=verdict,
            parse_error=None if verdict else "even",
            probabilities=(q1, 1.0 - q1),
            likelihoods=likelihoods,
        )
        return combined, usage

    async def likelihood(
        self, conversation: Sequence[Message], response: str, request_id: str
    ) -> tuple[float, EngineUsage]:
        """The mean log-prob of ``response``'s tokens as the model's own answer to the
        conversation (one prefill), and the engine work it took: one pass per (conversation,
        response), however many judgments ask for it at once (the two orders of a pair, the
        pairs of a group, concurrent calls). Its value is kept (``LIKELIHOOD_CACHE_SIZE``);
        while it runs every caller awaits it, and one of them, the first it answers, reports
        its engine work (the others none), so that summed usage is the work done. A caller
        cancelled leaves the pass to the others; the pass is cancelled (its engine request
        aborted) when none waits any more. A failed pass is kept by no one: the next caller
        runs it again."""
        key = hashlib.sha256(
            json.dumps([[(m.role, m.content) for m in conversation], response]).encode()
        ).hexdigest()
        if key in self._likelihoods:
            self._likelihoods.move_to_end(key)
            return self._likelihoods[key], EngineUsage()
        flight = self._passes.get(key)
        if flight is None:
            task = asyncio.ensure_future(self._likelihood_pass(conversation, response, request_id))
            flight = self._passes[key] = _Pass(task)
            task.add_done_callback(lambda t: self._pass_done(key, flight))
        flight.waiters += 1
        try:
            value, usage = await asyncio.shield(flight.task)
        finally:
            flight.waiters -= 1
            if flight.waiters == 0 and not flight.task.done():
                # Nobody waits any more: abort it, and let no later caller join it.
                if self._passes.get(key) is flight:
                    del self._passes[key]
                flight.task.cancel()
        if flight.reported:
            return value, EngineUsage()
        flight.reported = True
        return value, usage

    def _pass_done(self, key: str, flight: _Pass) -> None:
        """A pass ended: forget it, and keep its value when it has one."""
        if self._passes.get(key) is flight:
            del self._passes[key]
        if flight.task.cancelled() or flight.task.exception() is not None:
            return  # (the exception, retrieved here, is raised to each caller waiting)
        self._likelihoods[key] = flight.task.result()[0]
        self._likelihoods.move_to_end(key)
        if len(self._likelihoods) > LIKELIHOOD_CACHE_SIZE:
            self._likelihoods.popitem(last=False)

    async def _likelihood_pass(
        self, conversation: Sequence[Message], response: str, request_id: str
    ) -> tuple[float, EngineUsage]:
        """One likelihood pass: the response's tokens' log-probs in one prefill of the answer
        chat. The engine may read the conversation from its prefix cache (the log-probs asked
        from the response's first token on); where its cache reached into the response, so
        that some of the log-probs wanted were not computed, the pass is asked again without
        the cache."""
        question = [*answer_chat(conversation, "")[:-1]]
        prefix, full = await asyncio.to_thread(
            lambda: (
                self.engine.render_chat(question),
                self.engine.render_chat(answer_chat(conversation, response)),
            )
        )
        start = _common_prefix(prefix.token_ids, full.token_ids)
        if start >= len(full.token_ids):
            return 0.0, EngineUsage()
        # prompt_logprobs[k] is token k+1's: the response's are those from start - 1 on.
        first = max(0, start - 1)
        spec = SamplingSpec(
            n=1,
            temperature=0.0,
            max_tokens=1,
            prompt_logprobs=True,
            prompt_logprobs_start=max(1, start),
        )
        result = await self.engine.generate(full, spec, request_id)
        usage = EngineUsage.of(result)
        own = result.prompt_logprobs[first:]
        if any(math.isnan(lp) for lp in own):
            spec = dataclasses.replace(spec, prompt_logprobs_start=0)
            result = await self.engine.generate(full, spec, request_id + "-full")
            usage = usage + EngineUsage.of(result)
            own = result.prompt_logprobs[first:]
        return (sum(own) / len(own) if own else 0.0), usage

    async def run_from(
        self, request: JudgmentSpec, drawn: DrawnCandidates, request_id: str
    ) -> Judgment:
        """The judgment from candidates already drawn (by ``draw_candidates``, for this request
        or a larger one with the same prompt, sampling and seed): the first ``num_candidates`` of
        them are used (all of them in single mode), and the usage reported is theirs alone, as if
        this request had sampled them. The result is the one ``run`` gives."""
        mode = mode_spec(request.mode)
        if not mode.one_candidate:
            drawn = drawn.first(request.num_candidates)
        started = time.monotonic()
        candidates, usage = drawn.candidates, drawn.usage
        parsed = [c for c in candidates if c.verdict is not None]
        if not parsed:
            judgment = _no_verdict(request, candidates, usage)
        elif not mode.reflects:
            judgment = _vote_all(request, candidates, parsed, usage, scoring=self.scoring)
        else:
            judgment = await self._reflect(request, candidates, parsed, usage, request_id)
        return dataclasses.replace(
            judgment,
            rollout_seconds=drawn.seconds,
            reflection_seconds=time.monotonic() - started,
        )

    async def _reflect(
        self,
        request: JudgmentSpec,
        candidates: tuple[Candidate, ...],
        parsed: list[Candidate],
        usage: EngineUsage,
        request_id: str,
    ) -> Judgment:
        if self.config.early_exit and len({c.verdict for c in parsed}) == 1:
            return _vote_all(
                request, candidates, parsed, usage, early_exit=True, scoring=self.scoring
            )
        if self.config.early_exit and request.ablation == "none" and same_analyses(parsed):
            # Reflection would compare texts that differ in their verdict alone: it can only
            # echo the prompt's position, so the reply is the vote it would otherwise overturn.
            return _vote_all(
                request, candidates, parsed, usage, early_exit=True, scoring=self.scoring
            )
        rng = random.Random(request.seed)
        if request.ablation == "random_anchor":
            anchor = rng.choice(parsed)
        else:
            anchor = choose_anchor(parsed)
        if request.ablation == "anchor_only":
            return _final(request, candidates, anchor, (), (), usage, True, scoring=self.scoring)
        others = [c for c in parsed if c.index != anchor.index]
        # One random order per reflection, drawn in candidate order from the request's seed.
        positions = [1 if rng.random() < 0.5 else 2 for _ in others]
        reflections, reflection_usage = await self._run_reflections(
            request, anchor, others, positions, request_id
        )
        usage = usage + reflection_usage
        winners = tuple(r.candidate for r in reflections if r.beats_anchor)
        if request.ablation == "random_winners":
            winners = tuple(sorted(c.index for c in rng.sample(others, len(winners))))
        return _final(
            request, candidates, anchor, reflections, winners, usage, scoring=self.scoring
        )

    async def _run_reflections(
        self,
        request: JudgmentSpec,
        anchor: Candidate,
        others: Sequence[Candidate],
        positions: Sequence[int],
        request_id: str,
    ) -> tuple[tuple[Reflection, ...], EngineUsage]:
        r1, r2 = request.responses
        spec = SamplingSpec(
            n=1,
            temperature=0.0,  # paper: greedy decoding for reflection
            max_tokens=request.max_tokens,
            regex=self._regex(CRITIQUE_VERDICTS, request.max_tokens),
            stop=STOP,
            priority=REFLECTION_PRIORITY,
        )

        def render(cand: Candidate, pos: int) -> Prompt:
            first, second = (cand, anchor) if pos == 1 else (anchor, cand)
            messages = reflection_chat(
                self.template, request.conversation, r1, r2, first.analysis, second.analysis
            )
            return self.engine.render_chat(messages)

        prompts = await asyncio.to_thread(
            lambda: [render(c, p) for c, p in zip(others, positions, strict=True)]
        )
        # All reflections go to the engine at once so it batches them; cancelling aborts them all.
        outputs = await gather_all(
            [
                self.engine.generate(p, spec, reflection_request_id(request_id, c.index))
                for p, c in zip(prompts, others, strict=True)
            ]
        )
        usage = EngineUsage()
        reflections = []
        for cand, pos, out in zip(others, positions, outputs, strict=True):
            usage = usage + EngineUsage.of(out)
            g = out.generations[0]
            p = parse_output(g.text, "Critique", truncated=g.finish_reason == "length")
            reflections.append(
                Reflection(
                    candidate=cand.index,
                    candidate_position=pos,
                    verdict=p.verdict,
                    beats_anchor=p.verdict == pos,
                    text=g.text,
                    num_tokens=g.num_tokens,
                    parse_error=p.error,
                )
            )
        return tuple(reflections), usage


def same_analyses(parsed: Sequence[Candidate]) -> bool:
    """Whether every candidate's analysis is one text, up to which response it names (a judge
    that writes one fixed sentence per verdict): its reflections would have nothing to compare
    but the verdicts themselves."""
    texts = {" ".join(_NAMED.sub(r"\1 #", c.analysis).split()) for c in parsed}
    return len(texts) == 1


def choose_anchor(parsed: Sequence[Candidate]) -> Candidate:
    """Highest confidence; ties go to the lowest index."""
    return max(parsed, key=lambda c: (c.confidence, -c.index))


def majority(verdicts: Sequence[int]) -> int | None:
    """1 or 2 by strict majority; None on a tie or no votes."""
    ones = sum(v == 1 for v in verdicts)
    twos = len(verdicts) - ones
    if ones == twos:
        return None
    return 1 if ones > twos else 2


_NAMED = re.compile(r"\b(Response|Critique)\s*[12]\b")


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _margin_candidate(index: int, g: Generation) -> Candidate:
    """Margin mode's one output: the two verdict digits' own log-probs (asked for by token id),
    else the position's likeliest tokens (an engine that ignored the ids); the verdict is the
    likelier digit, and without either (an engine that returned neither) there is no verdict."""
    probabilities = None
    if g.asked_logprobs and len(g.asked_logprobs[0]) == 2:
        probabilities = digit_pair(g.asked_logprobs[0])
    elif g.top_logprobs:
        probabilities = digit_probabilities(g.top_logprobs[0])
    verdict: int | None = None
    error: str | None = "no_probability"
    if probabilities is not None:
        p1, p2 = probabilities
        verdict, error = (1, None) if p1 > p2 else (2, None) if p2 > p1 else (None, "even")
    return Candidate(
        index=index,
        verdict=verdict,
        confidence=bottom_fraction_confidence(g.token_logprobs),
        analysis="",
        text=g.text,
        num_tokens=g.num_tokens,
        parse_error=error,
        probabilities=probabilities,
    )


def _final(
    request: JudgmentSpec,
    candidates: tuple[Candidate, ...],
    anchor: Candidate,
    reflections: tuple[Reflection, ...],
    winners: tuple[int, ...],
    usage: EngineUsage,
    anchor_added: bool = False,
    scoring: Scoring = "votes",
) -> Judgment:
    """Vote over the winner group; if it is empty or ties, add the anchor and vote again."""
    by_index = {c.index: c for c in candidates}
    voters = tuple(sorted(winners))
    if not anchor_added and majority([_v(by_index[i]) for i in voters]) is None:
        anchor_added = True
    if anchor_added:
        voters = tuple(sorted((*voters, anchor.index)))
    trace = Trace(
        candidates=candidates,
        anchor=anchor.index,
        reflections=reflections,
        winner_group=tuple(sorted(winners)),
        voters=voters,
        anchor_added=anchor_added,
    )
    return _result(request, trace, usage, False, anchor, scoring)


def _vote_all(
    request: JudgmentSpec,
    candidates: tuple[Candidate, ...],
    parsed: Sequence[Candidate],
    usage: EngineUsage,
    early_exit: bool = False,
    scoring: Scoring = "votes",
) -> Judgment:
    """Every parsed candidate votes; a tie goes to the most confident one (vote mode only)."""
    trace = Trace(candidates=candidates, voters=tuple(c.index for c in parsed))
    return _result(request, trace, usage, early_exit, choose_anchor(parsed), scoring)


def _result(
    request: JudgmentSpec,
    trace: Trace,
    usage: EngineUsage,
    early_exit: bool,
    tie_break: Candidate,
    scoring_wanted: Scoring,
) -> Judgment:
    """Count the voters' response verdicts; a tie (vote mode only) goes to ``tie_break``. The
    scores are the voters' mean verdict probabilities when asked for and every voter has them,
    else the vote shares (the reply's ``scoring`` says which)."""
    by_index = {c.index: c for c in trace.candidates}
    voters = trace.voters
    verdicts = [_v(by_index[i]) for i in voters]
    votes = (sum(v == 1 for v in verdicts), sum(v == 2 for v in verdicts))
    winner = majority(verdicts) or _v(tie_break)
    agreeing = [by_index[i] for i in voters if by_index[i].verdict == winner] or [tie_break]
    total = len(verdicts)
    scores = (votes[0] / total, votes[1] / total)
    probabilities = [by_index[i].probabilities for i in voters]
    scoring: Scoring = "votes"
    wanted = scoring_wanted == "probability" or mode_spec(request.mode).reads_digit
    if wanted and all(probabilities):
        scores, scoring = mean_probabilities([p for p in probabilities if p]), "probability"
    return Judgment(
        winner=winner,
        scores=scores,
        scoring=scoring,
        outcome="verdict",
        mode=request.mode,
        analysis=choose_anchor(agreeing).analysis,
        votes=votes,
        early_exit=early_exit,
        usage=usage,
        trace=trace,
        seed=request.seed,
    )


def _no_verdict(
    request: JudgmentSpec, candidates: tuple[Candidate, ...], usage: EngineUsage
) -> Judgment:
    return Judgment(
        winner=None,
        scores=(0.5, 0.5),
        outcome="no_verdict",
        mode=request.mode,
        analysis=None,
        votes=(0, 0),
        early_exit=False,
        usage=usage,
        trace=Trace(candidates=candidates),
        seed=request.seed,
        # Margin mode's two verdicts exactly even: a measured (0.5, 0.5), not a missing one.
        scoring="probability" if all(c.probabilities for c in candidates) else "votes",
    )


def _v(c: Candidate) -> int:
    assert c.verdict is not None  # only parsed candidates reach a vote
    return c.verdict


def swapped(request: JudgmentSpec) -> JudgmentSpec:
    """The same request with the two responses in the other order."""
    r1, r2 = request.responses
    return dataclasses.replace(request, responses=(r2, r1))


def unswap_winner(winner: int | None) -> int | None:
    """A winner from the swapped judgment, in the original numbering."""
    return None if winner is None else 3 - winner


def consistent(original: Judgment, swapped_judgment: Judgment) -> bool | None:
    """Whether the same response won in both orders; None if either has no verdict."""
    if original.winner is None or swapped_judgment.winner is None:
        return None
    return original.winner == unswap_winner(swapped_judgment.winner)
