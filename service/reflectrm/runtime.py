"""Transitional: ``reflectrm.app`` still imports these two names. Use the ``Settings`` methods
(``settings.engine_config()``, ``settings.judge_config()``) instead; this module goes once the app
no longer imports it."""

from __future__ import annotations

from reflectrm.engines.config import EngineConfig
from reflectrm.judging.config import JudgeConfig
from reflectrm.settings import Settings


def engine_config(settings: Settings) -> EngineConfig:
    return settings.engine_config()


def judge_config(settings: Settings) -> JudgeConfig:
    return settings.judge_config()
