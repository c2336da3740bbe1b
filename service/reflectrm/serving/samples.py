"""The response inside an OpenRLHF sample: ``query`` minus its prompt, as OpenRLHF builds it.

OpenRLHF (0.11.2, openrlhf/utils/agent.py ``SingleTurnAgentExecutor.execute``) posts
``prompts = [prompt]`` (the dataset's prompt text, chat template applied) and
``query = [tokenizer.decode(prompt_ids + response_ids, skip_special_tokens=False)]``, where
``prompt_ids = tokenizer(prompt, add_special_tokens=False)`` cut from the left to
``max_length - max_tokens`` tokens when the prompt is longer. So ``query`` starts with
``prompt`` only when decoding the prompt's tokens gives its text back and nothing was cut:

- a prompt cut from the left leaves a *suffix* of the prompt at the start of ``query``; a cut
  inside a multi-byte character decodes to one to three U+FFFD characters before it;
- some tokenizers do not decode to the text they encoded: SentencePiece drops or adds a space
  (at the start, after special tokens), ``clean_up_tokenization_spaces`` removes the space
  before punctuation (``" ,"`` to ``","``).

``split_query`` finds where the prompt ends in the query all the same: exactly when the query
starts with the prompt (the common case, byte-level BPE tokenizers such as Qwen's and Llama
3's); else by aligning the two texts with every whitespace character left out, the longest
suffix of the prompt that starts the query (after at most ``MAX_JUNK`` characters such as
U+FFFD). It answers None when no such suffix of at least ``MIN_OVERLAP`` characters (or the
whole prompt, if shorter) is there: the query is not this prompt's.
"""

from __future__ import annotations

MIN_OVERLAP = 16  # non-space characters of the prompt that must start the query
MAX_JUNK = 4  # characters before them that may be left of a cut character
MAX_TRIES = 32  # places in the query where the prompt's end is tried, per offset


def _squeezed(text: str) -> tuple[str, list[int]]:
    """``text`` without whitespace, and the index in ``text`` of each character kept."""
    kept = [i for i, ch in enumerate(text) if not ch.isspace()]
    return "".join(text[i] for i in kept), kept


def _overlap(prompt: str, query: str, start: int) -> int:
    """The length of the longest suffix of ``prompt`` that ``query[start:]`` starts with, if it
    is at least ``MIN_OVERLAP`` long or the whole prompt; else 0.

    The suffix ends where the prompt's last ``MIN_OVERLAP`` characters (its tail) occur in the
    query, so the tail's places in the query are tried from the right (the longest first). A
    wrong place is one where the response repeats the prompt's tail, which is rare; repeats
    inside the prompt (few-shot examples, repeated context) cost nothing. After ``MAX_TRIES``
    wrong places the search gives up, so no body can make it quadratic."""
    if query.startswith(prompt, start):
        return len(prompt)
    if len(prompt) <= MIN_OVERLAP:
        return 0
    tail = prompt[-MIN_OVERLAP:]
    # A suffix shorter than the prompt ends in the query before start + len(prompt).
    end = min(len(query), start + len(prompt) - 1)
    at = query.rfind(tail, start, end)
    for _ in range(MAX_TRIES):
        if at == -1:
            break
        length = at + MIN_OVERLAP - start
        if query.startswith(prompt[-length:], start):
            return length
        at = query.rfind(tail, start, at + MIN_OVERLAP - 1)
    return 0


def split_query(query: str, prompt: str) -> str | None:
    """The response in ``query``: what follows the prompt (or the part of it OpenRLHF kept).
    None when the query does not start with (a suffix of) the prompt."""
    if query.startswith(prompt):
        return query[len(prompt) :]
    squeezed_prompt, _ = _squeezed(prompt)
    squeezed_query, positions = _squeezed(query)
    if not squeezed_prompt:
        return None
    for junk in range(min(MAX_JUNK, len(squeezed_query)) + 1):
        matched = _overlap(squeezed_prompt, squeezed_query, junk)
        if matched:
            break
    else:
        return None
    end = positions[junk + matched - 1] + 1  # just past the prompt's last non-space character
    rest = query[end:]
    # The whitespace after the prompt's last character is the prompt's when the prompt ends in
    # whitespace (e.g. the newline after "assistant"); how much of it the decoder gave back
    # varies, so all of it goes. Else it is the response's.
    return rest.lstrip() if prompt[-1:].isspace() else rest
