"""Which replica owns a cohort, when several judge replicas serve one job (``REFLECTRM_PEERS``).

Rendezvous (highest-random-weight) hashing: every peer gets a weight for a cohort's name, the
first 8 bytes of ``sha256(peer + "\\n" + name)`` read as a big-endian integer, and the peer with
the highest weight owns the cohort (a tie goes to the peer listed first). Every replica computes
the same owner from the same list, with no coordination. Removing a peer moves only the cohorts
it owned, each to its second-highest peer; adding one moves to it only the cohorts it now wins.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def weight(peer: str, name: str) -> int:
    """A peer's weight for a cohort's name."""
    digest = hashlib.sha256(f"{peer}\n{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def owner(peers: Sequence[str], name: str) -> str:
    """The peer that owns the cohort ``name``: the highest weight, the first listed on a tie."""
    if not peers:
        raise ValueError("no peers to choose an owner from")
    best = peers[0]
    best_weight = weight(best, name)
    for peer in peers[1:]:
        w = weight(peer, name)
        if w > best_weight:
            best, best_weight = peer, w
    return best
