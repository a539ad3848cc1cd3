"""Smoke tests of ``securefl bench ot|hamming|lp|crossclient`` at tiny sizes (secagg: test_secagg)."""

from __future__ import annotations

import argparse

import pytest
from rich.progress import Progress

from securefl.bench import crossclient, hamming, lp, ot
from securefl.errors import InputError


def _args(module, **overrides) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    args = parser.parse_args([])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def test_bench_lp_record_is_verified():
    with Progress(disable=True) as progress:
        record = lp.run(_args(lp, n=300, classes=3, dim=8, separation=1.5), progress)
    assert record["verified"] and record["max_abs_score_diff"] <= 1e-6
    assert record["pseudo_label_agreement"] == 1.0 and record["pseudo_label_accuracy"] > 0.8
    assert record["dense_seconds"] > 0 and record["sparse_seconds"] > 0


def test_bench_crossclient_record_fields():
    with Progress(disable=True) as progress:
        record = crossclient.run(
            _args(crossclient, n=24, parties=3, labels_per_client=2, classes=3, dim=6, L=64, k=3),
            progress,
        )
    assert record["verified"] and record["pseudo_label_agreement"] == 1.0
    assert record["max_abs_score_diff"] == 0.0
    for field in ("seconds_real", "seconds_plaintext", "bytes_per_client"):
        assert record[field] > 0
    assert (
        record["bytes_per_client_by_phase"]["hamming"] > 0
        and record["bytes_per_client_by_phase"]["sum"] > 0
    )


def test_bench_arguments_are_checked():
    with Progress(disable=True) as progress, pytest.raises(InputError, match="n"):
        crossclient.run(_args(crossclient, n=3, parties=3), progress)
    with Progress(disable=True) as progress, pytest.raises(InputError, match="classes"):
        lp.run(_args(lp, n=100, classes=1), progress)


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
