"""Signed X25519 keys of the LWE Hamming backends (``"lwe"``, ``"rlwe"``).

Every party ``j`` of an LWE session broadcasts an ephemeral X25519 public key ``pk_j``
(:meth:`securefl.crypto.lwe.LWEParty.public_key`); each pair derives from the two keys the
MAC key of its end-to-end tags and the AES-GCM key that seals the answer ``D``.  A server
that relayed keys of its own in their place would hold both pair keys, open ``D`` (the top
bits of ``C Y'^T``) and forge the tags.  So the key travels signed
(:mod:`securefl.crypto.identity`):

    sig_j = Sign_(c_j)(F, "lwe", context || j, C, pk_j)

where ``c_j`` is party ``j``'s roster client id, ``F`` the federation id, ``context`` the
session (a transport session and the round's LWE session over a transport; the network
session in process) and ``C`` the :func:`~securefl.crypto.identity.cohort_digest` of the
session's parties' client ids in party order.  :meth:`KeyBinding.verify` checks the
signature of ``pk_k`` under the roster key of ``c_k`` *before* the key is used: an
unsigned key, a key signed by a stranger or by another member, or one signed for another
session, party number or cohort raises :class:`~securefl.errors.ProtocolError`.

What the server can still do: drop or withhold keys (the session fails or loses the pair).
It cannot substitute a key (EUF-CMA of Ed25519), replay a key of another session or party
number into this one, or show two clients different cohorts (each signature covers the
cohort its signer saw).  A client colluding with the server signs keys under its own
identity only, which gives it nothing beyond its own pairs.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

from securefl.crypto.identity import SIGNATURE_BYTES, Credentials, cohort_digest
from securefl.errors import InputError, ProtocolError

KEY_PROTOCOL = "lwe"
"""The protocol name LWE key signatures bind."""


@dataclass(frozen=True)
class KeyBinding:
    """What one party's LWE keys are signed and checked against.

    ``credentials``: this party's identity and the roster it trusts (its own node's, never
    the server's); ``clients``: every party of the session -> its roster client id (the
    cohort, in party order); ``context``: the session the keys are for.
    """

    credentials: Credentials
    clients: Mapping[int, int]
    context: bytes

    def __post_init__(self) -> None:
        clients = {int(p): int(c) for p, c in dict(self.clients).items()}
        if not clients or len(set(clients.values())) != len(clients):
            raise InputError("clients", self.clients, "must map each party to a distinct client id")
        if not isinstance(self.context, bytes) or not self.context:
            raise InputError("context", self.context, "must be non-empty bytes")
        object.__setattr__(self, "clients", dict(sorted(clients.items())))

    @property
    def cohort(self) -> bytes:
        """:func:`~securefl.crypto.identity.cohort_digest` of the parties' client ids, in party order."""
        return cohort_digest(list(self.clients.values()))

    def _context(self, party: int) -> bytes:
        return self.context + b"|" + struct.pack(">q", int(party))

    def sign(self, party: int, key: bytes) -> bytes:
        """Party ``party``'s signature on its public ``key`` (it must be this client's party)."""
        if self.clients.get(int(party)) != self.credentials.client:
            raise InputError("party", party, f"is not client {self.credentials.client}'s party "
                             f"in {self.clients}")
        return self.credentials.sign(protocol=KEY_PROTOCOL, context=self._context(party),
                                     cohort=self.cohort, key=key)

    def verify(self, party: int, key: bytes, signature: bytes | None) -> None:
        """Check party ``party``'s ``signature`` on ``key``; any fault: ProtocolError."""
        if int(party) not in self.clients:
            raise ProtocolError(f"{KEY_PROTOCOL}: key of party {party}, who is not in the session")
        if signature is None or len(signature) != SIGNATURE_BYTES:
            raise ProtocolError(f"{KEY_PROTOCOL}: key of party {party} is unsigned")
        self.credentials.verify(signature, protocol=KEY_PROTOCOL, context=self._context(party),
                                sender=self.clients[int(party)], cohort=self.cohort, key=key)
