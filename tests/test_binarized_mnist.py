"""Binarized MNIST loaders on tiny .amat files written here.

Nothing is downloaded and /work/shared is never read; ``test_real_binarized_mnist``
runs only when $LNORM_DATA_DIR points at the real data.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import time
from pathlib import Path

import numpy as np
import pytest

from lnorm.data import files

from lnorm.data import DataError, binarized_mnist as bm
from tests.tiny_data import write_file

# Read before the autouse fixture below clears it.
REAL_DATA_DIR = os.environ.get(files.DATA_DIR_ENV, "")
NUM = {"train": 6, "valid": 3, "test": 4}


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
  monkeypatch.delenv(files.DATA_DIR_ENV, raising=False)


def amat_bytes(images: np.ndarray) -> bytes:
  """The original text format: 784 '0'/'1' separated by spaces, one image a line."""
  digits_NxD = images.reshape(len(images), -1).astype(np.uint8) + ord("0")
  rows = np.full((len(images), bm.ROW_BYTES), ord(" "), np.uint8)
  rows[:, 0::2] = digits_NxD
  rows[:, -1] = ord("\n")
  return rows.tobytes()


def write_amat(root: Path, gz: bool = True, seed: int = 0, num: dict[str, int] = NUM,
               p: float = 0.13) -> tuple[dict[str, np.ndarray], dict[str, str]]:
  """Writes tiny .amat files under root/binarized_mnist/; returns the images
  and their SHA-256 table."""
  rng = np.random.default_rng(seed)
  directory = root / bm.NAME
  directory.mkdir(parents=True, exist_ok=True)
  arrays, checksums = {}, {}
  for split, n in num.items():
    arrays[split] = (rng.random((n, 28, 28)) < p).astype(np.uint8)
    data = amat_bytes(arrays[split])
    stem = bm.file_stem(split)
    checksums[stem] = hashlib.sha256(data).hexdigest()
    write_file(directory, stem, data, gz)
  return arrays, checksums


@pytest.mark.parametrize("gz", [True, False])
def test_round_trip(tmp_path, gz):
  arrays, checksums = write_amat(tmp_path, gz=gz)
  data = bm.load_amat(tmp_path, checksums=checksums)
  assert set(data) == set(bm.SPLITS)
  for split, x in data.items():
    assert x.shape == (NUM[split], 28, 28) and x.dtype == np.uint8
    np.testing.assert_array_equal(x, arrays[split])
    x[0, 0, 0] = 1  # Callers may modify the arrays in place.


def test_gz_wins_over_uncompressed(tmp_path):
  arrays, checksums = write_amat(tmp_path, gz=True, seed=0)
  write_amat(tmp_path, gz=False, seed=1)
  data = bm.load_amat(tmp_path, checksums=checksums, splits=("test",))
  assert set(data) == {"test"}
  np.testing.assert_array_equal(data["test"], arrays["test"])


def test_env_var_and_dispatcher(tmp_path, monkeypatch):
  arrays, checksums = write_amat(tmp_path)
  monkeypatch.setenv(files.DATA_DIR_ENV, str(tmp_path))
  monkeypatch.setattr(bm, "SHA256", checksums)
  np.testing.assert_array_equal(bm.load("amat")["valid"], arrays["valid"])
  with pytest.raises(DataError, match="data_source='idx' is not valid; choose one of: amat, tfds"):
    bm.load("idx", tmp_path)
  with pytest.raises(DataError, match="unknown split 'validation'"):
    bm.load_amat(tmp_path, splits=("validation",))


def load_error(tmp_path, checksums, verify=True) -> str:
  with pytest.raises(DataError) as info:
    bm.load_amat(tmp_path, verify=verify, checksums=checksums)
  message = str(info.value)
  assert "\n" not in message
  return message


def rewrite(tmp_path, split: str, data: bytes, checksums: dict[str, str]) -> None:
  stem = bm.file_stem(split)
  (tmp_path / bm.NAME / f"{stem}.gz").write_bytes(gzip.compress(data))
  checksums[stem] = hashlib.sha256(data).hexdigest()


def test_missing_file_says_how_to_get_it(tmp_path):
  _, checksums = write_amat(tmp_path)
  (tmp_path / bm.NAME / "binarized_mnist_valid.amat.gz").unlink()
  message = load_error(tmp_path, checksums)
  assert str(tmp_path / bm.NAME / "binarized_mnist_valid.amat.gz") + " not found" in message
  assert "scripts/download_data.py binarized_mnist" in message


def test_bad_checksum_names_the_file(tmp_path):
  _, checksums = write_amat(tmp_path)
  checksums["binarized_mnist_test.amat"] = "0" * 64
  message = load_error(tmp_path, checksums)
  assert "binarized_mnist_test.amat.gz: SHA-256 of the uncompressed content" in message
  assert "expected " + "0" * 64 in message
  bm.load_amat(tmp_path, verify=False)  # The content itself is fine.


def test_default_checksums_reject_other_data(tmp_path):
  write_amat(tmp_path)
  message = load_error(tmp_path, None)
  assert "binarized_mnist_train.amat.gz: SHA-256" in message
  assert "expected " + bm.SHA256["binarized_mnist_train.amat"] in message


@pytest.mark.parametrize("verify", [True, False])
def test_wrong_row_length(tmp_path, verify):
  arrays, checksums = write_amat(tmp_path)
  lines = amat_bytes(arrays["train"]).split(b"\n")
  lines[2] = lines[2][:-2]  # 783 values
  rewrite(tmp_path, "train", b"\n".join(lines), checksums)
  message = load_error(tmp_path, checksums, verify)
  assert "binarized_mnist_train.amat.gz: line 3 has 783 values in 1566 bytes" in message
  assert "expected 784 values 0 or 1" in message


def test_extra_value(tmp_path):
  arrays, checksums = write_amat(tmp_path)
  lines = amat_bytes(arrays["valid"]).split(b"\n")
  lines[0] += b" 1"
  rewrite(tmp_path, "valid", b"\n".join(lines), checksums)
  assert "line 1 has 785 values in 1570 bytes" in load_error(tmp_path, checksums)


def test_missing_final_newline(tmp_path):
  arrays, checksums = write_amat(tmp_path)
  rewrite(tmp_path, "test", amat_bytes(arrays["test"])[:-1], checksums)
  assert "line 4 has 784 values in 1567 bytes" in load_error(tmp_path, checksums)


def test_value_other_than_0_or_1(tmp_path):
  arrays, checksums = write_amat(tmp_path)
  data = bytearray(amat_bytes(arrays["train"]))
  data[bm.ROW_BYTES + 2 * 9] = ord("2")  # line 2, value 10
  rewrite(tmp_path, "train", bytes(data), checksums)
  message = load_error(tmp_path, checksums)
  assert "binarized_mnist_train.amat.gz: line 2, value 10 is '2', not 0 or 1" in message


def test_float_values_are_rejected(tmp_path):
  # "0.5" where a digit should be: the line is too long.
  arrays, checksums = write_amat(tmp_path)
  lines = amat_bytes(arrays["train"]).split(b"\n")
  lines[0] = b"0.5" + lines[0][1:]
  rewrite(tmp_path, "train", b"\n".join(lines), checksums)
  assert "line 1 has 784 values in 1570 bytes" in load_error(tmp_path, checksums)


def test_bad_separator(tmp_path):
  arrays, checksums = write_amat(tmp_path)
  data = bytearray(amat_bytes(arrays["valid"]))
  data[5] = ord("\t")
  rewrite(tmp_path, "valid", bytes(data), checksums)
  assert "line 1, byte 6 is b'\\t', not a single space" in load_error(tmp_path, checksums)


def test_crlf_line_endings(tmp_path):
  arrays, checksums = write_amat(tmp_path)
  rewrite(tmp_path, "test", amat_bytes(arrays["test"]).replace(b"\n", b"\r\n"), checksums)
  assert "line 1 has 784 values in 1569 bytes" in load_error(tmp_path, checksums)


def test_empty_and_not_gzip(tmp_path):
  _, checksums = write_amat(tmp_path)
  rewrite(tmp_path, "test", b"", checksums)
  assert "binarized_mnist_test.amat.gz: the file is empty" in load_error(tmp_path, checksums)
  (tmp_path / bm.NAME / "binarized_mnist_valid.amat.gz").write_bytes(b"<html>404</html>")
  assert "binarized_mnist_valid.amat.gz: cannot read it" in load_error(tmp_path, checksums)


def test_parse_is_fast():
  # A train file's worth (78 MB): the issue asks for seconds, not minutes.
  images = (np.random.default_rng(0).random((50_000, 784)) < 0.13).astype(np.uint8)
  data = amat_bytes(images)
  t0 = time.perf_counter()
  out = bm.parse_amat(data, "train.amat")
  assert time.perf_counter() - t0 < 5.0
  np.testing.assert_array_equal(out.reshape(50_000, 784), images)


def test_tfds_mock(tmp_path):
  tfds = pytest.importorskip("tensorflow_datasets")
  rng = np.random.default_rng(0)
  images = {s: (rng.random((n, 28, 28, 1)) < 0.5).astype(np.uint8)
            for s, n in (("train", 5), ("validation", 3), ("test", 4))}

  def as_data_source(builder, split, **kwargs):
    assert builder.name == bm.NAME
    return [{"image": image} for image in images[split]]

  with tfds.testing.mock_data(as_data_source_fn=as_data_source):
    data = bm.load("tfds", str(tmp_path))
  for split, tfds_split in (("train", "train"), ("valid", "validation"), ("test", "test")):
    assert data[split].shape == (len(images[tfds_split]), 28, 28)
    assert data[split].dtype == np.uint8
    np.testing.assert_array_equal(data[split], images[tfds_split][..., 0])


def test_tfds_rejects_grey_levels(tmp_path):
  tfds = pytest.importorskip("tensorflow_datasets")
  # The default mock draws pixels from 0..255: not binarized MNIST.
  with tfds.testing.mock_data(num_examples=5, policy=tfds.testing.MockPolicy.USE_CODE):
    with pytest.raises(DataError, match="binarized_mnist split 'train': pixel value .* is "
                       "not 0 or 1"):
      bm.load_tfds(str(tmp_path))


def test_tfds_not_prepared(tmp_path):
  pytest.importorskip("tensorflow_datasets")
  with pytest.raises(DataError) as info:
    bm.load_tfds(tmp_path, splits=("test",))
  message = str(info.value)
  assert "\n" not in message
  assert str(tmp_path) in message and "data_source='amat'" in message


@pytest.mark.skipif(not (REAL_DATA_DIR and (Path(REAL_DATA_DIR) / bm.NAME).is_dir()),
                    reason="set LNORM_DATA_DIR to a directory holding binarized_mnist/")
def test_real_binarized_mnist():
  data = bm.load_amat(REAL_DATA_DIR)
  assert {s: len(x) for s, x in data.items()} == bm.NUM_EXAMPLES
  # The mean pixel values recorded in the data directory's README.
  for split, mean in (("train", 0.130562), ("valid", 0.131127), ("test", 0.132512)):
    assert abs(data[split].mean() - mean) < 1e-6
