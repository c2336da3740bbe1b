"""Each default is declared once: in the engine's, the judge's and the swap checks' configs, which
the settings mirror and build. And the environment reaches the built configs."""

from __future__ import annotations

import ast
import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from reflectrm.engines.config import EngineConfig, RemoteConfig
from reflectrm.judging.config import JudgeConfig
from reflectrm.settings import Settings, SwapCheckConfig, config_sources, get_settings

CONFIGS = (EngineConfig, RemoteConfig, JudgeConfig, SwapCheckConfig)
SERVICE = Path(__file__).resolve().parents[2] / "service" / "reflectrm"

# The config fields no setting mirrors: each keeps its config's default in the service.
NOT_SETTINGS = {
    EngineConfig: {"remote", "resolved"},  # remote: built from the engine_* settings
    RemoteConfig: {"backoff_s"},
    JudgeConfig: set(),
    SwapCheckConfig: {"poll_s"},
}

# The config fields whose default is not the setting's: the caller passes the value in (the
# engine takes the judge's template version from the settings, and knows no default of its own).
PASSED_IN = {(EngineConfig, "template_version")}

# A value other than the default for every mirrored setting, as the environment spells it, and
# as the config should then hold it.
ENV: dict[str, tuple[str, Any]] = {
    "engine": ("remote", "remote"),
    "model": ("/models/judge", "/models/judge"),
    "cache_dir": ("/tmp/reflectrm-cache", Path("/tmp/reflectrm-cache")),
    "template_version": ("v3", "v3"),
    "served_model_name": ("judge", "judge"),
    "device": ("cpu", "cpu"),
    "dtype": ("bfloat16", "bfloat16"),
    "max_model_len": ("4096", 4096),
    "kv_cache_gib": ("1.5", 1.5),
    "gpu_memory_utilization": ("0.5", 0.5),
    "enforce_eager": ("false", False),
    "enable_chunked_prefill": ("true", True),
    "enable_prefix_caching": ("false", False),
    "max_num_seqs": ("8", 8),
    "scheduling_policy": ("priority", "priority"),
    "tensor_parallel_size": ("2", 2),
    "engine_url": ("http://router:8000", "http://router:8000"),
    "engine_api_key": ("fleet-secret", "fleet-secret"),  # unwrapped from its SecretStr
    "engine_connect_timeout_s": ("2.5", 2.5),
    "engine_timeout_s": ("30", 30.0),
    "engine_retries": ("5", 5),
    "engine_affinity": ("false", False),
    "engine_tokenizer": ("default", "default"),
    "engine_startup_timeout_s": ("60", 60.0),
    "temperature": ("0.7", 0.7),
    "enforce_format": ("false", False),
    "max_analysis_chars": ("500", 500),
    "early_exit": ("false", False),
    "scoring": ("votes", "votes"),
    "margin_verdict_weight": ("0.5", 0.5),
    "margin_likelihood_weight": ("2.5", 2.5),
    "seeded_sampling": ("false", False),
    "swap_check_fraction": ("0.5", 0.5),
    "swap_check_max_pending": ("3", 3),
    "swap_check_concurrency": ("2", 2),
    "swap_check_busy_in_flight": ("7", 7),
    "request_timeout_s": ("42", 42.0),
}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("REFLECTRM_"):
            monkeypatch.delenv(name)


def built(settings: Settings, cls: type) -> Any:
    return {
        EngineConfig: settings.engine_config,
        RemoteConfig: lambda: settings.engine_config().remote,
        JudgeConfig: settings.judge_config,
        SwapCheckConfig: settings.swap_check_config,
    }[cls]()


def config_default(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def setting_default(name: str) -> Any:
    value = Settings.model_fields[name].get_default(call_default_factory=True)
    return value.get_secret_value() if isinstance(value, SecretStr) else value


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_every_config_field_but_the_named_ones_is_a_setting(cls: type) -> None:
    unmirrored = {f.name for f in dataclasses.fields(cls)} - set(config_sources(cls))
    assert unmirrored == NOT_SETTINGS[cls]


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_a_mirrored_setting_has_its_config_fields_default(cls: type) -> None:
    sources = config_sources(cls)
    for f in dataclasses.fields(cls):
        if f.name in sources and (cls, f.name) not in PASSED_IN:
            setting = sources[f.name]
            assert setting_default(setting) == config_default(f), f"{cls.__name__}.{f.name}"


def test_the_settings_defaults_build_the_configs_defaults() -> None:
    # The base model: no manifest names a template or margin weights for it.
    settings = Settings(model="base")
    assert settings.engine_config() == EngineConfig(
        model="base", template_version=JudgeConfig().template_version
    )
    assert settings.judge_config() == JudgeConfig()
    assert settings.swap_check_config() == SwapCheckConfig()


def test_the_default_judge_is_served_with_its_manifests_template_and_margin_weights() -> None:
    from reflectrm.checkpoints.judges import DEFAULT_MODEL, SHIPPED

    manifest = SHIPPED[DEFAULT_MODEL].manifest()
    config = Settings().judge_config()
    assert config.template_version == manifest["template_version"]
    assert config.margin_verdict_weight == manifest["margin"]["verdict_weight"]
    assert config.margin_likelihood_weight == manifest["margin"]["likelihood_weight"]
    # A setting given explicitly wins over the manifest.
    assert Settings(margin_likelihood_weight=0.0).judge_config().margin_likelihood_weight == 0.0


def test_every_mirrored_setting_is_exercised_below() -> None:
    mirrored = {s for cls in CONFIGS for s in config_sources(cls).values()}
    assert mirrored == set(ENV)


def test_the_environment_reaches_the_built_configs(monkeypatch: pytest.MonkeyPatch) -> None:
    for setting, (text, _) in ENV.items():
        monkeypatch.setenv(f"REFLECTRM_{setting.upper()}", text)
    settings = get_settings()
    for cls in CONFIGS:
        config = built(settings, cls)
        for field_name, setting in config_sources(cls).items():
            expected = ENV[setting][1]
            assert getattr(config, field_name) == expected, f"{cls.__name__}.{field_name}"
            assert expected != setting_default(setting)  # the default would prove nothing
    # The fields without a setting keep their defaults.
    assert settings.engine_config().remote.backoff_s == RemoteConfig().backoff_s
    assert settings.swap_check_config().poll_s == SwapCheckConfig().poll_s


def test_get_settings_overrides_win_and_none_is_not_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REFLECTRM_MODEL", "/from/env")
    monkeypatch.setenv("REFLECTRM_PORT", "9000")
    assert get_settings().model == "/from/env"
    assert get_settings(model=None).model == "/from/env"
    overridden = get_settings(model="/from/flag", max_num_seqs=3)
    assert (overridden.model, overridden.port) == ("/from/flag", 9000)
    assert overridden.engine_config().max_num_seqs == 3


def test_the_old_import_paths_still_work() -> None:
    from reflectrm.checkpoints.base import default_cache_dir
    from reflectrm.engines.config import DEFAULT_MODEL as ENGINE_DEFAULT
    from reflectrm.judging.judge import JudgeConfig as JudgeConfigFromJudge
    from reflectrm.settings import DEFAULT_MODEL
    from reflectrm.settings import default_cache_dir as from_settings

    assert JudgeConfigFromJudge is JudgeConfig
    assert DEFAULT_MODEL == ENGINE_DEFAULT == "default"
    assert from_settings is default_cache_dir


def _reads_of_the_environment(path: Path) -> list[str]:
    """The names a module looks up in os.environ / os.getenv: literals, or module constants."""
    tree = ast.parse(path.read_text())
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name) and isinstance(node.value.value, str)
    }

    def name_of(arg: ast.expr) -> str | None:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value
        if isinstance(arg, ast.Name):
            return constants.get(arg.id)
        return None

    def is_environ(node: ast.expr) -> bool:
        return ast.unparse(node) in ("os.environ", "environ")

    names = []
    for node in ast.walk(tree):
        arg = None
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            if isinstance(func, ast.Attribute) and (
                (func.attr in ("get", "pop", "setdefault") and is_environ(func.value))
                or ast.unparse(func) in ("os.getenv",)
            ):
                arg = node.args[0]
        elif isinstance(node, ast.Subscript) and is_environ(node.value):
            arg = node.slice
        if arg is not None and (name := name_of(arg)) is not None:
            names.append(name)
    return names


def test_no_module_reads_a_setting_from_the_environment_itself() -> None:
    settings = {f"REFLECTRM_{name.upper()}" for name in Settings.model_fields}
    offenders = {
        str(path.relative_to(SERVICE)): read
        for path in sorted(SERVICE.rglob("*.py"))
        if (read := sorted(set(_reads_of_the_environment(path)) & settings))
    }
    assert not offenders, f"read the setting through get_settings() instead: {offenders}"


def test_the_environment_reads_are_found() -> None:
    """The scan above sees a read of a constant's name (what it must not miss)."""
    harness = SERVICE.parents[1] / "harness" / "reflectrm_harness"
    reads = _reads_of_the_environment(harness / "evaluation" / "benchmarks.py")
    assert "REFLECTRM_DATA_DIR" in reads
