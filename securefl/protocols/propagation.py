"""Label propagation, FedProp Algorithm 1 (Zhou et al. 2004 diffusion), two solvers.

Given points v_1..v_n (or their similarity matrix A) and partial labels y (``-1`` =
unlabeled), with one-hot Y in R^(n x C) (zero rows for unlabeled points):

1. A_ij = <v_i, v_j> / (|v_i| |v_j|)                       cosine similarity
2. B_ij = max(A_ij, 0) if j is among the k most similar points to i (j != i), else 0
3. W = B + B^T
4. W_n = D^-1/2 W D^-1/2, D = diag(W 1)                    (D_ii = 0 -> row/column 0)
5. Z = (I - alpha W_n)^-1 Y
6. Z^_ic = Z_ic / sum_c Z_ic
7. y^_i = argmax_c Z^_ic
8. w_i = 1 - H(Z^_i) / log C,  H(p) = -sum p log p

Step 6 discards the label mass m_i = sum_c Z_ic that reached point i (returned as
``mass``; :func:`label_mass`).  A point of a class no labeled point has is reached only
through other classes' points, so it typically gets little mass, yet after step 6 it can
carry a confident Z^ and a large weight.  :func:`gate_by_mass` (an option, not the paper)
drops or down-weights such points.

Conventions where Algorithm 1 is silent (each also in the docstring of the step):

* **k-NN.** Exactly k neighbours per row, self excluded (the paper's "top k + 1, i != j"
  gives k whenever a point is its own best match, which it always is for cosine unless
  duplicates tie).  k is capped at n - 1.  On a precomputed similarity, ties at the
  k-th value go to the lower index; faiss breaks ties its own way.
* **Negative similarities** are clipped to 0 in step 2 so that D >= 0 and W_n is a
  proper normalised adjacency (eigenvalues in [-1, 1], hence I - alpha W_n is symmetric
  positive definite for 0 < alpha < 1).  ReLU embeddings never have negative cosines;
  LSH estimates cos(pi H / L) can.
* **Zero-score rows.**  Z >= 0 because (I - alpha W_n)^-1 = sum_t alpha^t W_n^t is
  entrywise non-negative; a row of Z is exactly zero when its point's graph component
  holds no labeled point.  Such rows get Z^ = uniform 1/C, pseudo-label ``-1`` ("still
  unlabeled") and weight 0, so they contribute nothing to a weighted loss.  Tiny negative
  round-off in Z is clipped to 0 before step 6.

Solvers for step 5 (and for the server's columns S_L in CrossClientLP):

* ``dense``: Cholesky factorisation of the n x n SPD matrix (LAPACK via scipy), O(n^3).
* ``sparse``: conjugate gradients on the sparse matrix, all right-hand sides at once
  (one sparse product per iteration for all columns, per-column step sizes).  The
  condition number is at most (1 + alpha) / (1 - alpha), so CG converges in
  O(sqrt((1 + alpha) / (1 - alpha)) log(1 / tol)) iterations, each O(nnz * columns).
  Hand-written because scipy's ``cg`` takes one right-hand side at a time (C or l
  separate Krylov runs with C or l separate sparse products per iteration).

The k-NN search on plaintext features uses faiss (exact inner-product search on
L2-normalised float32 rows).  No party is involved here; this module is the plaintext
algorithm that CrossClientLP distributes and that the per-client LP baseline runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import faiss
import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.special import xlogy

from securefl.errors import InputError, SecureFLError

SOLVERS = ("dense", "sparse")
METRICS = ("cosine", "precomputed")
CG_TOLERANCE = 1e-12
"""Relative residual at which the sparse solver stops (per right-hand side)."""


@dataclass(frozen=True)
class LabelPropagationResult:
    """Output of Algorithm 1.  Unpacks as ``pseudo_labels, weights = result``.

    ``pseudo_labels``: ``(n,)`` int64, ``-1`` where no label reached the point;
    ``weights``: ``(n,)`` float64 in [0, 1]; ``scores``: ``(n, C)`` row-normalised Z^;
    ``mass``: ``(n,)`` float64, the label mass m_i = sum_c Z_ic that reached point i
    before step 6 discards it (Z clipped at 0; :func:`label_mass`).
    """

    pseudo_labels: np.ndarray
    weights: np.ndarray
    scores: np.ndarray
    mass: np.ndarray

    def __iter__(self):
        yield self.pseudo_labels
        yield self.weights


def _check_k(k: int) -> None:
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise InputError("k", k, "must be a positive integer")


def _check_alpha(alpha: float) -> None:
    if not (isinstance(alpha, (int, float, np.floating)) and 0.0 < float(alpha) < 1.0):
        raise InputError("alpha", alpha, "must lie strictly between 0 and 1")


def knn_select(similarity: np.ndarray, *, k: int) -> np.ndarray:
    """Indices ``(n, k)`` of the k most similar points per row, self excluded.

    Ties at the k-th value go to the lower column index (the set a stable sort would
    pick), found in O(n^2) with a partition instead of sorting every row.  Any array
    where larger means more similar works (e.g. ``-H`` for Hamming distances).
    """
    similarity = np.asarray(similarity)
    n = similarity.shape[0]
    if similarity.ndim != 2 or similarity.shape[1] != n:
        raise InputError("similarity", similarity, "must be a square (n, n) matrix")
    if n < 2:
        raise InputError("similarity", similarity, "needs at least 2 points")
    if similarity.dtype.kind not in "fiu" or not np.all(np.isfinite(similarity)):
        raise InputError("similarity", similarity, "must be real and finite")
    _check_k(k)
    k = min(int(k), n - 1)
    distance = -similarity.astype(np.float64)
    np.fill_diagonal(distance, np.inf)
    kth = np.partition(distance, k - 1, axis=1)[:, k - 1 : k]
    chosen = distance < kth
    ties = distance == kth
    room = k - chosen.sum(axis=1)
    crowded = ties.sum(axis=1) > room
    chosen[~crowded] |= ties[~crowded]
    if crowded.any():
        crowded_ties = ties[crowded]
        chosen[crowded] |= crowded_ties & (np.cumsum(crowded_ties, axis=1) <= room[crowded, None])
    return np.nonzero(chosen)[1].reshape(n, k)


def knn_graph_from_similarity(similarity: np.ndarray, *, k: int) -> sp.csr_matrix:
    """Steps 2-3 on a dense similarity matrix: W = B + B^T as a sparse CSR matrix."""
    order = knn_select(similarity, k=k)
    values = np.take_along_axis(np.asarray(similarity, dtype=np.float64), order, axis=1)
    return graph_from_neighbours(order, values)


def knn_graph_from_features(features: np.ndarray, *, k: int) -> sp.csr_matrix:
    """Steps 1-3 on feature vectors: exact cosine k-NN with faiss, then W = B + B^T."""
    features = np.asarray(features)
    if features.ndim != 2 or features.dtype.kind not in "fiu":
        raise InputError("features", features, "must be a real (n, d) array")
    n = features.shape[0]
    if n < 2:
        raise InputError("features", features, "needs at least 2 points")
    if not np.all(np.isfinite(features)):
        raise InputError("features", features, "contains NaN or infinity")
    _check_k(k)
    k = min(int(k), n - 1)
    unit = features.astype(np.float32)
    norms = np.linalg.norm(unit, axis=1, keepdims=True)
    unit = np.ascontiguousarray(unit / np.where(norms > 0, norms, 1.0))
    index = faiss.IndexFlatIP(unit.shape[1])
    index.add(unit)
    sims, ids = index.search(unit, k + 1)
    is_self = ids == np.arange(n)[:, None]
    keep = ~is_self
    keep[~is_self.any(axis=1), -1] = False
    order = ids[keep].reshape(n, k).astype(np.int64)
    values = sims[keep].reshape(n, k).astype(np.float64)
    return graph_from_neighbours(order, values)


def graph_from_neighbours(order: np.ndarray, values: np.ndarray) -> sp.csr_matrix:
    """W = B + B^T from neighbour indices ``(n, k)`` and similarities (negatives -> 0)."""
    n = order.shape[0]
    rows = np.repeat(np.arange(n), order.shape[1])
    b = sp.csr_matrix((np.maximum(values.ravel(), 0.0), (rows, order.ravel())), shape=(n, n))
    w = (b + b.T).tocsr()
    w.eliminate_zeros()
    return w


def normalize_graph(w: sp.spmatrix) -> sp.csr_matrix:
    """Step 4: D^-1/2 W D^-1/2 with D = diag(W 1); isolated points get zero rows."""
    w = sp.csr_matrix(w, dtype=np.float64)
    degree = np.asarray(w.sum(axis=1)).ravel()
    inv_sqrt = np.zeros_like(degree)
    np.divide(1.0, np.sqrt(degree), out=inv_sqrt, where=degree > 0)
    scale = sp.diags(inv_sqrt)
    return (scale @ w @ scale).tocsr()


def propagate(
    w_normalized: sp.spmatrix, rhs: np.ndarray, *, alpha: float, solver: str = "sparse"
) -> np.ndarray:
    """Step 5 for any right-hand sides: solve (I - alpha W_n) X = rhs, ``rhs`` of shape (n, m)."""
    _check_alpha(alpha)
    if solver not in SOLVERS:
        raise InputError("solver", solver, f"must be one of {SOLVERS}")
    w_normalized = sp.csr_matrix(w_normalized, dtype=np.float64)
    rhs = np.asarray(rhs, dtype=np.float64)
    n = w_normalized.shape[0]
    if rhs.ndim != 2 or rhs.shape[0] != n:
        raise InputError("rhs", rhs, f"must be an (n={n}, m) array")
    if rhs.shape[1] == 0:
        return np.zeros((n, 0))
    if solver == "dense":
        system = np.eye(n) - alpha * w_normalized.toarray()
        factor = scipy.linalg.cho_factor(system, lower=True, check_finite=False)
        return scipy.linalg.cho_solve(factor, rhs, check_finite=False)
    return _block_cg(w_normalized, rhs, alpha=float(alpha))


def _block_cg(w: sp.csr_matrix, rhs: np.ndarray, *, alpha: float) -> np.ndarray:
    """Conjugate gradients on (I - alpha W) X = rhs, all columns advanced together."""
    x = np.zeros_like(rhs)
    residual = rhs.copy()
    direction = residual.copy()
    rho = np.einsum("ij,ij->j", residual, residual)
    target = (CG_TOLERANCE**2) * rho
    bound = 1.0 + alpha
    max_iter = 50 + int(10 * np.sqrt(bound / (1.0 - alpha)) * np.log(1.0 / CG_TOLERANCE))
    for _ in range(max_iter):
        active = rho > target
        if not active.any():
            return x
        product = direction - alpha * (w @ direction)
        curvature = np.einsum("ij,ij->j", direction, product)
        step = np.zeros_like(rho)
        np.divide(rho, curvature, out=step, where=active & (curvature > 0))
        x += step * direction
        residual -= step * product
        rho_next = np.einsum("ij,ij->j", residual, residual)
        beta = np.zeros_like(rho)
        np.divide(rho_next, rho, out=beta, where=active)
        direction = residual + beta * direction
        rho = rho_next
    raise SecureFLError(
        f"conjugate gradients did not reach relative residual {CG_TOLERANCE:g} in {max_iter} "
        f"iterations (alpha={alpha}); use solver='dense'"
    )


def one_hot(labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Y: one-hot rows for labeled points, zero rows for ``-1``."""
    y = np.zeros((labels.shape[0], num_classes))
    known = labels >= 0
    y[np.flatnonzero(known), labels[known]] = 1.0
    return y


def check_labels(
    labels: np.ndarray, num_classes: int, n: int, *, name: str = "labels"
) -> np.ndarray:
    """Validate a label vector (``-1`` = unlabeled) and return it as int64."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.shape[0] != n:
        raise InputError(name, labels, f"must be a 1-D array of length {n}")
    if labels.size and labels.dtype.kind not in "iu":
        raise InputError(name, labels, "must have an integer dtype")
    labels = labels.astype(np.int64)
    if labels.size and (labels.min() < -1 or labels.max() >= num_classes):
        raise InputError(name, labels, f"values must be -1 (unlabeled) or in [0, {num_classes})")
    return labels


def check_num_classes(num_classes: int) -> None:
    if not isinstance(num_classes, (int, np.integer)) or num_classes < 2:
        raise InputError("num_classes", num_classes, "must be an integer >= 2")


def labels_from_scores(z: np.ndarray, num_classes: int) -> LabelPropagationResult:
    """Steps 6-8: normalise Z, pseudo-labels and entropy weights (zero rows -> -1, 0)."""
    check_num_classes(num_classes)
    z = np.maximum(np.asarray(z, dtype=np.float64), 0.0)
    if z.ndim != 2 or z.shape[1] != num_classes:
        raise InputError("z", z, f"must be an (n, {num_classes}) array")
    totals = z.sum(axis=1)
    informed = totals > 0
    scores = np.full_like(z, 1.0 / num_classes)
    np.divide(z, totals[:, None], out=scores, where=informed[:, None])
    pseudo = np.where(informed, np.argmax(scores, axis=1), -1).astype(np.int64)
    entropy = -xlogy(scores, scores).sum(axis=1)
    weights = np.where(informed, np.clip(1.0 - entropy / np.log(num_classes), 0.0, 1.0), 0.0)
    return LabelPropagationResult(pseudo_labels=pseudo, weights=weights, scores=scores, mass=totals)


def label_mass(z: np.ndarray) -> np.ndarray:
    """m_i = sum_c max(Z_ic, 0): how much label mass reached point i (before step 6).

    Because every labeled row of Y sums to 1, m = S_L 1 with S_L = (I - alpha W_n)^-1 E_L
    the columns of the labeled points: the mass does not depend on the labels' classes,
    only on where the labeled points sit in the graph.  Step 6 divides it out, so a point
    reached by a trickle of mass gets the same Z^ (and entropy weight) as one reached by a
    flood; a point of a class no labeled point has is reached only through other classes'
    points and typically gets little mass.
    """
    return np.maximum(np.asarray(z, dtype=np.float64), 0.0).sum(axis=1)


def check_mass_options(*, min_label_mass: float, mass_weighting: bool) -> None:
    """Validate the label-mass options of :func:`gate_by_mass` (errors name the parameter)."""
    if isinstance(min_label_mass, bool) or not isinstance(min_label_mass, (int, float, np.floating)) \
            or not np.isfinite(min_label_mass) or min_label_mass < 0:
        raise InputError("min_label_mass", min_label_mass, "must be a finite number >= 0")
    if not isinstance(mass_weighting, (bool, np.bool_)):
        raise InputError("mass_weighting", mass_weighting, "must be True or False")


def gate_by_mass(
    pseudo_labels: np.ndarray,
    weights: np.ndarray,
    mass: np.ndarray,
    *,
    unlabeled: np.ndarray,
    min_label_mass: float,
    mass_weighting: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Pseudo-labels and weights gated or weighted by label mass (an option, not the paper).

    For the points where ``unlabeled`` is True (the others are returned unchanged):

    * ``min_label_mass = tau > 0``: a point with m_i < tau gets pseudo-label ``-1`` and
      weight 0 (it is left out of training, like a point no label reached);
    * ``mass_weighting``: w_i <- w_i * m_i / max_{j unlabeled} m_j, the entropy weight
      times the mass normalised by the largest mass among the given unlabeled points
      (so in [0, 1]; the normalisation is relative to this set: a client none of whose
      unlabeled points is well reached keeps weight on its best-reached one).

    Both rules use only ``mass`` and the labeled mask, which the caller (a FedProp client,
    on its own rows of Z) holds.  With ``tau = 0`` and ``mass_weighting=False`` the inputs
    are returned as they are.
    """
    check_mass_options(min_label_mass=min_label_mass, mass_weighting=mass_weighting)
    labels = np.asarray(pseudo_labels, dtype=np.int64)
    weights = np.asarray(weights, dtype=np.float64)
    mass = np.asarray(mass, dtype=np.float64)
    unlabeled = np.asarray(unlabeled, dtype=bool)
    if not (labels.shape == weights.shape == mass.shape == unlabeled.shape) or labels.ndim != 1:
        raise InputError("mass", mass.shape, f"must match pseudo_labels {labels.shape}, weights and unlabeled")
    if min_label_mass == 0 and not mass_weighting:
        return labels, weights
    labels, weights = labels.copy(), weights.copy()
    if min_label_mass > 0:
        starved = unlabeled & (mass < min_label_mass)
        labels[starved] = -1
        weights[starved] = 0.0
    if mass_weighting and unlabeled.any():
        top = float(mass[unlabeled].max())
        scale = np.zeros(mass.shape) if top <= 0 else np.clip(mass / top, 0.0, 1.0)
        weights[unlabeled] *= scale[unlabeled]
    return labels, weights


def label_propagation(
    features_or_similarity: np.ndarray,
    labels: np.ndarray,
    *,
    num_classes: int,
    k: int = 10,
    alpha: float = 0.99,
    solver: str = "sparse",
    metric: str = "cosine",
) -> LabelPropagationResult:
    """FedProp Algorithm 1.

    ``features_or_similarity`` is an ``(n, d)`` feature matrix (``metric="cosine"``,
    k-NN by faiss) or an ``(n, n)`` similarity matrix A (``metric="precomputed"``, e.g.
    the LSH estimate cos(pi H / L)).  ``labels`` is ``(n,)`` with ``-1`` for unlabeled.
    ``solver`` picks the dense Cholesky or the sparse CG solve of step 5.
    """
    check_num_classes(num_classes)
    _check_alpha(alpha)
    if metric not in METRICS:
        raise InputError("metric", metric, f"must be one of {METRICS}")
    if solver not in SOLVERS:
        raise InputError("solver", solver, f"must be one of {SOLVERS}")
    data = np.asarray(features_or_similarity)
    if data.ndim != 2:
        raise InputError("features_or_similarity", data, "must be a 2-D array")
    labels = check_labels(labels, num_classes, data.shape[0])
    if metric == "cosine":
        w = knn_graph_from_features(data, k=k)
    else:
        w = knn_graph_from_similarity(data, k=k)
    z = propagate(normalize_graph(w), one_hot(labels, num_classes), alpha=alpha, solver=solver)
    return labels_from_scores(z, num_classes)
