"""Elliptic-curve base OT and IKNP OT extension: correctness, views, tampering."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from securefl.crypto.bits import unpack_rows
from securefl.crypto.channel import Message, Network
from securefl.crypto.ot import (
    KAPPA,
    BaseOTReceiver,
    BaseOTSender,
    iknp_setup,
    random_ot,
)
from securefl.crypto.rand import random_source
from securefl.errors import InputError, ProtocolError


def run_base_ot(choices, seed=1):
    network = Network()
    rng = random_source(seed)
    sender = BaseOTSender(count=len(choices), rng=rng.child("s"))
    receiver = BaseOTReceiver(choices=np.asarray(choices), rng=rng.child("r"))
    reply, chosen = receiver.respond(network.deliver(sender.first(0, 1)))
    keys0, keys1 = sender.finish(network.deliver(reply))
    return keys0, keys1, chosen


def test_base_ot_receiver_gets_exactly_the_chosen_keys():
    choices = np.random.default_rng(0).integers(0, 2, 16)
    keys0, keys1, chosen = run_base_ot(choices)
    wanted = np.where(choices[:, None] == 1, keys1, keys0)
    other = np.where(choices[:, None] == 1, keys0, keys1)
    np.testing.assert_array_equal(chosen, wanted)
    assert (chosen != other).any(axis=1).all()
    assert len({bytes(k) for k in np.concatenate([keys0, keys1])}) == 32


def test_base_ot_rejects_point_off_the_curve():
    network = Network()
    sender = BaseOTSender(count=2)
    first = sender.first(0, 1)
    bad = first.arrays[0].copy()
    bad[0, -1] ^= 1
    with pytest.raises(ProtocolError, match="not on"):
        BaseOTReceiver(choices=np.array([0, 1])).respond(Message(0, 1, "baseot/A", (bad,)))
    receiver = BaseOTReceiver(choices=np.array([0, 1]))
    reply, _ = receiver.respond(network.deliver(first))
    with pytest.raises(ProtocolError):
        sender.finish(Message(1, 0, "baseot/B", (reply.arrays[0][:1],)))


def test_base_ot_rejects_non_binary_choices():
    with pytest.raises(InputError, match="choices"):
        BaseOTReceiver(choices=np.array([0, 2])).respond(BaseOTSender(count=2).first(0, 1))


def test_base_ot_finish_before_first():
    with pytest.raises(ProtocolError):
        BaseOTSender().finish(Message(1, 0, "baseot/B", ()))


@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 700), chunk=st.sampled_from([64, 128, 1024]), seed=st.integers(0, 2**30))
def test_random_ot_receiver_gets_chosen_message_never_the_other(m, chunk, seed):
    choices = np.random.default_rng(seed).integers(0, 2, m)
    result = random_ot(m, seed=seed, chunk=chunk, choices=choices)
    picked = choices.astype(bool)[:, None]
    np.testing.assert_array_equal(result.received, np.where(picked, result.messages1, result.messages0))
    other = np.where(picked, result.messages0, result.messages1)
    assert (result.received != other).any(axis=1).all()
    assert (result.messages0 != result.messages1).any(axis=1).all()


def test_random_ot_is_reproducible_with_a_seed_and_fresh_without():
    a, b = random_ot(200, seed=9), random_ot(200, seed=9)
    np.testing.assert_array_equal(a.messages0, b.messages0)
    np.testing.assert_array_equal(a.choices, b.choices)
    assert not np.array_equal(random_ot(200).messages0, random_ot(200).messages0)


def test_random_ot_counts_bytes_16_per_ot_plus_base():
    result = random_ot(64 * 100)
    assert result.bytes_sent[1] >= 16 * 64 * 100
    assert result.bytes_total < 16 * 64 * 100 + 30_000


def test_iknp_correlation_and_uniform_receiver_message():
    """q_j = t_j XOR r_j s, and the sender's view U is uniform bits (it hides r)."""
    network = Network()
    rng = random_source(4)
    sender, receiver = iknp_setup(
        network, sender=0, receiver=1, sender_rng=rng.child("s"), receiver_rng=rng.child("r")
    )
    choices = np.ones(4096, dtype=np.uint8)
    message, t = receiver.extend(choices, 0, sender=0, receiver=1)
    q = sender.extend(network.deliver(message), 0, choices.size)
    np.testing.assert_array_equal(q ^ t, np.broadcast_to(sender.delta, q.shape))
    bits = unpack_rows(message.arrays[0], 4096)
    ones = int(bits.sum())
    assert stats.binomtest(ones, bits.size).pvalue > 1e-6
    assert stats.binomtest(int((bits[:, :-1] == bits[:, 1:]).sum()), bits[:, 1:].size).pvalue > 1e-6


def test_iknp_rejects_wrong_shape_of_u():
    network = Network()
    rng = random_source(5)
    sender, receiver = iknp_setup(
        network, sender=0, receiver=1, sender_rng=rng.child("s"), receiver_rng=rng.child("r")
    )
    message, _ = receiver.extend(np.zeros(128, np.uint8), 0, sender=0, receiver=1)
    with pytest.raises(ProtocolError, match="U"):
        sender.extend(Message(1, 0, "iknp/U/0", (message.arrays[0][:, :1],)), 0, 128)


def test_tampered_iknp_message_is_rejected():
    network = Network()
    rng = random_source(6)
    sender, receiver = iknp_setup(
        network, sender=0, receiver=1, sender_rng=rng.child("s"), receiver_rng=rng.child("r")
    )
    message, _ = receiver.extend(np.zeros(128, np.uint8), 0, sender=0, receiver=1)
    network.send(message)
    frame = network.queue(1, 0)[0]
    raw = bytearray(bytes(frame.body[0]))
    raw[5] ^= 0x10
    frame.body = [memoryview(bytes(raw))]
    with pytest.raises(ProtocolError, match="MAC"):
        network.receive(0, 1, "iknp/U/0")


@pytest.mark.parametrize(
    "kwargs, parameter",
    [
        (dict(m=0), "m"),
        (dict(m=10, chunk=100), "chunk"),
        (dict(m=3, choices=np.array([0, 1, 2])), "choices"),
        (dict(m=3, choices=np.array([0, 1])), "choices"),
        (dict(m=3, seed=-2), "seed"),
    ],
)
def test_random_ot_bad_input(kwargs, parameter):
    with pytest.raises(InputError, match=parameter):
        random_ot(**kwargs)


def test_kappa_base_ots():
    assert KAPPA == 128
