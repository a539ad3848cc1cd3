"""Dataset readers: scikit-learn's bundled digits, the IDX family (MNIST, Fashion-MNIST),
CIFAR-10/100 (python pickle batches), SVHN (``.mat``), STL-10 (the binary files of
``stl10_binary/``) and user directories / ``.npz`` files.

Every reader returns a :class:`Dataset` with images as ``float32`` in ``[0, 1]`` laid out
``(n, channels, height, width)`` and labels as ``int64`` in ``0..C-1``.  Nothing is ever
downloaded: files are looked up in ``data_dir``, else ``$SECUREFL_DATA``, else ``./data``,
and a missing, truncated or corrupted file raises :class:`~securefl.errors.DataError` that
names the file and says where it should be.

The readers are hand-written (a few lines each over ``gzip``/``pickle``/``scipy.io``)
because torchvision would add a heavy dependency whose loaders download on demand and do
not verify checksums of files placed by hand.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from securefl.errors import DataError, InputError

DATASET_NAMES = ("digits", "mnist", "fashion-mnist", "cifar10", "cifar100", "svhn", "stl10")

STL10_FILES = ("train_X.bin", "train_y.bin", "test_X.bin", "test_y.bin")
"""The labeled STL-10 files :func:`load_stl10` reads (the 100,000 unlabeled images of
``unlabeled_X.bin`` are not: a :class:`Dataset` is labeled data that the partition splits
into labeled and unlabeled parts)."""

STL10_SIDE = 96

IDX_FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}

#: Published md5 sums of the distributed gzip files (see ../shared/datasets/README.md).
KNOWN_MD5 = {
    "mnist": {
        "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
        "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
        "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
        "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
    },
    "fashion-mnist": {
        "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
        "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
        "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
    },
}

_IDX_MAGIC = {2049: 1, 2051: 3}


@dataclass
class Dataset:
    """A labeled train/test split; images ``(n, C, H, W)`` float32 in [0, 1]."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
    """The data directory: ``data_dir``, else ``$SECUREFL_DATA``, else ``./data``."""
    if data_dir is not None:
        return Path(data_dir)
    env = os.environ.get("SECUREFL_DATA")
    return Path(env) if env else Path("data")


def load_dataset(name: str, data_dir: str | os.PathLike | None = None, *,
                 verify: bool = True) -> Dataset:
    """Load dataset ``name`` (one of :data:`DATASET_NAMES`, or a path to a directory of
    IDX / CIFAR / SVHN files or to an ``.npz`` with ``x_train, y_train, x_test, y_test``).

    ``verify`` checks the md5 of MNIST/Fashion-MNIST files against the published sums.
    """
    if not isinstance(name, str) or not name:
        raise InputError("name", name, f"must be one of {DATASET_NAMES} or a path")
    if name == "digits":
        return _load_digits()
    if name in ("mnist", "fashion-mnist"):
        return load_idx_directory(_dataset_dir(name, data_dir), name=name,
                                  md5=KNOWN_MD5[name] if verify else None)
    if name in ("cifar10", "cifar100"):
        return load_cifar(_dataset_dir(name, data_dir), name=name)
    if name == "svhn":
        return load_svhn(_dataset_dir(name, data_dir))
    if name == "stl10":
        return load_stl10(_dataset_dir(name, data_dir))
    path = Path(name)
    if path.suffix == ".npz" or path.is_dir():
        return _load_path(path)
    raise InputError("name", name, f"unknown dataset; use one of {DATASET_NAMES} or a path "
                                   "to a directory / .npz file")


def _dataset_dir(name: str, data_dir: str | os.PathLike | None) -> Path:
    root = data_root(data_dir)
    aliases = {"cifar10": ("cifar10", "cifar-10-batches-py"),
               "cifar100": ("cifar100", "cifar-100-python"),
               "stl10": ("stl10", "stl10_binary")}.get(name, (name,))
    for alias in aliases:
        if (root / alias).is_dir():
            return root / alias
    raise DataError(f"dataset {name!r} not found: expected directory {root / aliases[0]} "
                    f"(set --data-dir or $SECUREFL_DATA to the folder holding '{aliases[0]}/'; "
                    "securefl never downloads data)")


def _load_digits() -> Dataset:
    """scikit-learn's 8x8 digits (1797 images), seeded stratified 75/25 split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    x = (bunch.images.astype(np.float32) / 16.0)[:, None, :, :]
    y = bunch.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    return Dataset("digits", np.ascontiguousarray(x_tr), y_tr, np.ascontiguousarray(x_te),
                   y_te, 10)


def _md5(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_idx(path: str | os.PathLike, *, md5: str | None = None) -> np.ndarray:
    """Read one (gzip-compressed or raw) IDX file of unsigned bytes.

    Header: big-endian uint32 magic (2049 labels / 2051 images), then one uint32 per
    dimension.  Raises :class:`DataError` on a missing file, checksum mismatch, bad
    magic or a payload shorter/longer than the header promises.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"missing data file {path} (place the IDX file there; "
                        "securefl never downloads data)")
    if md5 is not None and _md5(path) != md5:
        raise DataError(f"checksum mismatch for {path}: md5 {_md5(path)} != expected {md5}")
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile) as error:
        raise DataError(f"corrupted gzip file {path}: {error}") from error
    if len(raw) < 8:
        raise DataError(f"truncated IDX file {path}: {len(raw)} bytes")
    magic = int.from_bytes(raw[:4], "big")
    if magic not in _IDX_MAGIC:
        raise DataError(f"bad IDX magic {magic:#010x} in {path} (expected 0x00000801 or "
                        "0x00000803)")
    ndim = _IDX_MAGIC[magic]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"truncated IDX header in {path}")
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    expected = int(np.prod(dims))
    if len(raw) - header != expected:
        raise DataError(f"truncated or oversized IDX file {path}: {len(raw) - header} payload "
                        f"bytes, header promises {expected}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def load_idx_directory(directory: str | os.PathLike, *, name: str = "idx",
                       md5: dict[str, str] | None = None) -> Dataset:
    """Load the four MNIST-style IDX files from ``directory``."""
    directory = Path(directory)
    arrays = {key: read_idx(directory / fname, md5=None if md5 is None else md5.get(fname))
              for key, fname in IDX_FILES.items()}
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        if images.ndim != 3 or len(images) != len(labels):
            raise DataError(f"{directory}: {split} images {images.shape} do not match "
                            f"labels {labels.shape}")
    y_train = arrays["train_labels"].astype(np.int64)
    return Dataset(name,
                   (arrays["train_images"].astype(np.float32) / 255.0)[:, None],
                   y_train,
                   (arrays["test_images"].astype(np.float32) / 255.0)[:, None],
                   arrays["test_labels"].astype(np.int64),
                   int(max(y_train.max(), arrays["test_labels"].max())) + 1)


def _unpickle(path: Path) -> dict:
    if not path.is_file():
        raise DataError(f"missing data file {path} (place the CIFAR python batches there; "
                        "securefl never downloads data)")
    try:
        with open(path, "rb") as handle:
            return pickle.load(handle, encoding="bytes")
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as error:
        raise DataError(f"corrupted CIFAR batch {path}: {error}") from error


def _cifar_batch(path: Path, label_key: bytes) -> tuple[np.ndarray, np.ndarray]:
    batch = _unpickle(path)
    if not isinstance(batch, dict) or b"data" not in batch or label_key not in batch:
        raise DataError(f"{path} is not a CIFAR batch (keys b'data', {label_key!r} required)")
    data = np.asarray(batch[b"data"], dtype=np.uint8)
    labels = np.asarray(batch[label_key], dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3072 or len(data) != len(labels):
        raise DataError(f"{path}: data {data.shape} / labels {labels.shape} are not "
                        "(n, 3072) / (n,)")
    return data.reshape(-1, 3, 32, 32).astype(np.float32) / 255.0, labels


def load_cifar(directory: str | os.PathLike, *, name: str = "cifar10") -> Dataset:
    """CIFAR-10 (``data_batch_1..5``, ``test_batch``) or CIFAR-100 (``train``, ``test``)."""
    directory = Path(directory)
    if name == "cifar10":
        parts = [_cifar_batch(directory / f"data_batch_{i}", b"labels") for i in range(1, 6)]
        x_test, y_test = _cifar_batch(directory / "test_batch", b"labels")
        num_classes = 10
    elif name == "cifar100":
        parts = [_cifar_batch(directory / "train", b"fine_labels")]
        x_test, y_test = _cifar_batch(directory / "test", b"fine_labels")
        num_classes = 100
    else:
        raise InputError("name", name, "must be 'cifar10' or 'cifar100'")
    x_train = np.concatenate([p[0] for p in parts])
    y_train = np.concatenate([p[1] for p in parts])
    return Dataset(name, x_train, y_train, x_test, y_test, num_classes)


def _svhn_split(path: Path) -> tuple[np.ndarray, np.ndarray]:
    from scipy.io import loadmat
    from scipy.io.matlab import MatReadError

    if not path.is_file():
        raise DataError(f"missing data file {path} (place the SVHN .mat files there; "
                        "securefl never downloads data)")
    try:
        mat = loadmat(path)
    except (MatReadError, ValueError, OSError, TypeError) as error:
        raise DataError(f"corrupted SVHN file {path}: {error}") from error
    if "X" not in mat or "y" not in mat:
        raise DataError(f"{path} lacks the 'X' and 'y' arrays of an SVHN .mat file")
    x, y = np.asarray(mat["X"]), np.asarray(mat["y"]).reshape(-1).astype(np.int64)
    if x.ndim != 4 or x.shape[:3] != (32, 32, 3) or x.shape[3] != len(y):
        raise DataError(f"{path}: X {x.shape} / y {y.shape} are not (32, 32, 3, n) / (n,)")
    if y.min() < 1 or y.max() > 10:
        raise DataError(f"{path}: labels outside 1..10")
    x = np.transpose(x, (3, 2, 0, 1)).astype(np.float32) / 255.0
    return np.ascontiguousarray(x), np.where(y == 10, 0, y)


def load_svhn(directory: str | os.PathLike) -> Dataset:
    """SVHN cropped digits (``train_32x32.mat``, ``test_32x32.mat``; label 10 means 0)."""
    directory = Path(directory)
    x_train, y_train = _svhn_split(directory / "train_32x32.mat")
    x_test, y_test = _svhn_split(directory / "test_32x32.mat")
    return Dataset("svhn", x_train, y_train, x_test, y_test, 10)


def _stl10_split(directory: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Images ``(n, 3, 96, 96)`` float32 in [0, 1] and labels 0..9 of one STL-10 split.

    ``<split>_X.bin`` holds n images of 3 x 96 x 96 bytes, each channel stored column by
    column (MATLAB order), so an image's bytes reshape to ``(3, 96, 96)`` indexed
    ``[channel, column, row]``; ``<split>_y.bin`` holds n label bytes 1..10 (class_names.txt
    order), returned as 0..9.
    """
    images, labels = directory / f"{split}_X.bin", directory / f"{split}_y.bin"
    for path in (images, labels):
        if not path.is_file():
            raise DataError(f"missing data file {path} (place the STL-10 binary files "
                            f"{', '.join(STL10_FILES)} there; securefl never downloads data)")
    raw = np.fromfile(images, dtype=np.uint8)
    y = np.fromfile(labels, dtype=np.uint8).astype(np.int64)
    per_image = 3 * STL10_SIDE * STL10_SIDE
    if raw.size % per_image or raw.size // per_image != len(y):
        raise DataError(f"{images}: {raw.size} bytes are not {len(y)} images of 3x96x96 "
                        f"bytes (as {labels} has {len(y)} labels); truncated or mismatched files?")
    if len(y) == 0 or y.min() < 1 or y.max() > 10:
        raise DataError(f"{labels}: labels must be bytes 1..10 (and at least one)")
    x = raw.reshape(-1, 3, STL10_SIDE, STL10_SIDE).transpose(0, 1, 3, 2)
    return np.ascontiguousarray(x, dtype=np.float32) / 255.0, y - 1


def load_stl10(directory: str | os.PathLike) -> Dataset:
    """STL-10's labeled splits (5,000 training and 8,000 test images of 96x96x3, 10
    classes) from the binary files in ``directory`` (:data:`STL10_FILES`)."""
    directory = Path(directory)
    x_train, y_train = _stl10_split(directory, "train")
    x_test, y_test = _stl10_split(directory, "test")
    return Dataset("stl10", x_train, y_train, x_test, y_test, 10)


def _load_path(path: Path) -> Dataset:
    if path.suffix == ".npz":
        if not path.is_file():
            raise DataError(f"missing data file {path}")
        try:
            with np.load(path) as npz:
                arrays = {k: npz[k] for k in ("x_train", "y_train", "x_test", "y_test")}
        except (KeyError, ValueError, OSError) as error:
            raise DataError(f"{path} must hold x_train, y_train, x_test, y_test: {error}") \
                from error
        x_train = arrays["x_train"].astype(np.float32)
        if x_train.ndim == 3:
            x_train = x_train[:, None]
        x_test = arrays["x_test"].astype(np.float32)
        if x_test.ndim == 3:
            x_test = x_test[:, None]
        if x_train.max() > 1.0:
            x_train, x_test = x_train / 255.0, x_test / 255.0
        y_train = arrays["y_train"].astype(np.int64)
        y_test = arrays["y_test"].astype(np.int64)
        return Dataset(path.stem, x_train, y_train, x_test, y_test,
                       int(max(y_train.max(), y_test.max())) + 1)
    if (path / IDX_FILES["train_images"]).exists():
        return load_idx_directory(path, name=path.name)
    if (path / "data_batch_1").exists():
        return load_cifar(path, name="cifar10")
    if (path / "train").exists() and (path / "test").exists():
        return load_cifar(path, name="cifar100")
    if (path / "train_32x32.mat").exists():
        return load_svhn(path)
    if (path / "train_X.bin").exists():
        return load_stl10(path)
    raise DataError(f"{path} holds no recognised dataset files (IDX gzip, CIFAR batches, "
                    "SVHN .mat, STL-10 binaries or an .npz)")
