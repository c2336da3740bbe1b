"""From the service's settings to what the engine and the judge are configured with: now the
``Settings`` methods (``engine_config()``, ``judge_config()``) and ``get_settings()``, which these
names call.
"""

from __future__ import annotations

from reflectrm.engines.config import EngineConfig
from reflectrm.judging.config import JudgeConfig
from reflectrm.settings import Settings, get_settings


def engine_config(settings: Settings) -> EngineConfig:
    return settings.engine_config()


def judge_config(settings: Settings) -> JudgeConfig:
    return settings.judge_config()


def settings_for(model: str | None = None) -> Settings:
    """Settings from the environment, with the model a command's --model names, if any."""
    return get_settings(model=model or None)
