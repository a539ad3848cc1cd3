"""Key substitution on FedProp's LSH seed agreement (securefl.protocols.lsh).

Unauthenticated, the agreement falls to a server that relays its own X25519 keys: it opens
every sealed share and computes the common seed, hence every hyperplane (the first test
shows the attack succeeding).  With roster identities every key is tagged, for each
receiver, for its session, party and cohort, and a substituted, stranger-tagged, untagged
or re-bound key is refused
with ProtocolError before any share is sealed: sans-I/O here; through a FedProp round
over the in-process transport in (tests/methods/test_malicious_lsh.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from securefl.crypto.channel import SERVER, Message
from securefl.crypto.identity import new_federation
from securefl.crypto.keys import KeyPair, open_sealed, pairwise_secret
from securefl.crypto.pairkeys import aggregate
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


def _table(viewer, rows):
    """A key broadcast to ``viewer`` from ``rows``, per party ``(public key, tag to viewer)``,
    with the aggregate (XOR) of the tags, as the server relays them."""
    ids = np.arange(len(rows), dtype=np.int32)
    keys = np.stack([np.frombuffer(k, np.uint8) for k, _ in rows])
    tags = np.stack([np.frombuffer(tag, np.uint8) for _, tag in rows])
    return Message(SERVER, viewer.party, TAG_PUBLIC_KEYS, (ids, keys, aggregate(tags)))


def _tagged(credential, signer_view, party, key, to=0):
    """``key`` of ``party`` tagged by ``credential`` for client ``to`` over the fields
    ``signer_view`` binds."""
    return key, credential.tags([to], key=key, **signer_view._binding(party))[0]


def test_tagged_agreement_refuses_substituted_stranger_untagged_and_rebound_keys():
    """A client with credentials seals nothing to a key that is: the server's own under a
    genuine tag, the server's own tagged by a stranger (same federation name and ids, other
    keys), untagged, a genuine key relabelled to another party, tagged for a member list
    this client was not shown, tagged for another client, or tagged for another session (a
    replay into the next round).  Honest keys still agree on one seed."""
    _, credentials = new_federation("fed", 3)
    _, strangers = new_federation("fed", 3)
    attacker = {j: KeyPair.generate().public for j in range(3)}
    clients = _clients(credentials)
    advertised = [c.advertise() for c in clients]
    me = clients[0]
    # each party's tag to client 0 is the first of its tags (party order, its own left out)
    genuine = [(bytes(m.arrays[0]), bytes(m.arrays[1][0]) if j else bytes(16))
               for j, m in enumerate(advertised)]

    attacks = {
        "substituted": [genuine[0], (attacker[1], genuine[1][1]), (attacker[2], genuine[2][1])],
        "stranger": [genuine[0], *(_tagged(strangers[j], me, j, attacker[j]) for j in (1, 2))],
        "relabelled": [genuine[0], genuine[2], genuine[1]],
        "for another client": [genuine[0], (genuine[1][0], bytes(advertised[1].arrays[1][1])),
                               genuine[2]],  # party 1's tag to client 2, shown to client 0
    }
    other_list = _clients(credentials, cohort=(0, 1, 3))[1]  # client 1 shown members [0, 1, 3]
    attacks["other cohort"] = [genuine[0], _tagged(credentials[1], other_list, 1, attacker[1]), genuine[2]]
    next_round = _clients(credentials)[1]
    next_round.binding = b"other-rd"
    attacks["other session"] = [genuine[0], genuine[1], _tagged(credentials[2], next_round, 2, attacker[2])]
    for rows in attacks.values():
        with pytest.raises(ProtocolError, match="does not verify"):
            me.send_shares(_table(me, rows))
    with pytest.raises(ProtocolError, match="carry no .* aggregate tag"):
        me.send_shares(Message(SERVER, 0, TAG_PUBLIC_KEYS, _table(me, genuine).arrays[:2]))

    relay = SeedAgreementServer()
    sent = [c.send_shares(m) for c, m in zip(clients, relay.broadcast_keys(advertised))]
    seeds = {c.receive_shares(m) for c, m in zip(clients, relay.relay_shares(sent))}
    assert len(seeds) == 1 and all(m.tag == TAG_SHARES for m in sent)
