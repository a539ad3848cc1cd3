"""Where a run's secrets come from: the OS CSPRNG in real mode (kept only in the
checkpoint), one published crypto seed for ``--secure both``, one derived from ``--seed``
in plaintext; ``--aggregation`` picks the secure-sum backend (issue 11, findings 8, 10)."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from securefl.cli import main
from securefl.errors import ConfigError
from securefl.experiments.config import load_config
from securefl.experiments.runner import (
    CHECKPOINT_FILE,
    Runner,
    load_federations,
    load_state,
    new_state,
)
from securefl.methods.base import plaintext_crypto_seed

from .conftest import fake_factory


def _run(config, federation, out, factory=fake_factory):
    runner = Runner(
        state=new_state(config, {"command": "test"}),
        federations={name: federation for name in config.methods},
        out=out,
        factory=factory,
    )
    return runner.run()


def _accuracies(document, secure):
    return [s["accuracy_by_round"] for s in document["methods"] if s["secure"] == secure]


def test_real_runs_with_one_seed_draw_different_secrets_on_the_same_split(
    tmp_path, fake_config, digits_federation
):
    config = load_config(fake_config, secure="real", rounds=3)
    first = _run(config, digits_federation, tmp_path / "a")
    second = _run(config, digits_federation, tmp_path / "b")
    assert _accuracies(first, "real") != _accuracies(second, "real")  # softmax-sup's noise
    assert first["crypto_seed"] is None and second["crypto_seed"] is None
    for job in first["randomness"]:
        assert "OS CSPRNG" in job["randomness"] and "checkpoint.pkl" in job["randomness"]
    split_a, split_b = (load_federations(config)["softmax-sup"] for _ in range(2))
    assert all(np.array_equal(a.y, b.y) and np.array_equal(a.labeled, b.labeled)
               for a, b in zip(split_a.clients, split_b.clients))


def test_the_real_crypto_seed_lives_only_in_the_checkpoint_until_the_run_completes(
    tmp_path, fake_config, digits_federation, os_draws
):
    config = load_config(fake_config, secure="real", rounds=3)
    out = tmp_path / "run"
    seen = []

    def stop_after_first_round(job, round_index):
        seen.append(load_state(out).crypto_seed)
        raise KeyboardInterrupt

    runner = Runner(state=new_state(config, {"command": "test"}),
                    federations={n: digits_federation for n in config.methods},
                    out=out, factory=fake_factory, after_round=stop_after_first_round)
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    secret = os_draws.value
    assert seen == [secret]
    assert str(secret) not in (out / "results.json").read_text()
    state = load_state(out)
    Runner(state=state, federations={n: digits_federation for n in config.methods}, out=out,
           factory=fake_factory).run()
    final = pickle.loads((out / CHECKPOINT_FILE).read_bytes())
    assert final["status"] == "complete" and final["crypto_seed"] is None
    assert str(secret) not in (out / "results.json").read_text()


def test_secure_both_shares_one_published_crypto_seed(tmp_path, fake_config, digits_federation):
    config = load_config(fake_config, secure="both", rounds=3)
    document = _run(config, digits_federation, tmp_path / "run")
    assert isinstance(document["crypto_seed"], int) and 0 <= document["crypto_seed"] < 2**63
    assert _accuracies(document, "real") == _accuracies(document, "plaintext")
    assert all(row["max_abs_accuracy_difference"] == 0.0 for row in document["comparison"])
    jobs = {(j["method"], j["secure"]): j["randomness"] for j in document["randomness"]}
    assert len(jobs) == 4 and all("shared by the real and plaintext" in r for r in jobs.values())
    again = _run(config, digits_federation, tmp_path / "again")
    assert again["crypto_seed"] != document["crypto_seed"]


def test_plaintext_is_reproducible_from_the_seed_and_a_configured_crypto_seed_is_published(
    tmp_path, fake_config, digits_federation
):
    config = load_config(fake_config, secure="plaintext", rounds=2)
    first = _run(config, digits_federation, tmp_path / "a")
    second = _run(config, digits_federation, tmp_path / "b")
    assert first["crypto_seed"] == second["crypto_seed"] == plaintext_crypto_seed(1)
    assert _accuracies(first, "plaintext") == _accuracies(second, "plaintext")

    text = fake_config.read_text().replace('secure = "real"', 'secure = "real"\ncrypto_seed = 77')
    fixed = tmp_path / "fixed.toml"
    fixed.write_text(text)
    config = load_config(fixed, rounds=2)
    one = _run(config, digits_federation, tmp_path / "c")
    two = _run(config, digits_federation, tmp_path / "d")
    assert one["crypto_seed"] == 77 and _accuracies(one, "real") == _accuracies(two, "real")
    assert "configured crypto_seed" in one["randomness"][0]["randomness"]


def test_aggregation_reaches_every_method(tmp_path, fake_config, digits_federation):
    built = []

    def recording(name, **kwargs):
        built.append(kwargs["sum_backend"])
        return fake_factory(name, **kwargs)

    config = load_config(fake_config, aggregation="he", rounds=1)
    assert config.aggregation == "he" and config.to_dict()["aggregation"] == "he"
    _run(config, digits_federation, tmp_path / "run", factory=recording)
    assert built == ["he", "he"]


def test_aggregation_and_crypto_seed_through_the_cli(tmp_path, fake_config, capsys):
    out = tmp_path / "run"
    assert main(["run", "--config", str(fake_config), "--out", str(out), "--rounds", "1",
                 "--aggregation", "he"]) == 0
    document = json.loads((out / "results.json").read_text())
    assert document["config"]["aggregation"] == "he" and "--aggregation he" in document["command"]
    assert main(["run", "--config", str(fake_config), "--out", str(tmp_path / "bad"),
                 "--aggregation", "ckks"]) == 2
    assert "aggregation='ckks'" in capsys.readouterr().err
    assert main(["run", "--resume", str(out), "--aggregation", "secagg"]) == 2
    assert "--aggregation cannot change" in capsys.readouterr().err


@pytest.mark.parametrize("value, message", [
    (-1, "crypto_seed=-1: must be >= 0"),
    ('"abc"', "crypto_seed='abc': must be an integer"),
    (2**63 - 1, None),
])
def test_crypto_seed_key_is_checked(tmp_path, fake_registry, value, message):
    from .conftest import FAKE_CONFIG

    path = tmp_path / "c.toml"
    path.write_text(FAKE_CONFIG.replace('secure = "real"', f'secure = "real"\ncrypto_seed = {value}'))
    if message is None:
        assert load_config(path).crypto_seed == 2**63 - 1
        return
    with pytest.raises(ConfigError, match=message):
        load_config(path)
