"""The STL-10 reader on tiny synthetic binary files written here (never downloaded)."""

from __future__ import annotations

import numpy as np
import pytest

from securefl.data import load_dataset, load_stl10
from securefl.errors import DataError


def _write_split(folder, split, images, labels):
    """Write ``images`` ``(n, 3, 96, 96)`` uint8 (``[channel, row, column]``) as STL-10 does:
    each channel column by column; labels as bytes 1..10."""
    np.ascontiguousarray(images.transpose(0, 1, 3, 2)).tofile(folder / f"{split}_X.bin")
    (labels + 1).astype(np.uint8).tofile(folder / f"{split}_y.bin")


@pytest.fixture
def stl10(tmp_path):
    folder = tmp_path / "stl10_binary"
    folder.mkdir()
    rng = np.random.default_rng(0)
    arrays = {}
    for split, n in (("train", 3), ("test", 2)):
        images = rng.integers(0, 256, size=(n, 3, 96, 96), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n)
        _write_split(folder, split, images, labels)
        arrays[split] = (images, labels)
    return folder, arrays


def test_images_come_back_row_major_in_unit_range(stl10):
    folder, arrays = stl10
    dataset = load_stl10(folder)
    assert dataset.name == "stl10" and dataset.num_classes == 10
    assert dataset.input_shape == (3, 96, 96) and dataset.x_train.dtype == np.float32
    np.testing.assert_array_equal(dataset.x_train, arrays["train"][0] / np.float32(255))
    np.testing.assert_array_equal(dataset.y_train, arrays["train"][1])
    np.testing.assert_array_equal(dataset.x_test, arrays["test"][0] / np.float32(255))
    np.testing.assert_array_equal(dataset.y_test, arrays["test"][1])


def test_a_bright_top_row_stays_the_top_row(tmp_path):
    folder = tmp_path / "stl10"
    folder.mkdir()
    image = np.zeros((1, 3, 96, 96), dtype=np.uint8)
    image[0, :, 0, :] = 255  # the top row, as STL-10's own reader would show it
    for split in ("train", "test"):
        _write_split(folder, split, image, np.array([4]))
    x = load_stl10(folder).x_train[0]
    assert x[:, 0, :].min() == 1.0 and x[:, 1:, :].max() == 0.0


def test_found_by_name_under_either_folder_name_and_by_path(stl10):
    folder, arrays = stl10
    by_name = load_dataset("stl10", data_dir=folder.parent)
    by_path = load_dataset(str(folder))
    np.testing.assert_array_equal(by_name.y_test, arrays["test"][1])
    np.testing.assert_array_equal(by_path.x_train, by_name.x_train)


def test_truncated_images_are_refused(stl10):
    folder, _ = stl10
    data = (folder / "train_X.bin").read_bytes()
    (folder / "train_X.bin").write_bytes(data[:-5])
    with pytest.raises(DataError, match="train_X.bin"):
        load_stl10(folder)


def test_labels_outside_1_to_10_are_refused(stl10):
    folder, _ = stl10
    np.array([1, 11, 2], dtype=np.uint8).tofile(folder / "train_y.bin")
    with pytest.raises(DataError, match="1..10"):
        load_stl10(folder)


def test_missing_files_say_where_they_go(stl10):
    folder, _ = stl10
    (folder / "test_y.bin").unlink()
    with pytest.raises(DataError, match="test_y.bin.*never downloads"):
        load_stl10(folder)


def test_missing_folder_gives_the_hint(tmp_path):
    with pytest.raises(DataError, match="stl10"):
        load_dataset("stl10", data_dir=tmp_path)
