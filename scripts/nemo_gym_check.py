"""Run NeMo Gym's own GenRM code against a running reflectrm service, and print what it got.

NeMo Gym is not a dependency of this project (it needs Python >= 3.13.14, Ray and vLLM). This
script imports Gym's code from a checkout (``--gym-src``, e.g. ``git archive`` of
NVIDIA-NeMo/Gym) and runs, unchanged:

- ``resources_servers/genrm_compare``: ``GenRMCompareResourcesServer.compare`` (the batch API,
  both strategies) and ``verify`` (the per-rollout cohort path), which build each comparison's
  request, parse the judge's reply (``parse_genrm_output``, retries included) and aggregate the
  rewards (``aggregate_scores``);
- ``responses_api_models/genrm_model``: ``GenRMModelMixin`` on ``VLLMModel`` (what
  ``GenRMModel`` is once ``base_url`` is set), which converts the request to a chat completion,
  appends the ``response_1``/``response_2`` messages and posts it with Gym's aiohttp client to
  ``{base_url}/chat/completions``, the service's URL plus ``/v1`` (``GENRM_BASE_URL``).

Two things are stood in for: the Gym-internal HTTP hop from genrm_compare to genrm_model (the
request is serialised as Gym's ServerClient does, validated as genrm_model's endpoint does, and
handed to it in-process) and ``LocalVLLMModel`` (it would import vLLM and Ray to launch a model
it skips when base_url is set). Run it with a Python that has Gym's light dependencies
(aiohttp, fastapi, omegaconf, openai, orjson, pydantic, requests, uvicorn, numpy, ray)::

    python scripts/nemo_gym_check.py --gym-src /tmp/gym-src --url http://127.0.0.1:8000 \\
        [--extra-body '{"reflectrm": {"mode": "vote"}}'] [--completion TEXT ...]

It prints one JSON object: each run's rewards and comparisons, and the raw replies' contents.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import types
from pathlib import Path
from typing import Any


def _load_gym(src: Path) -> dict[str, Any]:
    sys.path.insert(0, str(src))
    from pydantic import Field
    from responses_api_models.vllm_model.app import VLLMModel, VLLMModelConfig

    class LocalVLLMModelConfig(VLLMModelConfig):
        # The fields LocalVLLMModelConfig overrides (local_vllm_model/app.py); the launch
        # settings are not used with an external base_url.
        base_url: str | list[str] = Field(default_factory=list)
        api_key: str = "dummy"  # pragma: allowlist secret
        vllm_serve_kwargs: dict[str, Any] = Field(default_factory=dict)
        vllm_serve_env_vars: dict[str, str] = Field(default_factory=dict)

    stand_in = types.ModuleType("responses_api_models.local_vllm_model.app")
    stand_in.LocalVLLMModel = VLLMModel  # type: ignore[attr-defined]
    stand_in.LocalVLLMModelConfig = LocalVLLMModelConfig  # type: ignore[attr-defined]
    sys.modules["responses_api_models.local_vllm_model.app"] = stand_in

    from nemo_gym import server_utils
    from nemo_gym.openai_utils import NeMoGymResponse, NeMoGymResponseCreateParamsNonStreaming
    from resources_servers.genrm_compare import app as compare_app
    from responses_api_models.genrm_model.app import GenRMModelConfig, GenRMModelMixin

    return {
        "server_utils": server_utils,
        "VLLMModel": VLLMModel,
        "GenRMModelMixin": GenRMModelMixin,
        "GenRMModelConfig": GenRMModelConfig,
        "compare_app": compare_app,
        "Response": NeMoGymResponse,
        "CreateParams": NeMoGymResponseCreateParamsNonStreaming,
    }


class _Request:
    """What VLLMModel reads from the incoming request: a session id and headers."""

    def __init__(self, session_key: str) -> None:
        self.session = {session_key: "nemo-gym-check"}
        self.headers: dict[str, str] = {}


class _Reply:
    def __init__(self, body: Any) -> None:
        self._body = body

    async def json(self) -> Any:
        return self._body


class _ServerClient:
    """genrm_compare's ServerClient, for its one call: POST /v1/responses to genrm_model."""

    def __init__(self, gym: dict[str, Any], model: Any) -> None:
        self.gym, self.model = gym, model
        self.replies: list[str] = []

    async def post(self, server_name: str, url_path: str, json: Any) -> _Reply:
        assert url_path == "/v1/responses", url_path
        sent = json.model_dump(exclude_unset=True) if hasattr(json, "model_dump") else json
        body = self.gym["CreateParams"].model_validate(_roundtrip(sent))
        request = _Request(self.gym["server_utils"].SESSION_ID_KEY)
        try:
            response = await self.model.responses(request, body)
        except Exception as exc:  # genrm_model's endpoint would answer 500; the caller falls back
            self.replies.append(f"error: {type(exc).__name__}: {str(exc)[:300]}")
            raise
        dumped = response.model_dump(mode="json")
        texts = [
            c.get("text", "")
            for item in dumped["output"]
            if item.get("type") == "message"
            for c in item.get("content", [])
        ]
        self.replies.append("".join(texts))
        return _Reply(dumped)


def _roundtrip(obj: Any) -> Any:
    return json.loads(json.dumps(obj))


def _genrm_model(
    gym: dict[str, Any], base_url: str, api_key: str, reasoning: bool, extra_body: dict[str, Any]
) -> Any:
    class RemoteGenRM(gym["GenRMModelMixin"], gym["VLLMModel"]):  # type: ignore[misc]
        """GenRMModel once base_url is set: the mixin on VLLMModel (no local launch)."""

    config = gym["GenRMModelConfig"](
        host="127.0.0.1",
        port=0,
        entrypoint="app.py",
        name="genrm_model",
        base_url=base_url,
        api_key=api_key,
        model="nvidia/Qwen3-Nemotron-235B-A22B-GenRM",
        return_token_id_information=False,
        uses_reasoning_parser=reasoning,
        supports_principle_role=True,
        extra_body=extra_body or None,
    )
    return RemoteGenRM.model_construct(config=config, server_client=None)


def _compare_server(gym: dict[str, Any], client: _ServerClient, **overrides: Any) -> Any:
    app = gym["compare_app"]
    config = app.GenRMCompareConfig(
        host="127.0.0.1",
        port=0,
        entrypoint="app.py",
        name="genrm_compare",
        genrm_model_server={"type": "responses_api_models", "name": "genrm_model"},
        genrm_responses_create_params={
            "input": [],
            "max_output_tokens": 16384,
            "temperature": 0.6,
            "top_p": 0.95,
        },
        genrm_parse_retry_sleep_s=0.0,
        **overrides,
    )
    return app.GenRMCompareResourcesServer.model_construct(config=config, server_client=client)


def _response_obj(text: str) -> dict[str, Any]:
    return {
        "id": "resp_check",
        "created_at": 0,
        "model": "policy",
        "object": "response",
        "output": [
            {
                "id": "msg_check",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    gym = _load_gym(Path(args.gym_src))
    gym["server_utils"].set_global_aiohttp_client(
        gym["server_utils"].GlobalAIOHTTPAsyncClientConfig()
    )
    conversation = [{"role": "user", "content": args.prompt}]
    completions = args.completion
    out: dict[str, Any] = {"base_url": args.url.rstrip("/") + "/v1", "runs": []}
    for strategy in ("circular", "all_pairs"):
        for reasoning in (False, True):
            model = _genrm_model(gym, out["base_url"], args.api_key, reasoning, args.extra_body)
            client = _ServerClient(gym, model)
            server = _compare_server(gym, client, comparison_strategy=strategy)
            request = gym["compare_app"].GenRMCompareRequest(
                conversation_history=conversation,
                response_objs=[_response_obj(c) for c in completions],
            )
            result = await server.compare(request)
            out["runs"].append(
                {
                    "path": "compare",
                    "strategy": strategy,
                    "uses_reasoning_parser": reasoning,
                    "rewards": result.rewards,
                    "comparisons": result.comparison_results,
                    "replies": client.replies,
                }
            )
    # The per-rollout path: each rollout's /verify waits for its cohort, then gets its reward.
    model = _genrm_model(gym, out["base_url"], args.api_key, False, args.extra_body)
    client = _ServerClient(gym, model)
    server = _compare_server(gym, client, num_rollouts_per_prompt=len(completions))
    params = {"input": [{"role": "user", "content": args.prompt, "type": "message"}]}
    verifies = [
        server.verify(
            gym["compare_app"].GenRMCompareVerifyRequest(
                responses_create_params=params, response=_response_obj(c)
            )
        )
        for c in completions
    ]
    answers = await asyncio.gather(*verifies)
    out["runs"].append(
        {
            "path": "verify",
            "strategy": "circular",
            "rewards": [a.reward for a in answers],
            "replies": client.replies,
        }
    )
    await gym["server_utils"].get_global_aiohttp_client().close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gym-src", required=True, help="a NeMo Gym checkout")
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the reflectrm service")
    parser.add_argument("--api-key", default="dummy", help="genrm_model's api_key")
    parser.add_argument(
        "--extra-body",
        type=json.loads,
        default={},
        help='genrm_model\'s extra_body, JSON, e.g. \'{"reflectrm": {"mode": "vote"}}\'',
    )
    parser.add_argument("--prompt", default="What is the capital of France?")
    parser.add_argument(
        "--completion",
        action="append",
        help="a rollout's text (repeat; default: three answers of varying quality)",
    )
    args = parser.parse_args()
    args.completion = args.completion or [
        "The capital of France is Paris.",
        "The capital of France is Berlin.",
        "Paris.",
    ]
    print(json.dumps(asyncio.run(_run(args)), indent=2))


if __name__ == "__main__":
    main()
