"""Frozen outputs of every method, to prove that a refactor changes no result.

``python -m tests.methods.regression.outputs --write`` records, for every method of
:data:`securefl.methods.METHOD_NAMES` in plaintext and real mode (fixed ``crypto_seed``),
on a tiny digits federation, the warm-up (``warmup_rounds=1`` where a method has one) and
two rounds: per round the digest of every model the method holds, the pseudo-label digest
and accuracy, the digest of its test-set predictions, the test accuracy, the bytes per
client and the privacy accounting (ProtoFSSL).  ``outputs.json`` was written at main
d1acd75 (before the method split of issue 14, phase 2) and is never rewritten to make a
test pass: ``tests/methods/test_regression.py`` recomputes and compares.  A method added
later gets its entries once, when it is introduced, with ``--add`` (which records only the
methods the file lacks and leaves every existing entry as it is): ``fedavg-fixmatch``.

The model digest is SHA-256 over the state dicts of the method's public ``nn.Module``
attributes (sorted by attribute name, then by state key; every tensor's dtype, shape and
bytes), so it does not depend on how ``state_dict()`` is laid out.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

FIXTURE = Path(__file__).with_name("outputs.json")
CRYPTO_SEED = 20240607
SEED = 3
ROUNDS = 2
TINY = {"clients_per_round": 3, "local_epochs": 1, "batch_size": 8, "lr": 0.05, "warmup_rounds": 1,
        "L": 256, "rounds": 5, "n_unlabeled": 10, "helpers": 2, "pretrain_epochs": 1,
        "server_batch_size": 20, "threshold": 0.0}
"""The settings of ``tests/methods/test_client_order.py`` (each method takes a subset)."""
MODES = ("plaintext", "real")


def federations() -> dict[str, Any]:
    """The tiny digits federations of ``tests/methods/conftest.py``."""
    from securefl.data import load_dataset, partition

    digits = load_dataset("digits")
    clients = partition(digits, scheme="iid", num_clients=5, seed=0, labeled_fraction=0.2,
                        samples_per_client=40)
    server = partition(digits, scheme="iid", num_clients=5, seed=0, labeled_fraction=0.2,
                       samples_per_client=40, labels_at="server", server_labels=40)
    return {"clients": clients, "server": server}


def model_digest(method: Any) -> str:
    """SHA-256 of the state dicts of ``method``'s public ``nn.Module`` attributes."""
    from torch import nn

    digest = hashlib.sha256()
    for name in sorted(vars(method)):
        module = vars(method)[name]
        if name.startswith("_") or not isinstance(module, nn.Module):
            continue
        digest.update(name.encode() + b"\0")
        for key, tensor in module.state_dict().items():
            array = tensor.detach().cpu().contiguous().numpy()
            digest.update(f"{key}|{array.dtype}|{array.shape}".encode())
            digest.update(array.tobytes())
    return digest.hexdigest()


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def record(name: str, secure: str, feds: dict[str, Any]) -> list[dict[str, Any]]:
    """The warm-up and ``ROUNDS`` rounds of method ``name`` in mode ``secure``."""
    import torch

    from securefl.methods import build_method, hyper_parameters
    from securefl.methods.base import label_digest

    torch.set_num_threads(1)
    federation = feds["server"] if name == "fedanchor" else feds["clients"]
    hyper = {k: v for k, v in TINY.items() if k in hyper_parameters(name)}
    method = build_method(name, secure=secure, seed=SEED, crypto_seed=CRYPTO_SEED, **hyper)
    method.setup(federation.for_training())
    test = federation.test
    rounds = [{"round": "setup", "models": model_digest(method)}]
    for r in range(ROUNDS):
        result = method.run_round(r)
        predicted = np.asarray(method.predict(test.x))
        rounds.append({
            "round": r,
            "models": model_digest(method),
            "predictions": label_digest(predicted),
            "test_accuracy": method.score(test.x, test.y),
            "pseudo_label_digest": result.pseudo_label_digest,
            "pseudo_label_accuracy": result.pseudo_label_accuracy,
            "bytes_model_per_client": result.bytes_model_per_client,
            "bytes_protocol_per_client": result.bytes_protocol_per_client,
            "privacy": _plain(result.privacy),
        })
    return rounds


def main() -> None:
    from securefl.methods import METHOD_NAMES

    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help=f"(re)write {FIXTURE.name}")
    parser.add_argument("--add", action="store_true",
                        help=f"record the methods {FIXTURE.name} lacks; keep every other entry")
    parser.add_argument("--method", action="append", help="only these methods (print)")
    args = parser.parse_args()
    feds = federations()
    names = args.method or list(METHOD_NAMES)
    existing = json.loads(FIXTURE.read_text()) if args.add else {}
    if args.add:
        names = [name for name in names if f"{name}/{MODES[0]}" not in existing]
    outputs = {f"{name}/{secure}": record(name, secure, feds) for name in names for secure in MODES}
    text = json.dumps({**existing, **outputs}, indent=1, sort_keys=True)
    if args.write or args.add:
        FIXTURE.write_text(text + "\n")
    print(json.dumps(outputs, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
