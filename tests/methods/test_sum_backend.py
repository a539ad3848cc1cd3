"""Methods aggregate through the chosen secure-sum backend (``--aggregation he``)."""

from __future__ import annotations

import pytest

from securefl.methods import build_method

from .conftest import play


@pytest.mark.parametrize("name", ["fedavg-labeled", "protofssl", "fedsemi-mt"])
def test_a_method_aggregating_with_he_matches_plaintext(name, tiny_digits, tiny_hyper):
    hyper = dict(tiny_hyper) if name != "protofssl" else {"clients_per_round": 3, "helpers": 2,
                                                          "local_epochs": 2, "n_unlabeled": 10}
    if name == "fedsemi-mt":
        hyper.update(rounds=5, local_epochs=2)  # the second epoch's EMA sets teacher and student apart
    results, accuracies = {}, {}
    for secure in ("real", "plaintext"):
        method = build_method(name, secure=secure, seed=0, crypto_seed=7, sum_backend="he", **hyper)
        method.setup(tiny_digits.for_training())
        results[secure], accuracies[secure] = play(method, tiny_digits, 2)
    assert accuracies["real"] == accuracies["plaintext"]
    assert [r.pseudo_label_digest for r in results["real"]] == [
        r.pseudo_label_digest for r in results["plaintext"]
    ]
    # HE ciphertexts of a 64-bit ring element: far more than secagg's masked vector
    secagg = build_method(name, secure="real", seed=0, crypto_seed=7, **hyper)
    secagg.setup(tiny_digits.for_training())
    first, first_accuracy = play(secagg, tiny_digits, 1)
    assert results["real"][0].bytes_protocol_per_client > first[0].bytes_protocol_per_client
    assert first_accuracy[0] == accuracies["real"][0]
