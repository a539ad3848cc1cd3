"""Attacks of a deviating server on key agreement (securefl.crypto.identity and its users).

Each attack is run twice: against the unauthenticated semi-honest variant (``credentials
None``), where it succeeds -- the server reads a client's private input -- and against
the authenticated protocol, where a client refuses with ProtocolError before it uses
anything the server forged.
"""

from __future__ import annotations

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from securefl.crypto import he, identity, shamir
from securefl.crypto.channel import SERVER, Message
from securefl.crypto.fixed_point import ring_mask
from securefl.crypto.identity import Credentials, Identity, Roster, cohort_digest, new_federation
from securefl.crypto.idsets import pack_subset
from securefl.crypto.pairkeys import aggregate
from securefl.crypto.secagg import (
    _B_LIMBS,
    _NONCE_BYTES,
    _SHARE_WORDS,
    _SK_LIMBS,
    KEY_BYTES,
    SEED_BYTES,
    TAGS,
    MaskExpander,
    SecAggClient,
    SecAggConfig,
    SecAggServer,
    _associated_data,
    _kdf,
    _pair_info,
)
from securefl.errors import InputError, ProtocolError
from tests.adversary import Adversary

N, T, DIM = 5, 3, 12
VICTIM = 2


# ----------------------------------------------------------------------------- identity


def test_a_signature_binds_federation_protocol_context_sender_cohort_and_key():
    roster, creds = new_federation("fed", 3)
    cohort = cohort_digest([0, 1, 2])
    good = dict(protocol="p", context=b"s1", sender=1, cohort=cohort, key=b"k" * 32)
    signature = creds[1].sign(protocol="p", context=b"s1", cohort=cohort, key=b"k" * 32)
    roster.verify(signature, **good)
    for change in (dict(protocol="q"), dict(context=b"s2"), dict(sender=0),
                   dict(cohort=cohort_digest([0, 1])), dict(key=b"K" * 32)):
        with pytest.raises(ProtocolError):
            roster.verify(signature, **{**good, **change})
    with pytest.raises(ProtocolError, match="unsigned"):
        roster.verify(b"", **good)
    with pytest.raises(ProtocolError, match="not in roster"):
        roster.verify(signature, **{**good, "sender": 7})
    other, _ = new_federation("fed", 3)  # same name, other keys: another federation id
    with pytest.raises(ProtocolError):
        other.verify(signature, **good)
    stranger = Credentials(Identity(1, creds[1].identity.private), Roster("fed", {1: creds[1].identity.public}))
    with pytest.raises(ProtocolError):  # signed by client 1's key but under another roster
        roster.verify(stranger.sign(protocol="p", context=b"s1", cohort=cohort, key=b"k" * 32), **good)


def test_credentials_must_match_the_roster_and_files_round_trip(tmp_path):
    roster, creds = new_federation("fed", 2)
    with pytest.raises(InputError, match="identity"):
        Credentials(Identity.generate(0), roster)
    out = identity.write_federation(tmp_path / "keys", "fed", 3)
    assert oct((out / "client-1.key").stat().st_mode & 0o777) == "0o600"
    loaded = identity.node_credentials({"identity-file": str(out / "client-1.key"),
                                        "roster-file": str(out / "roster.json")}, 1)
    assert loaded.client == 1 and loaded.roster == Roster.load(out / "roster.json")
    with pytest.raises(ProtocolError, match="identity of client 1"):
        identity.node_credentials({"identity-file": str(out / "client-1.key"),
                                   "roster-file": str(out / "roster.json")}, 2)
    with pytest.raises(ProtocolError, match="node config names no"):
        identity.node_credentials({}, 0)
    with pytest.raises(InputError, match="refusing to overwrite"):
        identity.write_federation(out, "fed", 3)


# ----------------------------------------------------------------------------- secagg


def _values():
    rng = np.random.default_rng(1)
    return [rng.integers(0, 2**40, DIM, dtype=np.uint64) for _ in range(N)]


def secagg_key_substitution(credentials):
    """The review's attack: the server relays keys of its own for every peer (n = 5, t = 3,
    no colluding client), decrypts the victim's Shamir shares sent to those keys,
    reconstructs b_v and s_v^SK, strips every mask from y_v and returns x_v."""
    values = _values()
    members = tuple(range(N))
    config = SecAggConfig(b"s" * 16, N, T, DIM, 64, members=members if credentials else ())
    clients = [SecAggClient(u, config, values[u], credentials=credentials[u] if credentials else None)
               for u in range(N)]
    server = SecAggServer(config)
    for client in clients:
        server.handle(client.advertise())
    honest = {m.receiver: m for m in server.close_round()}
    adversary = Adversary()
    fake = {v: (adversary.x25519(("c", v)), adversary.x25519(("s", v))) for v in range(N)}
    fake_row = {v: np.frombuffer(c.public_key().public_bytes_raw() + s.public_key().public_bytes_raw(), np.uint8)
                for v, (c, s) in fake.items()}
    real_keys = {u: bytes(row) for u, row in zip(honest[0].arrays[0], honest[0].arrays[1])}
    shares_out = {}
    for u, client in enumerate(clients):
        message = honest[u]
        keys = np.stack([np.frombuffer(real_keys[v], np.uint8) if v == u else fake_row[v] for v in range(N)])
        forged = Message(SERVER, u, TAGS["keys"], (message.arrays[0], keys, *message.arrays[2:]))
        assert forged.arrays[1][u].tobytes() == real_keys[u]  # each client's own key left intact
        shares_out[u] = client.handle(forged)  # authenticated: ProtocolError here

    def open_share(sender, receiver, row):
        """A share ciphertext sender -> receiver, opened with the attacker's key for receiver."""
        c_pub = X25519PublicKey.from_public_bytes(real_keys[sender][:KEY_BYTES])
        key = _kdf(fake[receiver][0].exchange(c_pub), config.session, _pair_info(b"gcm", sender, receiver))
        raw = bytes(row)
        plain = AESGCM(key).decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:],
                                    _associated_data(config.session, sender, receiver))
        return shamir.shares_from_bytes(plain, _SHARE_WORDS)

    receivers, blob = shares_out[VICTIM].arrays
    held = {int(v): open_share(VICTIM, int(v), row) for v, row in zip(receivers, blob)}
    points = sorted(held)[:T]
    words = shamir.reconstruct([v + 1 for v in points], np.stack([held[v] for v in points]))
    s_key = shamir.elements_to_bytes(words[None, :_SK_LIMBS], KEY_BYTES)[0].tobytes()
    b_seed = shamir.elements_to_bytes(words[None, _SK_LIMBS:_SK_LIMBS + _B_LIMBS], SEED_BYTES)[0].tobytes()
    assert len(held) >= T
    # re-encrypt the shares for the victim as its view of the keys expects, get y_v
    rows, senders = [], []
    for u in range(N):
        if u == VICTIM:
            continue
        receivers_u, blob_u = shares_out[u].arrays
        row = blob_u[list(receivers_u).index(VICTIM)]
        share = open_share(u, VICTIM, row)
        victim_c = X25519PublicKey.from_public_bytes(real_keys[VICTIM][:KEY_BYTES])
        key = _kdf(fake[u][0].exchange(victim_c), config.session, _pair_info(b"gcm", u, VICTIM))
        nonce = b"\0" * _NONCE_BYTES
        sealed = AESGCM(key).encrypt(nonce, shamir.shares_to_bytes(share),
                                     _associated_data(config.session, u, VICTIM))
        rows.append(np.frombuffer(nonce + sealed, np.uint8))
        senders.append(u)
    masked = clients[VICTIM].handle(Message(SERVER, VICTIM, TAGS["ciphertexts"],
                                            (np.array(senders, np.int32), np.stack(rows))))
    x = np.array(masked.arrays[0], copy=True)
    expander = MaskExpander(DIM, np.dtype(np.uint64))
    expander.add(x, b_seed, -1)
    victim_s = X25519PublicKey.from_public_bytes(real_keys[VICTIM][KEY_BYTES:])
    for v in range(N):
        if v != VICTIM:
            seed = _kdf(fake[v][1].exchange(victim_s), config.session, _pair_info(b"mask", VICTIM, v))
            expander.add(x, seed, -1 if VICTIM < v else +1)
    assert s_key  # the masking key was recovered too (needed had the victim "dropped")
    return np.bitwise_and(x, ring_mask(64)), values[VICTIM]


def test_secagg_key_substitution_unmasks_an_unauthenticated_client_and_is_refused_when_tagged():
    recovered, truth = secagg_key_substitution(None)
    assert np.array_equal(recovered, truth)  # the attack works on the semi-honest variant
    _, credentials = new_federation("fed", N)
    with pytest.raises(ProtocolError, match="does not verify"):
        secagg_key_substitution(credentials)


def test_secagg_refuses_keys_tagged_for_another_cohort_or_session():
    _, credentials = new_federation("fed", N)
    members = tuple(range(N))
    config = SecAggConfig(b"s" * 16, N, T, DIM, 64, members=members)
    other = SecAggConfig(b"t" * 16, N, T, DIM, 64, members=members)
    reordered = SecAggConfig(b"s" * 16, N, T, DIM, 64, members=(1, 0, 2, 3, 4))
    values = _values()
    for foreign in (other, reordered):
        clients = [SecAggClient(u, foreign if u == 4 else config, values[u], credentials=credentials[u])
                   for u in range(N)]
        advertised = [c.advertise() for c in clients]
        server = SecAggServer(config)
        for message in advertised:
            server.handle(message)
        keys = server.close_round()
        with pytest.raises(ProtocolError, match="does not verify"):
            clients[0].handle(keys[0])
    # a member list that puts another client at this client's index: refused before any key
    with pytest.raises(ProtocolError, match="index 0 of the cohort is client 1"):
        SecAggClient(0, reordered, values[0], credentials=credentials[0]).advertise()
    clients = [SecAggClient(u, config, values[u], credentials=credentials[u]) for u in range(N)]
    server = SecAggServer(config)
    for c in clients:
        server.handle(c.advertise())
    message = server.close_round()[1]
    untagged = Message(SERVER, 1, TAGS["keys"], message.arrays[:2])
    with pytest.raises(ProtocolError, match="without tags"):
        clients[1].handle(untagged)


# ----------------------------------------------------------------------------- he


def _he_parties(credentials, n=N):
    values = [np.arange(DIM, dtype=np.uint64) * np.uint64(u + 1) for u in range(n)]
    members = tuple(c.client for c in credentials) if credentials else ()
    config = he.HEConfig(b"h" * 16, n, T, DIM, 64, members)
    clients = [he.HEClient(u, config, values[u], rng=__import__("secrets").token_bytes,
                           credentials=credentials[u] if credentials else None) for u in range(n)]
    server = he.HEServer(config)
    for client in clients:
        server.take_key(client.advertise())
    server.start_key_distribution()
    return values, config, clients, server


def he_server_dealt_key(credentials):
    """The server deals its own BFV key: to every client it relays a key message naming
    client 0 as dealer but carrying the server's X25519 key and a context sealed under it.
    Returns what the server decrypts of client 1's input."""
    values, config, clients, server = _he_parties(credentials)
    adversary = Adversary()
    attacker = adversary.x25519("dealer")
    context = he.new_context()
    secret = he.secret_context_bytes(context)
    honest_deal = server.next_deal()  # the server's view: every key and signature
    signatures = honest_deal.arrays[2] if credentials else None
    for v in range(1, N):
        key = he._seal_key(attacker, server._keys[v], config.session, 0, v)
        nonce = b"\1" * 12
        sealed = nonce + AESGCM(key).encrypt(nonce, secret, he._associated_data(config.session, 0, v))
        arrays = (np.array([0], np.int32), adversary.public("dealer"), np.frombuffer(sealed, np.uint8))
        if credentials:
            arrays += (signatures[0],)  # client 0's genuine signature, on its genuine key
        clients[v].receive_key(Message(SERVER, v, he.TAGS["key"], arrays))  # authenticated: refused
    message = clients[1].encrypt()
    blobs = he._unpack(message.arrays[0], message.arrays[1], config.ciphertexts, "ct")
    limbs = np.concatenate([np.asarray(he._vector(context, b, stop - start, "ct").decrypt(), np.int64)
                            for (start, stop), b in zip(config.chunks, blobs)])
    return he.join_limbs(limbs.reshape(config.limbs, config.dim), 64, config.bits), values[1]


def test_he_server_dealt_key_reads_an_unauthenticated_input_and_is_refused_when_signed():
    read, truth = he_server_dealt_key(None)
    assert np.array_equal(read, truth)
    _, credentials = new_federation("fed", N)
    with pytest.raises(ProtocolError, match="does not verify"):
        he_server_dealt_key(credentials)


def he_decryption_oracle(credentials):
    """Honest key distribution and encryption; then the server asks client 0 to decrypt
    client 1's ciphertext labelled as the sum of inputs 1..4.  Returns the plaintext."""
    values, config, clients, server = _he_parties(credentials)
    deal = server.next_deal()
    for message in server.relay_keys(clients[0].deal(deal)):
        clients[message.receiver].receive_key(message)
    inputs = {u: clients[u].encrypt() for u in range(N)}
    victim = inputs[1]
    ids = np.array([1, 2, 3, 4], np.int32)
    if credentials:
        arrays = (ids, np.stack([victim.arrays[0]] * 4), np.concatenate([victim.arrays[1]] * 4),
                  np.stack([inputs[u].arrays[2] for u in (1, 2, 3, 4)]))
    else:
        arrays = (ids, victim.arrays[0], victim.arrays[1])
    total = clients[0].decrypt(Message(SERVER, 0, he.TAGS["sum"], arrays))
    return total.arrays[0], values[1]


def test_he_decryptor_refuses_one_ciphertext_labelled_as_a_four_input_sum():
    read, truth = he_decryption_oracle(None)
    assert np.array_equal(read, truth)  # the semi-honest decryptor is an oracle
    _, credentials = new_federation("fed", N)
    with pytest.raises(ProtocolError, match="does not verify"):
        he_decryption_oracle(credentials)


def test_he_authenticated_sum_is_exact_and_refuses_too_few_signed_inputs():
    from securefl.crypto.secagg import plan_survivors
    from securefl.errors import DropoutError

    _, credentials = new_federation("fed", N)
    values = [np.arange(DIM, dtype=np.uint64) * np.uint64(u + 1) for u in range(N)]
    outcome = he.run_he(values, plan=plan_survivors(N, T, {4: "masked_input"}), modulus_bits=64,
                        credentials=credentials)
    assert np.array_equal(outcome.total, sum(values[:4]))
    _, config, clients, server = _he_parties(credentials)
    for message in server.relay_keys(clients[0].deal(server.next_deal())):
        clients[message.receiver].receive_key(message)
    inputs = {u: clients[u].encrypt() for u in (1, 2)}
    arrays = (np.array([1, 2], np.int32), np.stack([inputs[u].arrays[0] for u in (1, 2)]),
              np.concatenate([inputs[u].arrays[1] for u in (1, 2)]),
              np.stack([inputs[u].arrays[2] for u in (1, 2)]))
    with pytest.raises(DropoutError, match="refuses to decrypt"):
        clients[0].decrypt(Message(SERVER, 0, he.TAGS["sum"], arrays))


# ----------------------------------------------------------------------------- consistency


def test_the_consistency_round_sums_exactly_and_survives_dropouts():
    from securefl.runtime import secure_sum

    values = _values()
    outcome = secure_sum(values, threshold=T, dropouts={1: "masked_input", 4: "unmask"})
    assert outcome.survivors == (0, 2, 3, 4)
    assert np.array_equal(outcome.total, sum(values[u] for u in (0, 2, 3, 4)) & np.uint64(2**64 - 1))


def _through_masked_inputs(session: bytes, consistency: bool):
    """Clients and server of an honest n = 5, t = 3 run up to the survivor list."""
    _, credentials = new_federation("fed", N)
    config = SecAggConfig(session, N, T, DIM, 64, members=tuple(range(N)), consistency=consistency)
    clients = [SecAggClient(u, config, _values()[u], credentials=credentials[u]) for u in range(N)]
    server = SecAggServer(config)
    for c in clients:
        server.handle(c.advertise())
    for _ in range(2):
        for message in server.close_round():
            server.handle(clients[message.receiver].handle(message))
    server.close_round()
    return clients, server


def inconsistent_survivor_lists(consistency):
    """Rounds 0-2 honestly (n = 5, t = 3); then the server tells clients 0-2 and 4 that everyone
    survived and client 3 that client 4 dropped: the former reveal b_4's shares, client 3
    s_4^SK's.  Returns the clients' answers to the unmask step (or their errors)."""
    clients, _ = _through_masked_inputs(b"c" * 16, consistency)
    shown = {u: (0, 1, 2, 3) if u == 3 else (0, 1, 2, 3, 4) for u in range(N)}
    replies = {u: clients[u].handle(Message(SERVER, u, TAGS["survivors"], (np.array(shown[u], np.int32),)))
               for u in range(N)}
    if not consistency:
        return replies
    endorsed = {u: replies[u].arrays[0] for u in range(N)}  # u's tags, one per other member of its list

    def tag(v, u):
        """v's tag to u: v tagged its own list's members; to a client outside it (4, for
        client 3) the server can only forge one."""
        if u not in shown[v]:
            return np.zeros(16, np.uint8)
        return endorsed[v][[w for w in shown[v] if w != v].index(u)]

    outcome = {}
    for u in range(N):  # the server hands each client the XOR of every other member's tag to it
        others = [v for v in shown[u] if v != u]
        message = Message(SERVER, u, TAGS["endorsements"], (pack_subset(others, shown[u]),
                                                           aggregate(np.stack([tag(v, u) for v in others]))))
        try:
            outcome[u] = clients[u].handle(message)
        except ProtocolError as exc:
            outcome[u] = exc
    return outcome


def test_inconsistent_survivor_lists_get_no_share_past_the_consistency_round():
    plain = inconsistent_survivor_lists(False)
    assert 4 in plain[0].arrays[0].tolist() and 4 in plain[3].arrays[2].tolist()  # b_4 and s_4 shares
    checked = inconsistent_survivor_lists(True)
    assert all(isinstance(checked[u], ProtocolError) for u in range(N))  # mixed lists: nobody reveals
    # 0-2 and 4 are shown 3's tags on (0, 1, 2, 3); 3 is shown 0-2's on (0, ..., 4)
    # (an endorser outside its U3, client 4, cannot even be named: the bitmap is over U3)
    assert all("does not verify" in str(checked[u]) for u in range(N))


def test_fewer_than_t_endorsements_of_the_list_a_client_was_shown_get_no_share():
    from securefl.errors import DropoutError

    clients, _ = _through_masked_inputs(b"d" * 16, True)
    everyone = np.arange(N, dtype=np.int32)
    endorsed = {u: clients[u].handle(Message(SERVER, u, TAGS["survivors"], (everyone,))).arrays[0]
                for u in range(N)}
    two = Message(SERVER, 0, TAGS["endorsements"], (pack_subset([1], range(N)), endorsed[1][0]))
    with pytest.raises(DropoutError, match="only 2 clients"):  # client 1 and itself
        clients[0].handle(two)
