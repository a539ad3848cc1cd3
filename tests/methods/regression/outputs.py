"""Frozen outputs of every method, to prove that a refactor changes no result, on any CPU.

``python -m tests.methods.regression.outputs`` records, for every method of
:data:`securefl.methods.METHOD_NAMES` in plaintext and real mode (fixed ``crypto_seed``),
on a tiny digits federation, the warm-up (``warmup_rounds=1`` where a method has one) and
two rounds.  Per round it keeps two kinds of field:

- **bit-exact fields**: the SHA-256 of every model the method holds (``models``), of its
  test-set predictions (``predictions``) and of its pseudo-labels
  (``pseudo_label_digest``).  They change with the last bit of any float32 weight, so they
  hold only where the float kernels are the record's own (:func:`kernel_path`);
- **portable fields**: quantities that do not depend on float rounding (the bytes per
  client, the round, the privacy accounting) and readings of the float computation that a
  change of CPU moves by rounding noise only: every model tensor's root mean square and
  :data:`SAMPLES` of its entries at fixed positions (``weights``), the predicted test
  labels (``predicted``), the pseudo-labels themselves (``pseudo_labels``), the test and
  pseudo-label accuracies.

The record also holds :func:`securefl.machine.kernel_path` of the machine that wrote it.
``outputs.json`` was first written at main d1acd75 (before the method split of issue 14,
phase 2) and is never rewritten to make a test pass.  At issue 19 it was re-anchored with
``--reanchor``, which recomputes every entry and refuses to write unless every recorded
field is recomputed bit for bit, except the weight digests where the record's kernel path
is not this machine's: the d1acd75 record came from another kernel path (it failed on every
model digest on the AMD EPYC with AVX2 that re-anchored it), and there every label digest, accuracy, byte count and privacy figure of
every method and mode was recomputed identically, and only the weight digests differed.
A method added later gets its entries once, with ``--add`` (only methods the file lacks, on
the record's kernel path): ``fedavg-fixmatch``, ``fedmatch``.

A protocol change that moves bytes and nothing else (fewer or more bytes on the wire, the
same outputs) is taken with ``--accept-bytes --method NAME``, which refuses unless every
other field, the digests included, is recomputed bit for bit on the record's kernel path.
Taken so far (real mode only; plaintext sends nothing of it):

- issue 23, fedprop and fedprop-mt: +44 bytes per client per round (the first SHADE
  message of a pair carries the X25519 base-OT setup instead of one P-256 point);
- issue 20, every method: +220 bytes per client per secure sum (the Ed25519 signature on
  a client's SecAgg keys, 77 bytes, and its signature on the survivor list of the
  consistency round, 143 bytes): +220 to +880 per round by the method's number of sums;
- issue 20, fedprop and fedprop-mt: +290 bytes per client per round (the Ed25519
  signature on each client's LSH seed-agreement key: 64 bytes up, 3 x 64 in the relayed
  key table down, and the frames' array headers).

``--write PATH`` records this machine to another file and ``--check PATH`` compares this
machine with such a file, which is how a record made under one kernel path is shown to pass
under another (``ATEN_CPU_CAPABILITY=default|avx2|avx512``, ``MKL_ENABLE_INSTRUCTIONS``).

The model digest is SHA-256 over the state dicts of the method's public ``nn.Module``
attributes (sorted by attribute name, then by state key; every tensor's dtype, shape and
bytes), so it does not depend on how ``state_dict()`` is laid out.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from securefl.machine import kernel_path

FIXTURE = Path(__file__).with_name("outputs.json")
CRYPTO_SEED = 20240607
SEED = 3
ROUNDS = 2
TINY = {"clients_per_round": 3, "local_epochs": 1, "batch_size": 8, "lr": 0.05, "warmup_rounds": 1,
        "L": 256, "rounds": 5, "n_unlabeled": 10, "helpers": 2, "pretrain_epochs": 1,
        "server_batch_size": 20, "threshold": 0.0, "confidence": 0.3, "helper_interval": 1}
"""The settings of ``tests/methods/test_client_order.py`` (each method takes a subset)."""
MODES = ("plaintext", "real")
SAMPLES = 16
"""Entries of each model tensor kept in ``weights`` (evenly spaced over the flat tensor)."""
BIT_EXACT_FIELDS = ("models", "predictions", "pseudo_label_digest")
"""Fields compared only where the machine's kernel path is the record's."""


def federations() -> dict[str, Any]:
    """The tiny digits federations of ``tests/methods/conftest.py``."""
    from securefl.data import load_dataset, partition

    digits = load_dataset("digits")
    clients = partition(digits, scheme="iid", num_clients=5, seed=0, labeled_fraction=0.2,
                        samples_per_client=40)
    server = partition(digits, scheme="iid", num_clients=5, seed=0, labeled_fraction=0.2,
                       samples_per_client=40, labels_at="server", server_labels=40)
    return {"clients": clients, "server": server}


def _modules(method: Any) -> Iterator[tuple[str, Any]]:
    from torch import nn

    for name in sorted(vars(method)):
        module = vars(method)[name]
        if not name.startswith("_") and isinstance(module, nn.Module):
            yield name, module


def model_digest(method: Any) -> str:
    """SHA-256 of the state dicts of ``method``'s public ``nn.Module`` attributes."""
    digest = hashlib.sha256()
    for name, module in _modules(method):
        digest.update(name.encode() + b"\0")
        for key, tensor in module.state_dict().items():
            array = tensor.detach().cpu().contiguous().numpy()
            digest.update(f"{key}|{array.dtype}|{array.shape}".encode())
            digest.update(array.tobytes())
    return digest.hexdigest()


def weight_readings(method: Any) -> dict[str, dict[str, list[float]]]:
    """Per model and state key: ``[root mean square, SAMPLES entries at fixed positions]``
    of float tensors, ``[sum]`` of integer ones (float64 readings of the stored values)."""
    readings: dict[str, dict[str, list[float]]] = {}
    for name, module in _modules(method):
        tensors = {}
        for key, tensor in module.state_dict().items():
            flat = tensor.detach().cpu().reshape(-1).numpy()
            if not np.issubdtype(flat.dtype, np.floating):
                tensors[key] = [float(flat.astype(np.int64).sum())]
                continue
            values = flat.astype(np.float64)
            positions = np.unique(np.linspace(0, values.size - 1, min(SAMPLES, values.size)).astype(int))
            tensors[key] = [float(np.sqrt(np.mean(values**2))), *map(float, values[positions])]
        readings[name] = tensors
    return readings


def label_string(labels: list[np.ndarray] | np.ndarray) -> str:
    """Labels 0..9 as one string of digits, ``-1`` (no label) as ``.`` (arrays concatenated
    in order)."""
    flat = np.concatenate([np.asarray(a, dtype=np.int64).reshape(-1)
                           for a in (labels if isinstance(labels, list) else [labels])])
    if flat.size and (flat.min() < -1 or flat.max() > 9):
        raise ValueError(f"labels outside -1..9: {sorted(set(flat.tolist()))[:5]}")
    return "".join("." if label < 0 else str(label) for label in flat.tolist())


@contextmanager
def captured_pseudo_labels() -> Iterator[list[str]]:
    """The pseudo-labels every method hands to :func:`securefl.methods.halves.label_digest`
    (its one digest function), in call order, while the context is open."""
    from securefl.methods import halves

    seen: list[str] = []
    original = halves.label_digest

    def capture(labels):
        seen.append(label_string(labels))
        return original(labels)

    halves.label_digest = capture
    try:
        yield seen
    finally:
        halves.label_digest = original


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def record(name: str, secure: str, feds: dict[str, Any], **changes: Any) -> list[dict[str, Any]]:
    """The warm-up and ``ROUNDS`` rounds of method ``name`` in mode ``secure``.

    ``changes`` override the tiny hyper-parameters (the tests that show a wrong setting
    fails the comparison use it); ``feds`` may be any dict with the two federations."""
    import torch

    from securefl.methods import build_method, hyper_parameters
    from securefl.methods.halves import label_digest

    torch.set_num_threads(1)
    federation = feds["server"] if name == "fedanchor" else feds["clients"]
    hyper = {k: v for k, v in {**TINY, **changes}.items() if k in hyper_parameters(name)}
    method = build_method(name, secure=secure, seed=SEED, crypto_seed=CRYPTO_SEED, **hyper)
    method.setup(federation.for_training())
    test = federation.test
    rounds = [{"round": "setup", "models": model_digest(method), "weights": weight_readings(method)}]
    for r in range(ROUNDS):
        with captured_pseudo_labels() as seen:
            result = method.run_round(r)
        if len(seen) > 1:
            raise AssertionError(f"{name} digested {len(seen)} pseudo-label sets in round {r}")
        predicted = np.asarray(method.predict(test.x))
        rounds.append({
            "round": r,
            "models": model_digest(method),
            "weights": weight_readings(method),
            "predictions": label_digest(predicted),
            "predicted": label_string(predicted),
            "test_accuracy": method.score(test.x, test.y),
            "pseudo_label_digest": result.pseudo_label_digest,
            "pseudo_labels": seen[0] if seen and result.pseudo_label_digest else None,
            "pseudo_label_accuracy": result.pseudo_label_accuracy,
            "bytes_model_per_client": result.bytes_model_per_client,
            "bytes_protocol_per_client": result.bytes_protocol_per_client,
            "privacy": _plain(result.privacy),
        })
    return json.loads(json.dumps(rounds))


# ----------------------------------------------------------------------------- comparison

WEIGHT_RTOL = 3e-5
"""A weight reading may differ from the record by ``WEIGHT_RTOL`` of the tensor's scale
(its recorded root mean square, at least :data:`WEIGHT_FLOOR`) on another kernel path."""
WEIGHT_FLOOR = 1e-3
"""The smallest scale a tensor is given (a tensor of zeros, such as a fresh bias)."""
PRIVACY_RTOL = 1e-9
"""Privacy figures (float64 arithmetic in numpy / dp-accounting, whose transcendental
functions are SIMD-dispatched) may differ by this relative amount."""
LABEL_FLIPS = 1
"""Predicted test labels and pseudo-labels that may differ from the record on another
kernel path (an argmax whose two best logits are within rounding of each other)."""


def _weight_differences(ours: dict, theirs: dict, where: str) -> list[str]:
    problems = []
    if ours.keys() != theirs.keys():
        return [f"{where}: models {sorted(ours)} != {sorted(theirs)}"]
    for model, tensors in theirs.items():
        if ours[model].keys() != tensors.keys():
            problems.append(f"{where}: {model} state keys differ")
            continue
        for key, expected in tensors.items():
            actual = ours[model][key]
            if len(actual) != len(expected):
                problems.append(f"{where}: {model}.{key} has {len(actual)} readings, not {len(expected)}")
                continue
            if len(expected) == 1:  # an integer tensor's sum: exact
                if actual != expected:
                    problems.append(f"{where}: {model}.{key} sum {actual[0]} != {expected[0]}")
                continue
            scale = max(expected[0], WEIGHT_FLOOR)
            worst = max(abs(a - e) for a, e in zip(actual, expected)) / scale
            if worst > WEIGHT_RTOL:
                problems.append(f"{where}: {model}.{key} differs by {worst:.2e} of its scale "
                                f"(> {WEIGHT_RTOL:.0e})")
    return problems


def _label_differences(ours: str | None, theirs: str | None, field: str, where: str) -> list[str]:
    if ours is None or theirs is None or len(ours) != len(theirs):
        return [] if ours == theirs else [f"{where}: {field} {str(ours)[:20]} != {str(theirs)[:20]}"]
    flips = sum(a != b for a, b in zip(ours, theirs))
    return [f"{where}: {flips} {field} differ (> {LABEL_FLIPS})"] if flips > LABEL_FLIPS else []


def _close(ours: Any, theirs: Any) -> bool:
    if isinstance(theirs, float) and isinstance(ours, (int, float)):
        return math.isclose(ours, theirs, rel_tol=PRIVACY_RTOL, abs_tol=1e-12)
    if isinstance(theirs, dict) and isinstance(ours, dict):
        return ours.keys() == theirs.keys() and all(_close(ours[k], theirs[k]) for k in theirs)
    if isinstance(theirs, list) and isinstance(ours, list):
        return len(ours) == len(theirs) and all(_close(a, b) for a, b in zip(ours, theirs))
    return ours == theirs


def differences(actual: list[dict], expected: list[dict], *, bit_exact: bool) -> list[str]:
    """What differs between two records of one method and mode ('' for none).

    ``bit_exact``: every field must be equal (same kernel path).  Otherwise the digests are
    skipped; bytes, rounds and participation must be equal; privacy figures within
    :data:`PRIVACY_RTOL`; weights within :data:`WEIGHT_RTOL`; predicted and pseudo-labels
    within :data:`LABEL_FLIPS`, and the accuracies within what those flips allow."""
    if len(actual) != len(expected):
        return [f"{len(actual)} rounds recorded, {len(expected)} expected"]
    problems = []
    for ours, theirs in zip(actual, expected):
        where = f"round {theirs['round']}"
        if bit_exact:
            problems += [f"{where}: {k} {ours.get(k)!r:.40} != {theirs.get(k)!r:.40}"
                         for k in sorted(set(ours) | set(theirs)) if ours.get(k) != theirs.get(k)]
            continue
        if set(ours) != set(theirs):
            problems.append(f"{where}: fields {sorted(set(ours) ^ set(theirs))} differ")
            continue
        problems += _weight_differences(ours["weights"], theirs["weights"], where)
        problems += _label_differences(ours.get("predicted"), theirs.get("predicted"), "predicted labels", where)
        problems += _label_differences(ours.get("pseudo_labels"), theirs.get("pseudo_labels"),
                                       "pseudo-labels", where)
        for field in ("test_accuracy", "pseudo_label_accuracy"):
            a, e = ours.get(field), theirs.get(field)
            labels = theirs.get("predicted" if field == "test_accuracy" else "pseudo_labels")
            slack = LABEL_FLIPS / len(labels) + 1e-12 if labels else 0.0
            if (a is None) != (e is None) or (e is not None and abs(a - e) > slack):
                problems.append(f"{where}: {field} {a} != {e}")
        exact = set(theirs) - set(BIT_EXACT_FIELDS) - {"weights", "predicted", "pseudo_labels",
                                                        "test_accuracy", "pseudo_label_accuracy"}
        problems += [f"{where}: {k} {ours[k]!r:.60} != {theirs[k]!r:.60}"
                     for k in sorted(exact) if not _close(ours[k], theirs[k])]
    return problems


def deviation(actual: list[dict], expected: list[dict]) -> tuple[float, int]:
    """The largest weight reading's difference (in units of its tensor's scale) and the
    most labels flipped in one field, between two records of one method and mode."""
    worst, flips = 0.0, 0
    for ours, theirs in zip(actual, expected):
        for model, tensors in theirs.get("weights", {}).items():
            for key, readings in tensors.items():
                other = ours["weights"][model][key]
                if len(readings) > 1:
                    scale = max(readings[0], WEIGHT_FLOOR)
                    worst = max(worst, max(abs(a - e) for a, e in zip(other, readings)) / scale)
        for field in ("predicted", "pseudo_labels"):
            if ours.get(field) and theirs.get(field):
                flips = max(flips, sum(a != b for a, b in zip(ours[field], theirs[field])))
    return worst, flips


def load() -> dict[str, Any]:
    """The record: ``{"kernel_path": ..., "outputs": {"method/mode": [rounds]}}``."""
    return json.loads(FIXTURE.read_text())


def reanchor(existing: dict[str, Any], outputs: dict[str, list[dict]]) -> dict[str, Any]:
    """``existing`` with every entry of ``outputs`` in place of its own and this machine's
    kernel path; refused (``SystemExit``) unless every field the record holds, but the
    weight digests of another kernel path, is recomputed bit for bit."""
    here = kernel_path()
    free = () if existing.get("kernel_path") == here else ("models",)
    for key, rounds in outputs.items():
        old = existing["outputs"][key]
        stale = [(o["round"], k) for r, o in zip(rounds, old) for k in o
                 if k not in free and o[k] != r.get(k)]
        if len(old) != len(rounds) or stale:
            raise SystemExit(f"{key}: recomputed fields differ from the record: {stale[:5]}")
    return {"kernel_path": here, "outputs": {**existing["outputs"], **outputs}}


BYTE_FIELDS = ("bytes_model_per_client", "bytes_protocol_per_client")


def accept_bytes(existing: dict[str, Any], outputs: dict[str, list[dict]]) -> dict[str, Any]:
    """``existing`` with the byte counts of ``outputs`` in place of its own, for a protocol
    change that moves bytes and nothing else; refused (``SystemExit``) off the record's
    kernel path or where any other field differs, digests included."""
    if existing["kernel_path"] != kernel_path():
        raise SystemExit("--accept-bytes: this machine's kernel path is not the record's")
    updated = json.loads(json.dumps(existing))
    for key, rounds in outputs.items():
        old = updated["outputs"][key]
        other = [(o["round"], k) for r, o in zip(rounds, old) for k in set(o) | set(r)
                 if k not in BYTE_FIELDS and o.get(k) != r.get(k)]
        if len(old) != len(rounds) or other:
            raise SystemExit(f"{key}: fields other than bytes differ: {other[:5]}")
        for r, o in zip(rounds, old):
            for k in BYTE_FIELDS:
                if k in o and o[k] != r[k]:
                    print(f"{key} round {o['round']}: {k} {o[k]} -> {r[k]}")
                    o[k] = r[k]
    return updated


def main() -> None:
    from securefl.methods import METHOD_NAMES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--add", action="store_true",
                        help=f"record the methods {FIXTURE.name} lacks; keep every other entry")
    action.add_argument("--reanchor", action="store_true",
                        help="recompute every entry on this machine and keep it, with this "
                             "machine's kernel path, only if every recorded field but the "
                             "weight digests of another kernel path is recomputed bit for bit")
    action.add_argument("--accept-bytes", action="store_true",
                        help="take the recomputed byte counts of --method (a protocol change "
                             "that moves bytes only); refused where any other field differs")
    action.add_argument("--write", metavar="PATH",
                        help="write a fresh record to PATH (never the fixture)")
    action.add_argument("--check", metavar="PATH",
                        help="compare this machine with the record at PATH; exit 1 on a difference")
    parser.add_argument("--method", action="append", help="only these methods")
    args = parser.parse_args()
    if args.write and Path(args.write).resolve() == FIXTURE.resolve():
        parser.error(f"--write={args.write}: the fixture is changed only by --add or --reanchor")
    feds = federations()
    names = args.method or list(METHOD_NAMES)
    existing = load()
    if args.add:
        if existing["kernel_path"] != kernel_path():
            parser.error("--add: this machine's kernel path is not the record's; add where it is")
        names = [name for name in names if f"{name}/{MODES[0]}" not in existing["outputs"]]
    outputs = {f"{name}/{secure}": record(name, secure, feds) for name in names for secure in MODES}
    if args.check:
        other = json.loads(Path(args.check).read_text())
        same = other["kernel_path"] == kernel_path()
        failed, worst, flips = 0, 0.0, 0
        for key, rounds in outputs.items():
            w, f = deviation(rounds, other["outputs"][key])
            worst, flips = max(worst, w), max(flips, f)
            problems = differences(rounds, other["outputs"][key], bit_exact=False)
            if same:
                problems += differences(rounds, other["outputs"][key], bit_exact=True)
            failed += bool(problems)
            print(f"{key}: {'; '.join(problems[:3]) or 'agrees'}")
        print(f"{len(outputs) - failed} agree, {failed} differ "
              f"({'bit-exact and portable' if same else 'portable fields: another kernel path'}); "
              f"largest weight difference {worst:.1e} of scale (tolerance {WEIGHT_RTOL:.0e}), "
              f"at most {flips} labels flipped (tolerance {LABEL_FLIPS})")
        raise SystemExit(1 if failed else 0)
    if args.accept_bytes:
        if not args.method:
            parser.error("--accept-bytes needs --method")
        FIXTURE.write_text(json.dumps(accept_bytes(existing, outputs), indent=1, sort_keys=True) + "\n")
    elif args.add or args.reanchor:
        updated = reanchor(existing, outputs) if args.reanchor else {
            **existing, "outputs": {**existing["outputs"], **outputs}}
        FIXTURE.write_text(json.dumps(updated, indent=1, sort_keys=True) + "\n")
    elif args.write:
        Path(args.write).write_text(json.dumps({"kernel_path": kernel_path(), "outputs": outputs},
                                               indent=1, sort_keys=True) + "\n")
    else:
        print(json.dumps(outputs, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
