"""Model aggregation through HE (``sum_backend="he"``, ``--aggregation he``): the same
average as pairwise masking and as the plaintext oracle, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from securefl.errors import InputError
from securefl.fl import aggregate, secure_backend
from securefl.models import build_model


def test_he_average_of_a_cnn_is_bit_identical_to_secagg_and_plaintext():
    models = [build_model("cnn", input_shape=(1, 28, 28), num_classes=10, seed=s) for s in range(3)]
    states = [m.state_dict() for m in models]
    weights = [60.0, 45.0, 51.0]
    he_state, he_report = aggregate(states, weights, secure="real", sum_backend="he")
    masked_state, masked_report = aggregate(states, weights, secure="real", sum_backend="secagg")
    plain_state, plain_report = aggregate(states, weights, secure="plaintext", sum_backend="he")
    for other in (masked_state, plain_state):
        assert all(np.array_equal(he_state[k].numpy(), other[k].numpy()) for k in he_state)
    assert he_report.protocol_bytes_per_client > masked_report.protocol_bytes_per_client > 0
    assert plain_report.protocol_bytes_per_client == 0.0


def test_backend_choice_is_checked():
    assert secure_backend("real", "he") == "he" and secure_backend("plaintext", "he") == "plaintext"
    assert secure_backend("real") == "secagg"
    with pytest.raises(InputError, match="sum_backend"):
        aggregate([np.zeros(3)], [1.0], secure="real", sum_backend="ckks")
