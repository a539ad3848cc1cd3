"""The LWE secure Hamming session in a fixed number of hops.

The protocol (:mod:`securefl.crypto.lwe`: the sans-I/O parties
:class:`~securefl.crypto.lwe.LWEParty` and the relay :class:`~securefl.crypto.lwe.LWEServer`)
is written here once, cut into four hops; at each, every party does its part for all its
pairs at once.  A transport runs one hop per message round (:mod:`securefl.protocols.hamming`:
FedProp's clients, and the all-pairs matrix :func:`securefl.protocols.secure_hamming_matrix`
that ``bench hamming`` times, and its two-party form :func:`securefl.protocols.lwe_pair`, so
the benchmarks and the tests run the code a deployed client runs):

0. :func:`start`: the party's X25519 public key ``lwe/key/<j>`` for the server to relay,
   signed with the client's roster identity for this session and cohort
   (:mod:`securefl.crypto.lwe_keys`).
1. :func:`broadcast`: the relayed keys in, each signature checked against the client's own
   roster before the key is used (an unsigned, stranger-signed or otherwise bound key:
   :class:`~securefl.errors.ProtocolError`); every block of its ``C`` (if it encrypts for a
   peer) and its hint ``H'`` (if it evaluates a peer's codes) out, once per session, each
   with one end-to-end GMAC tag per recipient; the server relays them with
   :meth:`LWEServer.relay <securefl.crypto.lwe.LWEServer.relay>` (each recipient gets its
   own tag): ``C`` to the evaluators at hop 2, ``H'`` to the encryptors at hop 3.
2. :func:`evaluate` (evaluator): the relayed ``C`` blocks in; the answers ``D`` (AES-GCM
   under the pair key, addressed to the encryptor: the caller relays them client to
   client) and the evaluator's shares out.
3. :func:`finish` (encryptor): the relayed hints and the answers in; its shares out.

Shares go to the server as ``lwe/share/<a>-<b>`` (:func:`share_messages`, oriented as
:func:`securefl.protocols.hamming.relay.assemble` expects) with each party's own block
``lwe/own/<j>``.  A pair whose peer is not in ``alive`` any more is abandoned (its
relayed messages are ignored by the relay and never asked for).

What a party keeps between hops is a :class:`HopState` (its seed, X25519 private key, the
verified public keys, what its key was signed for, and the last hop it ran), stored by the
caller as a ``dict`` of numpy arrays; every other piece (``M``'s seed, pair keys, ``S``,
``R``) is derived from them again at each hop.

**Each hop runs once.**  Every hop checks that the state is at the hop before it and
advances it (:class:`HopState` ``hop``); the last hop clears it.  A server that sends the
evaluation request again (after hop 2 ran) gets :class:`~securefl.errors.ProtocolError`
and no second answer: the answer's masks ``U`` and its AES-GCM key and nonce
(:meth:`~securefl.crypto.lwe.LWEParty.answer_nonce`, bound to the session's fresh keys)
never meet a second plaintext.  Over a transport the state is the client's own (its state
Record); the server cannot hand an older one back.  Who learns what: exactly as
:mod:`securefl.crypto.lwe`; every check is the party's own (end-to-end tags, block order,
repeated broadcasts, AES-GCM of ``D``), so a relay that alters, replays or misroutes a
frame raises :class:`~securefl.errors.ProtocolError` at the receiving party.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from securefl.crypto.channel import SERVER, Message
from securefl.crypto.hamming_shares import (
    pair_roles,
)
from securefl.crypto.identity import Credentials
from securefl.crypto.lwe import LWEParty, LWEServer, check_exact_products, check_session
from securefl.crypto.lwe_keys import KeyBinding
from securefl.crypto.rand import RandomSource
from securefl.errors import ProtocolError

HOPS = 3
"""Hops after the key (hop 0): broadcasts, answers, decryption."""


@dataclass
class HopState:
    """What one party keeps between the hops of a session.

    ``hop``: the last hop it ran (0 after :func:`start`); ``saved``: the party's own
    (:meth:`LWEParty.saved <securefl.crypto.lwe.LWEParty.saved>`: seed, X25519 private
    key, public keys); ``parties`` / ``clients``: the session's parties and their roster
    client ids, ``context``: the session its key is signed for (:mod:`securefl.crypto.lwe_keys`).
    """

    hop: int
    saved: dict[str, np.ndarray]
    parties: np.ndarray
    clients: np.ndarray
    context: bytes

    @classmethod
    def load(cls, state: Mapping[str, np.ndarray], index: int, hop: int) -> HopState:
        """The state stored by :meth:`store`, which must be at the hop before ``hop``."""
        try:
            held = cls(hop=int(np.asarray(state["hop"]).reshape(-1)[0]),
                       saved={k: v for k, v in state.items() if k in ("seed", "private", "ids", "keys")},
                       parties=np.asarray(state["binding/parties"]),
                       clients=np.asarray(state["binding/clients"]),
                       context=bytes(np.asarray(state["binding/context"], np.uint8)))
        except (KeyError, IndexError):
            raise ProtocolError(f"party {index}: LWE hop {hop} without the state of the hops "
                                "before it (each hop runs once, in order)") from None
        if held.hop != hop - 1:
            raise ProtocolError(f"party {index}: LWE hop {hop} after hop {held.hop}: each hop runs "
                                "once, in order")
        return held

    def store(self, state: dict[str, np.ndarray]) -> None:
        """Replace ``state``'s entries with this state."""
        state.clear()
        state.update(self.saved)
        state.update({"hop": np.array([self.hop], np.int64), "binding/parties": self.parties,
                      "binding/clients": self.clients,
                      "binding/context": np.frombuffer(self.context, np.uint8).copy()})

    def binding(self, credentials: Credentials) -> KeyBinding:
        return KeyBinding(credentials, dict(zip(self.parties.tolist(), self.clients.tolist())),
                          self.context)


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
           session: bytes, ring: bool, binding: KeyBinding | None = None,
           device: str = "cpu") -> LWEParty:
    live = {int(p) for p in alive} | {index}
    pairs = [p for p in session_pairs(sizes) if set(p) <= live]
    return LWEParty(index=index, codes=codes,
                    encrypts_for=tuple(sorted(b for a, b in pairs if a == index)),
                    evaluates_for=tuple(sorted(a for a, b in pairs if b == index)),
                    sizes={int(p): int(n) for p, n in sizes.items()}, session=session,
                    rng=RandomSource(), binding=binding, ring=ring, device=device)


def start(state: dict[str, np.ndarray], *, index: int, codes: np.ndarray, session: bytes,
          rng: RandomSource, credentials: Credentials, clients: Mapping[int, int],
          context: bytes) -> Message:
    """Hop 0: draw this session's randomness (``rng``); the public key for the server,
    signed with ``credentials`` for ``context`` and the cohort ``clients`` (every party
    that may take part -> its roster client id)."""
    if state:
        raise ProtocolError(f"party {index}: LWE session started twice on one state")
    binding = KeyBinding(credentials, clients, context)
    party = LWEParty(index=index, codes=codes, encrypts_for=(), evaluates_for=(),
                     sizes={index: codes.shape[0]}, session=session, rng=rng, binding=binding)
    message = party.public_key()
    parties = sorted(binding.clients)
    HopState(0, party.saved(), np.array(parties, np.int64),
             np.array([binding.clients[p] for p in parties], np.int64), context).store(state)
    return message


def broadcast(state: dict[str, np.ndarray], keys: Sequence[Message], *, index: int,
              codes: np.ndarray, sizes: Mapping[int, int], session: bytes,
              credentials: Credentials, ring: bool = False,
              device: str = "cpu") -> list[Message]:
    """Hop 1: the relayed public keys of the session's other parties (``sizes``: every
    party's point count), each verified against ``credentials``' roster; every block of
    ``C`` and the hint ``H'`` for the server to relay.  A session whose statistical bound
    exceeds 2^-40 is refused before any work (:func:`~securefl.crypto.lwe.check_session`,
    ``InputError``).  ``ring`` selects the ring-structured public matrix (the ``"rlwe"``
    backend, :mod:`securefl.crypto.rlwe`); it must be the same at every hop and every party;
    ``device`` is the torch device of the products."""
    held = HopState.load(state, index, 1)
    check_session([int(n) for n in sizes.values()], codes.shape[1], ring=ring)
    party = _party(index, codes, sizes, list(sizes), session, ring, held.binding(credentials), device)
    party.restore(held.saved, keys=False)
    party.receive_keys(list(keys))
    held.hop, held.saved = 1, party.saved()
    held.store(state)
    if party.encrypts_for or party.evaluates_for:
        check_exact_products(ring=ring, device=device)
    return list(party.broadcasts())


def evaluate(state: dict[str, np.ndarray], relayed: Sequence[Message], *, index: int,
             codes: np.ndarray, sizes: Mapping[int, int], alive: Sequence[int],
             session: bytes, ring: bool = False,
             device: str = "cpu") -> tuple[list[Message], dict[int, np.ndarray]]:
    """Hop 2 (evaluator of its live pairs): absorb the relayed ``C`` blocks; the sealed
    answers ``D`` (one per live encryptor) and this party's shares by peer.  Runs once:
    a second call on the state raises ProtocolError."""
    held = HopState.load(state, index, 2)
    party = _party(index, codes, sizes, alive, session, ring, device=device)
    party.restore(held.saved, stage="evaluate")
    held.hop = 2
    held.store(state)
    for message in relayed:
        if not message.tag.startswith("lwe/C/"):
            raise ProtocolError(f"party {index}: expected ciphertext blocks at the evaluation hop, "
                                f"got {message.tag!r}")
        party.absorb(message)
    answers = [party.answer(peer) for peer in party.evaluates_for]
    return answers, {peer: party.share(peer) for peer in party.evaluates_for}


def finish(state: dict[str, np.ndarray], hints: Sequence[Message], answers: Sequence[Message], *,
           index: int, codes: np.ndarray, sizes: Mapping[int, int], alive: Sequence[int],
           session: bytes, ring: bool = False,
           device: str = "cpu") -> dict[int, np.ndarray]:
    """Hop 3 (encryptor of its live pairs): the relayed hints and the answers ``D``; this
    party's shares by peer.  The state is cleared (the session is over)."""
    held = HopState.load(state, index, 3)
    state.clear()
    party = _party(index, codes, sizes, alive, session, ring, device=device)
    party.restore(held.saved, stage="decrypt")
    for message in hints:
        if not message.tag.startswith("lwe/H/"):
            raise ProtocolError(f"party {index}: expected hints at the decryption hop, got {message.tag!r}")
        party.absorb(message)
    for message in answers:
        party.decrypt(message)
    return {peer: party.share(peer) for peer in party.encrypts_for}


def share_messages(index: int, shares: Mapping[int, np.ndarray]) -> list[Message]:
    """``lwe/share/<a>-<b>`` for the server, each share oriented ``(n_a, n_b)`` (``a < b``)."""
    out = []
    for peer, share in sorted(shares.items()):
        a, b = sorted((index, int(peer)))
        encryptor = pair_roles(a, b)[0]
        oriented = share if encryptor == a else share.T
        out.append(Message(index, SERVER, f"lwe/share/{a}-{b}", (np.ascontiguousarray(oriented),)))
    return out
