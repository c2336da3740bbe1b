"""What OpenRLHF 0.11.2 sends to ``/get_reward`` (openrlhf/utils/agent.py, vendored unchanged in
tests/frameworks/): the response is told apart from the query however the prompt came back from
the tokenizer, and the executor's own reward code gets the service's answer."""

from __future__ import annotations

import pytest

from reflectrm.serving.limits import MIN_OVERLAP, split_query
from tests.frameworks import load_openrlhf_agent

CHAT = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France? Answer in one word, please.<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def test_a_query_that_starts_with_its_prompt_is_split_there():
    assert split_query(CHAT + "Paris.<|im_end|>", CHAT) == "Paris.<|im_end|>"
    assert split_query(CHAT, CHAT) == ""
    # Exactly as before, whitespace included.
    assert split_query("Q:  A ", "Q: ") == " A "


def test_a_prompt_cut_from_the_left_leaves_its_end_at_the_start_of_the_query():
    kept = CHAT[len(CHAT) // 2 :]  # OpenRLHF keeps the last max_length - max_tokens tokens
    assert split_query(kept + "Paris.", CHAT) == "Paris."
    # The cut fell inside a multi-byte character: the decoder gives U+FFFD for its bytes.
    assert split_query("\ufffd\ufffd" + kept + "Paris.", CHAT) == "Paris."


def test_tokenizers_that_do_not_decode_to_the_same_whitespace_still_split():
    # clean_up_tokenization_spaces: " ?" -> "?", " ," -> ","
    prompt = "User: Is it red , or blue ? Say which .\nAssistant:"
    decoded = "User: Is it red, or blue? Say which.\nAssistant:"
    assert split_query(decoded + " Blue.", prompt) == " Blue."
    # SentencePiece: a space after a special token comes back or goes away.
    prompt = "<s>[INST] Name a prime number larger than ten. [/INST]"
    decoded = "<s> [INST] Name a prime number larger than ten. [/INST]"
    assert split_query(decoded + " 11", prompt) == " 11"
    # The prompt's own trailing newline is the prompt's, not the response's.
    assert split_query(CHAT.replace("\n", " \n") + "Paris.", CHAT) == "Paris."


def test_a_query_of_another_prompt_is_not_split():
    assert split_query("Something else entirely, and a response.", CHAT) is None
    assert split_query("", CHAT) is None
    # Only the last few characters of the prompt match: too little to tell.
    assert split_query(CHAT[-(MIN_OVERLAP - 4) :] + "Paris.", CHAT) is None
    assert split_query("anything", "   ") is None


def test_the_longest_matching_end_of_the_prompt_is_taken():
    prompt = "ab ab ab ab ab ab ab ab ab ab ab ab ab ab: "
    # Cut from the left at an unknown place: everything matching the prompt's end is prompt.
    assert split_query("ab ab ab ab ab ab ab ab ab: yes", prompt) == "yes"


@pytest.mark.parametrize("cut", [0.0, 0.1, 0.5, 0.75])
def test_a_real_tokenizer_round_trip_splits_at_the_response(cut: float):
    tokenizers = pytest.importorskip("tokenizers")
    # A byte-level BPE tokenizer (as Qwen and Llama 3 use), trained here on the prompt itself.
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    prompt = CHAT.replace("France", "Fürstenberg-Österreich")
    tok.train_from_iterator([prompt, "Paris is the answer."], trainer=trainer)
    prompt_ids = tok.encode(prompt, add_special_tokens=False).ids
    prompt_ids = prompt_ids[int(cut * len(prompt_ids)) :]  # OpenRLHF's cut from the left
    response_ids = tok.encode("Paris, I think.", add_special_tokens=False).ids
    query = tok.decode(prompt_ids + response_ids, skip_special_tokens=False)
    assert split_query(query, prompt) == "Paris, I think."


# --- OpenRLHF's own executor code ----------------------------------------------------------


async def test_openrlhf_reward_func_path_calls_reward_func_in_a_thread(tmp_path):
    """The ``.py`` variant: OpenRLHF loads ``reward_func`` from the file and calls it as
    ``reward_func([query], [prompt], [label])`` in a thread, reading ``rewards``."""
    agent = load_openrlhf_agent()
    seen: list[tuple] = []
    path = tmp_path / "reward.py"
    path.write_text(
        "SEEN = []\n"
        "def reward_func(queries, prompts, labels):\n"
        "    SEEN.append((queries, prompts, labels))\n"
        "    return {'rewards': [0.75], 'scores': [0.75], 'extra_logs': {'x': [1.0]}}\n"
    )
    executor = agent.SingleTurnAgentExecutor(str(path))
    out = await executor._fetch_rewards_via_func(["q a"], ["q "], ["ref"])
    assert out == [{"rewards": [0.75], "scores": [0.75], "extra_logs": {"x": [1.0]}}]
    seen.extend(executor.reward_func.__globals__["SEEN"])
    assert seen == [(["q a"], ["q "], ["ref"])]
