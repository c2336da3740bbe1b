"""The margin recipe (training/margin): ``reflectrm train margin-fit`` on the recorded
development features gives the default judge's shipped margin weights, and
``reflectrm train counterfactuals`` draws the same pairs for the same seed; ``margin-features``
skips the pairs its output already holds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from reflectrm.checkpoints.judges import DEFAULT_MODEL, SHIPPED
from reflectrm_harness.datasets import read_rows
from reflectrm_harness.training.cli import main
from reflectrm_harness.training.margin.counterfactuals import KINDS, NON_ANSWERS, build
from reflectrm_harness.training.margin.features import pending

RECORD = Path(__file__).resolve().parents[3] / "docs" / "records" / "margin-fit-dev"


def test_margin_fit_on_the_recorded_features_gives_the_default_judges_weights(
    tmp_path: Path,
) -> None:
    shipped = SHIPPED[DEFAULT_MODEL]
    margin = shipped.manifest()["margin"]
    manifest = tmp_path / "manifest.json"
    shutil.copyfile(shipped.folder / "manifest.json", manifest)
    features = [RECORD / name for name in margin["fitted_on"]]
    assert [f.name for f in features] == [
        "feat-qwenbase-dev-permissive.jsonl",
        "feat-qwenbase-wrongnum.jsonl",
    ]
    args = ["train", "margin-fit", "--out", str(tmp_path / "fit.json")]
    args += [a for f in features for a in ("--features", str(f))]
    args += ["--manifest", str(manifest), "--choose", margin["fit"]]
    assert main(args) == 0

    refit = json.loads(manifest.read_text())["margin"]
    assert margin["fit"] == "verdict + likelihood"
    assert refit["fit"] == margin["fit"]
    assert abs(refit["verdict_weight"] - margin["verdict_weight"]) < 1e-3
    assert abs(refit["likelihood_weight"] - margin["likelihood_weight"]) < 1e-3
    assert refit == margin  # the whole block: feature files, pairs, figures
    # the report is the recorded one
    report = json.loads((tmp_path / "fit.json").read_text())
    recorded = json.loads((RECORD / "fit-qwenbase.json").read_text())
    assert report["choices"] == recorded["choices"]


def test_margin_fit_refuses_a_choice_it_did_not_make(tmp_path: Path, capsys) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}\n")
    features = RECORD / "feat-qwenbase-wrongnum.jsonl"
    args = ["train", "margin-fit", "--features", str(features), "--out", str(tmp_path / "f.json")]
    assert main([*args, "--manifest", str(manifest), "--choose", "likelihood"]) == 2
    assert "--choose must be one of" in capsys.readouterr().err
    assert manifest.read_text() == "{}\n"


def _rows(n: int) -> list[dict]:
    reply = (
        "The answer to the question is 42 apples. To see why, count the six groups of seven apples on the table one by "
        "one, then add them together carefully and check the total twice before you write it down."
    )
    return [
        {
            "id": str(i),
            "source": "a" if i % 2 else "b",
            "prompt": f"question {i}",
            "chosen": reply.replace("42", str(40 + i)),
            "rejected": "no",
        }
        for i in range(n)
    ]


def test_counterfactuals_are_the_same_for_the_same_seed_and_of_every_kind() -> None:
    rows = _rows(12)
    made = build(rows, per_kind=3, seed=5)
    assert made == build(rows, per_kind=3, seed=5)
    assert made != build(rows, per_kind=3, seed=6)
    assert [r["subset"] for r in made] == [k for k in KINDS for _ in range(3)]
    for r in made:
        assert r["source"] == "counterfactual"
        assert r["rejected"] != r["chosen"]
        kind = r["subset"]
        if kind == "non_answer":
            assert r["rejected"] in NON_ANSWERS
        elif kind == "truncated":
            assert r["chosen"].startswith(r["rejected"])
            assert len(r["rejected"]) < len(r["chosen"])
        elif kind == "padded":
            assert r["rejected"].startswith(r["chosen"])
            assert len(r["rejected"]) > len(r["chosen"])
        elif kind == "wrong_number":
            assert len(r["rejected"]) == len(r["chosen"])
        else:  # another prompt's reply
            others = {o["chosen"] for o in rows if o["prompt"] != r["prompt"]}
            assert r["rejected"] in others


def test_train_counterfactuals_writes_the_pairs_of_the_chosen_sources_and_kinds(
    tmp_path: Path,
) -> None:
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(r) + "\n" for r in _rows(12)))
    out = tmp_path / "cf.jsonl"
    args = ["train", "counterfactuals", "--pairs", str(pairs), "--out", str(out)]
    args += ["--per-kind", "2", "--seed", "1", "--source", "a"]
    assert main([*args, "--kind", "non_answer", "--kind", "padded"]) == 0
    written = [r for _, r in read_rows(out)]
    only_a = [r for r in _rows(12) if r["source"] == "a"]
    assert written == build(only_a, 2, 1, ("non_answer", "padded"))
    assert [r["subset"] for r in written] == ["non_answer"] * 2 + ["padded"] * 2
    assert all(r["id"].startswith("a/") for r in written)


def test_margin_features_resumes_skipping_the_pairs_already_written(tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(r) + "\n" for r in _rows(4)))
    out = tmp_path / "features.jsonl"
    todo, total = pending(pairs, out)
    assert total == 4
    assert [p.id for p in todo] == ["b/0", "a/1", "b/2", "a/3"]  # ids prefixed by their source
    out.write_text(json.dumps({"id": "a/1"}) + "\n" + json.dumps({"id": "b/2"}) + "\n")
    todo, total = pending(pairs, out)
    assert (total, [p.id for p in todo]) == (4, ["b/0", "a/3"])
    assert todo[0].meta == {"source": "b", "subset": ""}
