"""Key substitution on FedProp's LSH seed agreement (securefl.protocols.lsh).

Unsigned, the agreement falls to a server that relays its own X25519 keys: it opens every
sealed share and computes the common seed, hence every hyperplane (the first test shows
the attack succeeding).  With roster identities every key is signed for its session,
party and cohort, and a substituted, stranger-signed, unsigned or re-bound key is refused
with ProtocolError before any share is sealed: sans-I/O here; through a FedProp round
over the in-process transport in (tests/methods/test_malicious_lsh.py).
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
    TAG_SHARES,
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
    (the genuine signatures, if any, left in place)."""
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


def test_an_unsigned_agreement_gives_a_key_substituting_server_the_seed():
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


def _table(viewer, rows):
    """A key broadcast to ``viewer`` from ``rows``: per party ``(public key, signature)``."""
    ids = np.arange(len(rows), dtype=np.int32)
    keys = np.stack([np.frombuffer(k, np.uint8) for k, _ in rows])
    signatures = np.stack([np.frombuffer(sig, np.uint8) for _, sig in rows])
    return Message(SERVER, viewer.party, TAG_PUBLIC_KEYS, (ids, keys, signatures))


def _signed(credential, signer_view, party, key):
    """``key`` of ``party`` signed by ``credential`` over the fields ``signer_view`` binds."""
    return key, credential.sign(key=key, **signer_view._signing(party))


def test_signed_agreement_refuses_substituted_stranger_unsigned_and_rebound_keys():
    """A client with credentials seals nothing to a key that is: the server's own under a
    genuine signature, the server's own signed by a stranger (same federation name and
    ids, other keys), unsigned, a genuine key relabelled to another party, signed for a
    member list this client was not shown, or signed for another session (a replay into
    the next round).  Honest keys still agree on one seed."""
    _, credentials = new_federation("fed", 3)
    _, strangers = new_federation("fed", 3)
    attacker = {j: KeyPair.generate().public for j in range(3)}
    clients = _clients(credentials)
    advertised = [c.advertise() for c in clients]
    me = clients[0]
    genuine = [(bytes(m.arrays[0]), bytes(m.arrays[1])) for m in advertised]

    attacks = {
        "substituted": [genuine[0], (attacker[1], genuine[1][1]), (attacker[2], genuine[2][1])],
        "stranger": [genuine[0], *(_signed(strangers[j], me, j, attacker[j]) for j in (1, 2))],
        "relabelled": [genuine[0], genuine[2], genuine[1]],
    }
    other_list = _clients(credentials, cohort=(0, 1, 3))[1]  # client 1 shown members [0, 1, 3]
    attacks["other cohort"] = [genuine[0], _signed(credentials[1], other_list, 1, attacker[1]), genuine[2]]
    next_round = _clients(credentials)[1]
    next_round.binding = b"other-rd"
    attacks["other session"] = [genuine[0], genuine[1], _signed(credentials[2], next_round, 2, attacker[2])]
    for rows in attacks.values():
        with pytest.raises(ProtocolError, match="does not verify"):
            me.send_shares(_table(me, rows))
    with pytest.raises(ProtocolError, match="unsigned"):
        me.send_shares(Message(SERVER, 0, TAG_PUBLIC_KEYS, _table(me, genuine).arrays[:2]))

    relay = SeedAgreementServer()
    sent = [c.send_shares(m) for c, m in zip(clients, relay.broadcast_keys(advertised))]
    seeds = {c.receive_shares(m) for c, m in zip(clients, relay.relay_shares(sent))}
    assert len(seeds) == 1 and all(m.tag == TAG_SHARES for m in sent)
