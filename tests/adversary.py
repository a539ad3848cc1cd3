"""A deviating server for the attack tests: one harness that rewrites what the server
relays, used both on sans-I/O protocol parties (secagg, he) and as the ``intercept`` of an
:class:`~securefl.runtime.transport.InProcessTransport` (every request before delivery).

:class:`Adversary` holds rewrite rules per step name; each rule gets ``(client, request)``
and returns the request to deliver (a changed copy, or the same one).  It records every
request it saw, so a test can replay or compare them, and it makes fresh attacker key
pairs (:meth:`Adversary.x25519`) for key substitution.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from securefl.runtime.transport import Record

Rule = Callable[[int, Record], Record]


class Adversary:
    """Rewrite rules keyed by step; an ``intercept`` for :class:`InProcessTransport`."""

    def __init__(self) -> None:
        self.rules: dict[str, Rule] = {}
        self.seen: list[tuple[int, str, Record]] = []
        self.keys: dict[object, X25519PrivateKey] = {}

    def on(self, step: str, rule: Rule) -> "Adversary":
        self.rules[step] = rule
        return self

    def __call__(self, client: int, request: Record) -> Record:
        step = str(request.config["_step"])
        self.seen.append((client, step, request.copy()))
        rule = self.rules.get(step)
        return request if rule is None else rule(client, request)

    def x25519(self, label: object) -> X25519PrivateKey:
        """The attacker's key pair for ``label`` (made once, then reused)."""
        if label not in self.keys:
            self.keys[label] = X25519PrivateKey.generate()
        return self.keys[label]

    def public(self, label: object) -> np.ndarray:
        return np.frombuffer(self.x25519(label).public_key().public_bytes_raw(), np.uint8).copy()
