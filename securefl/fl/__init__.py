"""securefl.fl: the federated simulation engine (sampling, ClientUpdate, ServerUpdate).

Public API::

    sample_clients(rng, num_clients, clients_per_round, *, labeled=None) -> sorted indices
        (FedProp's rule: tau*m_L labeled + the rest unlabeled when m_L < m)
    SimulationRNG.from_seed(seed, *, device=None): .numpy (np Generator), .torch (torch
        Generator on device), .draw_seed(), .state_dict() / .load_state_dict() for
        bit-exact resume (the server's)
    client_rng(seed, round_index, client, *, purpose="train", device=None) -> SimulationRNG:
        a client's generators for one round, derived from (seed, round, client, purpose)
    resolve_device("auto"|"cpu"|"cuda"|"cuda:<i>") -> torch.device; configure_determinism(device);
        describe_device(device) -> {"device", "device_name"}; model_device(model)
        (where torch computes: :mod:`securefl.fl.device`)
    train_supervised(model, x, y, *, weights=None, epochs, batch_size, lr, momentum=0.9,
                     weight_decay=0.0, prox_mu=0.0, generator) -> steps
    train_mixed(model, x_l, y_l, x_u, y_pseudo, w_pseudo, *, epochs, batch_size, lr, ...,
                generator, extra_loss=None, after_step=None) -> steps   (FedProp B_L u B_U)
    train_fixmatch(model, x_l, y_l, x_u, *, epochs, batch_size, unlabeled_ratio, threshold,
                   unlabeled_weight, lr, ..., generator, weak=None, strong) -> steps
        (FixMatch's local objective, fixmatch_loss)
    make_optimizer, weighted_cross_entropy, prox_term, batches
    evaluate(model, x, y) -> accuracy; predict_labels(model, x); predict_logits(model, x);
    extract_features(model, x)
    aggregate(states_or_vectors, weights, *, secure="real"|"plaintext", seed=None,
              threshold=None, sum_backend="secagg"|"he") -> (average, AggregationReport)
              (weighted FedAvg through a secure sum)
    secure_weighted_sum(vectors, weights, *, secure, seed, threshold, sum_backend)
        -> (sum, total_w, report)
    model_vector(model), load_model_vector(model, v), state_to_vector, vector_to_state,
    model_bytes(model), secure_backend(secure, sum_backend="secagg"), SUM_BACKENDS

Methods' uploads as exchanges (``uploads``, ``group_sums``) and the Flower transport
(``flower``) are modules of this package, imported by name; the records, the in-process
transport, the step driver, the links and the secure-sum steps they run on are the room
below, :mod:`securefl.runtime`.

Exports are lazy (PEP 562): importing ``securefl.fl`` or one of its torch-free modules
(the uploads, a ClientApp that does not train) does not import torch; the first use
of a name imports the module that defines it.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SUM_BACKENDS": "aggregation", "AggregationReport": "aggregation", "aggregate": "aggregation",
    "load_model_vector": "aggregation", "model_bytes": "aggregation", "model_vector": "aggregation",
    "secure_backend": "aggregation", "secure_weighted_sum": "aggregation",
    "state_to_vector": "aggregation", "vector_to_state": "aggregation",
    "SimulationRNG": "rng", "client_rng": "rng",
    "configure_determinism": "device", "describe_device": "device", "model_device": "device",
    "resolve_device": "device",
    "sample_clients": "sampling",
    "batches": "training", "evaluate": "training", "extract_features": "training",
    "make_optimizer": "training", "predict_labels": "training", "predict_logits": "training",
    "prox_term": "training", "train_fixmatch": "training", "fixmatch_loss": "training",
    "train_mixed": "training", "train_supervised": "training",
    "weighted_cross_entropy": "training",
}
"""Public name -> module of this package that defines it."""

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'securefl.fl' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"securefl.fl.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
