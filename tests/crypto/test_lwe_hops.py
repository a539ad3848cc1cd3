"""The LWE session cut into hops (securefl.crypto.lwe_hops): the matrix and the nominal
bytes of secure_hamming_matrix(..., backend="lwe"), and a relay's tampering refused."""

from __future__ import annotations

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from securefl.crypto import lwe, lwe_hops
from securefl.crypto.channel import SERVER, Message, frame_size
from securefl.crypto.hamming import own_block
from securefl.crypto.hamming_plain import hamming_matrix, pack_codes
from securefl.crypto.identity import Credentials, Identity, Roster, new_federation
from securefl.crypto.lwe_keys import KeyBinding
from securefl.crypto.rand import RandomSource
from securefl.errors import InputError, ProtocolError
from securefl.protocols import secure_hamming_matrix

SESSION = b"lwe-hops"
CONTEXT = b"transport-session|lwe-hops"


def _start(codes, credentials, states=None, context=CONTEXT):
    """Hop 0 of every party (party j is roster client j); returns (states, key messages)."""
    states = {j: {} for j in range(len(codes))} if states is None else states
    clients = {j: j for j in range(len(codes))}
    keys = [lwe_hops.start(states[j], index=j, codes=codes[j], session=SESSION, rng=RandomSource(),
                           credentials=credentials[j], clients=clients, context=context)
            for j in range(len(codes))]
    return states, keys


def _run(codes, tamper=None, ring=False, keys_tamper=None):
    """Every hop of every party, the server relaying; returns (matrix blocks, all messages)."""
    parties = list(range(len(codes)))
    sizes = {j: c.shape[0] for j, c in enumerate(codes)}
    _, credentials = new_federation("lwe-hops", len(codes))
    states, keys = _start(codes, credentials)
    moved: list[Message] = []
    moved += keys
    inbox = {j: [] for j in parties}
    for key in keys:
        for forward in lwe_hops.relay(parties, key):
            moved.append(forward)
            inbox[forward.receiver].append(forward)
    if keys_tamper is not None:
        keys_tamper(inbox)
    broadcasts = {j: lwe_hops.broadcast(states[j], inbox[j], index=j, codes=codes[j], sizes=sizes,
                                        session=SESSION, credentials=credentials[j], ring=ring)
                  for j in parties}
    c_in = {j: [] for j in parties}
    h_in = {j: [] for j in parties}
    for j in parties:
        moved += broadcasts[j]
        for message in broadcasts[j]:
            for forward in lwe_hops.relay(parties, message):
                moved.append(forward)
                (c_in if "/C/" in forward.tag else h_in)[forward.receiver].append(forward)
    if tamper is not None:
        tamper(c_in, h_in)
    shares, answers = [], {j: [] for j in parties}
    for j in parties:
        sent, own = lwe_hops.evaluate(states[j], c_in[j], index=j, codes=codes[j], sizes=sizes,
                                      alive=parties, session=SESSION, ring=ring)
        for message in sent:
            moved.append(message)
            answers[message.receiver].append(message)
        shares += lwe_hops.share_messages(j, own)
    for j in parties:
        own = lwe_hops.finish(states[j], h_in[j], answers[j], index=j, codes=codes[j], sizes=sizes,
                              alive=parties, session=SESSION, ring=ring)
        shares += lwe_hops.share_messages(j, own)
    moved += shares
    moved += [Message(j, SERVER, f"lwe/own/{j}", (own_block(codes[j]),)) for j in parties]
    return shares, moved


def _codes(sizes, length, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 2, (n, length)).astype(np.uint8) for n in sizes]


@pytest.mark.parametrize("backend", ["lwe", "rlwe"])
def test_hops_give_the_matrix_and_the_bytes_of_the_one_loop_session(backend):
    codes = _codes((5, 3, 4), 64)
    shares, moved = _run(codes, ring=backend == "rlwe")
    offsets = np.cumsum([0, *[c.shape[0] for c in codes]])
    matrix = np.zeros((offsets[-1],) * 2, dtype=np.int64)
    for message in shares:
        a, b = map(int, message.tag.rsplit("/", 1)[1].split("-"))
        matrix[offsets[a]:offsets[a + 1], offsets[b]:offsets[b + 1]] += message.arrays[0]
    matrix %= 1 << 16
    upper = np.triu(np.ones_like(matrix, dtype=bool), 1)
    for j in range(len(codes)):
        upper[offsets[j]:offsets[j + 1], offsets[j]:offsets[j + 1]] = False
    reference = secure_hamming_matrix(codes, backend=backend)
    np.testing.assert_array_equal(matrix[upper], reference.matrix[upper])
    np.testing.assert_array_equal(reference.matrix, hamming_matrix(pack_codes(np.concatenate(codes))))
    assert len(shares) == 2 * 3
    assert sum(frame_size(m) for m in moved) == reference.bytes_total


def _alter(c_in, h_in):
    block = c_in[1][0]
    arrays = [a.copy() for a in block.arrays]
    arrays[0][0, 0] ^= 1
    c_in[1][0] = Message(block.sender, block.receiver, block.tag, tuple(arrays))


def _replay(c_in, h_in):
    c_in[1].append(c_in[1][0])


def _misroute(c_in, h_in):
    # party 0 encrypts for 2 (pair_roles(0, 2)), not for 1: its block for 2 handed to 1
    block = next(m for m in c_in[2] if m.tag.startswith("lwe/C/0/"))
    c_in[1] = [Message(block.sender, 1, block.tag, block.arrays)] + [
        m for m in c_in[1] if not m.tag.startswith("lwe/C/0/")]


def _alter_hint(c_in, h_in):
    hint = h_in[0][0]
    arrays = [a.copy() for a in hint.arrays]
    arrays[0][0, 0] ^= 1  # a bit of the top limb, all the hint carries
    h_in[0][0] = Message(hint.sender, hint.receiver, hint.tag, tuple(arrays))


@pytest.mark.parametrize("tamper, match", [(_alter, "does not verify"), (_replay, "block 0"),
                                           (_misroute, "unexpected or repeated"),
                                           (_alter_hint, "does not verify")])
def test_a_relay_altering_replaying_or_misrouting_a_broadcast_is_caught(tamper, match):
    with pytest.raises(ProtocolError, match=match):
        _run(_codes((2, 3, 2), 32, seed=1), tamper=tamper)


def test_a_session_above_the_statistical_bound_is_refused_before_any_work():
    codes = _codes((2,), 64)[0]
    _, credentials = new_federation("lwe-hops", 2)
    states, _ = _start([codes, codes], credentials)
    with pytest.raises(InputError, match="statistical bound"):
        lwe_hops.broadcast(states[0], [], index=0, codes=codes, sizes={0: 2, 1: 1 << 29},
                           session=SESSION, credentials=credentials[0])


def _substitute(forge):
    """A keys_tamper: party 1 gets, in place of party 0's key, ``forge(original message)``."""
    def tamper(inbox):
        inbox[1] = [forge(m) if m.tag == "lwe/key/0" else m for m in inbox[1]]
    return tamper


def _with(message, *arrays):
    return Message(message.sender, message.receiver, message.tag, tuple(arrays))


def _server_key(message):
    """The server's own X25519 key, unsigned (the attack of issue 20, item 1)."""
    mine = np.frombuffer(_ATTACKER.public_key().public_bytes_raw(), np.uint8).copy()
    return _with(message, mine)


def _stranger_signed(message):
    """The server's key, signed by an identity outside the roster posing as client 0."""
    stranger = Identity.generate(0)
    credentials = Credentials(stranger, Roster("the server's own", {0: stranger.public}))
    mine = _ATTACKER.public_key().public_bytes_raw()
    signature = KeyBinding(credentials, {0: 0, 1: 1, 2: 2}, CONTEXT).sign(0, mine)
    return _with(message, np.frombuffer(mine, np.uint8).copy(), np.frombuffer(signature, np.uint8).copy())


def _relabelled(message):
    """Party 2's genuine signed key relayed as party 0's (the signature names party 2)."""
    return _with(message, *_KEYS[2].arrays)


def _flipped_key(message):
    key, signature = message.arrays
    return _with(message, key ^ np.eye(1, 32, 0, dtype=np.uint8)[0], signature)


_ATTACKER = X25519PrivateKey.generate()
_KEYS: dict[int, Message] = {}


@pytest.mark.parametrize("forge, match", [(_server_key, "unsigned"), (_stranger_signed, "does not verify"),
                                          (_relabelled, "does not verify"),
                                          (_flipped_key, "does not verify")])
def test_a_substituted_or_relabelled_lwe_key_is_refused_before_use(forge, match, monkeypatch):
    """A relay that puts its own key (unsigned, or signed by a stranger), another party's
    genuine key, or an altered key in place of party 0's: party 1 refuses it at hop 1."""
    original = lwe_hops.start

    def keep(state, **kwargs):
        message = original(state, **kwargs)
        _KEYS[kwargs["index"]] = message
        return message

    monkeypatch.setattr(lwe_hops, "start", keep)
    with pytest.raises(ProtocolError, match=match):
        _run(_codes((2, 3, 2), 32, seed=2), keys_tamper=_substitute(forge))


@pytest.mark.parametrize("other", ["context", "cohort"])
def test_a_key_signed_for_another_session_or_cohort_is_refused(other):
    """A genuine key of client 0 signed for another session (a replay from another round) or
    shown to client 1 with another cohort than the one client 0 signed: refused."""
    codes = _codes((2, 2), 16, seed=3)
    _, credentials = new_federation("lwe-hops", 3)
    states = {0: {}, 1: {}}
    clients = {0: 0, 1: 1}
    signer = {0: 0, 1: 1, 2: 2} if other == "cohort" else clients
    context = b"another round" if other == "context" else CONTEXT
    key0 = lwe_hops.start(states[0], index=0, codes=codes[0], session=SESSION, rng=RandomSource(),
                          credentials=credentials[0], clients=signer, context=context)
    lwe_hops.start(states[1], index=1, codes=codes[1], session=SESSION, rng=RandomSource(),
                   credentials=credentials[1], clients=clients, context=CONTEXT)
    (forward,) = lwe_hops.relay([0, 1], key0)
    with pytest.raises(ProtocolError, match="does not verify"):
        lwe_hops.broadcast(states[1], [forward], index=1, codes=codes[1], sizes={0: 2, 1: 2},
                           session=SESSION, credentials=credentials[1])


def test_each_hop_runs_once_a_second_evaluation_is_refused_and_answers_nothing():
    """Issue 20, item 5: the evaluation hop run again on the same state (a server re-sending
    the request) raises ProtocolError before any answer; so do a repeated start, broadcast
    and decryption, and any hop out of order."""
    codes = _codes((2, 3), 16, seed=4)
    sizes = {0: 2, 1: 3}
    _, credentials = new_federation("lwe-hops", 2)
    states, keys = _start(codes, credentials)
    with pytest.raises(ProtocolError, match="started twice"):
        _start(codes, credentials, states=states)
    with pytest.raises(ProtocolError, match="hop 2 after hop 0"):
        lwe_hops.evaluate(dict(states[1]), [], index=1, codes=codes[1], sizes=sizes, alive=[0, 1],
                          session=SESSION)
    inbox = {j: [f for k in keys for f in lwe_hops.relay([0, 1], k) if f.receiver == j] for j in (0, 1)}
    out = {j: lwe_hops.broadcast(states[j], inbox[j], index=j, codes=codes[j], sizes=sizes,
                                 session=SESSION, credentials=credentials[j]) for j in (0, 1)}
    with pytest.raises(ProtocolError, match="hop 1 after hop 1"):
        lwe_hops.broadcast(states[0], inbox[0], index=0, codes=codes[0], sizes=sizes, session=SESSION,
                           credentials=credentials[0])
    encryptor, evaluator = lwe_hops.session_pairs([0, 1])[0]
    blocks = [f for m in out[encryptor] if "/C/" in m.tag for f in lwe_hops.relay([0, 1], m)]
    answers, _ = lwe_hops.evaluate(states[evaluator], blocks, index=evaluator, codes=codes[evaluator],
                                   sizes=sizes, alive=[0, 1], session=SESSION)
    assert len(answers) == 1
    with pytest.raises(ProtocolError, match="hop 2 after hop 2"):
        lwe_hops.evaluate(states[evaluator], blocks, index=evaluator, codes=codes[evaluator],
                          sizes=sizes, alive=[0, 1], session=SESSION)
    lwe_hops.evaluate(states[encryptor], [], index=encryptor, codes=codes[encryptor], sizes=sizes,
                      alive=[0, 1], session=SESSION)
    hints = [f for m in out[evaluator] if "/H/" in m.tag for f in lwe_hops.relay([0, 1], m)]
    lwe_hops.finish(states[encryptor], hints, answers, index=encryptor, codes=codes[encryptor],
                    sizes=sizes, alive=[0, 1], session=SESSION)
    assert states[encryptor] == {}
    with pytest.raises(ProtocolError, match="without the state"):
        lwe_hops.finish(states[encryptor], hints, answers, index=encryptor, codes=codes[encryptor],
                        sizes=sizes, alive=[0, 1], session=SESSION)


def test_no_aes_gcm_key_and_nonce_seals_two_answers_across_sessions(monkeypatch):
    """Every answer D of two sessions with the same session id and the same codes is sealed
    under its own (key, nonce), and no nonce repeats."""
    sealed = []
    real = lwe.AESGCM

    class Recording:
        def __init__(self, key):
            self.key, self.inner = bytes(key), real(key)

        def encrypt(self, nonce, data, associated):
            sealed.append((self.key, bytes(nonce)))
            return self.inner.encrypt(nonce, data, associated)

        def decrypt(self, nonce, data, associated):
            return self.inner.decrypt(nonce, data, associated)

    monkeypatch.setattr(lwe, "AESGCM", Recording)
    codes = _codes((2, 3, 2), 16, seed=5)
    for _ in range(2):
        _run(codes)
    assert len(sealed) == 2 * 3
    assert len(set(sealed)) == len(sealed) and len({nonce for _, nonce in sealed}) == len(sealed)
