"""The trainers' own code that calls a reward function or a reward server, loaded from its files
as they are (vendored beside this file, ``.py.txt`` so that the linters leave them alone) with
only their heavy imports (torch-free stand-ins for ray, DataProto, tokenizers, loggers) stubbed.

- ``openrlhf-0.11.2/agent.py.txt``: ``openrlhf/utils/agent.py`` from the openrlhf 0.11.2 wheel
  (PyPI), whole; its one heavy import, ``openrlhf.utils.logging_utils``, is stubbed.
- ``verl-0.9.1/``: from the verl 0.9.1 wheel (PyPI): ``verl/trainer/ppo/reward.py`` (the custom
  reward loader, whole), ``verl/utils/import_utils.py`` (``load_extern_object``, whole),
  ``verl/experimental/reward_loop/reward_manager/naive.py`` (the reward loop's per-sample
  ``run_single``, whole), ``verl/workers/reward_manager/naive.py`` (the legacy manager, whole),
  ``verl/trainer/main_eval.py`` (only ``process_item`` is run: ``main`` needs hydra, ray and a
  parquet file). Stubbed: ``verl.DataProto`` (a list of items), ``RewardManagerBase`` and
  ``AbstractRewardManager`` (their constructors: they store the arguments), the registries, and
  ``verl.utils.reward_score``.
- ``slime-624b824/``: from THUDM/slime at commit 624b824a8 (after v0.3.1):
  ``slime/rollout/rm_hub/__init__.py`` (``async_rm``, ``batched_async_rm``),
  ``slime/rollout/sglang_rollout.py`` (``generate_and_rm``, ``generate_and_rm_group``),
  ``slime/utils/misc.py`` (``load_function``), ``slime/utils/types.py`` (``Sample``, whole).
  Functions are taken out of their files with ``ast`` (the files import sglang, megatron and
  the rule-based graders); ``GenerateState``, the tracing decorators, the sample hooks and
  SGLang generation are stubbed.

All three are Apache-2.0. ``MANIFEST`` holds each file's SHA-256, checked on every load.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import hashlib
import logging
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


def source(name: str) -> str:
    """A vendored file's text, checked against MANIFEST (it is the framework's, unchanged)."""
    data = (HERE / name).read_bytes()
    digests = dict(
        reversed(line.split(None, 1))  # type: ignore[misc]
        for line in (HERE / "MANIFEST").read_text().splitlines()
        if line.strip()
    )
    assert hashlib.sha256(data).hexdigest() == digests[name], f"{name} was changed"
    return data.decode()


def module(name: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__path__ = []  # type: ignore[attr-defined]  # a package, so submodules import
    mod.__dict__.update(attrs)
    return mod


def exec_module(name: str, file: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__file__ = str(HERE / file)
    sys.modules[name] = mod
    exec(compile(source(file), str(HERE / file), "exec"), mod.__dict__)
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
    """The named top-level functions of a vendored file, without their decorators, defined in
    ``namespace`` (which stands for the file's imports)."""
    text = source(file)
    tree = ast.parse(text)
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    picked = [n for n in found if n.name in names]
    assert sorted(n.name for n in picked) == sorted(names), f"not all of {names} in {file}"
    for node in picked:
        node.decorator_list = []
    exec(compile(ast.Module(body=picked, type_ignores=[]), str(HERE / file), "exec"), namespace)
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
        return exec_module("openrlhf_agent_0_11_2", "openrlhf-0.11.2/agent.py.txt")


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
        d = "verl-0.9.1/"
        exec_module("verl.utils.import_utils", d + "utils_import_utils.py.txt")
        reward = exec_module("verl.trainer.ppo.reward", d + "trainer_ppo_reward.py.txt")
        loop_naive = exec_module(
            "verl.experimental.reward_loop.reward_manager.naive", d + "reward_loop_naive.py.txt"
        )
        legacy = exec_module("verl.workers.reward_manager.naive", d + "workers_naive.py.txt")
        import numpy as np

        eval_ns: dict[str, Any] = {"np": np, "get_custom_reward_fn": reward.get_custom_reward_fn}
        process_item = functions(d + "trainer_main_eval.py.txt", ["process_item"], eval_ns)
        yield types.SimpleNamespace(
            get_custom_reward_fn=reward.get_custom_reward_fn,
            RewardLoopNaive=loop_naive.NaiveRewardManager,
            LegacyNaive=legacy.NaiveRewardManager,
            process_item=process_item["process_item"],
        )


# --- slime -------------------------------------------------------------------------------------


class _GenerateState:
    def __init__(self, args: Any) -> None:
        self.aborted = False
        self.semaphore = asyncio.Semaphore(64)
        self.group_sampling_seeds = list(range(64))

    @contextlib.contextmanager
    def dp_rank_context(self) -> Iterator[None]:
        yield


@contextlib.contextmanager
def _trace_span(*args: Any, **kwargs: Any) -> Iterator[None]:
    yield


async def _no_hooks(args: Any, sample: Any, evaluation: bool = False) -> Any:
    return sample


def slime() -> types.SimpleNamespace:
    """slime's ``Sample``, its reward dispatch (rm_hub) and its group rollout
    (``generate_and_rm_group``), as they are; SGLang generation is the caller's
    ``--custom-generate-function-path`` (every test gives one)."""
    import inspect
    import random
    import uuid
    from argparse import Namespace

    d = "slime-624b824/"
    misc = module("slime.utils.misc", decode_int32_meta_array=lambda *a, **k: None)
    stubs = {
        "slime": module("slime"),
        "slime.utils": module("slime.utils"),
        "slime.utils.misc": misc,
    }
    with modules(stubs):
        types_mod = exec_module("slime_types_624b824", d + "utils_types.py.txt")
    load = functions(
        d + "utils_misc.py.txt", ["load_function"], {"importlib": __import__("importlib")}
    )
    rm_ns: dict[str, Any] = {
        "asyncio": asyncio,
        "random": random,
        "logger": logging.getLogger("slime.rm_hub"),
        "load_function": load["load_function"],
        "Sample": types_mod.Sample,
    }
    rm = functions(d + "rollout_rm_hub_init.py.txt", ["async_rm", "batched_async_rm"], rm_ns)

    async def _generate(args: Any, sample: Any, sampling_params: Any) -> Any:
        raise AssertionError("the tests generate through --custom-generate-function-path")

    rollout_ns: dict[str, Any] = {
        "asyncio": asyncio,
        "inspect": inspect,
        "uuid": uuid,
        "Namespace": Namespace,
        "Any": Any,
        "Sample": types_mod.Sample,
        "GenerateState": _GenerateState,
        "load_function": load["load_function"],
        "generate": _generate,
        "apply_rollout_sample_hooks": _no_hooks,
        "trace_span": _trace_span,
        **rm,
    }
    rollout = functions(
        d + "rollout_sglang_rollout.py.txt",
        ["generate_and_rm", "generate_and_rm_group"],
        rollout_ns,
    )
    return types.SimpleNamespace(Sample=types_mod.Sample, **rm, **rollout)
