"""Metered authenticated channel: round trips, byte counts, and every tampering -> ProtocolError."""

import copy
import struct

import numpy as np
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from securefl.crypto.channel import (
    MAGIC,
    SERVER,
    Frame,
    LinkKeys,
    Message,
    Network,
    SharedKey,
    frame_key,
    frame_mac,
    link_info,
)
from securefl.errors import InputError, ProtocolError


def sample_message(tag="round1", sender=0, receiver=1):
    return Message(sender, receiver, tag, (np.arange(6, dtype=np.int64).reshape(2, 3), np.ones(4, np.uint16)))


def test_round_trip_preserves_arrays_and_counts_bytes():
    network = Network()
    sent = sample_message()
    size = network.send(sent)
    got = network.receive(1, 0, "round1")
    assert got.tag == "round1" and (got.sender, got.receiver) == (0, 1)
    for a, b in zip(sent.arrays, got.arrays):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert size > 48 + 8 and network.bytes_sent() == {0: size, 1: 0}
    assert network.stats[1].bytes_received == size and network.bytes_total() == size


def test_server_party_and_empty_message():
    network = Network()
    got = network.deliver(Message(2, SERVER, "empty"))
    assert got.arrays == () and network.stats[SERVER].messages_received == 1


def test_wire_bytes_round_trip_through_from_bytes():
    network = Network()
    network.send(sample_message())
    queue = network.queue(0, 1)
    wire = bytes(queue.popleft())
    queue.append(Frame.from_bytes(wire))
    np.testing.assert_array_equal(network.receive(1, 0, "round1").arrays[0], np.arange(6).reshape(2, 3))


def _sent(network=None):
    network = network or Network()
    network.send(sample_message())
    return network, network.queue(0, 1)


def _flip(buffer: bytes, index: int) -> bytes:
    data = bytearray(buffer)
    data[index] ^= 1
    return bytes(data)


@pytest.mark.parametrize("where", ["header", "body", "mac"])
def test_tampered_frame_is_rejected(where):
    network, queue = _sent()
    frame = queue[0]
    if where == "header":
        frame.header = _flip(frame.header, len(frame.header) - 1)
    elif where == "body":
        frame.body = [memoryview(_flip(bytes(frame.body[0]), 3))] + frame.body[1:]
    else:
        frame.mac = _flip(frame.mac, 0)
    with pytest.raises(ProtocolError):
        network.receive(1, 0, "round1")


def test_truncated_frame_is_rejected():
    network, queue = _sent()
    wire = bytes(queue.popleft())
    for cut in (3, 20, len(wire) - 17, len(wire) - 1):
        with pytest.raises(ProtocolError):
            queue.appendleft(Frame.from_bytes(wire[:cut]))
            network.receive(1, 0, "round1")
        queue.clear()


def test_truncated_body_is_rejected():
    network, queue = _sent()
    queue[0].body = [queue[0].body[0][:-1]] + queue[0].body[1:]
    with pytest.raises(ProtocolError, match="body"):
        network.receive(1, 0, "round1")


def test_replayed_frame_is_rejected():
    network, queue = _sent()
    replay = copy.copy(queue[0])
    network.receive(1, 0, "round1")
    queue.append(replay)
    with pytest.raises(ProtocolError, match="replayed"):
        network.receive(1, 0, "round1")


def test_reordered_frames_are_rejected():
    network = Network()
    network.send(sample_message("a"))
    network.send(sample_message("b"))
    queue = network.queue(0, 1)
    queue.rotate(1)
    with pytest.raises(ProtocolError, match="out-of-order"):
        network.receive(1, 0, "b")


def test_wrong_round_tag_is_rejected():
    network, _ = _sent()
    with pytest.raises(ProtocolError, match="round"):
        network.receive(1, 0, "round2")


def test_misaddressed_frame_is_rejected():
    network, queue = _sent()
    network.queue(0, 2).append(queue.popleft())
    with pytest.raises(ProtocolError, match="addressed"):
        network.receive(2, 0, "round1")


def test_frame_from_another_session_is_rejected():
    other, queue = _sent()
    network = Network()
    network.queue(0, 1).append(queue.popleft())
    with pytest.raises(ProtocolError):
        network.receive(1, 0, "round1")


def test_forged_frame_with_wrong_key_is_rejected():
    attacker = Network(session=b"12345678")
    victim = Network(session=b"12345678")
    attacker.send(sample_message())
    victim.queue(0, 1).append(attacker.queue(0, 1).popleft())
    with pytest.raises(ProtocolError, match="MAC"):
        victim.receive(1, 0, "round1")


def test_missing_frame_is_rejected():
    with pytest.raises(ProtocolError, match="no message"):
        Network().receive(1, 0, "round1")


def test_bad_session_length():
    with pytest.raises(InputError, match="session"):
        Network(session=b"short")


# ------------------------------------------------------------ malformed headers, any bytes


def _header(network, tag, specs, *, seq=0, sender=0, receiver=1):
    """A header as a (malicious or buggy) sender may write it: specs are (dtype, shape)."""
    raw_tag = tag.encode()
    parts = [struct.pack(">4s8sQiiH", MAGIC, network.session, seq, sender, receiver, len(raw_tag)), raw_tag]
    parts.append(struct.pack(">H", len(specs)))
    for dtype, shape in specs:
        parts.append(struct.pack(">B", len(dtype)) + dtype)
        parts.append(struct.pack(f">B{len(shape)}Q", len(shape), *shape))
    return b"".join(parts)


def _signed(network, header, body, *, seq=0, sender=0, receiver=1):
    """The frame with a valid MAC under the sender's own link key (the sender is the attacker)."""
    link_key = network.keys.party(sender).link_key(sender, receiver)
    key = frame_key(link_key, network.session, seq, sender, receiver)
    return Frame(header, [memoryview(body)], frame_mac(key, header, [memoryview(body)]))


@pytest.mark.parametrize(
    "dtype, shape, body",
    [
        (b"|u1", (2**32, 2**32), b""),  # element count wraps to 0 in int64
        (b"<u8", (2**61, 8), b""),  # byte count wraps to 0 in int64
        (b"|O", (1,), bytes(8)),  # object arrays: pointers from the wire
        (b"|V0", (3,), b""),  # zero-size void
        (b"<U2", (1,), bytes(8)),
        (b"(2,)<i4", (1,), bytes(8)),
        (b"<M8[s]", (1,), bytes(8)),
        (b"\xff\xfe", (1,), bytes(1)),
    ],
)
def test_signed_frame_with_a_malformed_header_is_a_protocol_error(dtype, shape, body):
    network = Network()
    network.queue(0, 1).append(_signed(network, _header(network, "r", [(dtype, shape)]), body))
    with pytest.raises(ProtocolError, match="header|body"):
        network.receive(1, 0, "r")


def test_too_many_dimensions_and_unsendable_arrays():
    network = Network()
    header = _header(network, "r", [(b"|u1", (1,) * 40)])
    network.queue(0, 1).append(_signed(network, header, bytes(1)))
    with pytest.raises(ProtocolError, match="dimensions"):
        network.receive(1, 0, "r")
    with pytest.raises(InputError, match=r"arrays\[1\]"):
        Network().send(Message(0, 1, "r", (np.zeros(2), np.array([object()]))))


_dtype_names = st.sampled_from(
    [b"|u1", b"<i4", b">u8", b"<f8", b"|b1", b"<c16", b"|O", b"|V0", b"|V8", b"<U1", b"S2", b"<f16", b""]
) | st.binary(max_size=6)
_dims = st.integers(0, 4) | st.integers(0, 2**64 - 1)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(_dtype_names, st.lists(_dims, max_size=5)), max_size=3),
    st.binary(max_size=96),
    st.booleans(),
)
@example(specs=[(b"|u1", [0, 2**63])], body=b"", fit=False)  # empty, but an axis numpy refuses
@example(specs=[(b"|u1", [0, 4, 2**61])], body=b"", fit=False)  # empty, non-zero axes too large
def test_any_signed_header_is_accepted_exactly_or_refused_with_protocol_error(specs, body, fit):
    """A sender holding its link key can put anything in a header: never a non-ProtocolError."""
    network = Network()
    header = _header(network, "r", specs)
    if fit:  # a body of the promised length, where that is small
        try:
            need = sum(np.dtype(d.decode()).itemsize * int(np.prod(shape, dtype=object)) for d, shape in specs)
        except Exception:
            need = len(body)
        body = bytes(need) if 0 <= need <= 4096 else body
    network.queue(0, 1).append(_signed(network, header, body))
    try:
        message = network.receive(1, 0, "r")
    except ProtocolError:
        return
    assert len(message.arrays) == len(specs)
    for array, (dtype, shape) in zip(message.arrays, specs):
        assert array.dtype.str == dtype.decode() and array.shape == tuple(shape)
    assert sum(a.nbytes for a in message.arrays) == len(body)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_as_a_frame_are_a_protocol_error(data):
    network = Network()
    with pytest.raises(ProtocolError):
        network.queue(0, 1).append(Frame.from_bytes(data))
        network.receive(1, 0, "round1")


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_edit_of_a_valid_frame_is_a_protocol_error(data):
    network, queue = _sent()
    original = bytes(queue.popleft())
    wire = bytearray(original)
    edits = data.draw(st.lists(st.tuples(st.sampled_from("xdi"), st.integers(0, len(wire)), st.integers(1, 255)), min_size=1, max_size=4))
    for kind, where, value in edits:
        where = min(where, len(wire) - 1)
        if kind == "x":
            wire[where] ^= value
        elif kind == "d":
            del wire[where]
        else:
            wire.insert(where, value)
    assume(bytes(wire) != original)
    with pytest.raises(ProtocolError):
        queue.append(Frame.from_bytes(bytes(wire)))
        network.receive(1, 0, "round1")


# ----------------------------------------------------------------------- per-link keys


def test_link_keys_are_x25519_agreements_of_the_two_endpoints_only():
    keys = LinkKeys()
    parties = (SERVER, 0, 1, 2)
    links = {}
    for a in parties:
        for b in parties:
            if a < b:
                k_ab = keys.party(a).link_key(a, b)
                assert k_ab == keys.party(b).link_key(a, b) == keys.party(b).link_key(b, a)
                shared = keys.party(a).private.exchange(X25519PublicKey.from_public_bytes(keys.public_key(b)))
                reference = HKDF(hashes.SHA256(), 32, b"securefl/channel", link_info(a, b)).derive(shared)
                assert k_ab == reference
                links[(a, b)] = k_ab
    assert len(set(links.values())) == len(links)  # every link its own key
    with pytest.raises(InputError, match="not an endpoint"):
        keys.party(SERVER).link_key(0, 1)


def test_relaying_server_can_neither_verify_nor_forge_a_client_to_client_frame():
    network = Network()
    network.send(Message(0, 1, "shade/u", (np.arange(64, dtype=np.uint16),)))
    queue = network.queue(0, 1)
    frame = queue.popleft()
    server = network.keys.party(SERVER)
    held = [server.link_key(SERVER, c) for c in (0, 1, 2)]  # every key the server can derive
    with pytest.raises(InputError):
        server.link_key(0, 1)
    for key in held:
        assert frame_mac(frame_key(key, network.session, 0, 0, 1), frame.header, frame.body) != frame.mac
    body = bytearray(bytes(frame.body[0]))
    body[5] ^= 0x40
    for key in held:
        forged = Frame(frame.header, [memoryview(bytes(body))], b"")
        forged.mac = frame_mac(frame_key(key, network.session, 0, 0, 1), forged.header, forged.body)
        queue.append(forged)
        with pytest.raises(ProtocolError, match="MAC"):
            network.receive(1, 0, "shade/u")
    queue.append(frame)  # the untouched frame still verifies at client 1
    assert network.receive(1, 0, "shade/u").arrays[0][5] == 5


def test_a_shared_link_key_verifies_that_link_only_and_keys_each_frame_from_it():
    """Two networks holding one link's key verify each other's frames, whose MAC is GMAC
    under HMAC-SHA256(K_ab, session || seq || sender || receiver)[:16]; another key fails,
    and the key ends no other link and belongs to no third party."""
    key = bytes(range(32))
    a = Network(session=b"12345678", keys=SharedKey((0, 1), key))
    b = Network(session=b"12345678", keys=SharedKey((1, 0), key))
    c = Network(session=b"12345678", keys=SharedKey((0, 1), bytes(32)))
    a.send(sample_message())
    frame = a.queue(0, 1)[0]
    assert frame.mac == frame_mac(frame_key(key, b"12345678", 0, 0, 1), frame.header, frame.body)
    wire = bytes(frame)
    b.queue(0, 1).append(Frame.from_bytes(wire))
    np.testing.assert_array_equal(b.receive(1, 0, "round1").arrays[1], np.ones(4))
    c.queue(0, 1).append(Frame.from_bytes(wire))
    with pytest.raises(ProtocolError, match="MAC"):
        c.receive(1, 0, "round1")
    with pytest.raises(InputError, match="link"):
        Network(session=b"12345678", keys=SharedKey((0, 1), key)).send(Message(0, 2, "x", (np.ones(1),)))
    with pytest.raises(InputError, match="party"):
        SharedKey((0, 1), key).party(2)
    with pytest.raises(InputError, match="key"):
        SharedKey((0, 1), b"short")
    with pytest.raises(InputError, match="ends"):
        SharedKey((1, 1), key)


@pytest.mark.parametrize("clmul", ["0", "1"])
def test_a_large_frames_mac_is_the_documented_gmac_on_either_ghash(monkeypatch, clmul):
    """A frame above ``ghash.SMALL`` (the compiled GHASH where the CPU has one): its MAC is
    AES-GCM's tag of header || body under the one-time frame key, as OpenSSL computes it, and
    one flipped body bit fails verification."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    from securefl.crypto import ghash

    monkeypatch.setenv(ghash.DISABLE_VARIABLE, clmul)
    key = bytes(range(32))
    sender = Network(session=b"12345678", keys=SharedKey((0, 1), key))
    receiver = Network(session=b"12345678", keys=SharedKey((1, 0), key))
    body = np.random.default_rng(3).integers(0, 2**16, size=(ghash.SMALL // 2 + 5,), dtype=np.uint16)
    sender.send(Message(0, 1, "shade/u", (body,)))
    frame = sender.queue(0, 1).popleft()
    encryptor = Cipher(algorithms.AES(frame_key(key, b"12345678", 0, 0, 1)), modes.GCM(bytes(12))).encryptor()
    encryptor.authenticate_additional_data(frame.header + body.tobytes())
    encryptor.finalize()
    assert frame.mac == encryptor.tag
    wire = bytearray(bytes(frame))
    wire[len(frame.header) + 12345] ^= 0x08
    receiver.queue(0, 1).append(Frame.from_bytes(bytes(wire)))
    with pytest.raises(ProtocolError, match="MAC"):
        receiver.receive(1, 0, "shade/u")
    receiver.queue(0, 1).clear()
    receiver.queue(0, 1).append(Frame.from_bytes(bytes(frame)))
    np.testing.assert_array_equal(receiver.receive(1, 0, "shade/u").arrays[0], body)
