"""FedProp's deployed CrossClientLP round, timed on two checkouts back to back.

    python benchmarks/crossclient_round.py --old DIR --new DIR --out FILE [--repeats R]

The round a deployment runs (:func:`securefl.protocols.crossclient.server_round.cross_client_round`,
the clients' :mod:`securefl.protocols.crossclient.client_steps`) on an in-process transport, at
the digits round shape (5 clients x 121 points of scikit-learn digits, L = 1024), real mode
with SHADE and with ring-LWE and the plaintext placeholder.  Each run is a fresh process
with ``PYTHONPATH`` set to one checkout; old and new alternate (old, new, old, new, ...) so
that both see the same load.  Per run: CPU seconds of the process in the round, wall
seconds, the nominal protocol bytes per client and the busiest link, and a digest of every
client's pseudo-labels and weights; per backend: the medians and new / old ratios, and
whether the digests agree (old vs new, and real vs plaintext).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BACKENDS = (("real", "shade"), ("real", "rlwe"), ("plaintext", "shade"))
CLIENTS, POINTS, LENGTH = 5, 121, 1024


def one_round(secure: str, backend: str) -> dict:
    """One round in this process (the checkout on ``PYTHONPATH``): its costs and digest."""
    from securefl.data import load_dataset, partition
    from securefl.fl import model_vector
    from securefl.methods import build_method
    from securefl.methods.fedprop.client import FedPropClient
    from securefl.methods.halves import MethodProgramClient, local_data, run_config
    from securefl.models import build_model
    from securefl.protocols.crossclient.server_round import cross_client_round
    from securefl.runtime.transport import InProcessTransport, NodeContext

    federation = partition(load_dataset("digits"), scheme="iid", num_clients=CLIENTS, seed=0,
                           labeled_fraction=0.1, samples_per_client=POINTS)
    method = build_method("fedprop", secure=secure, seed=4, clients_per_round=CLIENTS, L=LENGTH,
                          k=10, crypto_seed=99, hamming_backend=backend)
    nodes = [NodeContext(k, {"partition-id": k}, run_config(method), local_data(federation, k))
             for k in range(CLIENTS)]
    transport = InProcessTransport(MethodProgramClient(), nodes)
    model = build_model(method.model, input_shape=tuple(federation.input_shape),
                        num_classes=federation.num_classes, seed=4)
    members = list(range(CLIENTS))
    cpu, wall = time.process_time(), time.perf_counter()
    done = cross_client_round(transport, members, feature_model=model_vector(model), round_index=0,
                              secure=secure, k=method.k, alpha=method.alpha, L=method.L,
                              num_classes=federation.num_classes, hamming_backend=backend)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    digest = hashlib.sha256()
    for client in members:
        output = FedPropClient(method).finish_rows(done.rows[client], transport.states[client],
                                                   transport.nodes[client])
        digest.update(output.pseudo_labels.tobytes() + output.weights.tobytes())
    return {"cpu_seconds": cpu, "seconds": wall, "server_seconds": done.server_seconds,
            "bytes_per_client": done.protocol_bytes_per_client, "link_bytes": done.link_bytes,
            "steps": [e.step for e in done.exchanges], "digest": digest.hexdigest()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", type=Path, help="checkout of the code before")
    parser.add_argument("--new", type=Path, help="checkout of the code after")
    parser.add_argument("--out", type=Path, help="JSON file to write")
    parser.add_argument("--repeats", type=int, default=3, help="runs per checkout and backend")
    parser.add_argument("--one", nargs=2, metavar=("SECURE", "BACKEND"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_round(*args.one)))
        return
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    records = {}
    for secure, backend in BACKENDS:
        runs = {"old": [], "new": []}
        for _ in range(args.repeats):
            for label in ("old", "new"):
                env = {**os.environ, "PYTHONPATH": str(getattr(args, label).resolve())}
                load = os.getloadavg()[0]
                out = subprocess.run([sys.executable, __file__, "--one", secure, backend], env=env,
                                     check=True, capture_output=True, text=True).stdout
                runs[label].append({**json.loads(out.strip().splitlines()[-1]), "load_before": load})
        medians = {label: {key: statistics.median(r[key] for r in runs[label])
                           for key in ("cpu_seconds", "seconds", "bytes_per_client", "link_bytes")}
                   for label in runs}
        records[f"{secure}-{backend}"] = {
            "runs": runs, "medians": medians,
            "ratio_new_over_old": {key: medians["new"][key] / medians["old"][key]
                                   for key in medians["new"]},
            "same_outputs_old_new": len({r["digest"] for label in runs for r in runs[label]}) == 1,
            "same_bytes_old_new": len({(r["bytes_per_client"], r["link_bytes"])
                                       for label in runs for r in runs[label]}) == 1,
        }
    digests = {name: record["runs"]["new"][0]["digest"] for name, record in records.items()}
    result = {"shape": {"clients": CLIENTS, "points_per_client": POINTS, "L": LENGTH,
                        "dataset": "digits"},
              "old": str(args.old), "new": str(args.new), "repeats": args.repeats,
              "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
              "backends": records,
              "pseudo_labels_real_equal_plaintext": len(set(digests.values())) == 1}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({name: {"ratio": r["ratio_new_over_old"], "same": r["same_outputs_old_new"]}
                      for name, r in records.items()}, indent=1))


if __name__ == "__main__":
    main()
