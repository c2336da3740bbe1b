"""The vLLM engine's chat rendering: the model's own template, thinking off where it knows how."""

from __future__ import annotations

from types import SimpleNamespace

from reflectrm.engines.base import Prompt, SamplingSpec
from reflectrm.engines.vllm_engine import VLLMEngine


class FakeTokenizer:
    def __init__(self, chat_template: str) -> None:
        self.chat_template = chat_template
        self.kwargs: dict = {}

    def apply_chat_template(self, messages, tokenize, add_generation_prompt, **kwargs):
        assert tokenize is False
        assert add_generation_prompt is True
        self.kwargs = kwargs
        return "|".join(m["content"] for m in messages) + "|assistant:"

    def encode(self, text, add_special_tokens):
        assert add_special_tokens is False  # the chat template already placed them
        return [len(w) for w in text.split("|")]


MESSAGES = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"}]


def test_thinking_switched_off_where_the_template_knows_it():
    tok = FakeTokenizer("{% if enable_thinking is defined and not enable_thinking %}...{% endif %}")
    prompt = VLLMEngine(None, tok, "qwen3", 4096).render_chat(MESSAGES)
    assert tok.kwargs == {"enable_thinking": False}
    assert prompt.text == "sys|hello|assistant:"
    assert prompt.token_ids == (3, 5, 10)


def test_no_thinking_switch_for_templates_without_it():
    tok = FakeTokenizer("{% for message in messages %}{{ message.content }}{% endfor %}")
    VLLMEngine(None, tok, "smol", 4096).render_chat(MESSAGES)
    assert tok.kwargs == {}


class RecordingLLM:
    """Just enough of AsyncLLM for generate(): records the priority each request was given."""

    errored = False

    def __init__(self) -> None:
        self.priorities: list[int] = []

    async def generate(self, prompt, params, request_id, priority=0):
        self.priorities.append(priority)
        yield SimpleNamespace(outputs=[], num_cached_tokens=0)


async def test_priority_reaches_the_engine_only_where_it_schedules_by_priority():
    spec = SamplingSpec(n=1, max_tokens=4, priority=-1)
    prompt = Prompt(text="x", token_ids=(1, 2))
    tok = FakeTokenizer("")
    for scheduling, expected in ((True, -1), (False, 0)):
        llm = RecordingLLM()
        engine = VLLMEngine(llm, tok, "smol", 4096, priority_scheduling=scheduling)
        result = await engine.generate(prompt, spec, "r")
        assert llm.priorities == [expected]
        assert result.generations == ()
