"""securefl.fl: the federated simulation engine (sampling, ClientUpdate, ServerUpdate).

Public API::

    sample_clients(rng, num_clients, clients_per_round, *, labeled=None) -> sorted indices
        (FedProp's rule: tau*m_L labeled + the rest unlabeled when m_L < m)
    SimulationRNG.from_seed(seed): .numpy (np Generator), .torch (torch Generator),
        .draw_seed(), .state_dict() / .load_state_dict() for bit-exact resume (the server's)
    client_rng(seed, round_index, client, *, purpose="train") -> SimulationRNG: a client's
        generators for one round, derived from (seed, round, client, purpose)
    train_supervised(model, x, y, *, weights=None, epochs, batch_size, lr, momentum=0.9,
                     weight_decay=0.0, prox_mu=0.0, generator) -> steps
    train_mixed(model, x_l, y_l, x_u, y_pseudo, w_pseudo, *, epochs, batch_size, lr, ...,
                generator, extra_loss=None, after_step=None) -> steps   (FedProp B_L u B_U)
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
"""

from securefl.fl.aggregation import (
    SUM_BACKENDS,
    AggregationReport,
    aggregate,
    load_model_vector,
    model_bytes,
    model_vector,
    secure_backend,
    secure_weighted_sum,
    state_to_vector,
    vector_to_state,
)
from securefl.fl.rng import SimulationRNG, client_rng
from securefl.fl.sampling import sample_clients
from securefl.fl.training import (
    batches,
    evaluate,
    extract_features,
    make_optimizer,
    predict_labels,
    predict_logits,
    prox_term,
    train_mixed,
    train_supervised,
    weighted_cross_entropy,
)

__all__ = [
    "SUM_BACKENDS", "AggregationReport", "SimulationRNG", "aggregate", "batches", "client_rng", "evaluate",
    "extract_features", "load_model_vector", "make_optimizer", "model_bytes", "model_vector",
    "predict_labels", "predict_logits", "prox_term", "sample_clients", "secure_backend",
    "secure_weighted_sum", "state_to_vector", "train_mixed", "train_supervised", "vector_to_state",
    "weighted_cross_entropy",
]
