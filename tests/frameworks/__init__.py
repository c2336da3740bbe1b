"""The trainers' own code that calls a reward function or a reward server, imported from their
PyPI packages (pinned by version and SHA-256 in requirements/frameworks.txt, fetched into the
cache by scripts/frameworks.sh; see ``installed``) with only their heavy imports stubbed
(torch-free stand-ins for ray, DataProto, tokenizers, loggers). Each file is the package's own,
checked against its wheel's RECORD when it is loaded.

- OpenRLHF 0.11.2: ``openrlhf/utils/agent.py`` (``SingleTurnAgentExecutor``), whole; its one
  heavy import, ``openrlhf.utils.logging_utils``, is stubbed (``openrlhf/utils/__init__.py``,
  which imports torch and deepspeed, is not run).
- verl 0.9.1: ``verl/trainer/ppo/reward.py`` (the custom reward loader, whole),
  ``verl/utils/import_utils.py`` (``load_extern_object``, whole),
  ``verl/experimental/reward_loop/reward_manager/naive.py`` (the reward loop's per-sample
  ``run_single``, whole), ``verl/workers/reward_manager/naive.py`` (the legacy manager, whole),
  ``verl/trainer/main_eval.py`` (only ``process_item`` is run: ``main`` needs hydra, ray and a
  parquet file). Stubbed: ``verl.DataProto`` (a list of items), ``RewardManagerBase`` and
  ``AbstractRewardManager`` (their constructors: they store the arguments), the registries, and
  ``verl.utils.reward_score``.

slime is on no registry: tests/unit/test_framework_slime.py states its documented calling
contract in this project's words instead. NeMo Gym's servers run in a side environment
(``gym_servers``).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import logging
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

from tests.frameworks import installed


def source(relative: str) -> tuple[str, str]:
    """An installed package's file: its text and its path (for tracebacks)."""
    path = installed.source(relative)
    return path.read_text(), str(path)


def module(name: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__path__ = []  # type: ignore[attr-defined]  # a package, so submodules import
    mod.__dict__.update(attrs)
    return mod


def exec_module(name: str, file: str) -> types.ModuleType:
    text, path = source(file)
    mod = types.ModuleType(name)
    mod.__file__ = path
    sys.modules[name] = mod
    exec(compile(text, path, "exec"), mod.__dict__)
    return mod


@contextlib.contextmanager
def modules(stubs: dict[str, types.ModuleType]) -> Iterator[None]:
    """``stubs`` in sys.modules for the duration; modules of the stubbed packages imported
    meanwhile go with them (never others: unloading numpy or torch breaks them)."""
    roots = {name.split(".")[0] for name in stubs}
    saved = {n: m for n, m in sys.modules.items() if n.split(".")[0] in roots}
    sys.modules.update(stubs)
    try:
        yield
    finally:
        for name in list(sys.modules):
            if name.split(".")[0] in roots:
                del sys.modules[name]
        sys.modules.update(saved)


def functions(file: str, names: list[str], namespace: dict[str, Any]) -> dict[str, Any]:
    """The named top-level functions of an installed file, without their decorators, defined in
    ``namespace`` (which stands for the file's imports)."""
    text, path = source(file)
    tree = ast.parse(text)
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    picked = [n for n in found if n.name in names]
    assert sorted(n.name for n in picked) == sorted(names), f"not all of {names} in {file}"
    for node in picked:
        node.decorator_list = []
    exec(compile(ast.Module(body=picked, type_ignores=[]), path, "exec"), namespace)
    return {name: namespace[name] for name in names}


# --- OpenRLHF ----------------------------------------------------------------------------------


def load_openrlhf_agent() -> types.ModuleType:
    """openrlhf/utils/agent.py as it is (``SingleTurnAgentExecutor``)."""
    logging_utils = module(
        "openrlhf.utils.logging_utils", init_logger=lambda name: logging.getLogger(name)
    )
    stubs = {
        "openrlhf": module("openrlhf"),
        "openrlhf.utils": module("openrlhf.utils"),
        "openrlhf.utils.logging_utils": logging_utils,
    }
    with modules(stubs):
        return exec_module("openrlhf_agent_0_11_2", "openrlhf/utils/agent.py")


# --- verl --------------------------------------------------------------------------------------


class DataProtoItem:
    def __init__(self, batch: dict[str, Any], non_tensor_batch: dict[str, Any]) -> None:
        self.batch = batch
        self.non_tensor_batch = non_tensor_batch


class DataProto:
    """What verl's reward managers read of a DataProto: items by index, slices, ``batch``."""

    def __init__(self, items: list[DataProtoItem]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, key: int | slice) -> Any:
        if isinstance(key, slice):
            return DataProto(self.items[key])
        return self.items[key]

    @property
    def batch(self) -> dict[str, Any]:
        import torch

        return {k: torch.stack([i.batch[k] for i in self.items]) for k in self.items[0].batch}


def _register(name: str) -> Callable[[type], type]:
    return lambda cls: cls


class _RewardManagerBase:  # verl/experimental/reward_loop/reward_manager/base.py's constructor
    def __init__(self, config: Any, tokenizer: Any, compute_score: Any) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.compute_score = compute_score
        try:  # verl/utils/ray_utils.py get_event_loop
            self.loop = asyncio.get_event_loop()
        except RuntimeError:
            self.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self.loop)


class _AbstractRewardManager:  # verl/workers/reward_manager/abstract.py, rm_scores absent
    def _extract_reward_from_rm_scores(self, data: Any, return_dict: bool = False) -> Any:
        return None


def _default_compute_score(*args: Any, **kwargs: Any) -> float:
    raise AssertionError("the custom reward function should have been used")


@contextlib.contextmanager
def verl() -> Iterator[types.SimpleNamespace]:
    """verl 0.9.1's reward loader, reward-loop manager, legacy manager and main_eval's
    ``process_item``, importable as verl would import them."""
    reward_score = module(
        "verl.utils.reward_score",
        default_compute_score=_default_compute_score,
        get_default_compute_score=lambda name=None: _default_compute_score,
    )
    stubs = {
        "verl": module("verl", DataProto=DataProto),
        "verl.utils": module("verl.utils"),
        "verl.utils.reward_score": reward_score,
        "verl.trainer": module("verl.trainer"),
        "verl.trainer.ppo": module("verl.trainer.ppo"),
        "verl.experimental": module("verl.experimental"),
        "verl.experimental.reward_loop": module("verl.experimental.reward_loop"),
        "verl.experimental.reward_loop.reward_manager": module(
            "verl.experimental.reward_loop.reward_manager", register=_register
        ),
        "verl.experimental.reward_loop.reward_manager.base": module(
            "verl.experimental.reward_loop.reward_manager.base",
            RewardManagerBase=_RewardManagerBase,
            RawRewardFn=Any,
        ),
        "verl.workers": module("verl.workers"),
        "verl.workers.reward_manager": module("verl.workers.reward_manager", register=_register),
        "verl.workers.reward_manager.abstract": module(
            "verl.workers.reward_manager.abstract", AbstractRewardManager=_AbstractRewardManager
        ),
    }
    with modules(stubs):
        exec_module("verl.utils.import_utils", "verl/utils/import_utils.py")
        reward = exec_module("verl.trainer.ppo.reward", "verl/trainer/ppo/reward.py")
        loop = "verl.experimental.reward_loop.reward_manager.naive"
        loop_naive = exec_module(loop, loop.replace(".", "/") + ".py")
        legacy = exec_module(
            "verl.workers.reward_manager.naive", "verl/workers/reward_manager/naive.py"
        )
        import numpy as np

        eval_ns: dict[str, Any] = {"np": np, "get_custom_reward_fn": reward.get_custom_reward_fn}
        process_item = functions("verl/trainer/main_eval.py", ["process_item"], eval_ns)
        yield types.SimpleNamespace(
            get_custom_reward_fn=reward.get_custom_reward_fn,
            RewardLoopNaive=loop_naive.NaiveRewardManager,
            LegacyNaive=legacy.NaiveRewardManager,
            process_item=process_item["process_item"],
        )
