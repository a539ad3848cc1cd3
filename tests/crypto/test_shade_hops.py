"""SHADE cut into hops (securefl.crypto.shade_hops): the same shares' sum, the same frames as
the one-loop shade_pair, and a refusal of out-of-place messages."""

from __future__ import annotations

import numpy as np
import pytest

from securefl.crypto import shade_hops
from securefl.crypto.channel import Message, Network, frame_size
from securefl.crypto.rand import RandomSource
from securefl.crypto.shade import shade_pair
from securefl.errors import ProtocolError


def _hops(x, y, sender=0, receiver=1):
    s_state, r_state = {}, {}
    a = shade_hops.receiver_base(r_state, sender=sender, receiver=receiver, rng=RandomSource())
    b = shade_hops.sender_base(s_state, a, rng=RandomSource())
    u = shade_hops.receiver_extend(r_state, b, y, sender=sender, receiver=receiver)
    corrections, s_share = shade_hops.sender_correct(s_state, u, x, receivers=y.shape[0],
                                                     sender=sender, receiver=receiver)
    r_share = shade_hops.receiver_finish(r_state, corrections, y, senders=x.shape[0],
                                         sender=sender, receiver=receiver)
    return [a, b, *u, *corrections], s_share, r_share


@pytest.mark.parametrize("na, nb, length", [(13, 9, 200), (3, 700, 100)])
def test_hops_give_the_distances_with_the_frames_of_shade_pair(na, nb, length):
    rng = np.random.default_rng(na)
    x = rng.integers(0, 2, (na, length)).astype(np.uint8)
    y = rng.integers(0, 2, (nb, length)).astype(np.uint8)
    messages, s_share, r_share = _hops(x, y)
    distances = (x[:, None, :] != y[None, :, :]).sum(-1)
    np.testing.assert_array_equal((s_share + r_share).astype(np.int64), distances)
    network = Network()
    shade_pair(x, y, network=network)
    assert sum(frame_size(m) for m in messages) == network.bytes_total()
    assert len(messages) == sum(s.messages_sent for s in network.stats.values())
    assert len([m for m in messages if m.tag.startswith("iknp/U/")]) == len(shade_hops.chunks(nb, length))


def test_out_of_place_messages_are_refused():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 2, (4, 64)).astype(np.uint8)
    y = rng.integers(0, 2, (5, 64)).astype(np.uint8)
    s_state, r_state = {}, {}
    a = shade_hops.receiver_base(r_state, sender=0, receiver=1, rng=RandomSource())
    with pytest.raises(ProtocolError, match="baseot/B"):
        shade_hops.receiver_extend(r_state, a, y, sender=0, receiver=1)
    b = shade_hops.sender_base(s_state, a, rng=RandomSource())
    u = shade_hops.receiver_extend(r_state, b, y, sender=0, receiver=1)
    with pytest.raises(ProtocolError, match="IKNP matrices"):
        shade_hops.sender_correct(s_state, [*u, *u], x, receivers=5, sender=0, receiver=1)
    corrections, _ = shade_hops.sender_correct(s_state, u, x, receivers=5, sender=0, receiver=1)
    extra = Message(0, 1, "shade/u", (corrections[0].arrays[0],))
    with pytest.raises(ProtocolError, match="more correction frames"):
        shade_hops.receiver_finish(dict(r_state), [*corrections, extra], y, senders=4, sender=0, receiver=1)
    with pytest.raises(ProtocolError, match="fewer correction frames"):
        shade_hops.receiver_finish(dict(r_state), [], y, senders=4, sender=0, receiver=1)
