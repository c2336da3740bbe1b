"""A policy trained by GRPO on a live reflectrm service's rewards, measured by what the judge
never sees.

The task: short arithmetic and unit questions with known answers ("What is 37 + 48?", "How many
minutes are in 3 hours?"), made by a seeded generator and split by question into train,
development and held-out sets. TRL's ``GRPOTrainer`` trains the policy (LoRA on every linear
layer); its reward is the service's, through ``reflectrm.integrations.trl.ReflectRMReward``
(strategy ``reference``: each completion against a worked reference answer, both orders pooled,
the reward endpoints' default mode). The independent measure is exact match on held-out
questions: the numbers a completion states, besides the question's own, are exactly the answer.
The judge sees neither the measure nor the held-out questions.

Every step also logs what a team watches for reward hacking (``metrics.jsonl``): the reward, the
exact-match share and the non-answer share of the step's completions (zero-weight reward
functions: logged, never trained on) and their mean length.

    reflectrm serve &                       # the judge (make serve)
    python -m examples.policy_grpo train --url http://127.0.0.1:8000 --out runs/policy
    python -m examples.policy_grpo measure --url http://127.0.0.1:8000 --out runs/policy

``train`` resumes from the last saved step of ``--out``; ``measure`` writes the held-out figures
before and after training, with a paired 95% interval, and the judge's agreement with exact
match on the policy's own completions (``measure.json``). docs/rlhf.md shows a run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# --- the task -------------------------------------------------------------------------------

SPLIT_SHARES = {"train": 0.7, "dev": 0.1, "heldout": 0.2}


@dataclass(frozen=True)
class Question:
    """One question, its answer and a worked reference answer (what the judge compares with)."""

    id: str
    question: str
    answer: int
    reference: str
    operands: tuple[int, ...]
    kind: str


def _arith(rng: random.Random) -> Question:
    op = rng.choice("+-x")
    if op == "+":
        a, b = rng.randint(2, 40), rng.randint(2, 9)
        answer, shown = a + b, "+"
    elif op == "-":
        a, b = rng.randint(11, 40), rng.randint(2, 9)
        answer, shown = a - b, "-"
    else:
        a, b = rng.randint(2, 12), rng.randint(2, 9)
        answer, shown = a * b, "*"
    return Question(
        id=f"{a}{shown}{b}",
        question=f"What is {a} {shown} {b}?",
        answer=answer,
        reference=f"{a} {shown} {b} = {answer}.",
        operands=(a, b),
        kind="arithmetic",
    )


UNITS = (
    ("minutes", "hours", 60),
    ("seconds", "minutes", 60),
    ("centimetres", "metres", 100),
    ("days", "weeks", 7),
    ("months", "years", 12),
    ("hours", "days", 24),
    ("grams", "kilograms", 1000),
)


def _units(rng: random.Random) -> Question:
    small, big, factor = rng.choice(UNITS)
    n = rng.randint(2, 9)
    return Question(
        id=f"{n}{big}->{small}",
        question=f"How many {small} are in {n} {big}?",
        answer=n * factor,
        reference=f"There are {n * factor} {small} in {n} {big} ({n} x {factor}).",
        operands=(n, factor),
        kind="units",
    )


def make_questions(seed: int = 0, count: int = 500) -> dict[str, list[Question]]:
    """``count`` distinct questions (three arithmetic to one unit question), split by question
    into train, dev and held-out by ``SPLIT_SHARES``, each split in a seeded order."""
    rng = random.Random(seed)
    seen: dict[str, Question] = {}
    for _ in range(100 * count):
        if len(seen) == count:
            break
        q = _units(rng) if rng.random() < 0.25 else _arith(rng)
        seen.setdefault(q.id, q)
    else:
        raise ValueError(f"the generator makes fewer than {count} distinct questions")
    questions = list(seen.values())
    rng.shuffle(questions)
    cut1 = int(count * SPLIT_SHARES["train"])
    cut2 = cut1 + int(count * SPLIT_SHARES["dev"])
    return {
        "train": questions[:cut1],
        "dev": questions[cut1:cut2],
        "heldout": questions[cut2:],
    }


# --- the independent measure -----------------------------------------------------------------

_NUMBER = re.compile(r"(?<![\w.])-?\d{1,3}(?:,\d{3})+(?![\d])|(?<![\w.])-?\d+(?![\d])")
# A non-answer states no number of its own: the question's operands alone, or nothing.
NON_ANSWER = "non_answer"


def numbers_in(text: str) -> list[int]:
    return [int(m.replace(",", "")) for m in _NUMBER.findall(text)]


def grade(completion: str, answer: int, operands: Sequence[int]) -> str:
    """``right`` when the numbers the completion states besides the question's own are exactly
    the answer, ``non_answer`` when it states none, else ``wrong``."""
    own = {n for n in numbers_in(completion) if n not in operands or n == answer}
    if not own:
        return NON_ANSWER
    return "right" if own == {answer} else "wrong"


def exact_match_reward(
    completions: list[Any], answer: list[int], operands: list[list[int]], **_: Any
) -> list[float]:
    """1.0 for an exact match, else 0.0: logged beside the reward with weight 0, never trained
    on."""
    rows = zip(completions, answer, operands, strict=True)
    return [float(grade(_text(c), a, o) == "right") for c, a, o in rows]


def non_answer_reward(
    completions: list[Any], answer: list[int], operands: list[list[int]], **_: Any
) -> list[float]:
    """1.0 for a completion that states no number of its own (weight 0: the hacking watch)."""
    rows = zip(completions, answer, operands, strict=True)
    return [float(grade(_text(c), a, o) == NON_ANSWER) for c, a, o in rows]


def _text(completion: Any) -> str:
    if isinstance(completion, str):
        return completion
    return str(completion[-1]["content"]) if completion else ""


def rows(questions: Sequence[Question]) -> list[dict[str, Any]]:
    """TRL dataset rows: a conversational prompt, the reference the judge compares with, and
    the answer and operands the logged measure reads."""
    return [
        {
            "prompt": [{"role": "user", "content": q.question}],
            "reference": q.reference,
            "answer": q.answer,
            "operands": list(q.operands),
        }
        for q in questions
    ]


# --- training --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSettings:
    policy: str
    steps: int = 60
    prompts_per_step: int = 4
    group_size: int = 4
    max_completion_length: int = 48
    learning_rate: float = 2e-4
    kl_beta: float = 0.0
    temperature: float = 1.0
    lora_r: int = 16
    save_steps: int = 5
    threads: int = 1
    seed: int = 0
    question_seed: int = 0


METRICS_FILE = "metrics.jsonl"
TRAINER_DIR = "trainer"
ADAPTER_DIR = "adapter"


def build_trainer(
    settings: RunSettings,
    url: str,
    out: Path,
    reward_funcs: Sequence[Callable[..., Any]] | None = None,
) -> Any:
    """The GRPOTrainer of a run: the service's reward (weight 1) and the two watched measures
    (weight 0), a metrics file written on every logged step."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from reflectrm.integrations.trl import ReflectRMReward

    torch.set_num_threads(settings.threads)
    tokenizer = AutoTokenizer.from_pretrained(settings.policy)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(settings.policy, dtype=torch.float32)
    questions = make_questions(settings.question_seed)
    reward = ReflectRMReward(url, strategy="reference", reference_column="reference")
    funcs: list[Any] = (
        list(reward_funcs) if reward_funcs else [reward, exact_match_reward, non_answer_reward]
    )
    metrics = out / METRICS_FILE

    class WriteMetrics(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **_: Any) -> None:
            if logs and "loss" in logs:
                row = {"step": state.global_step, "time": round(time.time(), 1), **logs}
                with metrics.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"step {state.global_step}: " + _brief(logs), flush=True)

    config = GRPOConfig(
        output_dir=str(out / TRAINER_DIR),
        max_steps=settings.steps,
        per_device_train_batch_size=settings.prompts_per_step * settings.group_size,
        num_generations=settings.group_size,
        max_completion_length=settings.max_completion_length,
        learning_rate=settings.learning_rate,
        beta=settings.kl_beta,
        temperature=settings.temperature,
        reward_weights=[1.0] + [0.0] * (len(funcs) - 1),
        use_cpu=True,
        report_to="none",
        logging_steps=1,
        save_strategy="steps",
        save_steps=settings.save_steps,
        seed=settings.seed,
        log_completions=False,
    )
    return GRPOTrainer(
        model=model,
        reward_funcs=funcs,
        args=config,
        train_dataset=Dataset.from_list(rows(questions["train"])),
        processing_class=tokenizer,
        peft_config=LoraConfig(
            r=settings.lora_r,
            lora_alpha=2 * settings.lora_r,
            lora_dropout=0.0,
            target_modules="all-linear",
            task_type="CAUSAL_LM",
        ),
        callbacks=[WriteMetrics()],
    )


def _brief(logs: dict[str, Any]) -> str:
    keys = (
        "rewards/reflectrm/mean",
        "rewards/exact_match_reward/mean",
        "rewards/non_answer_reward/mean",
        "completions/mean_length",
        "step_time",
    )
    return " ".join(f"{k}={logs[k]:.4g}" for k in keys if isinstance(logs.get(k), int | float))


def train(settings: RunSettings, url: str, out: Path) -> Path:
    """Train (resuming from the last saved step in ``out``) and save the LoRA adapter."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "settings.json").write_text(json.dumps(asdict(settings), indent=1) + "\n")
    trainer = build_trainer(settings, url, out)
    saved = sorted((out / TRAINER_DIR).glob("checkpoint-*"), key=lambda p: int(p.name[11:]))
    trainer.train(resume_from_checkpoint=str(saved[-1]) if saved else None)
    trainer.model.save_pretrained(out / ADAPTER_DIR)
    return out / ADAPTER_DIR


# --- measuring -------------------------------------------------------------------------------


def generate(
    policy: str,
    adapter: Path | None,
    questions: Sequence[Question],
    max_new_tokens: int,
    samples: int = 0,
    seed: int = 0,
) -> list[str]:
    """Greedy completions of the policy (with ``adapter`` when given) to ``questions``; with
    ``samples``, that many sampled at temperature 1 per question (a GRPO step's group), the
    question's together."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(policy)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model: Any = AutoModelForCausalLM.from_pretrained(policy, dtype=torch.float32)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    model.eval()
    texts = []
    for start in range(0, len(questions), 16):
        batch = questions[start : start + 16]
        prompts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": q.question}],
                tokenize=False,
                add_generation_prompt=True,
            )
            for q in batch
        ]
        enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        if samples:
            torch.manual_seed(seed + start)
        with torch.no_grad():
            ids = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                do_sample=bool(samples),
                temperature=1.0 if samples else None,
                top_p=1.0 if samples else None,
                top_k=0 if samples else None,
                num_return_sequences=max(1, samples),
                pad_token_id=tokenizer.pad_token_id,
            )
        texts += tokenizer.batch_decode(
            ids[:, enc["input_ids"].shape[1] :], skip_special_tokens=True
        )
    return texts


def paired_interval(before: Sequence[float], after: Sequence[float]) -> dict[str, float]:
    """The mean paired difference (after - before) with a normal 95% interval."""
    d = [a - b for a, b in zip(after, before, strict=True)]
    mean = statistics.fmean(d)
    half = 1.96 * statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
    return {"difference": mean, "low": mean - half, "high": mean + half, "n": len(d)}


def auc(scores: Sequence[float], positive: Sequence[bool]) -> float | None:
    """How often a right completion's reward exceeds a wrong one's (ties half): the judge's
    agreement with exact match. None when either class is empty."""
    pos = [s for s, p in zip(scores, positive, strict=True) if p]
    neg = [s for s, p in zip(scores, positive, strict=True) if not p]
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


async def service_rewards(
    url: str, questions: Sequence[Question], texts: Sequence[str]
) -> list[float | None]:
    """The reward the training loop would have given each completion."""
    from reflectrm.integrations.trl import ReflectRMReward

    reward = ReflectRMReward(url, strategy="reference", reference_column="reference")
    table = rows(questions)
    return await reward(
        prompts=[r["prompt"] for r in table],
        completions=list(texts),
        reference=[r["reference"] for r in table],
    )


def summarize(
    questions: Sequence[Question], texts: Sequence[str], tokenizer: Any
) -> dict[str, Any]:
    grades = [grade(t, q.answer, q.operands) for q, t in zip(questions, texts, strict=True)]
    return {
        "exact_match": sum(g == "right" for g in grades) / len(grades),
        "non_answer": sum(g == NON_ANSWER for g in grades) / len(grades),
        "mean_tokens": statistics.fmean(
            len(tokenizer.encode(t, add_special_tokens=False)) for t in texts
        ),
        "grades": grades,
    }


def measure(settings: RunSettings, url: str, out: Path, split: str) -> dict[str, Any]:
    """The base policy and the trained one on ``split``: exact match, non-answers, length, the
    paired difference, and the judge's agreement with exact match on each one's completions."""
    from transformers import AutoTokenizer

    questions = make_questions(settings.question_seed)[split]
    tokenizer = AutoTokenizer.from_pretrained(settings.policy)
    result: dict[str, Any] = {"split": split, "questions": len(questions)}
    for name, adapter in (("base", None), ("trained", out / ADAPTER_DIR)):
        texts = generate(settings.policy, adapter, questions, settings.max_completion_length)
        summary = summarize(questions, texts, tokenizer)
        rewards = asyncio.run(service_rewards(url, questions, texts))
        graded = zip(rewards, summary["grades"], strict=True)
        scored = [(r, g == "right") for r, g in graded if r is not None]
        summary["judge_auc"] = auc([r for r, _ in scored], [ok for _, ok in scored])
        summary["mean_reward"] = statistics.fmean(r for r, _ in scored) if scored else None
        summary["completions"] = [
            {"id": q.id, "text": t, "grade": g, "reward": r}
            for q, t, g, r in zip(questions, texts, summary.pop("grades"), rewards, strict=True)
        ]
        result[name] = summary
    right = {
        name: [float(c["grade"] == "right") for c in result[name]["completions"]]
        for name in ("base", "trained")
    }
    result["paired"] = paired_interval(right["base"], right["trained"])
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("train", "measure"))
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--out", type=Path, default=Path("runs/policy"))
    parser.add_argument(
        "--policy",
        help="the policy's Hugging Face folder (default: reflectrm's "
        "SmolLM2-135M-Instruct, `reflectrm prepare-model base`)",
    )
    parser.add_argument("--split", default="heldout", choices=tuple(SPLIT_SHARES))
    for field, default in asdict(RunSettings(policy="")).items():
        if field != "policy":
            parser.add_argument(f"--{field.replace('_', '-')}", type=type(default), default=default)
    args = parser.parse_args(argv)
    policy = args.policy or default_policy()
    fields = {k: getattr(args, k) for k in asdict(RunSettings(policy="")) if k != "policy"}
    settings = RunSettings(policy=policy, **fields)
    if args.command == "train":
        print(f"adapter saved to {train(settings, args.url, args.out)}")
    else:
        result = measure(settings, args.url, args.out, args.split)
        path = args.out / f"measure-{args.split}.json"
        path.write_text(json.dumps(result, indent=1) + "\n")
        brief = {k: result[n][k] for n in ("base", "trained") for k in ("exact_match",)}
        print(json.dumps({"paired": result["paired"], **brief}), f"-> {path}")


def default_policy() -> str:
    from reflectrm.checkpoints.base import default_cache_dir
    from reflectrm.checkpoints.resolve import BASE_MODEL, resolve_model

    return str(resolve_model(BASE_MODEL, default_cache_dir(), None, "float32"))


if __name__ == "__main__":
    main()
