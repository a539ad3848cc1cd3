"""Label propagation (FedProp Algorithm 1): dense Cholesky vs sparse CG solver on N points.

Data: a Gaussian mixture of ``--classes`` clusters in ``--dim`` dimensions (centres at
distance ``--separation * sqrt(dim)`` from the origin in random directions, unit
noise), with ``--labels-per-class`` labeled points per class, so that propagation is
meaningful (pseudo-label accuracy is reported).  The k-NN graph (faiss) is built once
and timed separately; both solvers then solve (I - alpha W_n) Z = Y for all classes.

Reported: seconds of the graph, the dense and the sparse solve, their ratio, the
largest differences of the normalised scores and weights, pseudo-label agreement and
accuracy; ``verified`` is True when the scores agree within 1e-6.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from rich.progress import Progress

from securefl.bench.common import peak_memory_mb, require_float, require_int
from securefl.errors import InputError
from securefl.protocols.propagation import (
    knn_graph_from_features,
    labels_from_scores,
    normalize_graph,
    one_hot,
    propagate,
)

TOLERANCE = 1e-6
SMOKE = {"n": 500}
"""Caps under which the README check runs ``bench lp`` commands (about a second)."""


def synthetic_clusters(
    n: int, *, classes: int, dim: int, separation: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points of a Gaussian mixture with ``classes`` components, and their classes."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim))
    centres *= separation * np.sqrt(dim) / np.linalg.norm(centres, axis=1, keepdims=True)
    truth = rng.integers(0, classes, size=n)
    return centres[truth] + rng.normal(size=(n, dim)), truth


def reveal_labels(truth: np.ndarray, per_class: int, *, classes: int, seed: int) -> np.ndarray:
    """Labels with ``per_class`` randomly chosen points of each class revealed, ``-1`` elsewhere."""
    rng = np.random.default_rng(seed + 1)
    labels = np.full(truth.shape[0], -1)
    for c in range(classes):
        members = np.flatnonzero(truth == c)
        picked = rng.choice(members, size=min(per_class, members.size), replace=False)
        labels[picked] = c
    return labels


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """CLI options of ``securefl bench lp``."""
    parser.add_argument("--n", type=int, default=5000, help="number of points N")
    parser.add_argument("--classes", type=int, default=10, help="number of classes C")
    parser.add_argument("--dim", type=int, default=64, help="feature dimension d")
    parser.add_argument("--labels-per-class", type=int, default=10, help="labeled points per class")
    parser.add_argument("--k", type=int, default=10, help="neighbours per point")
    parser.add_argument("--alpha", type=float, default=0.99, help="propagation parameter alpha")
    parser.add_argument(
        "--separation", type=float, default=0.6, help="cluster separation (see module doc)"
    )
    parser.add_argument("--seed", type=int, default=0, help="data seed")


def validate(args: argparse.Namespace) -> None:
    """Check the flags before any work (InputError naming the flag)."""
    require_int(args, "--classes", minimum=2)
    require_int(args, "--n", minimum=2)
    if args.n < args.classes:
        raise InputError("--n", args.n, f"must be at least --classes={args.classes}")
    require_int(args, "--dim", minimum=1)
    require_int(args, "--labels-per-class", minimum=1)
    require_int(args, "--k", minimum=1)
    if args.k >= args.n:
        raise InputError("--k", args.k, f"must be below --n={args.n} (neighbours of a point)")
    require_float(args, "--alpha", low=0.0, high=1.0, low_open=True, high_open=True)
    require_float(args, "--separation", low=0.0)
    require_int(args, "--seed", minimum=0)


def run(args: argparse.Namespace, progress: Progress) -> dict:
    """Build the graph, run both solvers, compare, return the JSON record."""
    validate(args)
    features, truth = synthetic_clusters(
        args.n, classes=args.classes, dim=args.dim, separation=args.separation, seed=args.seed
    )
    labels = reveal_labels(truth, args.labels_per_class, classes=args.classes, seed=args.seed)
    task = progress.add_task(f"label propagation n={args.n}", total=3)

    start = time.perf_counter()
    w_normalized = normalize_graph(knn_graph_from_features(features, k=args.k))
    graph_seconds = time.perf_counter() - start
    progress.advance(task)
    y = one_hot(labels, args.classes)
    results, seconds = {}, {}
    for solver in ("sparse", "dense"):
        start = time.perf_counter()
        z = propagate(w_normalized, y, alpha=args.alpha, solver=solver)
        seconds[solver] = time.perf_counter() - start
        results[solver] = labels_from_scores(z, args.classes)
        progress.advance(task)

    dense, sparse = results["dense"], results["sparse"]
    score_diff = float(np.max(np.abs(dense.scores - sparse.scores)))
    weight_diff = float(np.max(np.abs(dense.weights - sparse.weights)))
    unlabeled = labels < 0
    return {
        "n": args.n,
        "classes": args.classes,
        "dim": args.dim,
        "labeled": int((labels >= 0).sum()),
        "k": args.k,
        "alpha": args.alpha,
        "graph_nnz": int(w_normalized.nnz),
        "graph_seconds": graph_seconds,
        "dense_seconds": seconds["dense"],
        "sparse_seconds": seconds["sparse"],
        "dense_over_sparse": seconds["dense"] / seconds["sparse"],
        "max_abs_score_diff": score_diff,
        "max_abs_weight_diff": weight_diff,
        "pseudo_label_agreement": float(np.mean(dense.pseudo_labels == sparse.pseudo_labels)),
        "pseudo_label_accuracy": float(
            np.mean(sparse.pseudo_labels[unlabeled] == truth[unlabeled])
        ),
        "mean_weight": float(sparse.weights.mean()),
        "peak_memory_mb": peak_memory_mb(),
        "verified": bool(score_diff <= TOLERANCE and weight_diff <= TOLERANCE),
    }
