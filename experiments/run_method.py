"""Run one method on one federation round by round and write results JSON (engineer D's
script for long MNIST runs while ``securefl run`` is being integrated).

    python experiments/run_method.py --method fedprop --dataset mnist --scheme iid \
        --clients 100 --labeled-fraction 0.1 --rounds 45 --seed 1234 \
        --hyper '{"model": "cnn", "clients_per_round": 10, ...}' --out PATH.json

The JSON holds the DESIGN.md result fields (method, dataset, secure, rounds,
final_accuracy, best_accuracy, pseudo_label_accuracy, seconds, crypto_seconds,
bytes_per_client_per_round, accuracy_by_round), the per-round records, the exact command
and the setup (warm-up) seconds; it is rewritten after every round.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import torch

from securefl.data import load_dataset, partition
from securefl.methods import build_method


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", required=True)
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--data-dir")
    parser.add_argument("--scheme", default="iid")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--labeled-fraction", type=float, default=0.1)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--secure", default="plaintext")
    parser.add_argument("--hyper", default="{}", help="JSON object of hyper-parameters")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    hyper = json.loads(args.hyper)
    dataset = load_dataset(args.dataset, args.data_dir)
    federation = partition(dataset, scheme=args.scheme, num_clients=args.clients,
                           seed=args.seed, labeled_fraction=args.labeled_fraction)
    method = build_method(args.method, secure=args.secure, seed=args.seed, **hyper)
    start = time.perf_counter()
    method.setup(federation)
    setup_seconds = time.perf_counter() - start
    records = []
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for r in range(args.rounds):
        records.append(method.run_round(r).to_dict())
        accuracies = [rec["accuracy"] for rec in records]
        pla = [rec["pseudo_label_accuracy"] for rec in records
               if rec["pseudo_label_accuracy"] is not None]
        result = {
            "method": args.method, "dataset": args.dataset, "secure": args.secure,
            "rounds": len(records), "final_accuracy": accuracies[-1],
            "best_accuracy": max(accuracies),
            "pseudo_label_accuracy": pla[-1] if pla else None,
            "seconds": sum(rec["seconds"] for rec in records),
            "setup_seconds": setup_seconds,
            "crypto_seconds": sum(rec["crypto_seconds"] for rec in records),
            "train_seconds": sum(rec["train_seconds"] for rec in records),
            "bytes_per_client_per_round": {
                "model": records[-1]["bytes_model_per_client"],
                "protocol": sum(rec["bytes_protocol_per_client"] for rec in records) / len(records)},
            "accuracy_by_round": accuracies,
            "partition": {"scheme": args.scheme, "num_clients": args.clients,
                          "labeled_fraction": args.labeled_fraction, "seed": args.seed},
            "hyper": hyper, "torch_threads": args.threads,
            "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
            "per_round": records,
        }
        out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
