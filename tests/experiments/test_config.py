"""Experiment configurations against the real method registry and the shipped TOML files."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from securefl.errors import ConfigError
from securefl.experiments.config import DEFAULT_CONFIG, config_from_dict, load_config
from securefl.methods import METHOD_NAMES, hyper_parameters

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def test_default_config_is_the_digits_job():
    config = load_config()
    assert config.source == str(DEFAULT_CONFIG)
    assert config.dataset == "digits" and config.secure == "real"
    assert config.methods[-1] == "fedavg-labeled"
    assert {"fedprop", "protofssl", "fedanchor"} <= set(config.methods)
    assert any(name.startswith("fedsemi") for name in config.methods)
    assert config.partition_for("fedanchor")["labels_at"] == "server"
    assert "labels_at" not in config.partition_for("fedprop")


@pytest.mark.parametrize("path", sorted(EXPERIMENTS.glob("*.toml")), ids=lambda p: p.name)
def test_every_shipped_config_validates(path):
    config = load_config(path)
    assert config.name == path.stem
    for name in config.methods:
        assert set(config.hyper_for(name)) <= set(hyper_parameters(name))


def test_hyper_goes_to_the_methods_that_take_it():
    config = config_from_dict({
        "methods": ["fedsemi-mt", "fedprop"],
        "rounds": 7,
        "hyper": {"clients_per_round": 4, "consistency": "kl", "fedprop": {"L": 256}},
    })
    assert config.hyper_for("fedprop") == {"clients_per_round": 4, "L": 256}
    assert config.hyper_for("fedsemi-mt") == {
        "clients_per_round": 4, "consistency": "kl", "rounds": 7
    }


def test_overrides_replace_file_values(tmp_path):
    config = load_config(None, methods=["all"], rounds=4, seed=5, secure="both",
                         dataset="mnist", data_dir=str(tmp_path))
    assert config.methods == METHOD_NAMES
    assert (config.rounds, config.seed, config.secure) == (4, 5, "both")
    assert config.secure_modes == ("real", "plaintext")
    assert (config.dataset, config.data_dir) == ("mnist", str(tmp_path))


def test_a_shared_setting_overrides_the_files_method_tables():
    """``--set hyper.K`` reaches every method, even one whose table in the file sets K
    (the digits default's ``[hyper.fedprop] warmup_rounds = 10``); a later per-method
    setting refines it again."""
    config = load_config(None, methods=["fedprop", "fedavg-locallp"],
                         settings=["hyper.warmup_rounds=1", "hyper.L=128",
                                   "hyper.fedavg-locallp.warmup_rounds=3"])
    assert config.hyper_for("fedprop")["warmup_rounds"] == 1
    assert config.hyper_for("fedprop")["L"] == 128
    assert config.hyper_for("fedavg-locallp")["warmup_rounds"] == 3
    assert load_config(None, methods=["fedprop"]).hyper_for("fedprop")["warmup_rounds"] == 10


def test_to_dict_round_trips():
    config = load_config()
    assert replace(config_from_dict(config.to_dict()), source=config.source) == config


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"methods": ["fedprop"], "rounds": True}, "rounds=True: must be an integer"),
        ({"methods": ["fedprop", "fedprop"]}, "listed twice"),
        ({"methods": ["fedprop"], "dataset": {"name": "digits", "dir": "x"}},
         "dataset.dir: unknown key"),
        ({"methods": ["fedprop"], "partition": {"seed": 3}}, "top-level seed"),
        ({"methods": ["fedprop"], "partition": {"num_clients": 0}},
         "partition.num_clients=0: must be >= 1"),
        ({"methods": ["fedprop"], "hyper": {"rounds": 3}}, "top-level rounds"),
        ({"methods": ["fedavg-labeled"], "hyper": {"lrr": 0.1}}, "hyper.lrr=0.1: no method takes it"),
        ({"methods": ["fedprop"], "partition": {"nope": {"labels_at": "server"}}},
         "partition.nope: unknown method"),
    ],
)
def test_invalid_values_name_the_key(raw, message):
    with pytest.raises(ConfigError, match=None) as info:
        config_from_dict(raw)
    assert message in str(info.value)


def test_a_shared_key_only_other_methods_take_is_ignored():
    """``--method protofssl`` on a config whose [hyper] holds FedSemi's batch_size runs."""
    config = config_from_dict(
        {"methods": ["protofssl"], "hyper": {"batch_size": 10, "clients_per_round": 4}}
    )
    hyper = config.hyper_for("protofssl")
    assert "batch_size" not in hyper and hyper["clients_per_round"] == 4
