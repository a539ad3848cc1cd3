"""ServerUpdate: weighted FedAvg through secure summation, and model (un)flattening.

FedAvg weighted by local data size |D_k| = n_k:

    theta = (sum_k n_k theta_k) / (sum_k n_k)

Each client k submits the vector ``[n_k * theta_k, n_k]`` to
:func:`securefl.runtime.secure_sum`; the server decodes the sum and divides by its last
entry.  With ``secure="real"`` the sum runs the backend ``sum_backend`` (the
``aggregation`` key of an experiment, ``--aggregation``): ``"secagg"``, the
pairwise-masked secure aggregation of Bonawitz et al. (no coalition of fewer than t
clients with the server learns an input; more than n - t dropouts abort), or ``"he"``,
BFV homomorphic aggregation under a key the clients share (:mod:`securefl.crypto.he`:
any dropouts once a majority's inputs arrived; one client colluding with the server
reads every input).  Either way the server learns only the two sums (hence the average
model and the total data size), never an individual model or n_k.  With
``secure="plaintext"`` the backend adds the same fixed-point encodings directly, so
all modes return bit-identical averages (the contract of ``secure_sum``).

Secure aggregation's keys and masks (and the HE key) come from the OS CSPRNG unless a
test passes ``seed``: the average does not depend on them, so neither ``--secure both``
nor ``--resume`` needs them fixed, and methods never derive them from their crypto seed
(a derived seed repeated by mistake would reuse masks).  The
fixed-point error of the average is at most ``(n/2 * 2^-f) / sum n_k`` per coordinate
plus float64 rounding (see :mod:`securefl.crypto.fixed_point`).

Every floating-point entry of a model's ``state_dict`` (parameters and BatchNorm running
statistics) is averaged; integer buffers (``num_batches_tracked``) are taken from the
first client.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from securefl.errors import InputError
from securefl.runtime import sum_backends

StateDict = Mapping[str, torch.Tensor]


@dataclass
class AggregationReport:
    """Cost of one secure aggregation.

    Byte accounting shared by all methods: ``payload_bytes`` is what plain FedAvg would
    upload (the float32 vector ``[n_k theta_k, n_k]``); ``protocol_bytes_per_client`` is
    what privacy adds on top -- with ``secure="real"`` the mean secure-sum traffic of a
    client (64-bit masked vector, keys, shares) minus ``payload_bytes``, 0 in plaintext
    mode.  ``crypto_seconds``: wall time of the secure sum (of its plaintext placeholder
    in plaintext mode); ``bytes_sent``: the backend's per-party byte counts.
    """

    clients: int
    dim: int
    crypto_seconds: float
    payload_bytes: float
    protocol_bytes_per_client: float
    bytes_sent: dict = field(default_factory=dict)


def _float_keys(state: StateDict) -> list[str]:
    return [k for k, v in state.items() if torch.is_floating_point(v)]


def state_to_vector(state: StateDict) -> np.ndarray:
    """Concatenate the floating-point entries of ``state`` into one float64 vector."""
    keys = _float_keys(state)
    if not keys:
        return np.zeros(0)
    return np.concatenate([state[k].detach().reshape(-1).double().cpu().numpy() for k in keys])


def vector_to_state(vector: np.ndarray, template: StateDict) -> dict[str, torch.Tensor]:
    """Inverse of :func:`state_to_vector`, shaped, typed and placed (device) like ``template``."""
    keys = _float_keys(template)
    expected = sum(template[k].numel() for k in keys)
    if vector.shape != (expected,):
        raise InputError("vector", vector, f"must have shape ({expected},) for this model")
    out: dict[str, torch.Tensor] = {}
    offset = 0
    for key, value in template.items():
        if key in keys:
            n = value.numel()
            out[key] = torch.from_numpy(np.array(vector[offset: offset + n])).reshape(
                value.shape).to(device=value.device, dtype=value.dtype)
            offset += n
        else:
            out[key] = value.detach().clone()
    return out


def model_vector(model: nn.Module) -> np.ndarray:
    """The model's floating-point state as one float64 vector."""
    return state_to_vector(model.state_dict())


def load_model_vector(model: nn.Module, vector: np.ndarray) -> None:
    """Write a vector from :func:`model_vector` back into ``model``."""
    model.load_state_dict(vector_to_state(vector, model.state_dict()))


def model_bytes(model: nn.Module) -> int:
    """Bytes of the model's floating-point state sent as float32 (one download)."""
    return 4 * sum(v.numel() for v in model.state_dict().values() if torch.is_floating_point(v))


SUM_BACKENDS = sum_backends.names(secure=True)
"""The secure backends built in (:mod:`securefl.runtime.sum_backends`); checks ask the registry."""


def secure_backend(secure: str, sum_backend: str = "secagg") -> str:
    """The :func:`securefl.runtime.secure_sum` backend for a ``secure`` mode: ``sum_backend``
    (a secure backend of :mod:`securefl.runtime.sum_backends`) when real, the plaintext oracle
    otherwise."""
    sum_backends.get(sum_backend, parameter="sum_backend", secure=True)
    if secure == "real":
        return sum_backend
    if secure == "plaintext":
        return "plaintext"
    raise InputError("secure", secure, "must be 'real' or 'plaintext'")


def secure_weighted_sum(vectors: Sequence[np.ndarray], weights: Sequence[float], *, secure: str,
                        seed: int | None = None, threshold: int | None = None,
                        sum_backend: str = "secagg") -> tuple[np.ndarray, float, AggregationReport]:
    """``(sum_k w_k v_k, sum_k w_k, report)`` through one secure sum of ``[w_k v_k, w_k]``."""
    from securefl.runtime.summation import secure_sum

    if len(vectors) == 0 or len(vectors) != len(weights):
        raise InputError("weights", weights, f"need one weight per vector ({len(vectors)})")
    dims = {np.shape(v) for v in vectors}
    if len(dims) != 1 or len(next(iter(dims))) != 1:
        raise InputError("vectors", dims, "must be 1-D arrays of one common length")
    w = np.asarray(weights, dtype=np.float64)
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise InputError("weights", weights, "must be finite, >= 0 and not all zero")
    n = len(vectors)
    t = n // 2 + 1 if threshold is None else threshold
    inputs = [np.append(np.asarray(v, np.float64) * wk, wk) for v, wk in zip(vectors, w)]
    start = time.perf_counter()
    result = secure_sum(inputs, threshold=t, backend=secure_backend(secure, sum_backend), seed=seed)
    seconds = time.perf_counter() - start
    total = np.asarray(result.total, dtype=np.float64)
    dim = len(inputs[0])
    sent = dict(result.bytes_sent)
    payload = 4.0 * dim
    overhead = max(float(np.mean([sent.get(k, 0) for k in range(n)])) - payload, 0.0) \
        if secure == "real" else 0.0
    report = AggregationReport(n, dim - 1, seconds, payload, overhead, sent)
    return total[:-1], float(total[-1]), report


def aggregate(states_or_vectors: Sequence[StateDict] | Sequence[np.ndarray],
              weights: Sequence[float], *, secure: str, seed: int | None = None,
              threshold: int | None = None, sum_backend: str = "secagg"
              ) -> tuple[dict[str, torch.Tensor] | np.ndarray, AggregationReport]:
    """Weighted FedAvg of client models (state dicts or flat vectors) via secure sum.

    Returns the average in the input's form (state dict or vector) and the cost report.
    """
    if len(states_or_vectors) == 0:
        raise InputError("states_or_vectors", states_or_vectors, "need at least one client")
    first = states_or_vectors[0]
    as_state = isinstance(first, Mapping)
    vectors = [state_to_vector(s) for s in states_or_vectors] if as_state else \
        [np.asarray(v, np.float64) for v in states_or_vectors]
    weighted, total_weight, report = secure_weighted_sum(vectors, weights, secure=secure, seed=seed,
                                                         threshold=threshold, sum_backend=sum_backend)
    average = weighted / total_weight
    if as_state:
        return vector_to_state(average, first), report
    return average, report
