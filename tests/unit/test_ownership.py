"""Who owns a cohort among the peers: rendezvous hashing, by hand.

A peer's weight for a cohort is the first 8 bytes of sha256(peer + "\\n" + name), as a
big-endian integer; each weight below can be checked with
``printf 'http://a:8000\\ndefault\\ng:step-1/p-0' | sha256sum | cut -c1-16``. The owner is the
peer with the highest weight.
"""

from __future__ import annotations

import pytest

from reflectrm.serving.ownership import owner, weight
from reflectrm.serving.service import cohort_name
from reflectrm.serving.types import MemberAsk

A, B, C = "http://a:8000", "http://b:8000", "http://c:8000"
PEERS = [A, B, C]

# Cohort name -> (weight of a, of b, of c), in hex.
WEIGHTS = {
    "default\ng:step-1/p-0": ("21ad8836bb17b769", "4bbf3c5145601f35", "2a6a866f5f227c58"),
    "default\ng:step-1/p-1": ("91dfe5bca08071be", "d35bd914a0ff4c6c", "ec8820b9aab4f003"),
    "default\ng:step-1/p-2": ("43f9cb96dae9a78e", "42d1293a60055be2", "8385c513d1f2a39a"),
    "default\ng:step-1/p-3": ("690d6b3e21819a85", "5ce2eac58b1415bf", "e3123376e2b712ff"),
    "default\ng:step-1/p-4": ("edd9771d8934995d", "fbcbae21edbc25f6", "81ad4e00751fd8f8"),
    "default\ng:step-1/p-5": ("236d18441742658e", "101a54a749a377c0", "9100b4ca065ab87c"),
}
# Read off the table: the highest of the three.
OWNERS = {"p-0": B, "p-1": C, "p-2": C, "p-3": C, "p-4": B, "p-5": C}
# With c removed, its cohorts go to the higher of a and b; b's stay with b.
WITHOUT_C = {"p-0": B, "p-1": B, "p-2": A, "p-3": A, "p-4": B, "p-5": A}


def name(prompt: str) -> str:
    return f"default\ng:step-1/{prompt}"


def test_the_weights_are_the_sha256_prefixes_of_the_table():
    for cohort, hexes in WEIGHTS.items():
        assert [weight(peer, cohort) for peer in PEERS] == [int(h, 16) for h in hexes]


def test_the_owner_is_the_peer_of_the_highest_weight():
    assert {p: owner(PEERS, name(p)) for p in OWNERS} == OWNERS


def test_the_owner_does_not_depend_on_the_order_of_the_list():
    assert {p: owner([C, A, B], name(p)) for p in OWNERS} == OWNERS


def test_removing_a_peer_moves_only_its_cohorts_each_to_its_second_highest():
    after = {p: owner([A, B], name(p)) for p in OWNERS}
    assert after == WITHOUT_C
    moved = {p for p in OWNERS if after[p] != OWNERS[p]}
    assert moved == {p for p, o in OWNERS.items() if o == C}  # only c's moved


def test_removing_a_peer_that_owns_nothing_here_moves_nothing():
    assert {p: owner([B, C], name(p)) for p in OWNERS} == OWNERS  # a owned none of these


def test_over_many_cohorts_a_removed_peer_gives_up_about_a_third_and_only_those():
    names = [f"default\ng:step-{k}" for k in range(3000)]
    before = {n: owner(PEERS, n) for n in names}
    after = {n: owner([A, C], n) for n in names}
    moved = [n for n in names if before[n] != after[n]]
    assert all(before[n] == B for n in moved)
    assert len(moved) == sum(1 for n in names if before[n] == B)
    assert 900 < len(moved) < 1100  # each of 3 peers owns about 1000


def test_one_peer_owns_everything_and_none_is_an_error():
    assert owner([A], name("p-0")) == A
    with pytest.raises(ValueError, match="no peers"):
        owner([], name("p-0"))


def test_the_cohort_name_holds_the_tenant_so_two_jobs_groups_may_have_other_owners():
    ask = MemberAsk(conversation=(), completion="x", group_size=2, group_id="step-1/p-0")
    assert cohort_name("default", ask) == name("p-0")
    # job-a: a 51a82a6dd35c18d6, b 93637e7124bfc6e4, c 92a66c55666c881e -> b
    # job-b: a 2934ccb133332674, b 533f20688349ca51, c 7cbcee33732b4eb6 -> c
    assert owner(PEERS, cohort_name("job-a", ask)) == B
    assert owner(PEERS, cohort_name("job-b", ask)) == C


def test_without_a_group_id_the_cohort_is_named_by_its_conversation():
    from reflectrm.judging.types import Message

    one = MemberAsk(conversation=(Message("user", "q"),), completion="x", group_size=2)
    other = MemberAsk(conversation=(Message("user", "r"),), completion="x", group_size=2)
    assert cohort_name("t", one).startswith("t\nconversation:")
    assert cohort_name("t", one) == cohort_name("t", one)
    assert cohort_name("t", one) != cohort_name("t", other)


# --- the settings ---------------------------------------------------------------------------


def test_peers_are_off_unless_set():
    from reflectrm.settings import Settings

    settings = Settings()
    assert settings.peers == ""
    assert settings.peer_url is None
    assert settings.peer_urls() == []


def test_the_peers_setting_is_a_list_of_base_urls_and_names_this_replica(monkeypatch):
    from reflectrm.settings import get_settings

    monkeypatch.setenv("REFLECTRM_PEERS", f" {A}/, {B} ,{C},")
    monkeypatch.setenv("REFLECTRM_PEER_URL", f"{B}/")
    settings = get_settings()
    assert settings.peer_urls() == PEERS
    assert settings.peer_url == f"{B}/"


@pytest.mark.parametrize(
    ("peer_url", "says"),
    [
        (None, "REFLECTRM_PEER_URL must name this replica's own entry"),
        ("http://d:8000", "REFLECTRM_PEER_URL 'http://d:8000' is not in REFLECTRM_PEERS"),
    ],
)
def test_a_peer_url_not_in_the_peers_stops_the_start(peer_url, says):
    from pydantic import ValidationError

    from reflectrm.settings import Settings

    with pytest.raises(ValidationError, match=says):
        Settings(peers=",".join(PEERS), peer_url=peer_url)


def test_a_peer_listed_twice_is_refused():
    from pydantic import ValidationError

    from reflectrm.settings import Settings

    with pytest.raises(ValidationError, match="lists a replica twice"):
        Settings(peers=f"{A},{A}/", peer_url=A)
