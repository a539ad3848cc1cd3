"""Dataset readers: digits, IDX (with md5), CIFAR pickle batches, SVHN .mat, paths."""

from __future__ import annotations

import gzip
import hashlib
import os
import pickle

import numpy as np
import pytest
from scipy.io import savemat

from securefl.data import KNOWN_MD5, load_cifar, load_dataset, load_svhn, read_idx
from securefl.errors import DataError, InputError


def _idx_bytes(array: np.ndarray) -> bytes:
    magic = 2051 if array.ndim == 3 else 2049
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def _write_idx_dir(directory, n_train=12, n_test=6, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte.gz": rng.integers(0, 256, (n_train, 28, 28)),
        "train-labels-idx1-ubyte.gz": rng.integers(0, 10, n_train),
        "t10k-images-idx3-ubyte.gz": rng.integers(0, 256, (n_test, 28, 28)),
        "t10k-labels-idx1-ubyte.gz": rng.integers(0, 10, n_test),
    }
    directory.mkdir(parents=True, exist_ok=True)
    for name, array in arrays.items():
        (directory / name).write_bytes(gzip.compress(_idx_bytes(array)))
    return arrays


def test_digits_split_is_stratified_and_scaled():
    data = load_dataset("digits")
    assert data.x_train.shape == (1347, 1, 8, 8) and data.x_test.shape == (450, 1, 8, 8)
    assert data.x_train.dtype == np.float32 and data.y_train.dtype == np.int64
    assert 0.0 <= data.x_train.min() and data.x_train.max() <= 1.0
    assert data.num_classes == 10 and data.input_shape == (1, 8, 8)
    train_share = np.bincount(data.y_train) / len(data.y_train)
    test_share = np.bincount(data.y_test) / len(data.y_test)
    assert np.abs(train_share - test_share).max() < 0.01
    again = load_dataset("digits")
    assert np.array_equal(again.y_train, data.y_train)


def test_idx_directory_roundtrip(tmp_path):
    arrays = _write_idx_dir(tmp_path / "mine")
    data = load_dataset(str(tmp_path / "mine"))
    assert data.x_train.shape == (12, 1, 28, 28)
    np.testing.assert_allclose(data.x_train[:, 0] * 255.0,
                               arrays["train-images-idx3-ubyte.gz"], atol=1e-4)
    assert np.array_equal(data.y_test, arrays["t10k-labels-idx1-ubyte.gz"])


def test_mnist_by_name_verifies_md5(tmp_path):
    _write_idx_dir(tmp_path / "mnist")
    with pytest.raises(DataError, match="checksum mismatch.*train-images"):
        load_dataset("mnist", tmp_path)
    assert load_dataset("mnist", tmp_path, verify=False).x_train.shape[0] == 12


def test_idx_rejects_bad_magic(tmp_path):
    path = tmp_path / "bad.gz"
    raw = bytearray(_idx_bytes(np.zeros(5)))
    raw[3] = 0x99
    path.write_bytes(gzip.compress(bytes(raw)))
    with pytest.raises(DataError, match=f"bad IDX magic.*{path.name}"):
        read_idx(path)


@pytest.mark.parametrize("cut", [3, 20, 100])
def test_idx_rejects_truncation(tmp_path, cut):
    path = tmp_path / "short.gz"
    path.write_bytes(gzip.compress(_idx_bytes(np.zeros((2, 28, 28)))[:-cut]))
    with pytest.raises(DataError, match="truncated"):
        read_idx(path)


def test_idx_rejects_truncated_gzip_stream(tmp_path):
    path = tmp_path / "cut.gz"
    path.write_bytes(gzip.compress(_idx_bytes(np.zeros((2, 28, 28))))[:-12])
    with pytest.raises(DataError, match=path.name):
        read_idx(path)


def test_idx_checksum(tmp_path):
    path = tmp_path / "labels.gz"
    path.write_bytes(gzip.compress(_idx_bytes(np.arange(10))))
    good = hashlib.md5(path.read_bytes()).hexdigest()
    assert read_idx(path, md5=good).tolist() == list(range(10))
    with pytest.raises(DataError, match="checksum mismatch"):
        read_idx(path, md5="0" * 32)


def test_missing_directory_gives_hint(tmp_path):
    with pytest.raises(DataError, match="SECUREFL_DATA"):
        load_dataset("fashion-mnist", tmp_path)
    (tmp_path / "mnist").mkdir()
    with pytest.raises(DataError, match="missing data file"):
        load_dataset("mnist", tmp_path)


def test_env_variable_is_the_fallback(tmp_path, monkeypatch):
    _write_idx_dir(tmp_path / "fashion-mnist")
    monkeypatch.setenv("SECUREFL_DATA", str(tmp_path))
    with pytest.raises(DataError, match=str(tmp_path)):
        load_dataset("fashion-mnist")


def test_unknown_name():
    with pytest.raises(InputError, match="name"):
        load_dataset("imagenet")


def test_cifar10_and_cifar100_pickles(tmp_path):
    rng = np.random.default_rng(1)
    ten = tmp_path / "cifar-10-batches-py"
    ten.mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8),
                 b"labels": list(rng.integers(0, 10, 4))}
        (ten / name).write_bytes(pickle.dumps(batch))
    data = load_dataset("cifar10", tmp_path)
    assert data.x_train.shape == (20, 3, 32, 32) and data.x_test.shape == (4, 3, 32, 32)
    raw = pickle.loads((ten / "data_batch_1").read_bytes())[b"data"][0]
    np.testing.assert_allclose(data.x_train[0, 0].ravel() * 255, raw[:1024], atol=1e-3)
    hundred = tmp_path / "cifar100"
    hundred.mkdir()
    for name in ("train", "test"):
        batch = {b"data": rng.integers(0, 256, (3, 3072), dtype=np.uint8),
                 b"fine_labels": [5, 99, 0]}
        (hundred / name).write_bytes(pickle.dumps(batch))
    data = load_cifar(hundred, name="cifar100")
    assert data.num_classes == 100 and data.y_train.tolist() == [5, 99, 0]
    (ten / "test_batch").write_bytes(b"not a pickle")
    with pytest.raises(DataError, match="test_batch"):
        load_dataset("cifar10", tmp_path)


def test_svhn_mat(tmp_path):
    rng = np.random.default_rng(2)
    directory = tmp_path / "svhn"
    directory.mkdir()
    x = rng.integers(0, 256, (32, 32, 3, 5), dtype=np.uint8)
    savemat(directory / "train_32x32.mat", {"X": x, "y": np.array([[10], [1], [2], [3], [4]])})
    savemat(directory / "test_32x32.mat", {"X": x[..., :2], "y": np.array([[5], [10]])})
    data = load_svhn(directory)
    assert data.x_train.shape == (5, 3, 32, 32)
    assert data.y_train.tolist() == [0, 1, 2, 3, 4] and data.y_test.tolist() == [5, 0]
    np.testing.assert_allclose(data.x_train[1, 2] * 255, x[:, :, 2, 1], atol=1e-3)
    (directory / "test_32x32.mat").write_bytes(b"garbage")
    with pytest.raises(DataError, match="test_32x32.mat"):
        load_svhn(directory)


def test_npz_path(tmp_path):
    path = tmp_path / "mine.npz"
    np.savez(path, x_train=np.full((4, 6, 6), 255, np.uint8), y_train=np.array([0, 1, 2, 1]),
             x_test=np.zeros((2, 6, 6), np.uint8), y_test=np.array([2, 0]))
    data = load_dataset(str(path))
    assert data.input_shape == (1, 6, 6) and data.num_classes == 3
    assert data.x_train.max() == 1.0


@pytest.mark.skipif(not os.environ.get("SECUREFL_DATA"), reason="SECUREFL_DATA not set")
def test_real_mnist_files_match_published_md5():
    root = os.environ["SECUREFL_DATA"]
    if not os.path.isdir(os.path.join(root, "mnist")):
        pytest.skip("no mnist/ under SECUREFL_DATA")
    for name, digest in KNOWN_MD5["mnist"].items():
        if "labels" in name:
            labels = read_idx(os.path.join(root, "mnist", name), md5=digest)
            assert labels.shape in ((60000,), (10000,)) and labels.max() == 9
