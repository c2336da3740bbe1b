"""From the service's settings to what the engine and the judge are configured with.

Everything that opens an engine (the app, the CLIs, evaluation, training, load tests, e2e tests)
goes through ``open_engine(engine_config(settings))``; nothing imports the HTTP app for it.
"""

from __future__ import annotations

from reflectrm.engines.config import EngineConfig, RemoteConfig
from reflectrm.judging.judge import JudgeConfig
from reflectrm.settings import Settings


def engine_config(settings: Settings) -> EngineConfig:
    key = settings.engine_api_key
    return EngineConfig(
        kind=settings.engine,
        model=settings.model,
        cache_dir=settings.cache_dir,
        template_version=settings.template_version,
        served_model_name=settings.served_model_name,
        device=settings.device,
        dtype=settings.dtype,
        max_model_len=settings.max_model_len,
        kv_cache_gib=settings.kv_cache_gib,
        gpu_memory_utilization=settings.gpu_memory_utilization,
        enforce_eager=settings.enforce_eager,
        enable_chunked_prefill=settings.enable_chunked_prefill,
        enable_prefix_caching=settings.enable_prefix_caching,
        max_num_seqs=settings.max_num_seqs,
        scheduling_policy=settings.scheduling_policy,
        tensor_parallel_size=settings.tensor_parallel_size,
        remote=RemoteConfig(
            url=settings.engine_url,
            api_key=key.get_secret_value() if key is not None else None,
            connect_timeout_s=settings.engine_connect_timeout_s,
            timeout_s=settings.engine_timeout_s,
            retries=settings.engine_retries,
            affinity=settings.engine_affinity,
            tokenizer=settings.engine_tokenizer,
            startup_timeout_s=settings.engine_startup_timeout_s,
        ),
    )


def judge_config(settings: Settings) -> JudgeConfig:
    return JudgeConfig(
        template_version=settings.template_version,
        temperature=settings.temperature,
        enforce_format=settings.enforce_format,
        max_analysis_chars=settings.max_analysis_chars,
        early_exit=settings.early_exit,
        seeded_sampling=settings.seeded_sampling,
    )


def settings_for(model: str | None = None) -> Settings:
    """Settings from the environment, with the model a command's --model names, if any."""
    return Settings(model=model) if model else Settings()
