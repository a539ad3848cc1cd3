"""The LWE secure Hamming session in a fixed number of hops (relayed transports).

:func:`securefl.crypto.lwe.lwe_hamming_matrix` runs every party of a session in one loop.
Over a transport whose every hop is a message round (``docs/method-halves.md``) the same
session is cut into four hops; at each, every party does its part for all its pairs at
once, with the same sans-I/O parties (:class:`~securefl.crypto.lwe.LWEParty`, the relay
:class:`~securefl.crypto.lwe.LWEServer`) and the same messages, tags and shapes, so the
frame bytes are those of the one-loop session:

0. :func:`start`: the party's X25519 public key ``lwe/key/<j>`` for the server to relay.
1. :func:`broadcast`: the relayed keys in; every block of its ``C`` (if it encrypts for a
   peer) and its hint ``H'`` (if it evaluates a peer's codes) out, once per session, each
   with one end-to-end GMAC tag per recipient; the server relays them with
   :meth:`LWEServer.relay <securefl.crypto.lwe.LWEServer.relay>` (each recipient gets its
   own tag): ``C`` to the evaluators at hop 2, ``H'`` to the encryptors at hop 3.
2. :func:`evaluate` (evaluator): the relayed ``C`` blocks in; the answers ``D`` (AES-GCM
   under the pair key, addressed to the encryptor: the caller relays them client to
   client) and the evaluator's shares out.
3. :func:`finish` (encryptor): the relayed hints and the answers in; its shares out.

Shares go to the server as ``lwe/share/<a>-<b>`` (:func:`share_messages`, oriented as
:func:`~securefl.crypto.hamming.server_reconstruct` expects) with each party's own block
``lwe/own/<j>``.  A pair whose peer is not in ``alive`` any more is abandoned (its
relayed messages are ignored by the relay and never asked for).

What a party keeps between hops is :meth:`LWEParty.saved
<securefl.crypto.lwe.LWEParty.saved>` (its seed, X25519 private key and the public keys,
a ``dict`` of numpy arrays the caller stores); every other piece (``M``'s seed, pair
keys, ``S``, ``R``) is derived from them again at each hop.  Who learns what: exactly as
:mod:`securefl.crypto.lwe`; every check is the party's own (end-to-end tags, block order,
repeated broadcasts, AES-GCM of ``D``), so a relay that alters, replays or misroutes a
frame raises :class:`~securefl.errors.ProtocolError` at the receiving party.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from securefl.crypto.channel import SERVER, Message
from securefl.crypto.hamming import pair_roles
from securefl.crypto.lwe import LWEParty, LWEServer, check_exact_products, check_session
from securefl.crypto.rand import RandomSource
from securefl.errors import ProtocolError

HOPS = 3
"""Hops after the key (hop 0): broadcasts, answers, decryption."""


def session_pairs(parties: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """``(encryptor, evaluator)`` of every pair among ``parties`` (:func:`pair_roles`)."""
    ordered = sorted(int(p) for p in parties)
    return tuple(pair_roles(a, b) for i, a in enumerate(ordered) for b in ordered[i + 1:])


def relay(parties: Sequence[int], message: Message) -> list[Message]:
    """The server's forwards of one broadcast (key, ``C`` block or ``H'``) of a session
    among ``parties`` (:meth:`LWEServer.relay <securefl.crypto.lwe.LWEServer.relay>`)."""
    server = LWEServer(pairs=session_pairs(parties), parties=tuple(sorted(int(p) for p in parties)))
    return server.relay(message)


def _party(index: int, codes: np.ndarray, sizes: Mapping[int, int], alive: Sequence[int],
           session: bytes, ring: bool) -> LWEParty:
    live = set(int(p) for p in alive) | {index}
    pairs = [p for p in session_pairs(sizes) if set(p) <= live]
    return LWEParty(index=index, codes=codes,
                    encrypts_for=tuple(sorted(b for a, b in pairs if a == index)),
                    evaluates_for=tuple(sorted(a for a, b in pairs if b == index)),
                    sizes={int(p): int(n) for p, n in sizes.items()}, session=session,
                    rng=RandomSource(), ring=ring)


def _keep(state: dict[str, np.ndarray], party: LWEParty) -> None:
    state.clear()
    state.update(party.saved())


def start(state: dict[str, np.ndarray], *, index: int, codes: np.ndarray, session: bytes,
          rng: RandomSource) -> Message:
    """Hop 0: draw this session's randomness (``rng``); the public key for the server."""
    party = LWEParty(index=index, codes=codes, encrypts_for=(), evaluates_for=(),
                     sizes={index: codes.shape[0]}, session=session, rng=rng)
    message = party.public_key()
    _keep(state, party)
    return message


def broadcast(state: dict[str, np.ndarray], keys: Sequence[Message], *, index: int,
              codes: np.ndarray, sizes: Mapping[int, int], session: bytes, ring: bool = False) -> list[Message]:
    """Hop 1: the relayed public keys of the session's other parties (``sizes``: every
    party's point count); every block of ``C`` and the hint ``H'`` for the server to relay.
    A session whose statistical bound exceeds 2^-40 is refused before any work
    (:func:`~securefl.crypto.lwe.check_session`, ``InputError``).  ``ring`` selects the
    ring-structured public matrix (the ``"rlwe"`` backend, :mod:`securefl.crypto.rlwe`); it
    must be the same at every hop and every party."""
    check_session([int(n) for n in sizes.values()], codes.shape[1], ring=ring)
    party = _party(index, codes, sizes, list(sizes), session, ring)
    party.restore(state, keys=False)
    party.receive_keys(list(keys))
    _keep(state, party)
    if party.encrypts_for or party.evaluates_for:
        check_exact_products(ring=ring)
    return list(party.broadcasts())


def evaluate(state: dict[str, np.ndarray], relayed: Sequence[Message], *, index: int,
             codes: np.ndarray, sizes: Mapping[int, int], alive: Sequence[int],
             session: bytes, ring: bool = False) -> tuple[list[Message], dict[int, np.ndarray]]:
    """Hop 2 (evaluator of its live pairs): absorb the relayed ``C`` blocks; the sealed
    answers ``D`` (one per live encryptor) and this party's shares by peer."""
    party = _party(index, codes, sizes, alive, session, ring)
    party.restore(state)
    for message in relayed:
        if not message.tag.startswith("lwe/C/"):
            raise ProtocolError(f"party {index}: expected ciphertext blocks at the evaluation hop, "
                                f"got {message.tag!r}")
        party.absorb(message)
    answers = [party.answer(peer) for peer in party.evaluates_for]
    return answers, {peer: party.share(peer) for peer in party.evaluates_for}


def finish(state: dict[str, np.ndarray], hints: Sequence[Message], answers: Sequence[Message], *,
           index: int, codes: np.ndarray, sizes: Mapping[int, int], alive: Sequence[int],
           session: bytes, ring: bool = False) -> dict[int, np.ndarray]:
    """Hop 3 (encryptor of its live pairs): the relayed hints and the answers ``D``; this
    party's shares by peer.  The state is cleared."""
    party = _party(index, codes, sizes, alive, session, ring)
    party.restore(state)
    for message in hints:
        if not message.tag.startswith("lwe/H/"):
            raise ProtocolError(f"party {index}: expected hints at the decryption hop, got {message.tag!r}")
        party.absorb(message)
    for message in answers:
        party.decrypt(message)
    shares = {peer: party.share(peer) for peer in party.encrypts_for}
    state.clear()
    return shares


def share_messages(index: int, shares: Mapping[int, np.ndarray]) -> list[Message]:
    """``lwe/share/<a>-<b>`` for the server, each share oriented ``(n_a, n_b)`` (``a < b``)."""
    out = []
    for peer, share in sorted(shares.items()):
        a, b = sorted((index, int(peer)))
        encryptor = pair_roles(a, b)[0]
        oriented = share if encryptor == a else share.T
        out.append(Message(index, SERVER, f"lwe/share/{a}-{b}", (np.ascontiguousarray(oriented),)))
    return out
