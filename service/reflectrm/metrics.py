"""Every Prometheus metric of the service, in one place, and the /metrics exposition.

Names carry the ``reflectrm_`` prefix and their unit; label values come from the fixed tuples
below and every combination is created at zero, so each series exists from the first scrape.
The vLLM engine's own ``vllm:`` metrics live in prometheus_client's default registry (vLLM's
PrometheusStatLogger registers them there); ``render`` exposes both. docs/metrics.md is the table.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Literal

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from reflectrm.engines.base import GenerationResult
from reflectrm.engines.request_ids import Stage
from reflectrm.judging.groups import STRATEGIES
from reflectrm.judging.types import MODES, Judgment

PREFIX = "reflectrm_"
CONTENT_TYPE = CONTENT_TYPE_LATEST

# How a judgment request ended: its answer (a winner, a tie of both orders, no verdict in any
# order), or the HTTP error it got.
REQUEST_OUTCOMES = (
    "verdict",
    "tie",  # debias swap: the two orders' averaged scores tie (a verdict that they are even)
    "no_verdict",
    "invalid",  # 422 raised by the route (a limit that depends on settings)
    "too_long",  # 413
    "rejected",  # 429, no slot within the admission queue's bounds
    "disconnected",  # 499, the client went away
    "unavailable",  # 503, the engine stopped
    "timeout",  # 504
    "error",  # anything unexpected (500)
)
RUN_OUTCOMES = ("verdict", "no_verdict")
STAGES = ("rollouts", "reflections")
SWAP_SOURCES = ("requested", "sampled")
SWAP_RESULTS = ("consistent", "inconsistent", "no_verdict", "error")
DROP_REASONS = ("queue_full", "busy", "preempted", "shutdown")

SwapSource = Literal["requested", "sampled"]
SwapResult = Literal["consistent", "inconsistent", "no_verdict", "error"]
DropReason = Literal["queue_full", "busy", "preempted", "shutdown"]

# A judgment is 1 (single) to 15 (reflect: 8 rollouts + 7 reflections) generations of up to
# max_tokens each: seconds on a GPU, up to minutes on a CPU; the top bucket is the default deadline.
LATENCY_BUCKETS_S = (
    0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0,
    180.0, 300.0, 600.0, 900.0,
)  # fmt: skip
QUEUE_WAIT_BUCKETS_S = (
    0.0, 0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip
# |votes_1 - votes_2| / voters: 0 is a tie (broken by confidence), 1 is unanimous.
MARGIN_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


REFUSAL_BOUNDS = ("queue", "tenant_queue", "queue_timeout", "tenants", "call_work", "cohorts")
# How a cohort closed: every member arrived, the timeout cut it, or every caller had gone.
COHORT_ENDS = ("full", "cut", "abandoned")
# Why the timeout cut a cohort: half or more of its members never came (what a trainer rotating
# several judge URLs makes: each judge gets a share of every group), or fewer than half.
CUT_REASONS = ("most_missing", "some_missing")
# What became of a cohort member's call sent to its owner among the peers (REFLECTRM_PEERS).
PEER_FORWARD_OUTCOMES = ("ok", "fallback_local", "error")
CutReason = Literal["most_missing", "some_missing"]
COHORT_WAIT_BUCKETS_S = (
    0.0, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 300.0, 600.0,
)  # fmt: skip
# round_robin with swap is 2(N-1) judgments per reward: 30 at N = 16.
JUDGMENTS_PER_REWARD_BUCKETS = (
    0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0,
)  # fmt: skip


def vote_margin(judgment: Judgment) -> float:
    ones, twos = judgment.votes
    return abs(ones - twos) / (ones + twos) if ones + twos else 0.0


class Metrics:
    """The service's metrics, in a registry of their own (one per app, so tests can build many)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # The *_created series double every counter and histogram and no panel reads them
        # (process-wide: the engine's metrics lose theirs too).
        disable_created_metrics()
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.peer_forwards: Counter | None = None  # enable_peers
        self.judgments = Counter(
            f"{PREFIX}judgments_total",
            "Judgment requests by mode and how they ended (a verdict, a tie of both orders, no "
            "verdict, or an error).",
            ["mode", "outcome"],
            registry=r,
        )
        self.judgment_duration = Histogram(
            f"{PREFIX}judgment_duration_seconds",
            "End-to-end latency of answered judgment requests (with check_swap: both orders).",
            ["mode"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.in_flight = Gauge(
            f"{PREFIX}judgments_in_flight",
            "Judgments holding an admission slot now.",
            registry=r,
        )
        self.queued = Gauge(
            f"{PREFIX}judgments_queued",
            "Judgments waiting for an admission slot now.",
            registry=r,
        )
        self.queue_wait = Histogram(
            f"{PREFIX}queue_wait_seconds",
            "Time an admitted judgment waited for its slot.",
            buckets=QUEUE_WAIT_BUCKETS_S,
            registry=r,
        )
        self.runs = Counter(
            f"{PREFIX}judgment_runs_total",
            "Runs of the judging algorithm: each request's, the swapped order of check_swap "
            "requests, and sampled background swap checks.",
            ["mode", "outcome"],
            registry=r,
        )
        self.stage_duration = Histogram(
            f"{PREFIX}stage_duration_seconds",
            "Wall time of a stage of a judgment run: rollouts (stage 1), reflections (stage 2, "
            "observed only when it ran).",
            ["stage"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.early_exits = Counter(
            f"{PREFIX}early_exits_total",
            "Reflect-mode runs whose stage-1 verdicts were unanimous, so reflection was skipped.",
            registry=r,
        )
        self.parse_failures = Counter(
            f"{PREFIX}parse_failures_total",
            "Generated outputs without a well-formed verdict, by stage.",
            ["stage"],
            registry=r,
        )
        self.vote_margin = Histogram(
            f"{PREFIX}vote_margin_ratio",
            "Margin of the final vote of runs with a verdict: |votes_1 - votes_2| / voters.",
            ["mode"],
            buckets=MARGIN_BUCKETS,
            registry=r,
        )
        self.engine_requests = Counter(
            f"{PREFIX}engine_requests_total",
            "Completed engine requests (one per rollout batch of n samples, one per reflection).",
            ["stage"],
            registry=r,
        )
        self.outputs = Counter(
            f"{PREFIX}generated_outputs_total",
            "Generated outputs (samples), by stage: the denominator of the parse-failure rate.",
            ["stage"],
            registry=r,
        )
        self.generated_tokens = Counter(
            f"{PREFIX}generated_tokens_total", "Generated tokens, by stage.", ["stage"], registry=r
        )
        self.prompt_tokens = Counter(
            f"{PREFIX}prompt_tokens_total",
            "Prompt tokens sent to the engine (once per engine request), by stage.",
            ["stage"],
            registry=r,
        )
        self.cached_prompt_tokens = Counter(
            f"{PREFIX}cached_prompt_tokens_total",
            "Of the prompt tokens sent, those the engine read from its prefix cache instead of "
            "computing them, by stage.",
            ["stage"],
            registry=r,
        )
        self.swap_checks = Counter(
            f"{PREFIX}swap_checks_total",
            "Positional-consistency checks (the pair judged again with the responses swapped): "
            "requested with check_swap, or sampled in the background.",
            ["source", "result"],
            registry=r,
        )
        self.swap_checks_dropped = Counter(
            f"{PREFIX}swap_checks_dropped_total",
            "Sampled swap checks given up so live traffic goes first, by reason.",
            ["reason"],
            registry=r,
        )
        self.swap_checks_pending = Gauge(
            f"{PREFIX}swap_checks_pending",
            "Sampled swap checks waiting to run.",
            registry=r,
        )
        self.swap_checks_running = Gauge(
            f"{PREFIX}swap_checks_running",
            "Sampled swap checks running now.",
            registry=r,
        )
        self.tenant_admitted = Counter(
            f"{PREFIX}tenant_judgments_admitted_total",
            "Judgments given an admission slot, by tenant (API key, key/job for a job named "
            "with a key, or the job named when keys are off).",
            ["tenant"],
            registry=r,
        )
        self.refusals = Counter(
            f"{PREFIX}refusals_total",
            "Calls refused by a bound, by tenant and bound: queue (all queued judgments), "
            "tenant_queue (the tenant's), queue_timeout, tenants (active tenants), call_work "
            "(one call's engine work).",
            ["tenant", "bound"],
            registry=r,
        )
        self.reused = Counter(
            f"{PREFIX}reused_answers_total",
            "Answers given without new engine work: joined (an identical call was in flight) or "
            "cached (an identical call was answered recently).",
            ["how"],
            registry=r,
        )
        for how in ("joined", "cached"):
            self.reused.labels(how)
        self.cohorts_open = Gauge(
            f"{PREFIX}cohorts_open",
            "Cohorts waiting for their members' per-sample calls now.",
            registry=r,
        )
        self.cohort_wait = Histogram(
            f"{PREFIX}cohort_wait_seconds",
            "Time a member's call waited for its cohort to close (every member arrived, or the "
            "timeout), before the cohort was judged.",
            buckets=COHORT_WAIT_BUCKETS_S,
            registry=r,
        )
        self.cohorts_closed = Counter(
            f"{PREFIX}cohorts_closed_total",
            "Cohorts closed: full (every member arrived), cut (by the timeout: judged with the "
            "members it had), abandoned (every caller had gone: not judged).",
            ["how"],
            registry=r,
        )
        self.cohorts_cut = Counter(
            f"{PREFIX}cohorts_cut_total",
            "Cohorts cut by the timeout with members missing, by reason: most_missing (half or "
            "more never arrived: members may be going to other judge URLs, as a trainer "
            "rotating several URLs sends them), some_missing (fewer than half).",
            ["reason"],
            registry=r,
        )
        self.cohort_members_missing = Counter(
            f"{PREFIX}cohort_members_missing_total",
            "Members that cut cohorts were missing (group_size minus those that arrived).",
            registry=r,
        )
        for reason in CUT_REASONS:
            self.cohorts_cut.labels(reason)
        self.merged_duplicates = Counter(
            f"{PREFIX}merged_duplicates_total",
            "Completions of judged groups identical to another after whitespace normalisation: "
            "not judged, given that one's reward.",
            registry=r,
        )
        self.judgments_per_reward = Histogram(
            f"{PREFIX}judgments_per_reward_ratio",
            "Judgments a judged group took per completion it rewarded, by strategy (the cost "
            "of a group reward; debias swap doubles it).",
            ["strategy"],
            buckets=JUDGMENTS_PER_REWARD_BUCKETS,
            registry=r,
        )
        for how in COHORT_ENDS:
            self.cohorts_closed.labels(how)
        for strategy in STRATEGIES:
            self.judgments_per_reward.labels(strategy)
        self.tenant_admitted.labels("default")
        for bound in REFUSAL_BOUNDS:
            self.refusals.labels("default", bound)
        self._tenants: Callable[[], Mapping[str, tuple[int, int]]] = dict
        r.register(_TenantGauges(self))
        self._create_series()

    def _create_series(self) -> None:
        for mode in MODES:
            for outcome in REQUEST_OUTCOMES:
                self.judgments.labels(mode, outcome)
            for outcome in RUN_OUTCOMES:
                self.runs.labels(mode, outcome)
            self.judgment_duration.labels(mode)
            self.vote_margin.labels(mode)
        for stage in STAGES:
            for family in (
                self.stage_duration,
                self.parse_failures,
                self.engine_requests,
                self.outputs,
                self.generated_tokens,
                self.prompt_tokens,
                self.cached_prompt_tokens,
            ):
                family.labels(stage)
        for source in SWAP_SOURCES:
            for result in SWAP_RESULTS:
                self.swap_checks.labels(source, result)
        for reason in DROP_REASONS:
            self.swap_checks_dropped.labels(reason)

    def enable_peers(self) -> None:
        """Expose the forwarding counter (only where REFLECTRM_PEERS is set, so a replica
        without peers exposes the same series as ever)."""
        if self.peer_forwards is not None:
            return
        self.peer_forwards = Counter(
            f"{PREFIX}peer_forward_total",
            "Cohort members' calls sent to the cohort's owner among the peers, by outcome: ok "
            "(the owner's 2xx relayed), error (the owner's error status relayed), "
            "fallback_local (the owner unreachable, too slow or not serving: judged here, the "
            "reply marked cohort_split).",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in PEER_FORWARD_OUTCOMES:
            self.peer_forwards.labels(outcome)

    def peer_forwarded(self, outcome: str) -> None:
        if self.peer_forwards is not None:
            self.peer_forwards.labels(outcome).inc()

    # --- recording ------------------------------------------------------------------------------

    def track_admission(self, in_flight: Callable[[], int], queued: Callable[[], int]) -> None:
        self.in_flight.set_function(lambda: float(in_flight()))
        self.queued.set_function(lambda: float(queued()))

    def observe_queue_wait(self, seconds: float, tenant: str | None = None) -> None:
        self.queue_wait.observe(seconds)
        if tenant is not None:
            self.tenant_admitted.labels(tenant).inc()

    def track_tenants(self, stats: Callable[[], Mapping[str, tuple[int, int]]]) -> None:
        """Per-tenant (queued, in flight) now, for the tenants that have either."""
        self._tenants = stats

    def refused(self, tenant: str, bound: str) -> None:
        self.refusals.labels(tenant, bound).inc()

    def observe_reuse(self, how: str) -> None:
        self.reused.labels(how).inc()

    def track_cohorts(self, open_cohorts: Callable[[], int]) -> None:
        self.cohorts_open.set_function(lambda: float(open_cohorts()))

    def observe_cohort(self, how: str, waits_s: Iterable[float]) -> None:
        """A cohort closed; each member's wait until then."""
        self.cohorts_closed.labels(how).inc()
        for seconds in waits_s:
            self.cohort_wait.observe(seconds)

    def observe_cut(self, reason: CutReason, missing: int) -> None:
        """A cohort cut by the timeout with ``missing`` members missing."""
        self.cohorts_cut.labels(reason).inc()
        self.cohort_members_missing.inc(missing)

    def observe_group(self, strategy: str, judgments: int, completions: int, merged: int) -> None:
        """A judged group: its judgments per completion rewarded, and its merged duplicates."""
        if completions:
            self.judgments_per_reward.labels(strategy).observe(judgments / completions)
        self.merged_duplicates.inc(merged)

    def track_swap_checks(self, pending: Callable[[], int], running: Callable[[], int]) -> None:
        self.swap_checks_pending.set_function(lambda: float(pending()))
        self.swap_checks_running.set_function(lambda: float(running()))

    def observe_request(self, mode: str, outcome: str, seconds: float | None = None) -> None:
        self.judgments.labels(mode, outcome).inc()
        if seconds is not None:
            self.judgment_duration.labels(mode).observe(seconds)

    def observe_run(self, judgment: Judgment) -> None:
        self.runs.labels(judgment.mode, judgment.outcome).inc()
        self.stage_duration.labels("rollouts").observe(judgment.rollout_seconds)
        if judgment.trace.reflections:
            self.stage_duration.labels("reflections").observe(judgment.reflection_seconds)
        if judgment.early_exit:
            self.early_exits.inc()
        self.parse_failures.labels("rollouts").inc(judgment.stage1_parse_failures)
        self.parse_failures.labels("reflections").inc(judgment.reflection_parse_failures)
        if judgment.outcome == "verdict":
            self.vote_margin.labels(judgment.mode).observe(vote_margin(judgment))

    def observe_engine_request(self, stage: Stage, result: GenerationResult) -> None:
        self.engine_requests.labels(stage).inc()
        self.outputs.labels(stage).inc(len(result.generations))
        self.generated_tokens.labels(stage).inc(result.generated_tokens)
        self.prompt_tokens.labels(stage).inc(result.prompt_tokens)
        self.cached_prompt_tokens.labels(stage).inc(result.cached_prompt_tokens)

    def observe_swap_check(self, source: SwapSource, result: SwapResult) -> None:
        self.swap_checks.labels(source, result).inc()

    def swap_check_dropped(self, reason: DropReason) -> None:
        self.swap_checks_dropped.labels(reason).inc()

    # --- exposition -----------------------------------------------------------------------------

    def render(self) -> bytes:
        """The judge's metrics followed by the engine's (and the process's) in text format."""
        return generate_latest(_Union((self.registry, engine_registry())))


class _TenantGauges(Collector):
    """Queued and in-flight judgments of each active tenant, read at scrape time (a tenant with
    neither has no series but the default one, so the set stays bounded by the active
    tenants)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        queued = GaugeMetricFamily(
            f"{PREFIX}tenant_judgments_queued",
            "Judgments waiting for an admission slot now, by tenant.",
            labels=["tenant"],
        )
        in_flight = GaugeMetricFamily(
            f"{PREFIX}tenant_judgments_in_flight",
            "Judgments holding an admission slot now, by tenant.",
            labels=["tenant"],
        )
        active = {"default": (0, 0), **self._metrics._tenants()}
        for tenant, (q, f) in sorted(active.items()):
            queued.add_metric([tenant], q)
            in_flight.add_metric([tenant], f)
        return [queued, in_flight]


def engine_registry() -> CollectorRegistry:
    """Where vLLM's metrics are: the default registry, or in multiprocess mode (vLLM's own
    convention, PROMETHEUS_MULTIPROC_DIR) the files every process writes."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return REGISTRY


class _Union:
    """Several registries read as one, for a single exposition."""

    def __init__(self, collectors: Iterable[Collector]) -> None:
        self._collectors = tuple(collectors)

    def collect(self) -> Iterable[Metric]:
        for collector in self._collectors:
            yield from collector.collect()
