"""CrossClientLP's ideal functionality: what Algorithm 3 computes, as its specification.

:func:`ideal_cross_client_lp` is the function the protocol's parties compute together,
written plainly from their math with no cryptography, no network and no party objects:
the tests hold the deployed round (:func:`securefl.protocols.cross_client_lp`, real and
plaintext) to it bit for bit.  With clients 0..P-1 and ``seed`` (the seed of their LSH
seed shares):

1. common LSH seed ``s = common_seed(share_0, ..., share_{P-1})``, ``share_j`` drawn from
   ``seed`` as client j draws it (:meth:`~securefl.protocols.lsh.SeedAgreementClient.draw_share`);
2. graph parties G = clients not in ``dropouts.before_hamming``; codes
   B_j = sign(V_j R_s) of each j in G, stacked in order; H the plaintext Hamming matrix
   (:mod:`securefl.crypto.hamming_plain`);
3. the k nearest neighbours of each point by smallest H (ties as
   :func:`~securefl.protocols.propagation.knn_select`), A = cos(pi H / L) on them,
   W = B + B^T, W_n = D^-1/2 W D^-1/2;
4. sum parties S = G without ``dropouts.before_sum``; E_L the columns of the identity at
   the labeled points of the parties of S (party order, position order);
   S_L = (I - alpha W_n)^-1 E_L by ``solver``;
5. contributors C = S without the parties that drop in the sum before their masked input
   (``during_sum`` at ``advertise``, ``share`` or ``masked_input``); fewer than t (default
   |S| // 2 + 1) clients finishing the sum raise :class:`DropoutError`;
6. enc the fixed-point encoding with |S| summands (:class:`~securefl.crypto.fixed_point.FixedPoint`),
   Z = sum_{j in C} enc(S_L^(j) Y_L^(j)) in Z_(2^64) over the rows of S's blocks;
7. each party k of S not dropped in the sum gets its block of Z decoded, normalised,
   labeled and weighed (:func:`~securefl.protocols.propagation.labels_from_scores`);
   every other client gets nothing.

Element-wise encoding and addition modulo 2^64 commute with the protocol's splitting
into blocks, pads and masks, so the protocol's outputs equal these bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from securefl.crypto.fixed_point import FixedPoint
from securefl.crypto.hamming_plain import hamming_matrix, pack_codes
from securefl.crypto.secagg import ROUNDS
from securefl.errors import DropoutError
from securefl.protocols.crossclient.parties import Dropouts
from securefl.protocols.lsh import (
    SeedAgreementClient,
    common_seed,
    cosine_from_hamming,
    hyperplanes,
    lsh_codes,
)
from securefl.protocols.propagation import (
    LabelPropagationResult,
    graph_from_neighbours,
    knn_select,
    labels_from_scores,
    normalize_graph,
    one_hot,
    propagate,
)


@dataclass
class IdealCrossClientLP:
    """The ideal outputs: per client its result (``None``: no output), the graph parties,
    the contributors to the sum, H, W_n and the decoded Z (``(N, C)``, graph order, rows
    of parties outside the sum zero)."""

    outputs: list[LabelPropagationResult | None]
    graph_parties: list[int]
    contributors: list[int]
    hamming: np.ndarray
    w_normalized: object
    z: np.ndarray


def ideal_cross_client_lp(
    features: Sequence[np.ndarray],
    labels: Sequence[np.ndarray],
    *,
    num_classes: int,
    k: int = 10,
    alpha: float = 0.99,
    L: int = 4096,
    seed: int,
    dropouts: Dropouts | Mapping | None = None,
    threshold: int | None = None,
    solver: str = "sparse",
) -> IdealCrossClientLP:
    """What CrossClientLP computes (module docstring), from already checked inputs."""
    parties = len(features)
    drops = Dropouts.coerce(dropouts, parties)
    shares = [SeedAgreementClient(party=j, session=b"", seed=seed).draw_share()
              for j in range(parties)]
    planes = hyperplanes(common_seed(shares), np.asarray(features[0]).shape[1], L)
    graph = [j for j in range(parties) if j not in drops.before_hamming]
    if not graph:
        raise DropoutError("every client dropped out before SecureHamming")
    sizes = [len(labels[j]) for j in graph]
    offsets = dict(zip(graph, np.concatenate([[0], np.cumsum(sizes)])[:-1].astype(int)))
    codes = np.concatenate([lsh_codes(np.asarray(features[j], dtype=np.float64), planes)
                            for j in graph])
    hamming = hamming_matrix(pack_codes(codes))
    order = knn_select(-hamming, k=k)
    similarity = cosine_from_hamming(np.take_along_axis(hamming, order, axis=1), L)
    w_normalized = normalize_graph(graph_from_neighbours(order, similarity))

    in_sum = [j for j in graph if j not in drops.before_sum]
    if not in_sum:
        raise DropoutError("every client dropped out before SecureSum")
    finishing = [j for j in in_sum if j not in drops.during_sum]
    t = len(in_sum) // 2 + 1 if threshold is None else threshold
    if len(finishing) < t:
        raise DropoutError(f"{len(finishing)} of {len(in_sum)} clients finished the sum, "
                           f"fewer than the threshold {t}")
    unmask = ROUNDS.index("unmask")
    contributors = [j for j in in_sum if j not in drops.during_sum
                    or _round_index(drops.during_sum[j]) >= unmask]
    n = int(sum(sizes))
    columns = [offsets[j] + np.flatnonzero(labels[j] >= 0) for j in in_sum]
    wanted = np.concatenate(columns) if columns else np.zeros(0, dtype=np.int64)
    rhs = np.zeros((n, wanted.size))
    rhs[wanted, np.arange(wanted.size)] = 1.0
    s_l = propagate(w_normalized, rhs, alpha=alpha, solver=solver)

    encoding = FixedPoint(len(in_sum))
    rows = np.concatenate([np.arange(offsets[j], offsets[j] + len(labels[j])) for j in in_sum])
    total = np.zeros(rows.size * num_classes, dtype=np.uint64)
    start = 0
    for j, cols in zip(in_sum, columns):
        width = cols.size
        if j in contributors:
            y_l = one_hot(labels[j][labels[j] >= 0], num_classes)
            z_bar = np.ascontiguousarray(s_l[:, start:start + width]) @ y_l
            total += encoding.encode(z_bar[rows].ravel())
        start += width
    z = np.zeros((n, num_classes))
    z[rows] = encoding.decode(total).reshape(rows.size, num_classes)
    outputs: list[LabelPropagationResult | None] = [None] * parties
    for j in finishing:
        outputs[j] = labels_from_scores(z[offsets[j]: offsets[j] + len(labels[j])], num_classes)
    return IdealCrossClientLP(outputs, graph, contributors, hamming, w_normalized, z)


def _round_index(stage: int | str) -> int:
    return ROUNDS.index(stage) if isinstance(stage, str) else int(stage)
