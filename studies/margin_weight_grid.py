"""Development figures of margin mode along the likelihood weight (verdict weight 1): what the
likelihood term buys on the counterfactual pairs and costs on general chat, on development
features only (``reflectrm train margin-features``).

    python -m studies.margin_weight_grid --features dev.jsonl [--features more.jsonl] \
        --chat chat-dev.jsonl --out grid.md
"""

from __future__ import annotations

import argparse
from pathlib import Path

from reflectrm_harness.training.margin.fit import arrays, figures, load, pooled

WEIGHTS = (0.0, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--features", type=Path, action="append", required=True)
    ap.add_argument("--chat", type=Path, action="append", default=[])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    dev, chat = load(args.features), load(args.chat)
    xd, xc = arrays(dev), arrays(chat) if chat else None
    groups = sorted(figures(dev, pooled(xd, 1.0, 0.0))["by_source"])
    head = ["w", "dev accuracy", "dev length-balanced", "ties", *groups]
    if xc is not None:
        head += ["chat accuracy", "chat length-balanced"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for w in WEIGHTS:
        f = figures(dev, pooled(xd, 1.0, w))
        cells = [f"{w:g}", f"{100 * f['accuracy']:.1f}", f"{100 * f['length_balanced']:.1f}",
                 f"{100 * f['ties']:.1f}"]  # fmt: skip
        cells += [f"{100 * f['by_source'][g][1]:.0f} ({f['by_source'][g][0]})" for g in groups]
        if xc is not None:
            c = figures(chat, pooled(xc, 1.0, w))
            cells += [f"{100 * c['accuracy']:.1f}", f"{100 * c.get('length_balanced', 0):.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
