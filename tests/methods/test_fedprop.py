"""FedProp and FedProp+MT on the tiny digits federation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from securefl.errors import InputError
from securefl.methods import build_method
from securefl.methods.fedprop.server import FedProp

from .conftest import play

FAST = {"warmup_rounds": 1, "L": 128}


def run(name, federation, hyper, secure, rounds=2, seed=0, crypto_seed=None):
    method = build_method(name, secure=secure, seed=seed, crypto_seed=crypto_seed, **hyper)
    method.setup(federation.for_training())
    return method, *play(method, federation, rounds)


@pytest.mark.parametrize("name", ["fedprop", "fedprop-mt"])
def test_real_and_plaintext_give_identical_pseudo_labels(name, tiny_digits, tiny_hyper):
    _, plain, plain_acc = run(name, tiny_digits, {**tiny_hyper, **FAST}, "plaintext", crypto_seed=7)
    _, real, real_acc = run(name, tiny_digits, {**tiny_hyper, **FAST}, "real", crypto_seed=7)
    assert plain_acc == real_acc
    for p, r in zip(plain, real):
        assert p.pseudo_label_digest is not None
        assert p.pseudo_label_digest == r.pseudo_label_digest
        assert p.pseudo_label_accuracy == r.pseudo_label_accuracy
        assert r.bytes_protocol_per_client > p.bytes_protocol_per_client > 0
        assert 0.0 <= p.pseudo_label_accuracy <= 1.0
    assert plain[0].pseudo_label_digest != plain[1].pseudo_label_digest


def test_lwe_hamming_backend_gives_the_same_pseudo_labels_and_a_link_projection(tiny_digits, tiny_hyper):
    """hamming_backend is a hyper-parameter: LWE real rounds equal plaintext ones; every round
    carries its projection onto 100 Mbit/s, 1 Gbit/s and 10 Gbit/s links."""
    hyper = {**tiny_hyper, **FAST, "hamming_backend": "lwe"}
    _, plain, plain_acc = run("fedprop", tiny_digits, hyper, "plaintext", rounds=1, crypto_seed=7)
    method, real, real_acc = run("fedprop", tiny_digits, hyper, "real", rounds=1, crypto_seed=7)
    assert real[0].pseudo_label_digest == plain[0].pseudo_label_digest
    assert real_acc == plain_acc
    projection = real[0].seconds_at_bandwidth
    assert list(projection) == ["100Mbit/s", "1Gbit/s", "10Gbit/s"]
    link = method._round_link_bytes + real[0].bytes_model_per_client / 2
    assert link > real[0].bytes_model_per_client / 2
    compute = projection["10Gbit/s"] - 8 * link / 1e10
    assert 0 < compute < 4 * real[0].seconds  # the round's CPU seconds (at most the threads x wall)
    assert projection["1Gbit/s"] == pytest.approx(compute + 8 * link / 1e9)
    assert projection["100Mbit/s"] == pytest.approx(compute + 8 * link / 1e8)


def test_round_result_accounting(tiny_digits, tiny_hyper):
    method, results, _ = run("fedprop", tiny_digits, {**tiny_hyper, **FAST}, "plaintext",
                             rounds=1)
    result = results[0]
    assert result.bytes_model_per_client == 2 * 4 * sum(
        p.numel() for p in method.network.state_dict().values())
    assert result.seconds >= result.train_seconds > 0
    assert result.crypto_seconds > 0


def test_resume_reproduces_uninterrupted_run(tiny_digits, tiny_hyper):
    hyper = {**tiny_hyper, **FAST}
    _, straight, accuracies = run("fedprop-mt", tiny_digits, hyper, "plaintext", rounds=2)
    first = build_method("fedprop-mt", secure="plaintext", seed=0, **hyper)
    first.setup(tiny_digits.for_training())
    first.run_round(0)
    state = first.state_dict()
    first.run_round(1)
    resumed = build_method("fedprop-mt", secure="plaintext", seed=0, **hyper)
    resumed.setup(tiny_digits.for_training())
    resumed.load_state_dict(state)
    (again,), (accuracy,) = play(resumed, tiny_digits, 2, start=1)
    assert accuracy == accuracies[1]
    assert again.pseudo_label_digest == straight[1].pseudo_label_digest


def test_seed_changes_the_run(tiny_digits, tiny_hyper):
    _, a, _ = run("fedprop", tiny_digits, {**tiny_hyper, **FAST}, "plaintext", rounds=1, seed=0)
    _, b, _ = run("fedprop", tiny_digits, {**tiny_hyper, **FAST}, "plaintext", rounds=1, seed=1)
    assert a[0].pseudo_label_digest != b[0].pseudo_label_digest


def test_mean_teacher_ramp():
    method = build_method("fedprop-mt", consistency_rampup=4)
    assert method.consistency_ramp(0) == pytest.approx(np.exp(-5.0))
    assert method.consistency_ramp(2) == pytest.approx(np.exp(-1.25))
    assert method.consistency_ramp(10) == 1.0


def test_fedprop_beats_labeled_only_fedavg_on_digits(digits):
    """Same labels, same communication rounds (FedProp's warm-up counts)."""
    from securefl.data import partition

    federation = partition(digits, scheme="iid", num_clients=6, seed=0, labeled_fraction=0.05,
                           samples_per_client=100)
    hyper = {"clients_per_round": 3, "local_epochs": 2, "batch_size": 10, "lr": 0.05,
             "lr_decay_rounds": 0}
    _, _, labeled = run("fedavg-labeled", federation, hyper, "plaintext", rounds=12)
    _, _, prop = run("fedprop", federation, {**hyper, "warmup_rounds": 6, "L": 256},
                     "plaintext", rounds=6)
    assert prop[-1] > labeled[-1] + 0.05


def test_a_federation_without_labeled_clients_is_refused(digits):
    from securefl.data import partition

    unlabeled = partition(digits, scheme="iid", num_clients=3, seed=0, labeled_fraction=0.0,
                          samples_per_client=20)
    with pytest.raises(InputError, match="federation"):
        FedProp().setup(unlabeled)


def test_translation_augmentation_rule(tiny_digits):
    from securefl.methods.halves import local_data

    method = FedProp(warmup_rounds=0)
    method.setup(tiny_digits)
    client, data = FedProp.client_half(method), local_data(tiny_digits, 0)
    assert client.augmentation(data, torch.Generator().manual_seed(0)) is None  # 8x8 digits: no shifts by default
    method.max_shift = 1
    shift = client.augmentation(data, torch.Generator().manual_seed(0))
    image = np.zeros((1,) + tiny_digits.input_shape, dtype=np.float32)
    image[..., 3, 3] = 1.0
    moved = shift(torch.as_tensor(image)).numpy()
    assert moved.sum() in (0.0, 1.0) and moved.shape == image.shape
    method.max_shift = -1
    with pytest.raises(InputError, match="max_shift"):
        client.augmentation(data, torch.Generator().manual_seed(0))


def _first_round_training(monkeypatch, federation, hyper, **options):
    """Round 0 of FedProp: the method, its result and, per train call (the round's clients in
    order), the pseudo-labels and weights the client trained on (its usable points)."""
    import securefl.methods.fedavg.client as clients

    seen = []
    original = clients.train_mixed

    def spy(model, x_l, y_l, x_u, labels_u, weights_u, **kwargs):
        seen.append((np.asarray(labels_u).copy(), np.asarray(weights_u).copy()))
        return original(model, x_l, y_l, x_u, labels_u, weights_u, **kwargs)

    monkeypatch.setattr(clients, "train_mixed", spy)
    method = build_method("fedprop", secure="plaintext", seed=0, **hyper, **FAST, **options)
    method.setup(federation.for_training())
    result = method.run_round(0)
    monkeypatch.setattr(clients, "train_mixed", original)
    return method, result, seen


def test_label_mass_options_gate_and_weigh_the_pseudo_labels(monkeypatch, tiny_digits, tiny_hyper):
    method, off, plain = _first_round_training(monkeypatch, tiny_digits, tiny_hyper)
    assert off.label_mass_median > 0
    done = method.last_cross_client
    members = off.participation["members"]
    _, weighted_result, weighted = _first_round_training(monkeypatch, tiny_digits, tiny_hyper,
                                                         mass_weighting=True)
    assert weighted_result.pseudo_label_digest == off.pseudo_label_digest  # labels kept
    for client, (labels, weights), (labels_w, weights_w) in zip(members, plain, weighted):
        data = tiny_digits.clients[client]
        mass = done.label_mass[client][~data.labeled]
        assert labels.size == (mass > 0).sum()  # every reached unlabeled point trains
        np.testing.assert_array_equal(labels_w, labels)
        np.testing.assert_allclose(weights_w, weights * mass[mass > 0] / mass.max(), rtol=1e-6)
        assert (weights_w < weights).any()
    _, gated_result, gated = _first_round_training(monkeypatch, tiny_digits, tiny_hyper,
                                                   min_label_mass=off.label_mass_median)
    assert gated_result.pseudo_label_digest != off.pseudo_label_digest
    kept = sum(len(labels) for labels, _ in gated)
    unlabeled = sum(int((~tiny_digits.clients[c].labeled).sum()) for c in members)
    assert kept == sum(
        int((done.label_mass[c][~tiny_digits.clients[c].labeled] >= off.label_mass_median).sum())
        for c in members)
    assert 0 < kept < unlabeled


def test_label_coverage_names_the_classes_no_sampled_client_labelled(tiny_digits, tiny_hyper):
    from dataclasses import replace

    from securefl.data import ClientData

    hidden = replace(tiny_digits, clients=[ClientData(c.x, c.y, c.labeled & (c.y != 0))
                                           for c in tiny_digits.clients])
    method = build_method("fedprop", secure="plaintext", seed=0, **tiny_hyper, **FAST)
    method.setup(hidden.for_training())
    method.run_round(0)
    coverage = method.label_coverage(hidden.for_training())
    clients = coverage["clients"]
    held = set().union(*(set(hidden.clients[c].y[hidden.clients[c].labeled].tolist()) for c in clients))
    assert 0 in coverage["uncovered_classes"]
    assert coverage["uncovered_classes"] == sorted(set(range(10)) - held)
    assert coverage["uncovered_count"] == len(coverage["uncovered_classes"])
    assert coverage["label_mass_median_uncovered"] < coverage["label_mass_median_covered"]


def test_chunk_bytes_reaches_the_round(tiny_digits, tiny_hyper, monkeypatch):
    """``hyper.fedprop.chunk_bytes`` bounds the SHADE bytes of a pair's message: with frames
    smaller than the bound, the corrections stream over several ``cclp/shade/3`` exchanges
    (at the default bound, one); the round's outputs are checked against the ideal
    functionality at any bound in ``tests/methods/test_feature_client.py``."""
    from securefl.crypto import shade

    monkeypatch.setattr(shade, "FRAME_BYTES", 1 << 14)
    monkeypatch.setattr(shade, "TILE_BYTES", 1 << 12)
    hyper = {**tiny_hyper, **FAST, "warmup_rounds": 0, "L": 64, "hamming_backend": "shade"}
    method, _, _ = run("fedprop", tiny_digits, {**hyper, "chunk_bytes": 1 << 15}, "real", rounds=1)
    stream = [e.step for e in method.last_cross_client.exchanges if e.step == "cclp/shade/3"]
    assert method.chunk_bytes == 1 << 15 and len(stream) > 1
