"""Where a round's time and bytes go when its parties talk through a transport.

A client half reports, in each reply's config, the seconds it spent on local computation
(:data:`COMPUTE`: training, feature extraction, local pseudo-labelling) and on
cryptography (:data:`CRYPTO`: encoding, protocol parties); the transport measures each
exchange's wall time, each client's handler time and the payload bytes each way.  A
:class:`RoundMeter` turns one round's exchanges into

* ``compute_seconds``: the clients' :data:`COMPUTE` seconds, summed over clients and
  exchanges (the work of all clients; on separate machines they overlap in time);
* ``client_crypto_seconds``: the clients' :data:`CRYPTO` seconds, summed likewise (the
  server's own protocol time is the protocol's to add);
* ``messaging_seconds``: per exchange, its wall time minus the time the clients' handlers
  account for -- the slowest handler where clients run in parallel
  (:attr:`Transport.parallel`), the sum of all where they run one after another (in
  process) -- summed over the round's exchanges: what moving the messages cost;
* ``bytes_down_per_client`` / ``bytes_up_per_client``: Record payload bytes the transport
  moved to / from each of the round's clients (:class:`TransportStats`), averaged over
  them -- the measured traffic, beside a method's nominal model and protocol bytes.

Who learns what: nothing; these are the transport's metadata and the clients' own
timings.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from securefl.runtime.transport import Exchange, Transport

COMPUTE = "seconds/compute"
CRYPTO = "seconds/crypto"


@dataclass
class RoundMeter:
    """Accumulates one round's exchanges on ``transport`` for ``clients`` (see module)."""

    transport: Transport
    clients: Sequence[int]
    exchanges: list[Exchange] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.clients = [int(c) for c in self.clients]
        self._down = dict(self.transport.stats.bytes_down)
        self._up = dict(self.transport.stats.bytes_up)

    def add(self, exchanges: Exchange | Iterable[Exchange]) -> None:
        """Count ``exchanges`` (one or several) in this round."""
        self.exchanges.extend([exchanges] if isinstance(exchanges, Exchange) else exchanges)

    def _reported(self, key: str) -> float:
        return float(sum(float(r.config.get(key, 0.0)) for e in self.exchanges
                         for r in e.replies.values()))

    @property
    def compute_seconds(self) -> float:
        return self._reported(COMPUTE)

    @property
    def client_crypto_seconds(self) -> float:
        return self._reported(CRYPTO)

    @property
    def messaging_seconds(self) -> float:
        total = 0.0
        for exchange in self.exchanges:
            handlers = list(exchange.client_seconds.values())
            busy = (max(handlers, default=0.0) if self.transport.parallel else sum(handlers))
            total += max(exchange.seconds - busy, 0.0)
        return total

    def bytes_per_client(self) -> tuple[float, float]:
        """Mean bytes (down, up) per client of this round so far."""
        stats = self.transport.stats
        down = [stats.bytes_down.get(c, 0) - self._down.get(c, 0) for c in self.clients]
        up = [stats.bytes_up.get(c, 0) - self._up.get(c, 0) for c in self.clients]
        if not self.clients:
            return 0.0, 0.0
        return float(np.mean(down)), float(np.mean(up))
