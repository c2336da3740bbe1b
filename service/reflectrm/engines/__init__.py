"""Engines: the interface the judging code needs, and the one factory that opens them."""

from reflectrm.engines.config import EngineConfig
from reflectrm.engines.factory import open_engine, resolve

__all__ = ["EngineConfig", "open_engine", "resolve"]
