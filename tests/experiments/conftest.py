"""A small, real, deterministic method for runner tests, and fixtures around it.

``SoftmaxSelfTraining`` is federated softmax regression with self-training: each round
it samples clients with its own seeded generator, pseudo-labels their unlabeled points
with the current model, runs a few local gradient steps, averages and adds a little
noise from its crypto seed (as DP noise would be).  It is cheap but
genuinely stateful (weights + RNG), so an interrupted-and-resumed run reproduces an
uninterrupted one only if the runner restores state correctly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from securefl.data import load_dataset, partition
from securefl.errors import ConfigError
from securefl.methods.base import Method, RoundResult
from securefl.methods.halves import label_digest
from securefl.methods.hyper import Hyper, flag, hp, integer, number

FAKE_NAMES = ("softmax-st", "softmax-sup")


@dataclass(frozen=True)
class SoftmaxHyper(Hyper):
    lr: float = hp(0.5, number())
    clients_per_round: int = hp(3, integer())
    local_steps: int = hp(5, integer())
    pseudo_labels: bool = hp(True, flag)


class SoftmaxSelfTraining(Method):
    name = "softmax-st"
    hyper = SoftmaxHyper
    uses_pseudo_labels = True

    def setup(self, federation: Any) -> None:
        self.federation = federation
        self.rng = np.random.default_rng(self.seed)
        dim = int(np.prod(federation.input_shape))
        self.weights = self.rng.normal(0.0, 0.01, size=(dim, federation.num_classes))

    def _features(self, x: np.ndarray) -> np.ndarray:
        return x.reshape(len(x), -1)

    def _local(self, weights: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        onehot = np.eye(self.federation.num_classes)[y]
        for _ in range(self.local_steps):
            batch = self.rng.choice(len(x), size=min(32, len(x)), replace=False)
            logits = x[batch] @ weights
            probs = np.exp(logits - logits.max(1, keepdims=True))
            probs /= probs.sum(1, keepdims=True)
            weights = weights - self.lr * x[batch].T @ (probs - onehot[batch]) / len(batch)
        return weights

    def run_round(self, round_index: int) -> RoundResult:
        started = time.perf_counter()
        fed = self.federation
        chosen = self.rng.choice(fed.num_clients, size=self.clients_per_round, replace=False)
        updates, pseudo, correct, total = [], [], 0, 0
        for k in sorted(chosen):
            client = fed.clients[k]
            x = self._features(client.x)
            y = client.observed_labels()
            if self.pseudo_labels:
                guess = np.argmax(x @ self.weights, axis=1)
                unlabeled = y < 0
                pseudo.append(guess[unlabeled])
                correct += int((guess[unlabeled] == client.y[unlabeled]).sum())
                total += int(unlabeled.sum())
                y = np.where(unlabeled, guess, y)
            else:
                x, y = x[y >= 0], y[y >= 0]
            updates.append(self._local(self.weights.copy(), x, y))
        self.weights = np.mean(updates, axis=0)
        # a secret that shapes the output, as DP noise does: from the crypto seed
        secret = np.random.default_rng(self.crypto_seed_for("noise", round_index))
        self.weights += 0.05 * secret.standard_normal(self.weights.shape)
        seconds = time.perf_counter() - started
        return RoundResult(
            round=round_index,
            seconds=seconds,
            train_seconds=0.9 * seconds,
            crypto_seconds=0.05 * seconds if self.secure == "real" else 0.0,
            bytes_model_per_client=2.0 * self.weights.size * 8,
            bytes_protocol_per_client=1000.0 if self.secure == "real" else 0.0,
            pseudo_label_accuracy=correct / total if self.pseudo_labels and total else None,
            pseudo_label_digest=label_digest(pseudo) if self.pseudo_labels else None,
        )

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.argmax(self._features(x) @ self.weights, axis=1)

    def state_dict(self) -> dict[str, Any]:
        # Live references, as torch's Module.state_dict() returns: the runner must snapshot.
        return {"weights": self.weights, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.weights = state["weights"].copy()
        self.rng.bit_generator.state = state["rng"]


def fake_factory(name: str, *, secure: str, seed: int, crypto_seed: int | None = None,
                 sum_backend: str = "secagg", hyper: dict[str, Any], device: str = "cpu") -> Method:
    """Method factory over the two fake methods (supervised = no pseudo-labels)."""
    if name not in FAKE_NAMES:
        raise ConfigError(f"method={name!r}: unknown")
    try:
        return SoftmaxSelfTraining(
            secure=secure, seed=seed, crypto_seed=crypto_seed, sum_backend=sum_backend,
            device=device, pseudo_labels=name == "softmax-st", **hyper
        )
    except TypeError as exc:
        raise ConfigError(f"hyper[{name}]={hyper!r}: {exc}") from None


class FixedDraws:
    """Stands in for ``secrets`` in the runner: every crypto seed it draws is ``value``."""

    def __init__(self, value: int) -> None:
        self.value = value

    def randbits(self, bits: int) -> int:
        return self.value % 2**bits

    def randbelow(self, bound: int) -> int:
        return self.value % bound


@pytest.fixture
def os_draws(monkeypatch):
    """Make the runner's OS draws of crypto seeds predictable; change ``.value`` to make
    the next draw differ (a resumed run must not draw again)."""
    import securefl.experiments.runner as runner

    draws = FixedDraws(2**100 + 12345)
    monkeypatch.setattr(runner, "secrets", draws)
    return draws


@pytest.fixture(scope="session")
def digits_federation():
    return partition(load_dataset("digits"), scheme="iid", num_clients=6, seed=0,
                     labeled_fraction=0.1)


@pytest.fixture
def fake_registry(monkeypatch):
    """Make the CLI see the fake methods instead of the real registry."""
    import securefl.experiments.cli as run_cli
    import securefl.experiments.config as config

    monkeypatch.setattr(config, "method_names", lambda: FAKE_NAMES)
    monkeypatch.setattr(
        config, "method_parameters",
        lambda name: {"lr", "clients_per_round", "local_steps"},
    )
    monkeypatch.setattr(config, "method_hyper",
                        lambda name, hyper: SoftmaxHyper(**hyper))
    monkeypatch.setattr(run_cli, "build_job_method", fake_factory)
    return FAKE_NAMES


FAKE_CONFIG = """
name = "tiny"
methods = ["softmax-st", "softmax-sup"]
secure = "real"
rounds = 3
seed = 1

[dataset]
name = "digits"

[partition]
scheme = "iid"
num_clients = 6
labeled_fraction = 0.1

[hyper]
clients_per_round = 3

[hyper.softmax-sup]
local_steps = 4
"""


@pytest.fixture
def fake_config(tmp_path, fake_registry):
    path = tmp_path / "tiny.toml"
    path.write_text(FAKE_CONFIG)
    return path

