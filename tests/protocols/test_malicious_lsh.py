"""Key substitution on FedProp's LSH seed agreement (securefl.protocols.lsh).

Unauthenticated, the agreement falls to a server that relays its own X25519 keys: it opens
every sealed share and computes the common seed, hence every hyperplane (the first test
shows the attack succeeding).  With roster identities every share is sealed under a key
bound to the pair key of the two clients' roster identities, the cohort and the session:
the server (with a colluding member) opens none of them, and a substituted, relabelled,
re-bound or stranger's key makes an honest receiver refuse the round with ProtocolError:
sans-I/O here; through a FedProp round over the in-process transport in
tests/methods/test_malicious_lsh.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from securefl.crypto.channel import SERVER, Message
from securefl.crypto.identity import new_federation
from securefl.crypto.keys import KeyPair, open_sealed, pairwise_secret
from securefl.errors import ProtocolError
from securefl.protocols.lsh import (
    TAG_PUBLIC_KEYS,
    SeedAgreementClient,
    SeedAgreementServer,
    _context,
    common_seed,
)

SESSION = b"lsh-sess"


def _clients(credentials=None, cohort=(0, 1, 2)):
    return [SeedAgreementClient(party=j, session=SESSION, binding=SESSION, cohort=cohort,
                                credentials=None if credentials is None else credentials[j])
            for j in range(3)]


def _substituted(advertised, attacker):
    """The server's broadcast to each client: its own key in every row but the client's own
    (the genuine tags, if any, left in place)."""
    server = SeedAgreementServer()
    out = []
    for message in server.broadcast_keys(advertised):
        ids, keys, *rest = message.arrays
        keys = np.array(keys, copy=True)
        for row, party in enumerate(ids):
            if int(party) != message.receiver:
                keys[row] = np.frombuffer(attacker[int(party)].public, np.uint8)
        out.append(Message(SERVER, message.receiver, TAG_PUBLIC_KEYS, (ids, keys, *rest)))
    return out


def test_an_unauthenticated_agreement_gives_a_key_substituting_server_the_seed():
    """The attack: the server relays its own keys, opens each sealed share with the key it
    shares with the sender, and computes the common seed every client derives."""
    clients = _clients()
    attacker = {j: KeyPair.generate() for j in range(3)}
    shares = [c.send_shares(m) for c, m in zip(clients, _substituted([c.advertise() for c in clients],
                                                                        attacker))]
    opened = {}
    for message in shares:
        recipients, blobs = message.arrays
        recipient, blob = int(recipients[0]), blobs[0]
        key = pairwise_secret(attacker[recipient].private, clients[message.sender].keys.public,
                              session=SESSION, me=recipient, peer=message.sender, label="seal")
        opened[message.sender] = open_sealed(key, blob, associated=_context(message.sender, recipient))
    assert common_seed([opened[j] for j in range(3)]) == common_seed([c.share for c in clients])


def _outcomes(clients, broadcast=lambda message: message):
    """Run the agreement among ``clients`` with ``broadcast`` rewriting each key broadcast;
    each client's seed, or the ProtocolError its ``receive_shares`` raised."""
    relay = SeedAgreementServer()
    advertised = [c.advertise() for c in clients]
    sent = [c.send_shares(broadcast(m)) for c, m in zip(clients, relay.broadcast_keys(advertised))]
    outcome = {}
    for message in relay.relay_shares(sent):
        try:
            outcome[message.receiver] = clients[message.receiver].receive_shares(message)
        except ProtocolError as error:
            outcome[message.receiver] = error
    return outcome


def _with_keys(message, keys):
    """``message`` (a key broadcast) with its key rows replaced by ``keys``."""
    ids, _ = message.arrays
    return Message(SERVER, message.receiver, TAG_PUBLIC_KEYS, (ids, keys))


def test_a_key_substituting_server_opens_no_share_of_a_bound_agreement():
    """The same attack against clients with roster credentials: every share is sealed under
    a key that mixes the pair key of the two roster identities into the exchange, so
    neither the server's own keys nor a colluding member's pair keys open any share sealed
    to another client, and every client refuses the shares relayed to it instead of
    agreeing on a seed.  (A member learns the seed, as it must to hash: the seed is secret
    from the server alone.)"""
    _, credentials = new_federation("fed", 3)
    clients = _clients(credentials)
    attacker = {j: KeyPair.generate() for j in range(3)}
    shares = [c.send_shares(m) for c, m in zip(clients, _substituted([c.advertise() for c in clients],
                                                                        attacker))]
    colluder = credentials[2]  # a member colluding with the server, its pair keys in hand
    for message in shares:
        for recipient, blob in zip(*message.arrays):
            recipient = int(recipient)
            exchange = pairwise_secret(attacker[recipient].private, clients[message.sender].keys.public,
                                       session=SESSION, me=recipient, peer=message.sender, label="seal")
            guesses = [exchange]
            if colluder.client not in (message.sender, recipient):  # what is sealed to the
                guesses.append(_bound(exchange, colluder.pair_key(message.sender),  # colluder it
                                      message.sender, recipient))  # opens, as any member would
            for key in guesses:
                with pytest.raises(ProtocolError, match="AES-GCM"):
                    open_sealed(key, blob, associated=_context(message.sender, recipient))
    relay = SeedAgreementServer()
    relay.broadcast_keys([c.advertise() for c in _clients(credentials)])  # the relay's party list
    for message in relay.relay_shares(shares):
        with pytest.raises(ProtocolError, match="does not open"):
            clients[message.receiver].receive_shares(message)


def _bound(exchange, pair, sender, recipient, cohort=(0, 1, 2)):
    """The seal key of :mod:`securefl.protocols.lsh` from an exchange output and a pair key."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    from securefl.crypto.identity import cohort_digest
    from securefl.protocols.lsh import SEAL_DOMAIN

    low, high = sorted((sender, recipient))
    info = SEAL_DOMAIN + b"seal" + cohort_digest(list(cohort)) + low.to_bytes(8, "big") \
        + high.to_bytes(8, "big")
    return HKDF(hashes.SHA256(), 32, salt=SESSION, info=info).derive(exchange + pair)


def test_the_seal_key_is_the_documented_derivation():
    """The module docstring's k_jk, recomputed here, opens what an honest party sealed: the
    pair key and the exchange both enter it."""
    _, credentials = new_federation("fed", 3)
    clients = _clients(credentials)
    relay = SeedAgreementServer()
    broadcast = relay.broadcast_keys([c.advertise() for c in clients])
    sent = clients[0].send_shares(broadcast[0])
    exchange = pairwise_secret(clients[1].keys.private, clients[0].keys.public, session=SESSION,
                               me=1, peer=0, label="seal")
    key = _bound(exchange, credentials[1].pair_key(0), 0, 1)
    assert open_sealed(key, sent.arrays[1][0], associated=_context(0, 1)) == clients[0].share


def test_a_bound_agreement_refuses_relabelled_rebound_and_foreign_views():
    """Each deviation leaves some honest client unable to open a share, and it refuses the
    round: client 0 shown parties 1 and 2's keys swapped; client 1 shown another member
    list; client 2 in another session (a replay into the next round); the roster of a
    stranger federation with the same name and ids.  Honestly relayed, the clients agree
    on one seed, sending exactly the unauthenticated agreement's bytes."""
    _, credentials = new_federation("fed", 4)  # client 3 is a member outside the round
    _, strangers = new_federation("fed", 4)

    def swapped(message):
        keys = np.array(message.arrays[1], copy=True)
        if message.receiver == 0:
            keys[[1, 2]] = keys[[2, 1]]
        return _with_keys(message, keys)

    other_cohort = _clients(credentials)
    other_cohort[1].cohort = (0, 1, 3)
    next_round = _clients(credentials)
    next_round[2].binding = b"other-rd"
    foreign = _clients(credentials)
    foreign[2] = _clients(strangers)[2]
    cases = {"relabelled": (_clients(credentials), swapped), "other cohort": (other_cohort, None),
             "other session": (next_round, None), "stranger": (foreign, None)}
    for name, (clients, rewrite) in cases.items():
        outcome = _outcomes(clients, rewrite) if rewrite else _outcomes(clients)
        refused = [u for u, result in outcome.items() if isinstance(result, ProtocolError)]
        assert refused, name
        assert all("does not open" in str(outcome[u]) for u in refused), name

    honest = _outcomes(_clients(credentials))
    assert len(set(honest.values())) == 1 and all(isinstance(v, bytes) for v in honest.values())
    bound, plain = _clients(credentials), _clients()
    sizes = [[m.arrays[0].nbytes for m in (c.advertise(),)] for c in bound + plain]
    assert sizes[:3] == sizes[3:]
