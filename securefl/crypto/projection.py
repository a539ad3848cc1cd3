"""Projected wall time of a protocol run on real links, from its measured compute and bytes.

The simulation moves every message in memory, so its wall time says nothing about a
network.  A run is projected onto a link of ``bandwidth`` bits per second as

    seconds_at_bandwidth = compute_seconds + 8 * link_bytes / bandwidth

where ``compute_seconds`` is the measured CPU time of the whole simulated run (all
parties in one process, worker threads included: what one core needs to do everyone's
work, an upper bound on a deployment's compute, where parties work in parallel; and,
unlike wall time, nearly independent of the load of a shared machine) and
``link_bytes`` is the busiest client's traffic in its busier direction,
``max_j max(sent_j, received_j)`` (full-duplex links of equal speed both ways; the
server's link is taken to be faster than any client's).  Compute and transfer are not
overlapped, so the projection is conservative on both counts.
"""

from __future__ import annotations

from collections.abc import Mapping

BANDWIDTHS: dict[str, float] = {"100Mbit/s": 1e8, "1Gbit/s": 1e9, "10Gbit/s": 1e10}
"""The links every backend is projected onto: label -> bits per second."""


def busiest_link_bytes(sent: Mapping[int, int], received: Mapping[int, int]) -> int:
    """``max_j max(sent_j, received_j)`` over the clients ``j >= 0`` (the server, -1, is left out)."""
    clients = {party for party in (*sent, *received) if party >= 0}
    return max((max(sent.get(p, 0), received.get(p, 0)) for p in clients), default=0)


def seconds_at_bandwidth(compute_seconds: float, link_bytes: float) -> dict[str, float]:
    """``compute_seconds + 8 * link_bytes / bandwidth`` for every link of :data:`BANDWIDTHS`."""
    return {label: float(compute_seconds) + 8.0 * float(link_bytes) / bits for label, bits in BANDWIDTHS.items()}
