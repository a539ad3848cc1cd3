"""Smoke tests of ``securefl bench ot|hamming|lp|crossclient`` at tiny sizes (secagg: test_secagg)."""

from __future__ import annotations

import argparse
import os

import pytest
from rich.progress import Progress

from securefl.bench import crossclient, hamming, lp, ot
from securefl.crypto import aesni, ghash
from securefl.crypto.hamming import arithmetic
from securefl.errors import InputError
from securefl.protocols.crossclient.client_steps import (
    ADVERTISE,
    CODES,
    COLUMNS,
    SHADE,
    SHARES,
    SUM,
)
from securefl.runtime.secure_sum_steps import STEPS as SECAGG_STEPS


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
    assert record["bytes_sent_per_client"] > 0 and record["bytes_received_per_client"] > 0
    # it times the round a deployment runs: the server's steps, the clients' step table
    assert record["steps_real"] == [ADVERTISE, SHARES, CODES, *SHADE, COLUMNS, SUM, *SECAGG_STEPS]
    projected = record["seconds_at_bandwidth"]
    assert projected["1Gbit/s"] == pytest.approx(
        record["cpu_seconds_real"] + 8 * record["link_bytes_max_client"] / 1e9
    )
    assert record["seconds_at_100Mbit/s"] == projected["100Mbit/s"]
    assert record["hamming_backend"] == "shade"


@pytest.mark.parametrize(
    "overrides, flag",
    [
        ({"L": -5}, "--L"),
        ({"L": 0}, "--L"),
        ({"L": 1 << 16}, "--L"),
        ({"parties": 1}, "--parties"),
        ({"n": 2, "parties": 3}, "--n"),
        ({"workers": 0}, "--workers"),
        ({"workers": 2}, "--workers"),
        ({"seed": -1}, "--seed"),
        ({"backend": "lwe", "n": 60_000}, "--n"),
    ],
)
def test_bench_hamming_validate_names_the_flag(overrides, flag):
    with pytest.raises(InputError) as info:
        hamming.validate(_args(hamming, **overrides))
    assert info.value.parameter == flag


@pytest.mark.parametrize(
    "overrides, flag",
    [
        ({"parties": 0}, "--parties"),
        ({"n": 3, "parties": 3}, "--n"),
        ({"L": 0}, "--L"),
        ({"k": 0}, "--k"),
        ({"alpha": 1.0}, "--alpha"),
        ({"classes": 1}, "--classes"),
        ({"hamming_backend": "lwe", "n": 100_000, "parties": 2}, "--n"),
    ],
)
def test_bench_crossclient_validate_names_the_flag(overrides, flag):
    with pytest.raises(InputError) as info:
        crossclient.validate(_args(crossclient, **overrides))
    assert info.value.parameter == flag


@pytest.mark.parametrize(
    "overrides, flag",
    [
        ({"backend": "rlwe", "n": 60_000}, "--n"),
        ({"backend": "shade", "device": "cuda"}, "--device"),
        ({"backend": "rlwe", "device": "tpu"}, "--device"),
    ],
)
def test_bench_hamming_ring_and_device_flags_are_checked(overrides, flag):
    with pytest.raises(InputError) as info:
        hamming.validate(_args(hamming, **overrides))
    assert info.value.parameter == flag


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")
def test_bench_hamming_refuses_cuda_without_a_gpu():
    with pytest.raises(InputError, match="no CUDA device"):
        hamming.validate(_args(hamming, backend="rlwe", device="cuda"))


@pytest.mark.parametrize("backend", ["lwe", "rlwe"])
def test_bench_hamming_lwe_record_fields(backend):
    with Progress(disable=True) as progress:
        record = hamming.run(_args(hamming, n=7, L=33, parties=3, backend=backend, workers=1), progress)
    assert record["verified"] and record["backend"] == backend and record["ots"] == 0
    assert record["device"] == "cpu" and record["shade_expansion"] is None
    assert 0 < record["fixed_seconds"] and 0 < record["per_pair_seconds"]
    assert record["fixed_seconds"] + record["per_pair_seconds"] <= record["cpu_seconds"] * 1.05
    assert set(record["cpu_seconds_by_party"]) == {"-1", "0", "1", "2"}
    assert record["cpu_seconds"] >= sum(record["cpu_seconds_by_party"].values()) * 0.9
    # every message counted once at its origin: the cost model plus headers, tags and keys
    assert 0 < record["bytes_clients_sent"] - record["bytes_cost_model"] < 10_000
    assert record["bytes_total"] > 1.9 * record["bytes_cost_model"]  # broadcasts relayed
    for label, bits in (("100Mbit/s", 1e8), ("1Gbit/s", 1e9), ("10Gbit/s", 1e10)):
        assert record["seconds_at_bandwidth"][label] == pytest.approx(
            record["cpu_seconds"] + 8 * record["link_bytes_max_party"] / bits
        )
    assert set(record["bytes_by_message"]) >= {"C", "H", "D", "share", "own", "relay/C", "relay/H"}
    # the floor: this session's products at this machine's GEMM and FFT rates, below the run
    parts = record["lower_bound_parts"]
    assert (parts["gemm_multiply_adds"], parts["ffts"]) == arithmetic(backend, record["party_sizes"], 33)
    assert parts["gemm_gflops"] > 0 and parts["fft_seconds"] > 0
    assert record["seconds_lower_bound"] == pytest.approx(
        2 * parts["gemm_multiply_adds"] / (parts["gemm_gflops"] * 1e9) + parts["ffts"] * parts["fft_seconds"])
    assert 0 < record["seconds_lower_bound"] < record["cpu_seconds"]
    assert record["seconds_over_lower_bound"] == pytest.approx(record["seconds"] / record["seconds_lower_bound"])


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


def test_bench_hamming_workers_default_to_the_cores_for_lwe_and_to_one_for_shade():
    args = _args(hamming)
    hamming.validate(args)
    assert args.workers == 1
    args = _args(hamming, backend="lwe", n=60)
    hamming.validate(args)
    assert args.workers == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("parties, workers", [(2, 1), (3, 1)])
def test_bench_hamming_bytes_match_the_cost_model(parties, workers):
    with Progress(disable=True) as progress:
        record = hamming.run(_args(hamming, n=61, L=67, parties=parties, workers=workers), progress)
    assert record["verified"] and record["workers"] == workers
    assert record["ots"] == hamming.total_ots(record["party_sizes"], 67)
    assert record["shade_expansion"] == ("aes-ni fused" if aesni.available() else "openssl tiles")
    assert record["ghash"] == ("vpclmulqdq" if ghash.available() else "openssl")
    # measured bytes = cost model + per pair 128 base OTs (~8.3 kB) + frame headers and MACs
    pairs = parties * (parties - 1) // 2
    assert 8_000 * pairs < record["bytes_total"] - record["bytes_cost_model"] < 12_000 * pairs
    assert record["seconds_over_lower_bound_per_worker"] == pytest.approx(
        record["seconds_over_lower_bound"] * workers
    )
    assert record["lower_bound_parts"]["aes_bytes"] == record["prg_bytes"]
    assert record["seconds_lower_bound"] == pytest.approx(record["prg_bytes"] / (record["prg_gbps"] * 1e9))
