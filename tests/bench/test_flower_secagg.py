"""Smoke test of ``securefl bench flower-secagg`` at a tiny size (both sums verified)."""

from __future__ import annotations

import argparse

import pytest
from rich.progress import Progress

from securefl.bench import flower_secagg
from securefl.errors import InputError

pytest.importorskip("flwr")


def _args(**overrides) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    flower_secagg.add_arguments(parser)
    args = parser.parse_args([])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def test_both_protocols_sum_the_same_survivors():
    with Progress(disable=True) as progress:
        record = flower_secagg.run(_args(clients=6, dim=40, dropout=0.34), progress)
    assert record["verified"] and record["dropped"] == 2 and record["threshold"] == 4
    for side in ("securefl", "flower"):
        assert record[side]["verified"] and record[side]["bytes_total"] > 0
        assert record[side]["server_cpu_seconds"] > 0
    assert record["flower"]["model"]["terms"]["key_reconstructions"] == 2
    assert record["flower"]["model_over_measured"] > 0


def test_large_workloads_use_the_component_model():
    with Progress(disable=True) as progress:
        record = flower_secagg.run(_args(clients=5, dim=10, flower_max_clients=4), progress)
    assert record["flower"]["flower_extrapolated"] and "bytes_total" not in record["flower"]
    assert record["server_cpu_ratio"] > 0


@pytest.mark.parametrize("overrides, name", [
    ({"clients": 2}, "clients"), ({"dim": 0}, "dim"), ({"dropout": 1.0}, "dropout"),
    ({"clients": 6, "threshold": 10}, "threshold"), ({"clients": 6, "dropout": 0.5}, "dropout"),
])
def test_bad_options_are_refused_before_any_work(overrides, name):
    with pytest.raises(InputError, match=name):
        flower_secagg.validate(_args(**overrides))
