"""The vLLM engine's chat rendering: the model's own template, thinking off where it knows how."""

from __future__ import annotations

from reflectrm.engines.vllm_engine import VLLMEngine


class FakeTokenizer:
    def __init__(self, chat_template: str) -> None:
        self.chat_template = chat_template
        self.kwargs: dict = {}

    def apply_chat_template(self, messages, tokenize, add_generation_prompt, **kwargs):
        assert tokenize is False and add_generation_prompt is True
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
    assert prompt.text == "sys|hello|assistant:" and prompt.token_ids == (3, 5, 10)


def test_no_thinking_switch_for_templates_without_it():
    tok = FakeTokenizer("{% for message in messages %}{{ message.content }}{% endfor %}")
    VLLMEngine(None, tok, "smol", 4096).render_chat(MESSAGES)
    assert tok.kwargs == {}
