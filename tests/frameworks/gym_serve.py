"""Runs in NeMo Gym's side environment (tests/frameworks/installed.py ``gym_python``): builds a
Gym run's configuration and starts Gym's servers from it, the way Gym's runner (``gym env start``,
nemo_gym/cli/env.py ``RunHelper``) does.

``config``: Gym's own resources_servers/genrm_compare/configs/genrm_compare.yaml (its
``genrm_compare`` and ``genrm_model`` servers; the agent blocks are left out, they name a policy
model this run has none of), with the given fields set on each server, resolved by Gym's
``GlobalConfigDictParser`` (hosts, free ports, defaults); printed as YAML.

``serve NAME``: one server, as the runner starts each: ``app.py`` run as ``__main__`` in the
server's folder, the resolved configuration in ``NEMO_GYM_CONFIG_DICT`` and the server's name in
``NEMO_GYM_CONFIG_PATH`` (the caller sets both). Two things differ, both for a judge given by
``base_url``, where genrm_model launches no model: no Ray cluster is started (the runner starts
one for servers that launch models on it; with ``base_url`` set genrm_model uses none), and the
four vLLM serve-argument helpers that genrm_model's module imports from vLLM (to launch a model)
are stand-ins that fail if called, since vLLM is not in the side environment.

    python gym_serve.py config '{"num_rollouts_per_prompt": 3}' '{"base_url": "http://..."}'
    NEMO_GYM_CONFIG_DICT=... NEMO_GYM_CONFIG_PATH=genrm_model python gym_serve.py serve genrm_model
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import types
from pathlib import Path
from typing import Any

COMPARE, MODEL = "genrm_compare_resources_server", "genrm_model"
AGENT_BLOCKS = (
    "genrm_simple_agent",
    "genrm_simple_agent_reasoning_off",
    "genrm_environment_server",
    "genrm_simple_agent_reasoning_off_environment_server",
)


def gym_root() -> Path:
    import nemo_gym

    return Path(nemo_gym.__file__).resolve().parents[1]


def config(compare: dict[str, Any], model: dict[str, Any]) -> str:
    from nemo_gym.global_config import GlobalConfigDictParser, GlobalConfigDictParserConfig
    from omegaconf import OmegaConf

    path = gym_root() / "resources_servers/genrm_compare/configs/genrm_compare.yaml"
    base = OmegaConf.load(path)
    for block in AGENT_BLOCKS:
        base.pop(block)
    base[COMPARE].resources_servers.genrm_compare.merge_with(compare)
    base[MODEL].responses_api_models.genrm_model.merge_with(model)
    # The policy model's fields every Gym run has; no policy model serves in this one.
    initial = OmegaConf.merge(
        base, {"policy_base_url": "", "policy_api_key": "", "policy_model_name": ""}
    )
    parsed = GlobalConfigDictParser().parse(
        GlobalConfigDictParserConfig(
            initial_global_config_dict=initial, skip_load_from_cli=True, skip_load_from_dotenv=True
        )
    )
    return OmegaConf.to_yaml(parsed)


def _absent(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("vLLM is not in this environment: genrm_model has a base_url to call")


def serve(name: str) -> None:
    from nemo_gym import server_utils
    from omegaconf import OmegaConf

    api = types.ModuleType("vllm.entrypoints.openai.api_server")
    for helper in (
        "FlexibleArgumentParser",
        "cli_env_setup",
        "make_arg_parser",
        "validate_parsed_serve_args",
    ):
        setattr(api, helper, _absent)
    for package in ("vllm", "vllm.entrypoints", "vllm.entrypoints.openai"):
        stand_in = types.ModuleType(package)
        stand_in.__path__ = []  # type: ignore[attr-defined]
        sys.modules[package] = stand_in
    sys.modules[api.__name__] = api
    server_utils.initialize_ray = lambda: None  # no Ray cluster (see the module's docstring)

    conf = OmegaConf.create(os.environ["NEMO_GYM_CONFIG_DICT"])[name]
    kind = next(iter(conf))
    server = next(iter(conf[kind]))
    folder = gym_root() / kind / server
    os.chdir(folder)
    sys.path.insert(0, str(folder))
    sys.argv = [conf[kind][server].entrypoint]
    runpy.run_path(sys.argv[0], run_name="__main__")


def main() -> None:
    # This file's folder holds the project's test helpers, not Gym's: off the import path.
    here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(here)]
    command, *rest = sys.argv[1:]
    if command == "config":
        compare, model = (json.loads(a) for a in rest)
        sys.stdout.write(config(compare, model))
    elif command == "serve":
        serve(rest[0])
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
