"""SHADE cut into hops (securefl.crypto.shade_hops): the same shares' sum, the same frames as
the one-loop shade_pair, setups kept across rounds, and a refusal of out-of-place messages."""

from __future__ import annotations

import numpy as np
import pytest

from securefl.crypto import shade_hops
from securefl.crypto.channel import Message, Network, frame_size
from securefl.crypto.ot import RESUME, setup_context
from securefl.crypto.rand import RandomSource
from securefl.crypto.shade import shade_pair
from securefl.errors import ProtocolError

CONTEXT = setup_context(b"federation", 7, 9)


class Party:
    """One party's setup across rounds (what a client keeps in its state)."""

    def __init__(self):
        self.setup = None


def _hops(x, y, s_party=None, r_party=None, sender=0, receiver=1):
    s_party, r_party = s_party or Party(), r_party or Party()
    s_state, r_state = {}, {}
    a = shade_hops.receiver_base(r_state, setup=r_party.setup, context=CONTEXT, sender=sender,
                                 receiver=receiver, rng=RandomSource())
    b, s_party.setup = shade_hops.sender_base(s_state, a, setup=s_party.setup, context=CONTEXT,
                                              rng=RandomSource())
    u, r_party.setup = shade_hops.receiver_extend(r_state, b, y, setup=r_party.setup, context=CONTEXT,
                                                  sender=sender, receiver=receiver)
    corrections, s_share = shade_hops.sender_correct(s_state, u, x, setup=s_party.setup,
                                                     receivers=y.shape[0], sender=sender, receiver=receiver)
    r_share = shade_hops.receiver_finish(r_state, corrections, y, setup=r_party.setup, senders=x.shape[0],
                                         sender=sender, receiver=receiver)
    return [a, b, *u, *corrections], s_share, r_share


def _codes(seed, na, nb, length):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 2, (na, length)).astype(np.uint8), rng.integers(0, 2, (nb, length)).astype(np.uint8))


@pytest.mark.parametrize("na, nb, length", [(13, 9, 200), (3, 700, 100)])
def test_hops_give_the_distances_with_the_frames_of_shade_pair(na, nb, length):
    x, y = _codes(na, na, nb, length)
    messages, s_share, r_share = _hops(x, y)
    distances = (x[:, None, :] != y[None, :, :]).sum(-1)
    np.testing.assert_array_equal((s_share + r_share).astype(np.int64), distances)
    network = Network()
    shade_pair(x, y, network=network)
    assert sum(frame_size(m) for m in messages) == network.bytes_total()
    assert len(messages) == sum(s.messages_sent for s in network.stats.values())
    assert len([m for m in messages if m.tag.startswith("iknp/U/")]) == len(shade_hops.chunks(nb, length))


def test_later_rounds_resume_the_setup_and_stay_exact():
    """Round 1 runs the base OTs; rounds 2 and 3 resume (no base-OT points) with new codes."""
    s_party, r_party = Party(), Party()
    for round_index in range(3):
        x, y = _codes(round_index, 11, 6, 130)
        messages, s_share, r_share = _hops(x, y, s_party, r_party)
        distances = (x[:, None, :] != y[None, :, :]).sum(-1)
        np.testing.assert_array_equal((s_share + r_share).astype(np.int64), distances)
        assert messages[1].tag == ("baseot/B" if round_index == 0 else RESUME)
        assert [m.tag for m in messages if m.tag.startswith("iknp/U/")] == [f"iknp/U/{round_index}/0"]
    assert s_party.setup.next_session == r_party.setup.next_session == 3


def test_a_party_that_lost_its_setup_falls_back_to_fresh_base_ots():
    s_party, r_party = Party(), Party()
    x, y = _codes(1, 4, 5, 64)
    _hops(x, y, s_party, r_party)
    r_party.setup = None
    messages, s_share, r_share = _hops(x, y, s_party, r_party)
    assert messages[1].tag == "baseot/B"
    np.testing.assert_array_equal((s_share + r_share).astype(np.int64), (x[:, None] != y[None]).sum(-1))
    assert s_party.setup.setup_id == r_party.setup.setup_id and s_party.setup.next_session == 1


def test_a_replayed_hello_is_refused_by_the_sender():
    s_party, r_party = Party(), Party()
    x, y = _codes(2, 4, 5, 64)
    _hops(x, y, s_party, r_party)
    hello = shade_hops.receiver_base({}, setup=r_party.setup, context=CONTEXT, sender=0, receiver=1,
                                     rng=RandomSource())
    shade_hops.sender_base({}, hello, setup=s_party.setup, context=CONTEXT, rng=RandomSource())
    with pytest.raises(ProtocolError, match="session 1 replayed or out of order"):
        shade_hops.sender_base({}, hello, setup=s_party.setup, context=CONTEXT, rng=RandomSource())


def test_matrices_of_another_session_are_refused():
    """The sender accepted session 1; U matrices the receiver made for session 2 do not pass."""
    s_party, r_party = Party(), Party()
    x, y = _codes(3, 4, 5, 64)
    _hops(x, y, s_party, r_party)
    s_state, r_state = {}, {}
    hello = shade_hops.receiver_base(r_state, setup=r_party.setup, context=CONTEXT, sender=0, receiver=1,
                                     rng=RandomSource())
    answer, _ = shade_hops.sender_base(s_state, hello, setup=s_party.setup, context=CONTEXT, rng=RandomSource())
    r_party.setup.next_session += 1  # a receiver whose counter ran ahead of its hello
    stale = r_party.setup.extension(2)
    wrong, _ = stale.extend(y.reshape(-1), 0, sender=0, receiver=1)
    with pytest.raises(ProtocolError, match="iknp/U/1/0"):
        shade_hops.sender_correct(s_state, [wrong], x, setup=s_party.setup, receivers=5, sender=0, receiver=1)


def test_out_of_place_messages_are_refused():
    x, y = _codes(1, 4, 5, 64)
    s_party, r_party = Party(), Party()
    s_state, r_state = {}, {}
    a = shade_hops.receiver_base(r_state, setup=None, context=CONTEXT, sender=0, receiver=1, rng=RandomSource())
    with pytest.raises(ProtocolError, match="iknp/resume.*baseot/B"):
        shade_hops.receiver_extend(r_state, a, y, setup=None, context=CONTEXT, sender=0, receiver=1)
    with pytest.raises(ProtocolError, match="before the hello"):
        shade_hops.receiver_extend({}, a, y, setup=None, context=CONTEXT, sender=0, receiver=1)
    b, s_party.setup = shade_hops.sender_base(s_state, a, setup=None, context=CONTEXT, rng=RandomSource())
    u, r_party.setup = shade_hops.receiver_extend(r_state, b, y, setup=None, context=CONTEXT, sender=0, receiver=1)
    with pytest.raises(ProtocolError, match="IKNP matrices"):
        shade_hops.sender_correct(s_state, [*u, *u], x, setup=s_party.setup, receivers=5, sender=0, receiver=1)
    with pytest.raises(ProtocolError, match="not the one this session was opened on"):
        shade_hops.sender_correct(dict(s_state), u, x, setup=None, receivers=5, sender=0, receiver=1)
    corrections, _ = shade_hops.sender_correct(s_state, u, x, setup=s_party.setup, receivers=5, sender=0, receiver=1)
    extra = Message(0, 1, "shade/u", (corrections[0].arrays[0],))
    with pytest.raises(ProtocolError, match="more correction frames"):
        shade_hops.receiver_finish(dict(r_state), [*corrections, extra], y, setup=r_party.setup, senders=4,
                                   sender=0, receiver=1)
    with pytest.raises(ProtocolError, match="fewer correction frames"):
        shade_hops.receiver_finish(dict(r_state), [], y, setup=r_party.setup, senders=4, sender=0, receiver=1)


def test_a_resume_naming_another_setup_or_session_is_refused():
    s_party, r_party = Party(), Party()
    x, y = _codes(4, 4, 5, 64)
    _hops(x, y, s_party, r_party)
    r_state = {}
    hello = shade_hops.receiver_base(r_state, setup=r_party.setup, context=CONTEXT, sender=0, receiver=1,
                                     rng=RandomSource())
    answer, _ = shade_hops.sender_base({}, hello, setup=s_party.setup, context=CONTEXT, rng=RandomSource())
    other_id = Message(answer.sender, answer.receiver, RESUME, (np.zeros(16, np.uint8) + 1, answer.arrays[1]))
    with pytest.raises(ProtocolError, match="not offered"):
        shade_hops.receiver_extend(dict(r_state), other_id, y, setup=r_party.setup, context=CONTEXT,
                                   sender=0, receiver=1)
    other_session = Message(answer.sender, answer.receiver, RESUME,
                            (answer.arrays[0], np.array([7], np.uint64)))
    with pytest.raises(ProtocolError, match="names session 7"):
        shade_hops.receiver_extend(dict(r_state), other_session, y, setup=r_party.setup, context=CONTEXT,
                                   sender=0, receiver=1)
