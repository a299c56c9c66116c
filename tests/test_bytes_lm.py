"""Byte-level LM data (lnorm/data/bytes_lm.py) on tiny files the tests write."""

import hashlib
import os
import zipfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lnorm.data import DataError
from lnorm.data import bytes_lm
from tests.tiny_data import write_novels

SHARED = Path(os.environ.get("LNORM_DATA_DIR", "/work/shared/data"))


def test_books_split_whole_and_in_name_order(tmp_path, monkeypatch):
  books = {f"b{i:02d}.txt": f"book {i} text é\n" * 3 for i in range(25)}
  write_novels(tmp_path, books, monkeypatch)
  train, valid, test = bytes_lm.split_rule(list(books))
  assert test == ["b00.txt", "b20.txt"] and valid == ["b10.txt"]
  assert len(train) == 22
  s = bytes_lm.load_novels(tmp_path, valid, test)
  assert s.train.dtype == np.uint8 and s.source == "novels"
  # Each book ends with a blank line; held-out books only in their split.
  want = lambda names: "".join(books[n].strip("\n") + "\n\n" for n in sorted(names))
  assert s.valid.tobytes().decode() == want(valid)
  assert s.test.tobytes().decode() == want(test)
  assert s.train.tobytes().decode() == want(train)
  assert "b10.txt" in s.description
  # Records keep the description: the archive relative to the data folder,
  # not this machine's path.
  assert s.description.startswith(f"{bytes_lm.NOVELS}: 22 training books; ")
  assert str(tmp_path) not in s.description


def test_clean_book_drops_credits_and_markers_only():
  text = ("Produced by Someone, email x@y.org\nand the Online Distributed\n"
          "Proofreading Team\n\n\nTHE TITLE\n\nby AN AUTHOR\n\n"
          "[Illustration: a picture\n   over two lines]\nChapter one. It began\n"
          + "line\n" * 50 + "\nLater text about www.example.com stays.\n")
  out = bytes_lm.clean_book(text)
  assert "Produced" not in out and "Proofreading" not in out
  assert "Illustration" not in out and "over two lines" not in out
  assert "THE TITLE\n\nby AN AUTHOR\n\nChapter one. It began\n" in out
  # Past the first 40 lines nothing is touched, nor a long paragraph.
  assert "line\n" * 50 in out
  long = "Produced by a press.\n" + "text\n" * 8
  assert bytes_lm.clean_book(long) == long
  assert out.endswith("Later text about www.example.com stays.\n")


def test_windows_numpy_and_jax_agree():
  data = np.arange(50, dtype=np.uint8)
  T = 7
  n = bytes_lm.num_windows(len(data), T)
  assert n == 7  # (50 - 1) // 7
  w = bytes_lm.windows(data, np.arange(n), T)
  assert w.shape == (n, T + 1) and w.dtype == np.uint8
  # Consecutive windows share one byte; every byte after the first is a target once.
  np.testing.assert_array_equal(w[:-1, -1], w[1:, 0])
  np.testing.assert_array_equal(w[:, 1:].ravel(), data[1:1 + n * T])
  wj = jax.jit(lambda d, i: bytes_lm.windows(d, i, T, offset=1))(jnp.asarray(data),
                                                                  jnp.arange(3))
  np.testing.assert_array_equal(np.asarray(wj), bytes_lm.windows(data, np.arange(3), T, 1))
  r = np.asarray(bytes_lm.random_windows(jax.random.key(0), jnp.asarray(data), 16, T))
  assert r.shape == (16, T + 1)
  np.testing.assert_array_equal(np.diff(r.astype(int), axis=1), 1)  # contiguous, in range
  assert bytes_lm.eval_windows(data, T, 2).shape == (2, T + 1)


def test_enwik8_standard_split_on_a_tiny_file(tmp_path):
  raw = np.random.default_rng(0).integers(0, 256, 1000).astype(np.uint8)
  (tmp_path / "enwik8").write_bytes(raw.tobytes())
  # Not enwik8: its MD5 is not the published one.
  with pytest.raises(DataError, match=r"enwik8: MD5 of the enwik8 bytes is [0-9a-f]{32}, "
                     f"expected {bytes_lm.ENWIK8_MD5}"):
    bytes_lm.load_enwik8(tmp_path, split=(900, 50, 50))
  md5 = hashlib.md5(raw.tobytes()).hexdigest()
  s = bytes_lm.load_enwik8(tmp_path, split=(900, 50, 50), md5=md5)
  np.testing.assert_array_equal(s.train, raw[:900])
  np.testing.assert_array_equal(s.valid, raw[900:950])
  np.testing.assert_array_equal(s.test, raw[950:])
  assert s.source == "enwik8"
  # The standard 90M / 5M / 5M split on a 1000-byte file: one line, no traceback.
  with pytest.raises(DataError, match=r"1,000 bytes, fewer than the 100,000,000"):
    bytes_lm.load_enwik8(tmp_path)
  # The zip it is distributed as.
  (tmp_path / "enwik8").unlink()
  with zipfile.ZipFile(tmp_path / "enwik8.zip", "w") as z:
    z.writestr("enwik8", raw.tobytes())
  np.testing.assert_array_equal(bytes_lm.load_enwik8(tmp_path, (900, 50, 50), md5).test,
                                raw[950:])
  # A damaged member: the zip's CRC, named in one line, even unpinned.
  blob = bytearray((tmp_path / "enwik8.zip").read_bytes())
  blob[blob.index(raw.tobytes()[:64]) + 10] ^= 0x01
  (tmp_path / "enwik8.zip").write_bytes(bytes(blob))
  with pytest.raises(DataError, match=r"enwik8.zip: cannot read it \(Bad CRC-32"):
    bytes_lm.load_enwik8(tmp_path, (900, 50, 50), None)


def _one_line(e: pytest.ExceptionInfo) -> str:
  msg = str(e.value)
  assert "\n" not in msg
  return msg


def test_bad_input_is_one_line(tmp_path, monkeypatch):
  with pytest.raises(DataError) as e:
    bytes_lm.load_novels(tmp_path / "nowhere")
  assert "novels.tar.gz not found" in _one_line(e)
  with pytest.raises(DataError) as e:
    bytes_lm.load_enwik8(tmp_path)
  assert "enwik8 not found" in _one_line(e)
  with pytest.raises(DataError) as e:
    bytes_lm.load_text_dir(tmp_path / "missing", [], [])
  assert "not found" in _one_line(e)
  with pytest.raises(DataError) as e:
    bytes_lm.load("wiki103", tmp_path)
  assert "choose one of: novels, enwik8" in _one_line(e)
  (tmp_path / bytes_lm.NOVELS).parent.mkdir(parents=True)
  (tmp_path / bytes_lm.NOVELS).write_bytes(b"not a gzip")
  with pytest.raises(DataError) as e:
    bytes_lm.load_novels(tmp_path)
  assert "novels.tar.gz: SHA-256 is" in _one_line(e)
  with pytest.raises(DataError) as e:
    bytes_lm.load_novels(tmp_path, verify=False)
  assert "cannot read it" in _one_line(e)
  # Too little text for one window.
  write_novels(tmp_path, {"a.txt": "x" * 100, "b.txt": "short", "c.txt": "tiny"}, monkeypatch)
  s = bytes_lm.load_novels(tmp_path, valid=["b.txt"], test=["c.txt"])
  s.check(seq_len=5)
  with pytest.raises(DataError) as e:
    s.check(seq_len=64)
  assert "the valid split holds 7 bytes, fewer than one window of seq_len + 1 = 65" == \
      _one_line(e).split(": ", 1)[1]
  with pytest.raises(DataError) as e:
    bytes_lm.num_windows(10, 10)
  _one_line(e)
  with pytest.raises(DataError) as e:
    bytes_lm.load_novels(tmp_path, valid=["zz.txt"], test=["c.txt"])
  assert "zz.txt not among" in _one_line(e)


@pytest.mark.skipif(not (SHARED / bytes_lm.NOVELS).is_file(), reason="no shared novels")
def test_the_documented_rule_gives_the_fixed_held_out_books():
  names = list(bytes_lm.read_novels(SHARED / bytes_lm.NOVELS))
  assert len(names) == 99
  _, valid, test = bytes_lm.split_rule(names)
  assert tuple(valid) == bytes_lm.VALID_BOOKS and tuple(test) == bytes_lm.TEST_BOOKS
