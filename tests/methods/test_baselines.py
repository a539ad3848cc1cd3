"""FedAvg baselines and the method registry."""

from __future__ import annotations

import numpy as np
import pytest

from securefl.errors import ConfigError, InputError
from securefl.methods import METHOD_NAMES, build_method, hyper_parameters, method_class
from securefl.methods.base import Method

from .conftest import play


def run(name, federation, hyper, secure, rounds=2):
    method = build_method(name, secure=secure, seed=0, **hyper)
    method.setup(federation.for_training())
    return method, *play(method, federation, rounds)


@pytest.mark.parametrize("name", ["fedavg-labeled", "fedavg-supervised", "fedavg-locallp"])
def test_two_rounds_real_equals_plaintext(name, tiny_digits, tiny_hyper):
    hyper = dict(tiny_hyper, **({"warmup_rounds": 1} if name == "fedavg-locallp" else {}))
    _, plain, plain_acc = run(name, tiny_digits, hyper, "plaintext")
    _, real, real_acc = run(name, tiny_digits, hyper, "real")
    assert plain_acc == real_acc and all(0.0 <= a <= 1.0 for a in plain_acc)
    for p, r in zip(plain, real):
        assert p.pseudo_label_digest == r.pseudo_label_digest
        assert r.bytes_protocol_per_client > 0 and p.bytes_protocol_per_client == 0
        assert r.bytes_model_per_client == p.bytes_model_per_client > 0
    if name == "fedavg-locallp":
        assert plain[0].pseudo_label_digest is not None
        assert 0.0 <= plain[0].pseudo_label_accuracy <= 1.0
    else:
        assert plain[0].pseudo_label_digest is None


def test_labeled_only_samples_label_holders(digits, tiny_hyper):
    from securefl.data import partition

    federation = partition(digits, scheme="iid", num_clients=6, seed=0, labeled_fraction=0.2,
                           labeled_clients=2, samples_per_client=30)
    method = build_method("fedavg-labeled", **tiny_hyper)
    method.setup(federation)
    for _ in range(5):
        assert set(method._sample()) <= set(federation.labeled_clients)


def test_supervised_upper_bound_beats_labeled_only(tiny_digits, tiny_hyper):
    hyper = dict(tiny_hyper, local_epochs=3)
    _, _, labeled = run("fedavg-labeled", tiny_digits, hyper, "plaintext", rounds=4)
    _, _, supervised = run("fedavg-supervised", tiny_digits, hyper, "plaintext", rounds=4)
    assert supervised[-1] > labeled[-1]


def test_cosine_learning_rate():
    method = build_method("fedavg-labeled", lr=0.2, lr_decay_rounds=100)
    assert method.learning_rate(0) == pytest.approx(0.2)
    assert method.learning_rate(50) == pytest.approx(0.1)
    assert method.learning_rate(100) == pytest.approx(0.0)
    assert build_method("fedavg-labeled", lr=0.2, lr_decay_rounds=0).learning_rate(70) == 0.2


def test_registry_names_and_classes():
    assert METHOD_NAMES == ("fedprop", "fedprop-mt", "protofssl", "fedsemi-pi", "fedsemi-mt",
                            "fedsemi-d", "fedanchor", "fedavg-labeled", "fedavg-supervised",
                            "fedavg-locallp")
    for name in ("fedprop", "fedprop-mt", "fedavg-labeled", "fedavg-supervised",
                 "fedavg-locallp"):
        cls = method_class(name)
        assert issubclass(cls, Method) and cls.name == name
    assert hyper_parameters("fedprop")["L"] == 4096
    assert hyper_parameters("fedprop")["k"] == 10
    assert hyper_parameters("fedprop")["alpha"] == 0.99


def test_registry_errors_name_the_problem():
    with pytest.raises(ConfigError, match="fedmatch"):
        build_method("fedmatch")
    with pytest.raises(ConfigError, match="learning_rate"):
        build_method("fedprop", learning_rate=0.1)
    with pytest.raises(InputError, match="secure"):
        build_method("fedavg-labeled", secure="sometimes")


def test_building_does_no_work():
    method = build_method("fedprop", seed=3, clients_per_round=2)
    assert not hasattr(method, "network") and method.clients_per_round == 2
    assert np.isclose(method.lr, 0.1)
