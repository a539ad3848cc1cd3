"""Client sampling for a communication round.

Uniform sampling of ``clients_per_round`` of the m clients, except FedProp's rule
(fedprop.md Appendix A): when only m_L < m clients hold labels, the server samples
``round(tau * m_L)`` (at least one) labeled and the rest of the round's clients from the
unlabeled ones, with tau = clients_per_round / m, so that every round's graph contains
labels.  The returned indices are sorted so that per-round processing order (and hence
pseudo-label digests) does not depend on the sampling order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from securefl.errors import InputError


def sample_clients(rng: np.random.Generator, num_clients: int, clients_per_round: int, *,
                   labeled: Sequence[int] | None = None) -> np.ndarray:
    """Sample ``clients_per_round`` distinct client indices (sorted, int64).

    ``labeled``: indices of the clients holding labels; when given and not all clients,
    FedProp's stratified rule applies.
    """
    if not 1 <= clients_per_round <= num_clients:
        raise InputError("clients_per_round", clients_per_round,
                         f"must lie in 1..{num_clients} (the number of clients)")
    if labeled is None or len(labeled) in (0, num_clients):
        return np.sort(rng.choice(num_clients, size=clients_per_round, replace=False))
    labeled = np.asarray(sorted(set(int(i) for i in labeled)), dtype=np.int64)
    if labeled.min() < 0 or labeled.max() >= num_clients:
        raise InputError("labeled", labeled, f"indices must lie in 0..{num_clients - 1}")
    unlabeled = np.setdiff1d(np.arange(num_clients), labeled)
    tau = clients_per_round / num_clients
    n_labeled = min(len(labeled), clients_per_round, max(1, round(tau * len(labeled))))
    n_unlabeled = min(len(unlabeled), clients_per_round - n_labeled)
    n_labeled = clients_per_round - n_unlabeled
    chosen = np.concatenate([rng.choice(labeled, size=n_labeled, replace=False),
                             rng.choice(unlabeled, size=n_unlabeled, replace=False)])
    return np.sort(chosen).astype(np.int64)
