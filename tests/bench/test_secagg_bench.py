"""``securefl bench secagg --backend secagg|he``: verified records with per-party costs,
and every bad flag refused before any work, naming the flag."""

from __future__ import annotations

import argparse

import pytest

from securefl.bench import secagg as bench
from securefl.errors import InputError


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize("backend", ["secagg", "he"])
def test_both_backends_give_verified_records_with_per_party_costs(backend):
    record = bench.run(
        _args("--backend", backend, "--clients", "12", "--dim", "5000", "--dropout", "0.25"), None
    )
    assert record["verified"] and record["backend"] == backend
    assert record["survived"] == 9 and record["dropped"] == 3
    for field in (
        "clients",
        "dim",
        "dropout",
        "threshold",
        "seconds",
        "plaintext_seconds",
        "bytes_total",
        "bytes_max_client",
        "server_cpu_seconds",
        "client_cpu_seconds_mean",
        "client_cpu_seconds_max",
        "bytes_per_client",
        "bytes_per_client_median",
        "bytes_received_per_client",
    ):
        assert record[field] is not None
    assert record["bytes_max_client"] >= record["bytes_per_client_median"] > 0
    assert len(record["load_average_before"]) == 3
    if backend == "he":  # the dealer sends a sealed key to each of the 11 others
        assert record["dealer_bytes_sent"] == record["bytes_max_client"]
        assert record["key_distribution_bytes"] > 2 * 11 * 60_000
        assert record["dealer"] == 0 and record["decryptor_bytes_received"] > 0


def test_he_finishes_where_pairwise_masking_cannot():
    args = (
        "--clients",
        "9",
        "--dim",
        "100",
        "--dropout",
        "0.34",
        "--drop-round",
        "unmask",
        "--threshold",
        "7",
    )
    record = bench.run(_args("--backend", "he", *args), None)
    assert record["verified"] and record["survived"] == 9
    with pytest.raises(InputError, match="--dropout"):
        bench.run(_args("--backend", "secagg", *args), None)


@pytest.mark.parametrize(
    "argv, flag",
    [
        (("--clients", "0"), "--clients"),
        (("--backend", "he", "--clients", "5000"), "--clients"),
        (("--dim", "0"), "--dim"),
        (("--dropout", "1.0"), "--dropout"),
        (("--modulus-bits", "65"), "--modulus-bits"),
        (("--input-bits", "40"), "--input-bits"),
        (("--threshold", "101"), "--threshold"),
        (("--neighbours", "3"), "--neighbours"),
        (("--backend", "he", "--neighbours", "4"), "--neighbours"),
        (("--backend", "paillier"), "--backend"),
        (("--clients", "10", "--dropout", "0.5", "--threshold", "6"), "--dropout"),
    ],
)
def test_bad_flags_are_named_before_any_work(argv, flag):
    with pytest.raises(InputError) as caught:
        bench.validate(_args(*argv))
    assert caught.value.parameter == flag
