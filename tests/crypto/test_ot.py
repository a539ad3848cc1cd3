"""X25519 base OT and IKNP OT extension across sessions: correctness, known answers against
an independent Montgomery ladder, views, refused points, session reuse, tampering."""

import hashlib

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from securefl.crypto import aesni, ot
from securefl.crypto.bits import unpack_rows
from securefl.crypto.channel import Message, Network
from securefl.crypto.fixed_key import FixedKeyAES
from securefl.crypto.ot import (
    CRS_POINT,
    FIELD_PRIME,
    KAPPA,
    LOW_ORDER_U,
    BaseOTReceiver,
    BaseOTSender,
    OTSetups,
    ReceiverSetup,
    SenderSetup,
    check_point,
    iknp_setup,
    random_ot,
    receiver_complete,
    receiver_hello,
    sender_answer,
    setup_context,
)
from securefl.crypto.rand import random_source
from securefl.errors import InputError, ProtocolError

ORDER = (1 << 252) + 27742317777372353535851937790883648493
"""The prime order l of Curve25519's base point."""
CONTEXT = setup_context(b"test federation", 0, 1)


def ladder(k: int, u: int) -> int:
    """x-only scalar multiplication, RFC 7748 section 5, with an unclamped scalar ``k``
    (an independent reference: the identity comes out as 0)."""
    p, a24 = FIELD_PRIME, 121665
    x1, x2, z2, x3, z3, swap = u, 1, 0, u, 1, 0
    for t in reversed(range(k.bit_length())):
        bit = (k >> t) & 1
        swap ^= bit
        if swap:
            x2, x3, z2, z3 = x3, x2, z3, z2
        swap = bit
        a, b, c, d = x2 + z2, x2 - z2, x3 + z3, x3 - z3
        aa, bb = a * a % p, b * b % p
        e = (aa - bb) % p
        da, cb = d * a % p, c * b % p
        x3, z3 = (da + cb) ** 2 % p, x1 * (da - cb) ** 2 % p
        x2, z2 = aa * bb % p, e * (aa + a24 * e) % p
    if swap:
        x2, z2 = x3, z3
    return x2 * pow(z2, p - 2, p) % p


def clamp(scalar: bytes) -> int:
    k = bytearray(scalar)
    k[0] &= 248
    k[31] = (k[31] & 127) | 64
    return int.from_bytes(k, "little")


def u_of(raw) -> int:
    return int.from_bytes(bytes(raw), "little")


def test_reference_ladder_agrees_with_x25519():
    rng = np.random.default_rng(0)
    for _ in range(4):
        scalar, other = rng.bytes(32), rng.bytes(32)
        point = X25519PrivateKey.from_private_bytes(other).public_key().public_bytes_raw()
        shared = X25519PrivateKey.from_private_bytes(scalar).exchange(X25519PublicKey.from_public_bytes(point))
        assert ladder(clamp(scalar), u_of(point)) == u_of(shared)


def test_reference_point_is_in_the_prime_order_subgroup():
    u = u_of(CRS_POINT)
    check_point(CRS_POINT, "T")
    assert ladder(ORDER, u) == 0 and ladder(ORDER - 1, u) == u
    assert CRS_POINT.hex() == "9150f26e9673ebe97a44777e2c11898d66a29fa5a6c256d53eb5a5fc0a3a3c64"


def test_low_order_list_is_the_8_torsion():
    for u in LOW_ORDER_U:
        assert ladder(8, u) == 0
    assert ladder(8, 9) != 0


def kdf(index, choice, a_point, p0, p1, shared):
    digest = hashlib.sha256(b"securefl X25519 base OT v2")
    digest.update(CONTEXT + index.to_bytes(4, "big") + bytes([choice]) + a_point + p0 + p1 + shared)
    return digest.digest()[:16]


def run_base_ot(choices, seed=1):
    rng = random_source(seed)
    sender = BaseOTSender(context=CONTEXT, count=len(choices), rng=rng.child("s"))
    receiver = BaseOTReceiver(context=CONTEXT, choices=np.asarray(choices), rng=rng.child("r"))
    a_point = sender.point()
    points, chosen = receiver.respond(a_point)
    keys0, keys1 = sender.finish(points)
    return sender, a_point, points, keys0, keys1, chosen


def test_base_ot_known_answer_from_the_reference_ladder():
    """Every key is the KDF of the transcript and a*P_i^j computed by the reference ladder;
    the receiver's point P_i^{c_i} is b_i G and P_i^{1-c_i} is b_i T for one scalar b_i."""
    choices = np.array([0, 1, 1, 0, 1])
    sender, a_point, points, keys0, keys1, chosen = run_base_ot(choices)
    a = clamp(sender.secret)
    assert ladder(a, 9) == u_of(a_point)
    for i, c in enumerate(choices):
        p0, p1 = bytes(points[i, 0]), bytes(points[i, 1])
        for j, keys in ((0, keys0), (1, keys1)):
            shared = ladder(a, u_of(bytes(points[i, j]))).to_bytes(32, "little")
            assert bytes(keys[i]) == kdf(i, j, a_point.tobytes(), p0, p1, shared)
        assert bytes(chosen[i]) == bytes((keys1 if c else keys0)[i])
    secrets = random_source(1).child("r").bytes(32 * len(choices))
    for i, c in enumerate(choices):
        b = clamp(secrets[32 * i : 32 * i + 32])
        assert u_of(points[i, c]) == ladder(b, 9) and u_of(points[i, 1 - c]) == ladder(b, u_of(CRS_POINT))


@settings(max_examples=15, deadline=None)
@given(choices=st.lists(st.integers(0, 1), min_size=1, max_size=12), seed=st.integers(0, 2**30))
def test_base_ot_receiver_gets_exactly_the_chosen_keys(choices, seed):
    choices = np.array(choices)
    _, _, _, keys0, keys1, chosen = run_base_ot(choices, seed)
    picked = choices[:, None] == 1
    np.testing.assert_array_equal(chosen, np.where(picked, keys1, keys0))
    assert (chosen != np.where(picked, keys0, keys1)).any(axis=1).all()
    assert len({bytes(k) for k in np.concatenate([keys0, keys1])}) == 2 * len(choices)


def test_base_ot_points_do_not_reveal_the_choices():
    """Both points of every OT are valid curve points whatever the choice, and the points
    of the all-0 and the all-1 choice vectors look alike (first-byte histogram)."""
    zeros = run_base_ot(np.zeros(128, int), seed=3)[2]
    ones = run_base_ot(np.ones(128, int), seed=4)[2]
    for points in (zeros, ones):
        for i in range(4):
            check_point(points[i, 0], "P0")
            check_point(points[i, 1], "P1")
    table = np.array([[np.bincount(p[:, j, 0] >> 6, minlength=4) for j in (0, 1)] for p in (zeros, ones)])
    assert stats.chi2_contingency(table.reshape(2, 8)).pvalue > 1e-4


def on_twist_u() -> int:
    return next(u for u in range(2, 100) if not ot._on_curve(u) and u not in LOW_ORDER_U)


@pytest.mark.parametrize(
    "raw, problem",
    [
        (bytes(31), "32 bytes"),
        ((FIELD_PRIME + 2).to_bytes(32, "little"), "not a canonical"),
        ((9 | 1 << 255).to_bytes(32, "little"), "not a canonical"),
        (max(LOW_ORDER_U).to_bytes(32, "little"), "low-order"),
        ((0).to_bytes(32, "little"), "low-order"),
        (on_twist_u().to_bytes(32, "little"), "not on Curve25519"),
    ],
)
def test_bad_points_are_refused_naming_the_field(raw, problem):
    with pytest.raises(ProtocolError, match=f"A: .*{problem}" if len(raw) == 32 else problem):
        BaseOTReceiver(context=CONTEXT, choices=np.array([0, 1])).respond(np.frombuffer(raw, np.uint8))
    sender = BaseOTSender(context=CONTEXT, count=2)
    points = BaseOTReceiver(context=CONTEXT, choices=np.array([0, 1])).respond(sender.point())[0]
    if len(raw) == 32:
        points[1, 0] = np.frombuffer(raw, np.uint8)
        with pytest.raises(ProtocolError, match=rf"baseot/B\[1\]\[0\]: .*{problem}"):
            sender.finish(points)


def test_base_ot_sender_refuses_malformed_answers():
    sender = BaseOTSender(context=CONTEXT, count=2)
    with pytest.raises(ProtocolError, match="before point"):
        sender.finish(np.zeros((2, 2, 32), np.uint8))
    points = BaseOTReceiver(context=CONTEXT, choices=np.array([0, 1])).respond(sender.point())[0]
    with pytest.raises(ProtocolError, match=r"expected \(2, 2, 32\)"):
        sender.finish(points[:1])
    points[0, 1] = points[0, 0]
    with pytest.raises(ProtocolError, match="both points are equal"):
        sender.finish(points)


def test_base_ot_bad_inputs_name_the_parameter():
    with pytest.raises(InputError, match="choices"):
        BaseOTReceiver(context=CONTEXT, choices=np.array([0, 2])).respond(BaseOTSender(context=CONTEXT).point())
    with pytest.raises(InputError, match="context"):
        BaseOTSender(context=b"short").point()
    with pytest.raises(InputError, match="receiver"):
        setup_context(b"f", 3, 3)
    with pytest.raises(InputError, match="federation"):
        setup_context(b"", 1, 2)


def negotiate(network, setups, me=0, peer=1, rng=None):
    """One hello/answer round between extension sender ``me`` and receiver ``peer``."""
    rng = rng or random_source(None)
    context = setup_context(setups.federation, me, peer)
    hello, pending = receiver_hello(setups.receiver(peer, me), context=context, rng=rng, sender=me, receiver=peer)
    answer, s_setup, session = sender_answer(setups.sender(me, peer), network.deliver(hello), context=context, rng=rng)
    setups.keep(me, peer, s_setup)
    r_setup, r_session = receiver_complete(pending, setups.receiver(peer, me), network.deliver(answer), context=context)
    setups.keep(peer, me, r_setup)
    assert session == r_session
    return s_setup.extension(session), r_setup.extension(session), answer.tag


def test_the_receivers_t_does_not_depend_on_its_choices():
    """``t_blocks`` (no choices) is the ``t`` that ``extend`` returns for any choices, and
    ``matrix`` is ``extend``'s ``U``: what lets SHADE's receiver recompute its seeds."""
    network, setups = Network(), OTSetups()
    _, receiver, _ = negotiate(network, setups)
    rng = np.random.default_rng(3)
    for chunk, count in ((0, 1000), (5, 64)):
        t = receiver.t_blocks(chunk, count)
        for _ in range(2):
            choices = rng.integers(0, 2, count).astype(np.uint8)
            message, extended = receiver.extend(choices, chunk, sender=0, receiver=1)
            np.testing.assert_array_equal(t, extended)
            assert receiver.matrix(choices, chunk, sender=0, receiver=1).arrays[0].tobytes() \
                == message.arrays[0].tobytes()
    assert not np.array_equal(receiver.t_blocks(1, 64), receiver.t_blocks(5, 64))


def test_sessions_resume_one_setup_and_never_reuse_a_pad():
    """Two sessions of one setup with the same choice bits: the second runs no base OTs, both
    give correct OTs, U of the two differ (a re-used PRG window would make them equal:
    U ^ U' = r ^ r' = 0), and no output of one session equals an output of the other."""
    network, setups = Network(), OTSetups()
    choices = np.random.default_rng(0).integers(0, 2, 1024).astype(np.uint8)
    outputs, matrices, tags = [], [], []
    for _ in range(2):
        sender, receiver, tag = negotiate(network, setups)
        message, t = receiver.extend(choices, 0, sender=0, receiver=1)
        q = sender.extend(network.deliver(message), 0, choices.size)
        m0, m1 = sender.random_ot(q, 0)
        got = receiver.random_ot(t, 0)
        np.testing.assert_array_equal(got, np.where(choices[:, None] == 1, m1, m0))
        outputs.append({bytes(r) for r in np.concatenate([m0, m1])})
        matrices.append(message.arrays[0])
        tags.append((tag, message.tag))
    assert tags == [("baseot/B", "iknp/U/0/0"), ("iknp/resume", "iknp/U/1/0")]
    assert not np.array_equal(matrices[0], matrices[1])
    assert not outputs[0] & outputs[1]


def test_every_session_hashes_under_fresh_tweaks_and_reads_fresh_prg_windows(monkeypatch):
    """Spy on the TCCR hash (OpenSSL's or the compiled AES-NI pass, whichever runs) and the
    row PRG over three sessions of one setup: no (tweak) and no (nonce) is used twice.  A
    counter that did not advance would fail here."""
    tweaks, nonces = [], []
    tccr, fill, compiled = FixedKeyAES.tccr, ot.RowPRG.fill, aesni.tccr_into

    def spy_tccr(self, x, low, out=None, *, high=0):
        tweaks.extend((int(high), int(w)) for w in low)
        return tccr(self, x, low, out, high=high)

    def spy_compiled(x, delta_low, delta_high, first, high, keys, out):
        tweaks.extend((int(high), int(first) + i) for i in range(x.shape[0]))
        return compiled(x, delta_low, delta_high, first, high, keys, out)

    def spy_fill(self, nonce, words):
        nonces.append((id(self), nonce))
        return fill(self, nonce, words)

    monkeypatch.setattr(FixedKeyAES, "tccr", spy_tccr)
    monkeypatch.setattr(aesni, "tccr_into", spy_compiled)
    monkeypatch.setattr(ot.RowPRG, "fill", spy_fill)
    network, setups = Network(), OTSetups()
    choices = np.ones(200, np.uint8)
    for _ in range(3):
        sender, receiver, _ = negotiate(network, setups)
        for chunk in range(2):
            message, t = receiver.extend(choices, chunk, sender=0, receiver=1)
            sender.random_ot(sender.extend(network.deliver(message), chunk, choices.size), chunk)
            receiver.random_ot(t, chunk)
    # each OT is hashed 3 times (q and q ^ s at the sender, t at the receiver) under its tweak
    assert len(tweaks) == 3 * 2 * 3 * 200
    assert len(set(tweaks)) == 3 * 2 * 200
    assert {high for high, _ in tweaks} == {0, 1, 2}
    windows = [nonce for _, nonce in nonces]
    assert len(windows) == 3 * 2 * 3 and len(set(windows)) == 3 * 2
    assert set(windows) == {(s << 32) | c for s in range(3) for c in range(2)}


def test_a_replayed_or_out_of_order_session_is_refused():
    setup = SenderSetup(setup_id=bytes(16), delta=np.zeros(2, np.uint64), seeds=np.zeros((KAPPA, 16), np.uint8))
    assert setup.accept(0) == 0 and setup.accept(5) == 5
    for old in (5, 3, 0):
        with pytest.raises(ProtocolError, match=f"session {old} replayed or out of order"):
            setup.accept(old)
    with pytest.raises(InputError, match="session"):
        setup.accept(ot.SESSION_LIMIT)
    with pytest.raises(ProtocolError, match="never accepted"):
        setup.extension(6)
    receiver = ReceiverSetup(setup_id=bytes(16), seeds0=np.zeros((KAPPA, 16), np.uint8),
                             seeds1=np.zeros((KAPPA, 16), np.uint8), next_session=ot.SESSION_LIMIT - 1)
    assert receiver.open() == ot.SESSION_LIMIT - 1
    with pytest.raises(ProtocolError, match="sessions used"):
        receiver.open()
    with pytest.raises(ProtocolError, match="never opened"):
        ReceiverSetup(setup_id=bytes(16), seeds0=receiver.seeds0, seeds1=receiver.seeds1).extension(0)


def test_a_matrix_of_another_session_is_refused():
    network, setups = Network(), OTSetups()
    negotiate(network, setups)
    sender, receiver, _ = negotiate(network, setups)
    stale = setups.receiver(1, 0).extension(0)
    message, _ = stale.extend(np.zeros(64, np.uint8), 0, sender=0, receiver=1)
    with pytest.raises(ProtocolError, match="iknp/U/1/0"):
        sender.extend(network.deliver(message), 0, 64)


def test_setups_round_trip_through_arrays_and_refuse_malformed_state():
    network, setups = Network(), OTSetups()
    negotiate(network, setups)
    s_setup, r_setup = setups.sender(0, 1), setups.receiver(1, 0)
    again = SenderSetup.from_arrays(s_setup.to_arrays())
    assert again.setup_id == s_setup.setup_id and again.next_session == 1
    np.testing.assert_array_equal(again.seeds, s_setup.seeds)
    assert ReceiverSetup.from_arrays(r_setup.to_arrays()).setup_id == r_setup.setup_id
    broken = r_setup.to_arrays()
    broken["seeds0"] = broken["seeds0"][:3]
    with pytest.raises(ProtocolError, match="seeds0"):
        ReceiverSetup.from_arrays(broken)
    with pytest.raises(InputError, match="setup"):
        setups.keep(0, 1, "not a setup")


def test_a_new_setup_replaces_a_lost_one_on_both_sides():
    network, setups = Network(), OTSetups()
    negotiate(network, setups)
    first = setups.sender(0, 1).setup_id
    del setups.held[1][(0, "receiver")]
    _, _, tag = negotiate(network, setups)
    assert tag == "baseot/B"
    assert setups.sender(0, 1).setup_id == setups.receiver(1, 0).setup_id != first


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
        sender.extend(Message(1, 0, "iknp/U/0/0", (message.arrays[0][:, :1],)), 0, 128)


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
        network.receive(0, 1, "iknp/U/0/0")


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
