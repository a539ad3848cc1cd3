"""No label a method must not see can change what it learns or which round is selected.

Three kinds of labels are hidden from training: the test labels, the validation labels,
and the true labels of the clients' unlabeled points (kept in ``ClientData.y`` only to
report pseudo-label accuracy).  Each test replaces hidden labels by other classes
(``(y + 1) mod C``, so every one changes) and checks that training is bit-identical:
same pseudo-labels (SHA-256 digests) and same predictions on every held-out image, round
by round.  A method that read a hidden label anywhere on its training path — directly,
through a pseudo-label filter, through a "best round" it kept itself — would see
different numbers and fail.  The runner-level tests check the same for selection: the
selected round does not move when the test labels change.

Methods never hold the held-out sets at all (:meth:`Federation.for_training`), which
``test_methods_are_set_up_without_held_out_data`` checks on the runner's path.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch  # noqa: F401  (imported first, so tests/conftest.py runs torch on one thread)

from securefl.data import ClientData, LabeledSet, load_dataset, partition
from securefl.experiments.config import load_config
from securefl.experiments.runner import Runner, new_state
from securefl.methods import METHOD_NAMES, build_method, hyper_parameters

from .conftest import SoftmaxSelfTraining, fake_factory

ROUNDS = 2
FAST = {
    "clients_per_round": 3, "local_epochs": 1, "batch_size": 8, "lr": 0.05, "L": 64,
    "warmup_rounds": 1, "pretrain_epochs": 1, "server_batch_size": 20, "rounds": 5,
    "n_unlabeled": 10, "helpers": 2, "confidence": 0.3, "helper_interval": 1,
}
"""Tiny settings, each passed to the methods that take it."""

USES_EVERY_LABEL = {"fedavg-supervised"}
"""The upper bound trains on all client labels by definition."""


def shifted(labels: np.ndarray, classes: int) -> np.ndarray:
    return (labels + 1) % classes


def relabel(federation, *, test=False, validation=False, unlabeled=False):
    """A copy of ``federation`` with the chosen hidden labels moved to the next class."""
    classes = federation.num_classes
    changes = {}
    if test:
        changes["test"] = LabeledSet(federation.test.x, shifted(federation.test.y, classes))
    if validation:
        held = federation.validation
        changes["validation"] = LabeledSet(held.x, shifted(held.y, classes))
    if unlabeled:
        changes["clients"] = [
            ClientData(c.x, np.where(c.labeled, c.y, shifted(c.y, classes)), c.labeled)
            for c in federation.clients
        ]
    return replace(federation, **changes)


@pytest.fixture(scope="module")
def federations():
    digits = load_dataset("digits")
    options = dict(scheme="iid", num_clients=4, seed=3, labeled_fraction=0.2,
                   samples_per_client=50, validation_fraction=0.1)
    return {
        "clients": partition(digits, **options),
        "server": partition(digits, **options, labels_at="server", server_labels=40),
    }


def trajectory(name, federation, held_out, **options):
    """Per round: the pseudo-label digest and the predictions on every held-out image
    (``options``: extra hyper-parameters)."""
    accepted = hyper_parameters(name)
    method = build_method(name, secure="plaintext", seed=3,
                          **{k: v for k, v in FAST.items() if k in accepted}, **options)
    method.setup(federation.for_training())
    images = np.concatenate([held_out.test.x, held_out.validation.x])
    rounds = []
    for r in range(ROUNDS):
        result = method.run_round(r)
        rounds.append((result.pseudo_label_digest, method.predict(images).tolist()))
    return rounds


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_hidden_labels_do_not_change_training(name, federations):
    federation = federations["server" if name == "fedanchor" else "clients"]
    assert federation.validation is not None and federation.clients[0].num_labeled < 50
    hidden = relabel(federation, test=True, validation=True, unlabeled=True)
    reference = trajectory(name, federation, federation)
    changed = trajectory(name, hidden, federation)
    if name in USES_EVERY_LABEL:
        assert changed != reference  # the check sees a method that reads hidden labels
    else:
        assert changed == reference


def test_hidden_labels_do_not_reach_fedprops_label_mass_options(federations):
    """The label-mass option (gating and weighting pseudo-labels) reads only the clients'
    own rows of Z: hidden labels change nothing, although the option changes training."""
    federation = federations["clients"]
    hidden = relabel(federation, test=True, validation=True, unlabeled=True)
    options = {"min_label_mass": 5.0, "mass_weighting": True}
    reference = trajectory("fedprop", federation, federation, **options)
    assert trajectory("fedprop", hidden, federation, **options) == reference
    assert trajectory("fedprop", federation, federation) != reference


def _runner(config, federation, out, factory=fake_factory):
    return Runner(state=new_state(config, {}), out=out, factory=factory,
                  federations={name: federation for name in config.methods})


def _held_out_federation():
    return partition(load_dataset("digits"), scheme="iid", num_clients=6, seed=0,
                     labeled_fraction=0.1, validation_fraction=0.2)


def test_methods_are_set_up_without_held_out_data(tmp_path, fake_config):
    seen = []

    class Spy(SoftmaxSelfTraining):
        def setup(self, federation):
            seen.append((federation.test, federation.validation))
            super().setup(federation)

    def factory(name, *, secure, seed, crypto_seed=None, sum_backend="secagg", hyper, device="cpu"):
        return Spy(secure=secure, seed=seed, crypto_seed=crypto_seed, sum_backend=sum_backend,
                   device=device, **hyper)

    config = load_config(fake_config, methods=["softmax-st"], rounds=1)
    federation = _held_out_federation()
    _runner(config, federation, tmp_path / "run", factory).run()
    assert seen == [(None, None)]
    assert federation.test is not None and federation.validation is not None


def _series(document, key):
    return [s[key] for s in document["methods"]]


def test_test_labels_cannot_move_the_selected_round(tmp_path, fake_config):
    config = load_config(fake_config, rounds=5, settings=["crypto_seed=11"])
    federation = _held_out_federation()
    reference = _runner(config, federation, tmp_path / "ref").run()
    other = _runner(config, relabel(federation, test=True), tmp_path / "test").run()
    for key in ("validation_accuracy_by_round", "selected_round",
                "selected_validation_accuracy", "pseudo_label_digest_by_round"):
        assert _series(other, key) == _series(reference, key), key
    assert _series(other, "accuracy_by_round") != _series(reference, "accuracy_by_round")
    assert [s["selected_by"] for s in reference["methods"]] == ["validation"] * 2


def test_validation_labels_do_not_reach_training(tmp_path, fake_config):
    config = load_config(fake_config, rounds=3, settings=["crypto_seed=11"])
    federation = _held_out_federation()
    reference = _runner(config, federation, tmp_path / "ref").run()
    other = _runner(config, relabel(federation, validation=True), tmp_path / "val").run()
    for key in ("accuracy_by_round", "pseudo_label_digest_by_round"):
        assert _series(other, key) == _series(reference, key), key
    assert (_series(other, "validation_accuracy_by_round")
            != _series(reference, "validation_accuracy_by_round"))
