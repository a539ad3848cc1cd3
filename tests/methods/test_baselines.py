"""FedAvg baselines and the method registry."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from securefl.errors import ConfigError, InputError
from securefl.methods import (
    BUILTIN_METHODS,
    METHOD_NAMES,
    build_method,
    hyper_parameters,
    method_class,
)
from securefl.methods.base import Method
from securefl.methods.fedavg.client import FedAvgClient
from securefl.methods.halves import local_data

from .conftest import play


def client_of(method):
    """The method's client half, configured like the method."""
    return type(method).client_half(method)


def run(name, federation, hyper, secure, rounds=2):
    method = build_method(name, secure=secure, seed=0, **hyper)
    method.setup(federation.for_training())
    return method, *play(method, federation, rounds)


WARMUP = {"fedavg-locallp": {"warmup_rounds": 1}, "fedavg-pl": {"warmup_rounds": 1}}
PSEUDO_LABELLERS = ("fedavg-locallp", "fedavg-pl")


@pytest.mark.parametrize("name", ["fedavg-labeled", "fedavg-supervised", "fedavg-locallp",
                                  "fedavg-pl", "fedavg-mt"])
def test_two_rounds_real_equals_plaintext(name, tiny_digits, tiny_hyper):
    hyper = dict(tiny_hyper, **WARMUP.get(name, {}))
    plain_method, plain, plain_acc = run(name, tiny_digits, hyper, "plaintext")
    real_method, real, real_acc = run(name, tiny_digits, hyper, "real")
    assert plain_acc == real_acc and all(0.0 <= a <= 1.0 for a in plain_acc)
    for p, r in zip(plain, real):
        assert p.pseudo_label_digest == r.pseudo_label_digest
        assert p.pseudo_label_accuracy == r.pseudo_label_accuracy
        assert r.bytes_protocol_per_client > 0 and p.bytes_protocol_per_client == 0
        assert r.bytes_model_per_client == p.bytes_model_per_client > 0
    for key, value in plain_method.state_dict()["models"].items():
        for name_, tensor in value.items():
            assert torch.equal(tensor, real_method.state_dict()["models"][key][name_]), name_
    if name in PSEUDO_LABELLERS:
        assert plain[0].pseudo_label_digest is not None
        assert 0.0 <= plain[0].pseudo_label_accuracy <= 1.0
    else:
        assert plain[0].pseudo_label_digest is None


@pytest.mark.parametrize("name", ["fedavg-pl", "fedavg-mt"])
def test_new_baselines_resume_exactly(name, tiny_digits, tiny_hyper):
    hyper = dict(tiny_hyper, **WARMUP.get(name, {}))
    straight_method, straight, straight_acc = run(name, tiny_digits, hyper, "plaintext", rounds=3)
    first, _, _ = run(name, tiny_digits, hyper, "plaintext", rounds=2)
    resumed = build_method(name, secure="plaintext", seed=0, **hyper)
    resumed.setup(tiny_digits.for_training())
    resumed.load_state_dict(first.state_dict())
    (again,), (again_acc,) = play(resumed, tiny_digits, 3, start=2)
    assert (again_acc, again.pseudo_label_digest, again.pseudo_label_accuracy) == (
        straight_acc[2], straight[2].pseudo_label_digest, straight[2].pseudo_label_accuracy)
    expected = straight_method.state_dict()
    assert set(resumed.state_dict()["models"]) == set(expected["models"])
    for key, state in resumed.state_dict()["models"].items():
        for tensor_name, tensor in state.items():
            assert torch.equal(tensor, expected["models"][key][tensor_name]), (key, tensor_name)


@pytest.mark.parametrize("name", ["fedavg-pl", "fedavg-mt"])
def test_new_baselines_learn_on_digits(name, digits):
    """Above chance (10 %) and above the labeled-only model's starting point on digits."""
    from securefl.data import partition

    federation = partition(digits, scheme="iid", num_clients=6, seed=0, labeled_fraction=0.2,
                           samples_per_client=100)
    hyper = {"clients_per_round": 3, "local_epochs": 5, "batch_size": 10, "lr": 0.1,
             "lr_decay_rounds": 0, **({"warmup_rounds": 3} if name == "fedavg-pl" else {})}
    _, _, accuracies = run(name, federation, hyper, "plaintext", rounds=4)
    assert accuracies[-1] > 0.5


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
    contract = ("fedprop", "fedprop-mt", "protofssl", "fedsemi-pi", "fedsemi-mt", "fedsemi-d",
                "fedanchor", "fedavg-labeled", "fedavg-supervised", "fedavg-locallp")
    assert set(contract) <= set(BUILTIN_METHODS)  # the names DESIGN.md's contract promises
    assert METHOD_NAMES[:len(BUILTIN_METHODS)] == BUILTIN_METHODS
    for name in METHOD_NAMES:
        cls = method_class(name)
        assert issubclass(cls, Method) and cls.name == name
    assert hyper_parameters("fedprop")["L"] == 4096
    assert hyper_parameters("fedprop")["k"] == 10
    assert hyper_parameters("fedprop")["alpha"] == 0.99


def test_registry_errors_name_the_problem():
    with pytest.raises(ConfigError, match="fedmixmatch"):
        build_method("fedmixmatch")
    with pytest.raises(InputError, match="^hyper.fedprop.learning_rate=0.1: unknown"):
        build_method("fedprop", learning_rate=0.1)
    with pytest.raises(InputError, match="secure"):
        build_method("fedavg-labeled", secure="sometimes")


def test_building_does_no_work():
    method = build_method("fedprop", seed=3, clients_per_round=2)
    assert not hasattr(method, "network") and method.clients_per_round == 2
    assert np.isclose(method.lr, 0.1)


def _images(n_per_class=4, classes=10, side=28, seed=0):
    from securefl.data import Dataset

    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(classes), n_per_class)
    x = rng.random((len(y), 1, side, side), dtype=np.float32)
    return Dataset("images28", x, y, x[:20], y[:20], classes)


AUGMENTED = ("fedavg-labeled", "fedavg-supervised", "fedavg-locallp", "fedavg-pl", "fedavg-mt",
             "fedavg-fixmatch", "fedprop", "fedprop-mt")


@pytest.mark.parametrize("name", AUGMENTED)
def test_every_fedavg_family_method_gets_fedprops_translations(name):
    """FedProp App. A.1 augments every method it compares (§5.1: localLP "otherwise
    identical"): same rule, same shifts from the same generator state."""
    from securefl.data import partition

    federation = partition(_images(), scheme="iid", num_clients=4, seed=0, labeled_fraction=0.5)
    method = build_method(name, warmup_rounds=0) if "warmup_rounds" in hyper_parameters(name) \
        else build_method(name)
    method.setup(federation)
    reference = build_method("fedprop", warmup_rounds=0)
    reference.setup(federation)
    batch = torch.rand(16, 1, 28, 28)
    data = local_data(federation, 0)
    shifted = client_of(method).augmentation(data, torch.Generator().manual_seed(1))(batch)
    expected = client_of(reference).augmentation(data, torch.Generator().manual_seed(1))(batch)
    assert torch.equal(shifted, expected) and not torch.equal(shifted, batch)
    method.max_shift = 0
    assert client_of(method).augmentation(data, torch.Generator()) is None


@pytest.mark.parametrize("name", ["fedavg-labeled", "fedavg-locallp", "fedavg-mt"])
def test_baselines_train_on_translated_batches(name):
    """Regression (issue 13): fedavg-labeled and fedavg-locallp trained on raw images.
    FedAvg+MT's consistency inputs are translated too (Tarvainen & Valpola's perturbation)."""
    from securefl.data import partition

    federation = partition(_images(), scheme="iid", num_clients=4, seed=0, labeled_fraction=0.5)
    raw = {c.x[i].tobytes() for c in federation.clients for i in range(len(c))}

    def seen_in_training(max_shift):
        extra = {"fedavg-locallp": {"warmup_rounds": 0}, "fedavg-mt": {"noise_std": 0.0}}
        method = build_method(name, clients_per_round=2, local_epochs=1, batch_size=5,
                              max_shift=max_shift, **extra.get(name, {}))
        method.setup(federation)
        inputs = []
        build = FedAvgClient.build

        def watched(self, data, vector):  # every model a client trains (student and teacher)
            model = build(self, data, vector)
            model.body.register_forward_pre_hook(
                lambda module, args: inputs.extend(args[0].numpy()) if module.training else None)
            return model

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(FedAvgClient, "build", watched)
            method.run_round(0)
        return [x.tobytes() in raw for x in inputs]

    plain = seen_in_training(0)
    assert plain and all(plain)
    augmented = seen_in_training(None)
    assert augmented and not all(augmented)


@pytest.mark.parametrize("name", ["fedavg-pl", "fedavg-mt", "fedavg-fixmatch"])
def test_hidden_labels_of_unlabeled_points_are_never_read(name, tiny_digits, tiny_hyper):
    from securefl.data import ClientData, Federation

    hyper = dict(tiny_hyper, **WARMUP.get(name, {}))
    scrambled = Federation(
        tiny_digits.name,
        [ClientData(c.x, np.where(c.labeled, c.y, (c.y + 3) % 10), c.labeled)
         for c in tiny_digits.clients],
        tiny_digits.num_classes, tiny_digits.input_shape, test=tiny_digits.test)
    a, results_a, accuracies_a = run(name, tiny_digits, hyper, "plaintext")
    b, results_b, accuracies_b = run(name, scrambled, hyper, "plaintext")
    assert accuracies_a == accuracies_b
    assert [r.pseudo_label_digest for r in results_a] == [r.pseudo_label_digest for r in results_b]
    for key, state in a.state_dict()["models"].items():
        assert all(torch.equal(t, b.state_dict()["models"][key][k]) for k, t in state.items())


def test_fedavg_mt_learns_labels_only_from_labeled_points(tiny_digits, tiny_hyper):
    """B_U enters the cross-entropy with weight 0: without the consistency term the
    unlabeled images do not matter; with it they do."""
    from securefl.data import ClientData, Federation

    rng = np.random.default_rng(0)
    noisy = Federation(
        tiny_digits.name,
        [ClientData(np.where(c.labeled[:, None, None, None], c.x,
                             rng.random(c.x.shape, dtype=np.float32)), c.y, c.labeled)
         for c in tiny_digits.clients],
        tiny_digits.num_classes, tiny_digits.input_shape, test=tiny_digits.test)

    def student(federation, weight):
        method, _, _ = run("fedavg-mt", federation, dict(tiny_hyper, consistency_weight=weight,
                                                       consistency_rampup=0), "plaintext", rounds=1)
        return method.network.state_dict()

    for weight, same in ((0.0, True), (100.0, False)):
        a, b = student(tiny_digits, weight), student(noisy, weight)
        assert all(torch.equal(a[k], b[k]) for k in a) is same


def test_fedavg_pl_pseudo_labels_are_the_networks_predictions(tiny_digits):
    method = build_method("fedavg-pl", warmup_rounds=0, entropy_weights=True)
    method.setup(tiny_digits)
    features = [np.random.default_rng(1).normal(scale=5.0, size=(7, method.network.feature_dim))
                .astype(np.float32)]
    with torch.no_grad():
        probs = torch.softmax(method.network.head(torch.from_numpy(features[0])), 1).double().numpy()
    method.threshold = float(np.median(probs.max(1)))
    pseudo, weights = client_of(method).predictions(method.network, features[0], 10)
    confident = probs.max(1) > method.threshold
    assert 0 < confident.sum() < 7
    assert np.array_equal(pseudo, np.where(confident, probs.argmax(1), -1))
    entropy = -(probs * np.log(probs)).sum(1)
    np.testing.assert_allclose(weights, 1 - entropy / np.log(10))
    method.entropy_weights = False
    _, ones = client_of(method).predictions(method.network, features[0], 10)
    assert (ones == 1).all()


@pytest.mark.parametrize("name, modes", [("fedavg-mt", ("plaintext", "plaintext")),
                                         ("fedavg-labeled", ("plaintext", "plaintext", "real"))])
def test_dropout_of_cnn13_is_seeded_by_the_method(name, modes):
    """cnn13's dropout draws from the method's RNG (student and teacher): two runs, and real
    vs plaintext, agree (an unbound dropout layer would raise)."""
    from securefl.data import partition

    federation = partition(_images(n_per_class=2, side=12), scheme="iid", num_clients=2, seed=0,
                           labeled_fraction=0.5)
    hyper = {"model": "cnn13", "clients_per_round": 2, "local_epochs": 1, "batch_size": 5,
             "lr": 0.01}
    runs = [run(name, federation, hyper, secure, rounds=1)[0] for secure in modes]
    states = [m.state_dict()["models"]["network"] for m in runs]
    for other in states[1:]:
        assert all(torch.equal(states[0][k], other[k]) for k in states[0])
