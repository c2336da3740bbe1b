"""The verdict head (``reflectrm train probe``): its fit, its figures by hand, and its edit of the
output layer (the digit margin at a position grows by exactly v . h; the inputs are untouched)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from transformers import LlamaForCausalLM

from reflectrm.checkpoints.artifact import ArtifactError, apply_probe, merge_adapter
from reflectrm.checkpoints.files import PROBE_WEIGHTS
from reflectrm_harness.training.judge.figures import summarize, wilson
from reflectrm_harness.training.judge.probe import (
    copy_projector,
    evaluate_head,
    fit_head,
    partner_index,
)
from tests.unit.tiny_models import save_tiny_llama

ONE, TWO = 5, 9


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return save_tiny_llama(tmp_path / "base", 32, hidden_size=8)


def _adapter_with_probe(base: Path, out: Path, direction: torch.Tensor) -> None:
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        LlamaForCausalLM.from_pretrained(base),
        LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"], lora_dropout=0.0),
    )
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p))
    model.save_pretrained(out)
    save_file(
        {"direction": direction, "digits": torch.tensor([ONE, TWO], dtype=torch.int64)},
        str(out / PROBE_WEIGHTS),
    )


def _final_hidden_and_logits(model: LlamaForCausalLM, ids: list[int]) -> tuple[torch.Tensor, ...]:
    captured = {}
    hook = model.model.norm.register_forward_hook(lambda _m, _i, o: captured.update(h=o))
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
    hook.remove()
    return captured["h"][0], logits


def test_the_merged_margin_is_the_adapted_margin_plus_v_dot_h(base: Path, tmp_path: Path) -> None:
    direction = torch.randn(8) * 3
    art = tmp_path / "art"
    _adapter_with_probe(base, art, direction)
    plain, probed = tmp_path / "plain", tmp_path / "probed"
    merge_adapter(base, art, probed)
    (art / PROBE_WEIGHTS).unlink()
    merge_adapter(base, art, plain)

    assert json.loads((probed / "config.json").read_text())["tie_word_embeddings"] is False
    assert json.loads((plain / "config.json").read_text())["tie_word_embeddings"] is True
    a = LlamaForCausalLM.from_pretrained(plain).eval()
    b = LlamaForCausalLM.from_pretrained(probed).eval()
    # The inputs keep the base embeddings: the hidden states are the same.
    ids = [1, 7, 3, ONE, 2, TWO]
    ha, la = _final_hidden_and_logits(a, ids)
    hb, lb = _final_hidden_and_logits(b, ids)
    torch.testing.assert_close(ha, hb)
    margin_a = la[:, ONE] - la[:, TWO]
    margin_b = lb[:, ONE] - lb[:, TWO]
    torch.testing.assert_close(margin_b, margin_a + ha @ direction, rtol=1e-4, atol=1e-4)
    # Every other token's logit is unchanged.
    others = [t for t in range(32) if t not in (ONE, TWO)]
    torch.testing.assert_close(lb[:, others], la[:, others])
    # Each digit moves by half the margin.
    torch.testing.assert_close(lb[:, ONE] - la[:, ONE], (ha @ direction) / 2, rtol=1e-4, atol=1e-4)


def test_a_probe_of_another_hidden_size_is_refused() -> None:
    weights = {"model.embed_tokens.weight": torch.zeros(32, 8)}
    probe = {"direction": torch.zeros(6), "digits": torch.tensor([ONE, TWO])}
    with pytest.raises(ArtifactError, match=r"6 dimensions.*hidden size is 8"):
        apply_probe(weights, probe)


def test_the_fit_finds_the_direction_that_separates_the_orders() -> None:
    # Slot 1 is right exactly when the feature along axis 2 is positive; the model's own margin
    # (the offset) says nothing. Other axes are noise.
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(400, 6, generator=g)
    label = torch.where(hidden[:, 2] > 0, 1, 2)
    v = fit_head(hidden, torch.zeros(400), label, penalty=1e-3)
    assert int(v.abs().argmax()) == 2
    assert v[2] > 0
    rows = evaluate_head(hidden, torch.zeros(400), [{"label": int(x)} for x in label], v)
    assert sum(r["verdict"] == r["label"] for r in rows) >= 390


def test_the_offset_is_the_models_own_margin() -> None:
    # The model's margin already decides every item correctly and the features are pure noise:
    # the fitted head must not undo it (a fit that ignored the offset would be at chance).
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(200, 4, generator=g)
    label = torch.tensor([1, 2] * 100)
    margin = torch.where(label == 1, 3.0, -3.0)
    v = fit_head(hidden, margin, label, penalty=1e-2)
    rows = evaluate_head(hidden, margin, [{"label": int(x)} for x in label], v)
    assert all(r["verdict"] == r["label"] for r in rows)


def test_the_figures_by_hand() -> None:
    # Pair a: right in both orders. Pair b: says 1 both times (right once). Pair c: wrong twice.
    rows = [
        {"pair_id": "a", "source": "s", "label": 1, "verdict": 1, "longer": 1},
        {"pair_id": "a", "source": "s", "label": 2, "verdict": 2, "longer": 2},
        {"pair_id": "b", "source": "s", "label": 1, "verdict": 1, "longer": 2},
        {"pair_id": "b", "source": "s", "label": 2, "verdict": 1, "longer": 1},
        {"pair_id": "c", "source": "t", "label": 1, "verdict": 2, "longer": 0},
        {"pair_id": "c", "source": "t", "label": 2, "verdict": 1, "longer": 0},
    ]
    out = summarize(rows)
    assert out["all"]["accuracy"] == pytest.approx(3 / 6)
    assert out["all"]["slot1_share"] == pytest.approx(4 / 6)
    assert out["all"]["both_orders_right"] == pytest.approx(1 / 3)
    # Longer wins: a twice (1 + 1), b never (0 + 0), c ties (0.5 + 0.5).
    assert out["all"]["length_heuristic"] == pytest.approx(3 / 6)
    assert out["s"]["accuracy"] == pytest.approx(3 / 4)
    assert out["t"]["accuracy"] == 0
    low, high = wilson(3, 6)
    assert low == pytest.approx(0.1876, abs=1e-3)
    assert high == pytest.approx(0.8124, abs=1e-3)


def test_partners_are_the_two_orders_of_a_pair() -> None:
    items = [{"pair_id": p} for p in ("a", "b", "a", "c", "b")]
    assert partner_index(items).tolist() == [[0, 2], [1, 4]]


def test_the_consistency_term_makes_the_two_orders_margins_opposite() -> None:
    # Per pair, t = +1 when slot 1 holds the chosen response in the first order. Axis 0 flips
    # with the order and says t weakly; axis 1 says t strongly but carries noise that is the
    # same in both orders (so using it makes the two orders' margins disagree). Without the
    # term the head leans on axis 1; with a heavy one the two orders' margins nearly cancel.
    g = torch.Generator().manual_seed(2)
    n = 400
    t = torch.where(torch.rand(n, generator=g) < 0.5, 1.0, -1.0)
    weak = 0.3 * t + torch.randn(n, generator=g)
    same = 2.0 * torch.randn(n, generator=g)
    hidden = torch.zeros(2 * n, 2)
    hidden[0::2, 0], hidden[1::2, 0] = weak, -weak
    hidden[0::2, 1], hidden[1::2, 1] = t + same, -t + same
    label = torch.empty(2 * n, dtype=torch.long)
    label[0::2] = torch.where(t > 0, 1, 2)
    label[1::2] = torch.where(t > 0, 2, 1)
    partners = partner_index([{"pair_id": str(k // 2)} for k in range(2 * n)])
    margin = torch.zeros(2 * n)

    def asymmetry(v: torch.Tensor) -> float:
        z = hidden @ v
        return float(((z[partners[:, 0]] + z[partners[:, 1]]) ** 2).mean())

    loose = fit_head(hidden, margin, label, 1e-3, 0.0, partners)
    tight = fit_head(hidden, margin, label, 1e-3, 10.0, partners)
    assert asymmetry(loose) > 0.1
    assert asymmetry(tight) < asymmetry(loose) / 20
    assert abs(float(tight[1])) < abs(float(loose[1]))


def test_a_head_through_the_copy_projector_is_blind_at_the_copy_positions() -> None:
    # Copy-position states live in a 2-dimensional subspace (plus nothing else): a head of the
    # form P v gives them no margin at all, whatever v.
    g = torch.Generator().manual_seed(3)
    basis = torch.linalg.qr(torch.randn(6, 2, generator=g))[0]
    copies = torch.randn(50, 2, generator=g) @ basis.T
    projector = copy_projector(copies, 2)
    v = projector @ torch.randn(6, generator=g, dtype=torch.float64)
    assert float((copies.double() @ v).abs().max()) < 1e-5  # float32 inputs
    # A direction away from them is kept.
    assert float(v.norm()) > 0.1
