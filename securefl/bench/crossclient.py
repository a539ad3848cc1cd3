"""CrossClientLP (FedProp Algorithm 3) with real cryptography vs its plaintext placeholder.

N points of a Gaussian mixture (see :mod:`securefl.bench.lp`) are split evenly over
``--parties`` clients, each revealing ``--labels-per-client`` random labels.  The same
round runs twice with the same seed, each as a deployment runs it: the server's steps
(:func:`securefl.protocols.crossclient.server_round.cross_client_round`) driven by
:func:`securefl.runtime.engine.drive` on an in-process transport to the clients' step table
(:class:`securefl.protocols.crossclient.client_steps.FeatureClient`: the protocol's client
steps on features the node holds), real mode (X25519/AES-GCM seed agreement, secure Hamming matrix
by ``--hamming-backend`` SHADE, LWE or ring-LWE in its hops, padded Bonawitz secure sum)
and the plaintext placeholder.

Reported: pseudo-label agreement and the largest score / weight differences between
the two (must be 1.0 and 0: the plaintext backend sums the same fixed-point encodings),
wall and process CPU seconds of both runs (the clients' rows finished included) and the
real run's split (``crypto_seconds_real``: clients' cryptography plus the server's share;
``server_seconds_real``; ``client_seconds_real``: the clients' handlers), the nominal
bytes per client (sent + received: every CrossClientLP message's frame, the
client-to-client ones included, and what the client sent in the secure sum, as
:class:`~securefl.protocols.crossclient.server_round.CrossClientRound` meters them), the paper's
~2.5 MB per client for the CIFAR-10 round (5 clients x 500 points, L = 4096) beside ours,
the agreement of the LSH-based pseudo-labels with Algorithm 1 on the exact cosine of the
raw features, and the real round projected onto 100 Mbit/s, 1 Gbit/s and 10 Gbit/s links
(``seconds_at_bandwidth`` = ``cpu_seconds_real + 8 * link_bytes_max_client / bandwidth``,
:mod:`securefl.crypto.projection`).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np
from rich.progress import Progress

from securefl.bench.common import peak_memory_mb
from securefl.bench.lp import synthetic_clusters
from securefl.crypto import lwe
from securefl.crypto.projection import seconds_at_bandwidth
from securefl.errors import InputError
from securefl.protocols.crossclient import HAMMING_BACKENDS
from securefl.protocols.crossclient.client_steps import FeatureClient, FeatureData, FeatureProtocol
from securefl.protocols.crossclient.server_round import CrossClientRound, cross_client_round
from securefl.protocols.propagation import LabelPropagationResult, label_propagation
from securefl.runtime.transport import InProcessTransport, NodeContext

PAPER = {
    "source": "FedProp §4.2 Efficiency-Communication: CIFAR-10, 5 clients x 500 points, L = 4096",
    "bytes_per_client": 2.5e6,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """CLI options of ``securefl bench crossclient``."""
    parser.add_argument(
        "--n", type=int, default=2500, help="total points N, split evenly over the parties"
    )
    parser.add_argument("--parties", type=int, default=5, help="number of clients P")
    parser.add_argument(
        "--labels-per-client", type=int, default=10, help="labeled points per client"
    )
    parser.add_argument("--classes", type=int, default=10, help="number of classes C")
    parser.add_argument("--dim", type=int, default=128, help="embedding dimension d")
    parser.add_argument("--L", type=int, default=4096, help="LSH code length")
    parser.add_argument("--k", type=int, default=10, help="neighbours per point")
    parser.add_argument("--alpha", type=float, default=0.99, help="propagation parameter alpha")
    parser.add_argument("--separation", type=float, default=0.6, help="cluster separation")
    parser.add_argument("--seed", type=int, default=0, help="data and protocol seed")
    parser.add_argument(
        "--hamming-backend",
        choices=HAMMING_BACKENDS,
        default="shade",
        help="secure Hamming protocol of the real run",
    )


def validate(args: argparse.Namespace) -> None:
    """Check every flag before any work; :class:`InputError` names the flag."""
    if args.parties < 1:
        raise InputError("--parties", args.parties, "must be >= 1")
    if args.n < 2 * args.parties:
        raise InputError(
            "--n", args.n, f"must give every one of the {args.parties} parties at least 2 points"
        )
    if not 1 <= args.L < 1 << 16:
        raise InputError("--L", args.L, "must be a code length in [1, 2^16)")
    checks = [
        ("--classes", args.classes, args.classes >= 2, "must be at least 2"),
        ("--labels-per-client", args.labels_per_client, args.labels_per_client >= 0, "must be >= 0"),
        ("--dim", args.dim, args.dim >= 1, "must be >= 1"),
        ("--k", args.k, args.k >= 1, "must be >= 1"),
        ("--alpha", args.alpha, 0.0 < args.alpha < 1.0, "must lie strictly between 0 and 1"),
        ("--seed", args.seed, args.seed >= 0, "must be non-negative"),
    ]
    for flag, value, ok, problem in checks:
        if not ok:
            raise InputError(flag, value, problem)
    if args.hamming_backend in ("lwe", "rlwe"):
        bounds = np.linspace(0, args.n, args.parties + 1).astype(int)
        bound = lwe.statistical_distance(np.diff(bounds).tolist(), args.L)
        if bound > lwe.STATISTICAL_BOUND:
            raise InputError(
                "--n", args.n, f"too many points for one LWE session (statistical bound 2^{np.log2(bound):.1f} > 2^-40)"
            )


def _federation(args: argparse.Namespace):
    features, truth = synthetic_clusters(
        args.n, classes=args.classes, dim=args.dim, separation=args.separation, seed=args.seed
    )
    rng = np.random.default_rng(args.seed + 2)
    bounds = np.linspace(0, args.n, args.parties + 1).astype(int)
    per_client_features, per_client_labels, per_client_truth = [], [], []
    for j in range(args.parties):
        block = slice(bounds[j], bounds[j + 1])
        t = truth[block]
        labels = np.full(t.shape[0], -1)
        picked = rng.choice(t.shape[0], size=min(args.labels_per_client, t.shape[0]), replace=False)
        labels[picked] = t[picked]
        per_client_features.append(features[block])
        per_client_labels.append(labels)
        per_client_truth.append(t)
    return per_client_features, per_client_labels, per_client_truth


@dataclass
class _Run:
    """One round as deployed: its outcome, every client's output, wall and CPU seconds."""

    done: CrossClientRound
    outputs: list[LabelPropagationResult]
    seconds: float
    cpu_seconds: float


def _round(args: argparse.Namespace, features: list, labels: list, secure: str) -> _Run:
    """The round in ``secure`` mode on an in-process transport, each client's rows finished."""
    half = FeatureClient(FeatureProtocol(secure, args.L, args.hamming_backend, args.seed))
    nodes = [NodeContext(j, {"partition-id": j}, {}, FeatureData(x, y, args.classes))
             for j, (x, y) in enumerate(zip(features, labels))]
    transport = InProcessTransport(half, nodes)
    start, cpu_start = time.perf_counter(), time.process_time()
    done = cross_client_round(transport, range(args.parties), round_index=0, secure=secure,
                              k=args.k, alpha=args.alpha, L=args.L, num_classes=args.classes,
                              hamming_backend=args.hamming_backend)
    outputs = [half.finish_rows(done.rows[j], transport.states[j], transport.nodes[j])
               for j in range(args.parties)]
    return _Run(done, outputs, time.perf_counter() - start, time.process_time() - cpu_start)


def run(args: argparse.Namespace, progress: Progress) -> dict:
    """Run the round with both backends, compare, return the JSON record."""
    validate(args)
    features, labels, truth = _federation(args)
    task = progress.add_task(f"crossclient {args.parties} x {args.n // args.parties}", total=3)
    plain = _round(args, features, labels, "plaintext")
    progress.advance(task)
    real = _round(args, features, labels, "real")
    progress.advance(task)
    exact = label_propagation(
        np.vstack(features),
        np.concatenate(labels),
        num_classes=args.classes,
        k=args.k,
        alpha=args.alpha,
    )
    progress.advance(task)

    pl_real = np.concatenate([o.pseudo_labels for o in real.outputs])
    pl_plain = np.concatenate([o.pseudo_labels for o in plain.outputs])
    score_diff = max(
        float(np.max(np.abs(a.scores - b.scores))) for a, b in zip(real.outputs, plain.outputs)
    )
    weight_diff = max(
        float(np.max(np.abs(a.weights - b.weights))) for a, b in zip(real.outputs, plain.outputs)
    )
    all_labels, all_truth = np.concatenate(labels), np.concatenate(truth)
    unlabeled = all_labels < 0
    done = real.done
    per_client = {c: done.bytes_sent[c] + done.bytes_received[c] for c in done.bytes_sent}
    mean_bytes = done.protocol_bytes_per_client
    agreement = float(np.mean(pl_real == pl_plain))
    projected = seconds_at_bandwidth(real.cpu_seconds, done.link_bytes)
    return {
        "n": args.n,
        "parties": args.parties,
        "n_per_client": args.n // args.parties,
        "labels_per_client": args.labels_per_client,
        "classes": args.classes,
        "dim": args.dim,
        "L": args.L,
        "k": args.k,
        "alpha": args.alpha,
        "hamming_backend": args.hamming_backend,
        "pseudo_label_agreement": agreement,
        "max_abs_score_diff": score_diff,
        "max_abs_weight_diff": weight_diff,
        "seconds_real": real.seconds,
        "cpu_seconds_real": real.cpu_seconds,
        "seconds_plaintext": plain.seconds,
        "cpu_seconds_plaintext": plain.cpu_seconds,
        "real_over_plaintext": real.seconds / plain.seconds,
        "crypto_seconds_real": done.crypto_seconds,
        "server_seconds_real": done.server_seconds,
        "client_seconds_real": float(sum(sum(e.client_seconds.values()) for e in done.exchanges)),
        "bytes_per_client": mean_bytes,
        "bytes_per_client_max": int(max(per_client.values())),
        "bytes_sent_per_client": float(np.mean(list(done.bytes_sent.values()))),
        "bytes_received_per_client": float(np.mean(list(done.bytes_received.values()))),
        "link_bytes_max_client": done.link_bytes,
        "seconds_at_bandwidth": projected,
        **{f"seconds_at_{label}": value for label, value in projected.items()},
        "steps_real": [e.step for e in done.exchanges],
        "paper": PAPER,
        "bytes_per_client_over_paper": mean_bytes / PAPER["bytes_per_client"],
        "pseudo_label_accuracy": float(np.mean(pl_real[unlabeled] == all_truth[unlabeled])),
        "agreement_with_exact_cosine_lp": float(np.mean(pl_real == exact.pseudo_labels)),
        "exact_cosine_lp_accuracy": float(
            np.mean(exact.pseudo_labels[unlabeled] == all_truth[unlabeled])
        ),
        "peak_memory_mb": peak_memory_mb(),
        "verified": bool(agreement == 1.0 and score_diff == 0.0 and weight_diff == 0.0),
    }
