"""Each per-request default, declared once: what a call that leaves a field unset is judged with.

The settings (REFLECTRM_NUM_CANDIDATES, REFLECTRM_MAX_TOKENS), the service's asks and specs and
the HTTP schemas take their defaults from here. Imports nothing, so any layer above the engines
may import it.
"""

from __future__ import annotations

from typing import Final

# The judging mode of a pair (/v1/judge, /v1/judge/batch).
MODE: Final = "reflect"
# The judging mode of the reward endpoints: a group, a cohort, an OpenRLHF sample (/get_reward),
# a NeMo Gym comparison. Margin mode reads the verdict digit alone (one token per order), pooled
# over both orders: docs/method-choices.md says why it is the rewards' default.
REWARD_MODE: Final = "margin"
# Stage-1 candidates of the reflect and vote modes (the paper's N).
NUM_CANDIDATES: Final = 8
# The generation limit per output (the paper's).
MAX_TOKENS: Final = 1024
# A pair is judged in the order given unless asked; groups, cohorts and OpenRLHF samples are
# judged in both orders.
PAIR_DEBIAS: Final = "none"
GROUP_DEBIAS: Final = "swap"
# How a cohort (the members sharing a prompt) is compared.
COHORT_STRATEGY: Final = "knockout"
