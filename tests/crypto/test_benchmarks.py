"""Smoke tests of ``securefl bench ot`` and ``securefl bench hamming`` at tiny sizes."""

from __future__ import annotations

import argparse

import pytest
from rich.progress import Progress

from securefl.bench import hamming, ot


def _args(module, **overrides) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    args = parser.parse_args([])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def test_bench_ot_record_is_verified():
    with Progress(disable=True) as progress:
        record = ot.run(_args(ot, m=3 * 4096 + 17, chunk=4096), progress)
    assert record["verified"]
    assert record["ots_per_second"] > 0 and record["seconds_lower_bound"] > 0
    assert 16 <= record["bytes_per_ot"] < 20


@pytest.mark.parametrize("parties, workers", [(2, 1), (3, 2)])
def test_bench_hamming_bytes_match_the_cost_model(parties, workers):
    with Progress(disable=True) as progress:
        record = hamming.run(_args(hamming, n=61, L=67, parties=parties, workers=workers), progress)
    assert record["verified"] and record["workers"] == workers
    assert record["ots"] == hamming.total_ots(record["party_sizes"], 67)
    # measured bytes = cost model + per pair 128 base OTs (~8.3 kB) + frame headers and MACs
    pairs = parties * (parties - 1) // 2
    assert 8_000 * pairs < record["bytes_total"] - record["bytes_cost_model"] < 12_000 * pairs
    assert record["seconds_over_lower_bound_per_worker"] == pytest.approx(
        record["seconds_over_lower_bound"] * workers
    )
