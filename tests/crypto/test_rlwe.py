"""Ring-LWE Hamming backend and the exact device products under it: polynomial products against
a Python-int reference, the secure matrix against plaintext, the exactness checks against
injected faults, bad parameters, bytes, and the security estimate of the module docstring."""

import math

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from securefl.crypto import kernels, linalg, lwe, prg, rlwe
from securefl.errors import InputError, PlatformError, ProtocolError
from securefl.protocols import lwe_pair, secure_hamming_matrix

CPU = torch.device("cpu")


def plain(codes):
    stacked = np.concatenate([np.asarray(c, dtype=np.int64) for c in codes])
    return (stacked[:, None, :] != stacked[None, :, :]).sum(axis=2)


def negacyclic_reference(a, v):
    """a * v in Z[X]/(X^N + 1) with Python ints (the slow reference; O(n) per nonzero
    coefficient of ``a``)."""
    n = len(a)
    out = [0] * n
    for i, ai in enumerate(a):
        if not ai:
            continue
        for j, vj in enumerate(v):
            if i + j < n:
                out[i + j] += ai * vj
            else:
                out[i + j - n] -= ai * vj
    return out


@settings(max_examples=25, deadline=None)
@given(
    log_n=st.integers(1, 6),
    count=st.integers(1, 3),
    rows=st.integers(1, 4),
    limb_bits=st.integers(1, 26),
    seed=st.integers(0, 2**32 - 1),
)
@example(log_n=6, count=3, rows=2, limb_bits=26, seed=0)
def test_polynomial_products_equal_the_python_int_reference(log_n, count, rows, limb_bits, seed):
    n = 1 << log_n
    rng = np.random.default_rng(seed)
    top = (1 << limb_bits) - 1
    publics = rng.integers(-top, top + 1, size=(count + 1, 2, n))
    publics[0, 0] = top  # the extreme magnitude
    smalls = rng.integers(-1, 2, size=(count, rows, n))
    which = list(rng.permutation(count + 1)[:count])
    ring = linalg.NegacyclicProducts(publics.astype(np.float64), limb_bits=limb_bits, device=CPU)
    got = ring.multiply(smalls.astype(np.float64), which)
    for i in range(rows):
        for t in range(2):
            expected = np.zeros(n, dtype=object)
            for k, index in enumerate(which):
                expected += np.array(negacyclic_reference([int(x) for x in publics[index, t]],
                                                          [int(x) for x in smalls[k, i]]), dtype=object)
            assert [int(x) for x in got[i, t]] == list(expected)


@settings(max_examples=10, deadline=None)
@given(log_n=st.integers(1, 5), seed=st.integers(0, 2**32 - 1))
def test_the_conjugate_is_the_transpose(log_n, seed):
    """a* v = A^T v: the hint's products with M^T are ring products with the conjugates."""
    n = 1 << log_n
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 1 << 26, size=n)
    v = rng.integers(-1, 2, size=n)
    matrix = np.array([negacyclic_reference([int(x) for x in a], [int(j == c) for j in range(n)]) for c in range(n)],
                      dtype=object).T  # column c is a * X^c: the negacyclic matrix of a
    star = rlwe.conjugate(a.astype(np.float64)[None, None])[0, 0]
    assert negacyclic_reference([int(x) for x in star], [int(x) for x in v]) == list(matrix.T.dot(v.astype(object)))


def test_public_limbs_are_the_13_byte_elements():
    seed = prg.random_seed()
    limbs = rlwe.public_limbs(seed, 5000)
    assert limbs.shape == (rlwe.polynomial_count(5000), 4, rlwe.RING_DIMENSION) == (3, 4, 4096)
    assert limbs.min() >= 0 and limbs.max() < 1 << 26
    count = limbs.shape[0] * rlwe.RING_DIMENSION
    raw = prg.expand(seed, 13 * count, np.uint8)
    for index in (0, 1, count // 2, count - 1):
        low = int.from_bytes(raw[8 * index : 8 * index + 8].tobytes(), "little")
        top = int.from_bytes(raw[8 * count + 4 * index : 8 * count + 4 * index + 4].tobytes(), "little")
        value = low | raw[12 * count + index].item() << 64 | top << 72
        k, j = divmod(index, rlwe.RING_DIMENSION)
        assert sum(int(limbs[k, t, j]) << 26 * t for t in range(4)) == value


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_limb_regrouping_keeps_the_element_mod_q(seed):
    rng = np.random.default_rng(seed)
    products = rng.integers(-(1 << 46), 1 << 46, size=(3, 4, 8)).astype(np.float64)
    products[0, :, 0] = -(1 << 46) + 1
    g = np.empty((3, 3, 6))
    kernels.rlwe_limbs_into(products, 2, g[:, 0], g[:, 1], g[:, 2])
    assert np.abs(g).max() < 2.0**53
    for i in range(3):
        for j in range(6):
            value = sum(int(products[i, t, j + 2]) << 26 * t for t in range(4))
            regrouped = int(g[i, 0, j]) + (int(g[i, 1, j]) << 36) + (int(g[i, 2, j]) << 72)
            assert (value - regrouped) % (1 << 104) == 0


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_the_hint_on_the_wire_is_the_top_32_bits_of_the_element_plus_noise(seed):
    """The hint kernel propagates every carry: its output is floor(h / 2^72) of the exact element."""
    rng = np.random.default_rng(seed)
    products = rng.integers(-(1 << 46), 1 << 46, size=(3, 4, 16)).astype(np.float64)
    products[0, :, 0] = -(1 << 46) + 1
    products[1, :, 1] = (1 << 46) - 1
    products[2, :, 2] = [-(1 << 26), (1 << 26) - 1, 0, 0]  # carries cross every limb boundary
    noise = rng.integers(-21, 22, size=(3, 16)).astype(np.float64)
    products[0, :, 3] = [(1 << 26) - 5, (1 << 26) - 1, (1 << 20) - 1, 7]  # 2^72 - 5 below bit 72:
    noise[0, 3] = 10  # the noise carries into the top bits
    products[0, :, 4] = [3, 0, 0, 7]
    noise[0, 4] = -10  # and borrows from them
    top = np.empty((3, 16), dtype=np.uint32)
    kernels.rlwe_hint_top_into(products, noise, top)
    for i in range(3):
        for j in range(16):
            element = (sum(int(products[i, t, j]) << 26 * t for t in range(4)) + int(noise[i, j])) % (1 << 104)
            assert int(top[i, j]) == element >> 72


@settings(max_examples=6, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 4), min_size=2, max_size=4),
    length=st.sampled_from([1, 31, 2049, 4096, 4097, 9000]),
    seed=st.integers(0, 2**31),
)
@example(sizes=[3, 2], length=8193, seed=1)
def test_rlwe_matrix_equals_plaintext_and_its_bytes_equal_lwe(sizes, length, seed):
    """Every message but ``C`` has the LWE backend's size; ``C`` too at ``P = 1`` (``L > N / 2``),
    and the packed size below it."""
    rng = np.random.default_rng(seed)
    codes = [rng.integers(0, 2, size=(n, length)) for n in sizes]
    result = secure_hamming_matrix(codes, backend="rlwe", seed=seed)
    assert result.backend == "rlwe"
    np.testing.assert_array_equal(result.matrix, plain(codes))
    reference = secure_hamming_matrix(codes, backend="lwe", seed=seed)
    if rlwe.packing(length) == 1:
        assert result.bytes_by_message == reference.bytes_by_message
        assert result.bytes_sent == reference.bytes_sent
    else:
        assert {k: v for k, v in result.bytes_by_message.items() if not k.endswith("C")} == {
            k: v for k, v in reference.bytes_by_message.items() if not k.endswith("C")}
        encryptors = {lwe.pair_roles(a, b)[0] for a in range(len(sizes)) for b in range(a + 1, len(sizes))}
        saved = sum(lwe.ELEMENT_BYTES * (sizes[a] * (length + rlwe.RING_DIMENSION)
                                         - rlwe.ciphertext_elements(sizes[a], length)) for a in encryptors)
        assert 0 <= reference.bytes_by_message["C"] - result.bytes_by_message["C"] - saved < 1000
    assert set(result.cpu_seconds_by_phase) == {"fixed", "per_pair"}


@pytest.mark.parametrize("sign", [1, -1])
def test_rlwe_exact_at_the_worst_case_noise(sign, monkeypatch):
    monkeypatch.setattr(lwe, "_binomial", lambda seed, label, shape: np.full(shape, float(sign * lwe.ETA)))
    rng = np.random.default_rng(5)
    codes = [rng.integers(0, 2, size=(3, 4100)), rng.integers(0, 2, size=(2, 4100))]
    codes[0][0] = 1
    np.testing.assert_array_equal(secure_hamming_matrix(codes, backend="rlwe", seed=0).matrix, plain(codes))


def test_pair_form_with_the_ring():
    rng = np.random.default_rng(2)
    x, y = rng.integers(0, 2, (4, 50)), rng.integers(0, 2, (3, 50))
    share_x, share_y = lwe_pair(x, y, ring=True, encryptor=2, evaluator=5)
    np.testing.assert_array_equal((share_x + share_y).astype(np.int64), plain([x, y])[:4, 4:])


def _corrupt_one_coefficient(monkeypatch, rows_at_least=1):
    original = linalg.NegacyclicProducts._inverse

    def inverse(self, values, out):
        original(self, values, out)
        if out.shape[0] >= rows_at_least:
            out[out.shape[0] - 1, out.shape[1] - 1, self.n // 3] += 1.0

    monkeypatch.setattr(linalg.NegacyclicProducts, "_inverse", inverse)


def test_the_known_answer_test_detects_a_corrupted_product(monkeypatch):
    linalg.check_exact_ring(rlwe.RING_DIMENSION, rlwe.FFT_LIMB_BITS, CPU)
    _corrupt_one_coefficient(monkeypatch)
    with pytest.raises(PlatformError, match="exactness check|not exact"):
        linalg.check_exact_ring(rlwe.RING_DIMENSION, rlwe.FFT_LIMB_BITS, CPU)


def test_every_product_is_checked_before_use(monkeypatch):
    """With the session's known-answer test passing, a corrupted product inside the session
    (one coefficient off by one, in a batch of at least 3 rows) is still refused at the client
    that ran it (its step fails with the PlatformError): no share."""
    _corrupt_one_coefficient(monkeypatch, rows_at_least=3)
    linalg.check_exact_ring(rlwe.RING_DIMENSION, rlwe.FFT_LIMB_BITS, CPU)
    codes = [np.ones((3, 40), np.uint8), np.zeros((3, 40), np.uint8)]
    with pytest.raises(ProtocolError, match="PlatformError: .*exactness check"):
        secure_hamming_matrix(codes, backend="rlwe")


def test_an_error_of_many_coefficients_is_caught():
    rng = np.random.default_rng(9)
    publics = rng.integers(0, 1 << 26, size=(1, 4, 64)).astype(np.float64)
    ring = linalg.NegacyclicProducts(publics, limb_bits=26, device=CPU)
    smalls = rng.integers(-1, 2, size=(1, 5, 64)).astype(np.float64)
    good = ring.multiply(smalls, [0])
    coefficients = torch.from_numpy(good.copy())
    coefficients += torch.from_numpy(rng.integers(-3, 4, size=good.shape).astype(np.float64))
    with pytest.raises(PlatformError):
        ring._check(torch.from_numpy(smalls), torch.tensor([0]), coefficients)
    ring._check(torch.from_numpy(smalls), torch.tensor([0]), torch.from_numpy(good))


def test_inexact_gemms_are_refused_on_the_device(monkeypatch):
    monkeypatch.setattr(
        linalg, "gemm", lambda a, b, *, device, out=None: (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float64)
    )
    with pytest.raises(PlatformError, match="not exact"):
        secure_hamming_matrix([np.zeros((1, 8), int), np.ones((1, 8), int)], backend="rlwe")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("backend", ["rlwe", "lwe"])
def test_cuda_is_refused_clearly_without_a_gpu(backend):
    with pytest.raises(InputError, match="device=.*CUDA"):
        secure_hamming_matrix([np.zeros((1, 8), int), np.ones((1, 8), int)], backend=backend, device="cuda")


@pytest.mark.parametrize("device, match", [("tpu", "device"), ("not a device", "device")])
def test_unknown_devices_are_refused(device, match):
    with pytest.raises(InputError, match=match):
        secure_hamming_matrix([np.zeros((1, 8), int), np.ones((1, 8), int)], backend="rlwe", device=device)


def test_a_device_for_a_cpu_only_backend_is_refused():
    with pytest.raises(InputError, match="device='cuda'.*CPU only"):
        secure_hamming_matrix([np.zeros((1, 8), int), np.ones((1, 8), int)], backend="shade", device="cuda")


@pytest.mark.parametrize(
    "name, value, parameter",
    [("RING_DIMENSION", 2048, "LWE_DIMENSION"), ("FFT_LIMB_BITS", 25, "FFT_LIMB_BITS")],
)
def test_bad_ring_parameters_are_refused_naming_the_parameter(name, value, parameter, monkeypatch):
    monkeypatch.setattr(rlwe, name, value)
    with pytest.raises(InputError) as info:
        secure_hamming_matrix([np.zeros((1, 8), int), np.ones((1, 8), int)], backend="rlwe")
    assert info.value.parameter == parameter


def test_a_ring_product_that_would_overflow_float64_is_refused():
    with pytest.raises(InputError) as info:
        rlwe.check_ring_parameters(1 << 27, 4096, 4096, 104)
    assert info.value.parameter == "L"


@pytest.mark.parametrize(
    "publics, limb_bits, parameter",
    [
        (np.zeros((1, 1, 12)), 8, "N"),
        (np.zeros((1, 1, 16384)), 8, "N"),
        (np.full((1, 1, 8), 256.0), 8, "limb_bits"),
        (np.zeros((1, 8)), 8, "publics"),
        (np.zeros((1, 1, 8), np.int64), 8, "publics"),
    ],
)
def test_bad_polynomial_products_are_refused(publics, limb_bits, parameter):
    with pytest.raises(InputError) as info:
        linalg.NegacyclicProducts(publics, limb_bits=limb_bits, device=CPU)
    assert info.value.parameter == parameter


def test_bad_small_operands_are_refused():
    ring = linalg.NegacyclicProducts(np.zeros((2, 1, 8)), limb_bits=8, device=CPU)
    with pytest.raises(InputError, match="smalls"):
        ring.multiply(np.zeros((1, 3, 4)), [0])
    with pytest.raises(InputError, match="which"):
        ring.multiply(np.zeros((1, 3, 8)), [2])
    with pytest.raises(InputError, match="float64"):
        ring.multiply(np.zeros((1, 3, 8), np.int64), [0])


def test_the_security_estimate_of_the_docstring():
    """The primal-uSVP computation reproduces the HE standard's 128-bit boundary
    (log2 q = 109 at N = 4096, ternary, sigma 3.2) in its BKZ.sieve model, and gives the
    figures the module docstring states for log2 q = 104."""
    sigma_e, sigma_s = math.sqrt(lwe.ETA / 2), math.sqrt(2 / 3)
    boundary = rlwe.security_bits(4096, 109, sigma_e, sigma_s)
    assert abs(boundary["bkz_sieve"] - 128) < 1.0
    ours = rlwe.security_bits(rlwe.RING_DIMENSION, lwe.MODULUS_BITS, sigma_e, sigma_s)
    assert ours["beta"] == 351
    assert round(ours["core_svp_classical"], 1) == 102.5 and round(ours["core_svp_quantum"], 1) == 93.0
    assert round(ours["bkz_sieve"], 1) == 134.8
    assert lwe.HE_STANDARD_128_TERNARY[rlwe.RING_DIMENSION] >= lwe.MODULUS_BITS
    for text in ("102.5", "93.0", "134.8", "127.9", "351"):
        assert text in rlwe.__doc__


@pytest.mark.parametrize("backend", ["shade", "rlwe"])
def test_the_link_model_is_the_measured_busiest_link(backend):
    from securefl.crypto.hamming import link_bytes_model
    from securefl.crypto.projection import busiest_link_bytes

    rng = np.random.default_rng(4)
    sizes, length = [9, 3, 6], 100
    result = secure_hamming_matrix([rng.integers(0, 2, (n, length)) for n in sizes], backend=backend)
    measured = busiest_link_bytes(result.bytes_sent, result.bytes_received)
    model = link_bytes_model(backend, sizes, length)
    assert model <= measured <= model * 1.02 + 20_000, (measured, model)


def test_auto_takes_the_backend_of_fewer_modelled_seconds():
    from securefl.crypto.hamming import choose_backend, link_bytes_model, modelled_seconds

    assert choose_backend([121] * 5, 1024) == "rlwe"  # FedProp's digits round at 100 Mbit/s
    assert choose_backend([121] * 5, 1024, link_bits_per_second=1e9) == "rlwe"  # and at 1 Gbit/s
    assert choose_backend([17] * 5, 1024) == "rlwe" and choose_backend([16] * 5, 1024) == "shade"
    assert choose_backend([65] * 5, 1024, 1e9) == "rlwe" and choose_backend([64] * 5, 1024, 1e9) == "shade"
    assert choose_backend([17, 17], 4096, 1e9) == "rlwe" and choose_backend([16, 16], 4096, 1e9) == "shade"
    assert choose_backend([500, 500], 4096) == choose_backend([600] * 10, 4096, 1e10) == "rlwe"
    assert choose_backend([40, 40, 40], 256) == "shade" and choose_backend([8, 8], 4096) == "shade"
    assert choose_backend([7], 4096) == "shade"
    for n in (8, 20, 40, 80):
        for link in (1e8, 1e9):
            ring, shade = (modelled_seconds(b, [n, n], 4096, link) for b in ("rlwe", "shade"))
            assert choose_backend([n, n], 4096, link) == ("rlwe" if ring < shade else "shade")
            assert ring > 8 * link_bytes_model("rlwe", [n, n], 4096) / link
    with pytest.raises(InputError, match="link_bits_per_second"):
        modelled_seconds("rlwe", [1, 1], 8, 0.0)
    with pytest.raises(InputError, match="backend"):
        modelled_seconds("lwe", [1, 1], 8)
    rng = np.random.default_rng(1)
    codes = [rng.integers(0, 2, (n, 16)) for n in (2, 3)]
    result = secure_hamming_matrix(codes, backend="auto")
    assert result.backend == "shade"
    np.testing.assert_array_equal(result.matrix, plain(codes))
    with pytest.raises(InputError, match="backend"):
        link_bytes_model("plaintext", [1, 1], 8)


def test_the_arithmetic_count_by_hand():
    from securefl.crypto.hamming import arithmetic

    # parties of 2 and 3 points, L = 5: party 1 encrypts (0 + 1 is odd), party 0 evaluates;
    # m = 2 polynomials, P = 819 points per ciphertext, so one secret
    per_pair = 3 * 2 * (3 * (5 + 4096) + 4096)
    assert arithmetic("rlwe", [2, 3], 5) == (per_pair, (4 * 2 + 1 * (1 + 4 * 2)) + (4 * 2 + 2 * (2 + 4)))
    fixed = 3 * 3 * 4096 * 4101 + 3 * 2 * 4101 * 4096  # C = S M^T of party 1, the hint of party 0
    assert arithmetic("lwe", [2, 3], 5) == (per_pair + fixed, 0)
    with pytest.raises(InputError, match="backend"):
        arithmetic("shade", [2, 3], 5)


@pytest.mark.parametrize("backend, sizes, length", [("rlwe", (7, 9, 8), 33), ("rlwe", (4, 3), 5000),
                                                    ("lwe", (5, 4, 3), 40)])
def test_the_arithmetic_count_is_the_multiply_adds_the_parties_run(backend, sizes, length, monkeypatch):
    from securefl.crypto.hamming import arithmetic, pair_roles

    counted = []
    gemm = lwe.LWEParty._gemm

    def counting(self, a, b, out=None):
        counted.append(a.shape[0] * a.shape[1] * b.shape[1])
        return gemm(self, a, b, out=out)

    transforms = []

    def transforms_of(function):
        def run(values, *args, **kwargs):
            transforms.append(values.numel() // values.shape[-1])
            return function(values, *args, **kwargs)
        return run

    monkeypatch.setattr(lwe.LWEParty, "_gemm", counting)
    monkeypatch.setattr(torch.fft, "fft", transforms_of(torch.fft.fft))
    monkeypatch.setattr(torch.fft, "ifft", transforms_of(torch.fft.ifft))
    rng = np.random.default_rng(5)
    codes = [rng.integers(0, 2, (n, length)) for n in sizes]
    result = secure_hamming_matrix(codes, backend=backend)
    np.testing.assert_array_equal(result.matrix, plain(codes))
    multiply_adds, ffts = arithmetic(backend, sizes, length)
    assert sum(counted) == multiply_adds
    # the FFTs counted are the fewest: the parties run them, one more forward transform per
    # secret and further public polynomial, and each party's known-answer test (<= 16)
    encryptors = {pair_roles(a, b)[0] for a in range(len(sizes)) for b in range(a + 1, len(sizes))}
    again = sum(rlwe.groups(sizes[j], length) * (rlwe.polynomial_count(length) - 1) for j in encryptors)
    assert ffts <= sum(transforms) <= ffts + (again + 16 * len(sizes) if backend == "rlwe" else 0)
