"""MNIST loaders and scripts/download_data.py on tiny IDX files written here.

Nothing is downloaded and /work/shared is never read; ``test_real_mnist`` runs
only when $LNORM_DATA_DIR points at the real data.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from lnorm.data import files

from lnorm.data import DataError, mnist
from scripts import download_data
from tests.tiny_data import idx_bytes, write_dataset

# Read before the autouse fixture below clears it.
REAL_DATA_DIR = os.environ.get(files.DATA_DIR_ENV, "")
NUM = {"train": 7, "test": 3}


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
  monkeypatch.delenv(files.DATA_DIR_ENV, raising=False)


@pytest.mark.parametrize("gz", [True, False])
@pytest.mark.parametrize("name", mnist.DATASETS)
def test_round_trip(tmp_path, name, gz):
  arrays, checksums = write_dataset(tmp_path, name, gz=gz)
  data = mnist.load_mnist(name, str(tmp_path), checksums=checksums)
  assert set(data) == {"train", "test"}
  for split, (x, y) in data.items():
    assert x.shape == (NUM[split], 28, 28) and x.dtype == np.uint8
    assert y.shape == (NUM[split],) and y.dtype == np.int32
    np.testing.assert_array_equal(x, arrays[split][0])
    np.testing.assert_array_equal(y, arrays[split][1])
    x[0, 0, 0] = 1  # Callers may modify the arrays in place.


def test_gz_wins_over_uncompressed(tmp_path):
  arrays, checksums = write_dataset(tmp_path, gz=True, seed=0)
  write_dataset(tmp_path, gz=False, seed=1)
  data = mnist.load_mnist("mnist", tmp_path, checksums=checksums)
  np.testing.assert_array_equal(data["train"][0], arrays["train"][0])


def test_dispatcher(tmp_path, monkeypatch):
  arrays, checksums = write_dataset(tmp_path)
  monkeypatch.setitem(mnist.MD5, "mnist", checksums)
  data = mnist.load("idx", "mnist", str(tmp_path))
  np.testing.assert_array_equal(data["test"][1], arrays["test"][1])
  with pytest.raises(DataError, match="data_source='hdf5' is not valid"):
    mnist.load("hdf5", "mnist", str(tmp_path))
  with pytest.raises(DataError, match="unknown dataset 'kmnist'"):
    mnist.load("idx", "kmnist", str(tmp_path))


def test_resolve_data_dir_order(tmp_path, monkeypatch):
  monkeypatch.setenv("HOME", str(tmp_path / "home"))
  assert files.resolve_data_dir(None) == tmp_path / "home/.cache/lnorm/data"
  assert files.resolve_data_dir("") == tmp_path / "home/.cache/lnorm/data"
  monkeypatch.setenv(files.DATA_DIR_ENV, str(tmp_path / "env"))
  assert files.resolve_data_dir("") == tmp_path / "env"
  assert files.resolve_data_dir(str(tmp_path / "cfg")) == tmp_path / "cfg"
  assert files.resolve_data_dir("~/cfg") == tmp_path / "home/cfg"


def test_env_var_is_used(tmp_path, monkeypatch):
  arrays, checksums = write_dataset(tmp_path)
  monkeypatch.setenv(files.DATA_DIR_ENV, str(tmp_path))
  data = mnist.load_mnist("mnist", "", checksums=checksums)
  np.testing.assert_array_equal(data["train"][1], arrays["train"][1])


def load_error(tmp_path, checksums, verify=True) -> str:
  with pytest.raises(DataError) as info:
    mnist.load_mnist("mnist", tmp_path, verify=verify, checksums=checksums)
  message = str(info.value)
  assert "\n" not in message
  assert "scripts/download_data.py mnist" in message
  return message


def test_missing_file(tmp_path):
  _, checksums = write_dataset(tmp_path)
  (tmp_path / "mnist/t10k-labels-idx1-ubyte.gz").unlink()
  assert "t10k-labels-idx1-ubyte.gz not found" in load_error(tmp_path, checksums)


def test_missing_directory(tmp_path):
  message = load_error(tmp_path, None)
  assert str(tmp_path / "mnist/train-images-idx3-ubyte.gz") in message


@pytest.mark.parametrize("keep", [20, 0.5, -8])
def test_truncated_gzip(tmp_path, keep):
  _, checksums = write_dataset(tmp_path)
  path = tmp_path / "mnist/train-images-idx3-ubyte.gz"
  raw = path.read_bytes()
  path.write_bytes(raw[:int(len(raw) * keep) if isinstance(keep, float) else keep])
  assert "train-images-idx3-ubyte.gz: cannot read it" in load_error(tmp_path, checksums)


def test_corrupt_gzip(tmp_path):
  _, checksums = write_dataset(tmp_path)
  path = tmp_path / "mnist/train-labels-idx1-ubyte.gz"
  raw = bytearray(path.read_bytes())
  raw[len(raw) // 2] ^= 0xFF  # Breaks the deflate stream or its CRC.
  path.write_bytes(bytes(raw))
  assert "train-labels-idx1-ubyte.gz: cannot read it" in load_error(tmp_path, checksums)


def test_not_gzip(tmp_path):
  _, checksums = write_dataset(tmp_path)
  (tmp_path / "mnist/t10k-images-idx3-ubyte.gz").write_bytes(b"<html>not found</html>")
  assert "t10k-images-idx3-ubyte.gz: cannot read it" in load_error(tmp_path, checksums)


def test_wrong_checksum(tmp_path):
  _, checksums = write_dataset(tmp_path)
  checksums["t10k-images-idx3-ubyte"] = "0" * 32
  message = load_error(tmp_path, checksums)
  assert "t10k-images-idx3-ubyte.gz: MD5 of the uncompressed content" in message
  mnist.load_mnist("mnist", tmp_path, verify=False)  # The content itself is fine.


def test_default_checksums_reject_other_data(tmp_path):
  write_dataset(tmp_path)
  assert "expected 6bbc9ace898e44ae57da46a324031adb" in load_error(tmp_path, None)


def rewrite(tmp_path, stem: str, data: bytes, checksums: dict[str, str]) -> None:
  (tmp_path / "mnist" / f"{stem}.gz").write_bytes(gzip.compress(data))
  checksums[stem] = hashlib.md5(data).hexdigest()


@pytest.mark.parametrize("verify", [True, False])
def test_bad_magic(tmp_path, verify):
  arrays, checksums = write_dataset(tmp_path)
  data = bytearray(idx_bytes(arrays["train"][0]))
  data[2] = 0x0D  # float32 instead of unsigned bytes
  rewrite(tmp_path, "train-images-idx3-ubyte", bytes(data), checksums)
  message = load_error(tmp_path, checksums, verify)
  assert "train-images-idx3-ubyte.gz: not an IDX file" in message
  assert "magic 0x00000d03" in message


def test_labels_file_where_images_expected(tmp_path):
  arrays, checksums = write_dataset(tmp_path)
  rewrite(tmp_path, "train-images-idx3-ubyte", idx_bytes(arrays["train"][1]), checksums)
  assert "expected magic 0x00000803" in load_error(tmp_path, checksums)


def test_wrong_image_size(tmp_path):
  _, checksums = write_dataset(tmp_path)
  rewrite(tmp_path, "t10k-images-idx3-ubyte", idx_bytes(np.zeros((3, 32, 32))), checksums)
  assert "images are 32x32, expected 28x28" in load_error(tmp_path, checksums)


def test_short_payload(tmp_path):
  arrays, checksums = write_dataset(tmp_path)
  rewrite(tmp_path, "t10k-images-idx3-ubyte", idx_bytes(arrays["test"][0])[:-5], checksums)
  assert "data bytes for dims (3, 28, 28)" in load_error(tmp_path, checksums)


def test_count_mismatch(tmp_path):
  _, checksums = write_dataset(tmp_path)
  rewrite(tmp_path, "t10k-labels-idx1-ubyte", idx_bytes(np.zeros(4)), checksums)
  assert "has 3 images but t10k-labels-idx1-ubyte has 4 labels" in load_error(
      tmp_path, checksums)


def test_unreadable_file(tmp_path):
  _, checksums = write_dataset(tmp_path)
  path = tmp_path / "mnist/train-images-idx3-ubyte.gz"
  path.unlink()
  path.mkdir()  # Exists, but reading it is an OSError.
  assert "train-images-idx3-ubyte" in load_error(tmp_path, checksums)


def test_split_train_valid():
  x, y = np.arange(20).reshape(10, 2), np.arange(10)
  (xt, yt), (xv, yv) = mnist.split_train_valid(x, y, num_valid=3)
  np.testing.assert_array_equal(yt, np.arange(7))
  np.testing.assert_array_equal(yv, [7, 8, 9])  # the tail of the training file
  np.testing.assert_array_equal(xv, x[7:])
  with pytest.raises(DataError, match="num_valid=10"):
    mnist.split_train_valid(x, y, num_valid=10)
  with pytest.raises(DataError, match="num_valid=-1"):
    mnist.split_train_valid(x, y, num_valid=-1)


def test_split_train_valid_default_is_the_papers():
  x = np.zeros((60000, 1), np.uint8)
  (xt, _), (xv, _) = mnist.split_train_valid(x, np.zeros(60000))
  assert (len(xt), len(xv)) == (55000, 5000)


# TFDS: tfds.data_source reads array_record without TensorFlow; mock_data with
# MockPolicy.USE_CODE fakes it from the builder's features, no files needed.
@pytest.mark.parametrize("name", mnist.DATASETS)
def test_tfds_mock(tmp_path, name):
  tfds = pytest.importorskip("tensorflow_datasets")
  with tfds.testing.mock_data(num_examples=5, policy=tfds.testing.MockPolicy.USE_CODE):
    data = mnist.load("tfds", name, str(tmp_path))
  for x, y in data.values():
    assert x.shape == (5, 28, 28) and x.dtype == np.uint8
    assert y.shape == (5,) and y.dtype == np.int32
    assert ((0 <= y) & (y < 10)).all()


def test_tfds_not_prepared(tmp_path):
  pytest.importorskip("tensorflow_datasets")
  with pytest.raises(DataError) as info:
    mnist.load_tfds("mnist", tmp_path)
  message = str(info.value)
  assert "\n" not in message
  assert str(tmp_path) in message and "data_source='idx'" in message


# scripts/download_data.py, with file:// mirrors only.
@pytest.fixture
def mirror(tmp_path, monkeypatch):
  """A local mirror of tiny MNIST files that the script downloads from."""
  arrays, checksums = write_dataset(tmp_path / "mirror")
  dataset = download_data.Dataset(
      mirrors=((tmp_path / "absent").as_uri() + "/", (tmp_path / "mirror/mnist").as_uri() + "/"),
      digests={f"{stem}.gz": md5 for stem, md5 in checksums.items()}, algorithm="md5")
  monkeypatch.setitem(download_data.DATASETS, "mnist", dataset)
  return arrays, checksums


def test_download(tmp_path, mirror, capsys):
  arrays, checksums = mirror
  out = tmp_path / "data"
  assert download_data.main(["mnist", "--data_dir", str(out)]) == 0
  assert sorted(p.name for p in (out / "mnist").iterdir()) == sorted(
      f"{stem}.gz" for stem in checksums)
  data = mnist.load_mnist("mnist", out, checksums=checksums)
  np.testing.assert_array_equal(data["train"][0], arrays["train"][0])
  assert capsys.readouterr().out.count("downloaded from file://") == 4
  assert download_data.main(["mnist", "--data_dir", str(out)]) == 0  # Nothing to fetch.
  assert capsys.readouterr().out.count("present and valid") == 4


def test_download_uses_env(tmp_path, mirror, monkeypatch):
  monkeypatch.setenv(files.DATA_DIR_ENV, str(tmp_path / "env"))
  assert download_data.main(["mnist"]) == 0
  assert (tmp_path / "env/mnist/t10k-labels-idx1-ubyte.gz").is_file()


def test_download_replaces_corrupt_file(tmp_path, mirror):
  _, checksums = mirror
  target = tmp_path / "data/mnist/train-labels-idx1-ubyte.gz"
  target.parent.mkdir(parents=True)
  target.write_bytes(b"junk")
  assert download_data.main(["mnist", "--data_dir", str(tmp_path / "data")]) == 0
  mnist.load_mnist("mnist", tmp_path / "data", checksums=checksums)


def test_download_checksum_mismatch(tmp_path, mirror, monkeypatch, capsys):
  dataset = download_data.DATASETS["mnist"]
  digests = dict(dataset.digests, **{"t10k-images-idx3-ubyte.gz": "0" * 32})
  monkeypatch.setitem(download_data.DATASETS, "mnist",
                      dataclasses.replace(dataset, digests=digests))
  out = tmp_path / "data"
  assert download_data.main(["mnist", "--data_dir", str(out)]) == 1
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and err.startswith("error: cannot download t10k-images")
  assert "wrong md5" in err and "Traceback" not in err
  # Files before the bad one are complete; the bad one and temporaries are not there.
  names = {p.name for p in (out / "mnist").iterdir()}
  assert names == {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"}


def test_download_no_mirror_answers(tmp_path, monkeypatch, capsys):
  dataset = dataclasses.replace(download_data.DATASETS["binarized_mnist"],
                                mirrors=((tmp_path / "nowhere").as_uri() + "/",))
  monkeypatch.setitem(download_data.DATASETS, "binarized_mnist", dataset)
  out = tmp_path / "data"
  assert download_data.main(["binarized_mnist", "--data_dir", str(out)]) == 1
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "binarized_mnist_train.amat" in err
  assert list((out / "binarized_mnist").iterdir()) == []


def test_download_sha256_uncompressed(tmp_path, monkeypatch):
  src = tmp_path / "src"
  src.mkdir()
  content = b"0 1 1 0\n" * 3
  (src / "tiny.amat").write_bytes(content)
  dataset = download_data.Dataset(
      mirrors=(src.as_uri() + "/",),
      digests={"tiny.amat": hashlib.sha256(content).hexdigest()}, algorithm="sha256")
  monkeypatch.setitem(download_data.DATASETS, "binarized_mnist", dataset)
  assert download_data.main(["binarized_mnist", "--data_dir", str(tmp_path / "d")]) == 0
  assert (tmp_path / "d/binarized_mnist/tiny.amat").read_bytes() == content


@pytest.mark.skipif(not (REAL_DATA_DIR and (Path(REAL_DATA_DIR) / "mnist").is_dir()),
                    reason="set LNORM_DATA_DIR to a directory holding mnist/")
def test_real_mnist():
  data = mnist.load_mnist("mnist", REAL_DATA_DIR)
  (x, y), (xt, yt) = data["train"], data["test"]
  assert x.shape == (60000, 28, 28) and xt.shape == (10000, 28, 28)
  np.testing.assert_array_equal(y[:10], [5, 0, 4, 1, 9, 2, 1, 3, 1, 4])
  np.testing.assert_array_equal(yt[:10], [7, 2, 1, 0, 4, 1, 4, 9, 5, 9])
  np.testing.assert_array_equal(np.bincount(yt), [980, 1135, 1032, 1010, 982, 892, 958,
                                                  1028, 974, 1009])
