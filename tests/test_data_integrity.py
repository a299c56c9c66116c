"""Every file a loader reads is verified, and a derived cache that is damaged
or cannot be written never stops a run (issue 58, items 3 and 4), on tiny
files written here; copies of the shared data only where noted (read-only,
never changed in place)."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
from pathlib import Path
import tarfile

import numpy as np
import pytest

from lnorm.data import DataError
from lnorm.data import books, bytes_lm, cloze, files, flickr8k
from lnorm.data import iam_ondb as iam
from tests.pinned import pin
from tests.test_iam_ondb import write as write_iam

SHARED = Path(os.environ.get("LNORM_DATA_DIR", "/work/shared/data"))


def one_line(e: pytest.ExceptionInfo) -> str:
  msg = str(e.value)
  assert "\n" not in msg and "Traceback" not in msg
  return msg


# -- Archives: the gzip CRC, which tarfile alone never reads. ------------------

def _stored_novels(root: Path) -> tuple[Path, bytes]:
  """A novels.tar.gz of stored (level 0) deflate blocks, so that a flipped
  byte changes a book's text without upsetting the decompressor: only the
  gzip trailer's CRC can tell. Returns the path and a snippet of a book."""
  path = root / bytes_lm.NOVELS
  path.parent.mkdir(parents=True)
  rng = np.random.default_rng(0)
  snippet = b"It was the best of times, it was the worst of times."
  with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=0,
                                              mtime=0) as gz:
    with tarfile.open(fileobj=gz, mode="w") as tar:
      for k in range(3):
        text = snippet + b"\n" + bytes(rng.integers(97, 123, 3000, dtype=np.uint8))
        info = tarfile.TarInfo(f"novels/book_{k}.txt")
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text))
  return path, snippet


def _flip(path: Path, at: int, n: int = 2) -> None:
  blob = bytearray(path.read_bytes())
  for i in range(at, at + n):
    blob[i] ^= 0x20
  path.write_bytes(bytes(blob))


def test_a_flipped_byte_in_a_tar_gz_is_refused_naming_it(tmp_path, monkeypatch):
  path, snippet = _stored_novels(tmp_path)
  pin(monkeypatch, bytes_lm.NOVELS, path)
  assert len(bytes_lm.read_novels(path)) == 3
  _flip(path, path.read_bytes().index(snippet) + 7)  # "the" -> "THe" in book_0
  # What tarfile alone makes of it: the altered book, and no error.
  with tarfile.open(path, "r:gz") as tar:
    altered = tar.extractfile("novels/book_0.txt").read()
  assert altered.startswith(b"It was THe best")
  # Pinned: the SHA-256 says so first. Unpinned (verify=False): the CRC.
  with pytest.raises(DataError) as e:
    bytes_lm.load_novels(tmp_path, valid=["book_1.txt"], test=["book_2.txt"])
  assert one_line(e).startswith(f"{path}: SHA-256 is ")
  with pytest.raises(DataError) as e:
    bytes_lm.load_novels(tmp_path, valid=["book_1.txt"], test=["book_2.txt"], verify=False)
  assert one_line(e).startswith(f"{path}: cannot read it, truncated or corrupt (CRC check failed")
  # The skip-thoughts reader reads the same archive the same way.
  with pytest.raises(DataError, match="CRC check failed"):
    books.load_novels(tmp_path, heldout=("book_2.txt",), verify=False)


def test_files_tar_files_reads_to_the_trailer(tmp_path):
  path, _ = _stored_novels(tmp_path)
  blob = path.read_bytes()
  # Only the trailer's CRC-32 changed: the members read the same, the end does not.
  path.write_bytes(blob[:-8] + bytes([blob[-8] ^ 1]) + blob[-7:])
  with pytest.raises(DataError, match=r"CRC check failed") as e:
    list(files.tar_files(path))
  assert str(path) in one_line(e)
  # Cut short: a one-line error too, not an EOFError's traceback.
  path.write_bytes(blob[:len(blob) // 2])
  with pytest.raises(DataError, match=r"truncated or corrupt") as e:
    list(files.tar_files(path))
  assert str(path) in one_line(e)


def test_a_damaged_iam_archive_is_refused_without_its_checksum(tmp_path):
  write_iam(tmp_path)
  path = tmp_path / iam.NAME / iam.ARCHIVES[iam.STROKES]
  blob = path.read_bytes()
  path.write_bytes(blob[:-8] + bytes([blob[-8] ^ 1]) + blob[-7:])  # the CRC alone
  with pytest.raises(DataError) as e:
    iam.load(tmp_path, cache_dir=tmp_path / "cache", verify=False)
  assert one_line(e).startswith(f"{path}: cannot read it, truncated or corrupt (CRC check")
  assert not (tmp_path / "cache").exists()


# -- Pinned checksums. ---------------------------------------------------------

def test_pinned_checksums_name_the_file(tmp_path, monkeypatch):
  g = tmp_path / "text" / "gutenberg"
  g.mkdir(parents=True)
  (g / "a.txt").write_text("One sentence .\nTwo .\n")
  with pytest.raises(DataError) as e:
    cloze.read_books(g)
  assert one_line(e).startswith(f"{g}: SHA-256 is ")
  pin(monkeypatch, files.GUTENBERG, g)
  assert [d.name for d in cloze.read_books(g)] == ["gutenberg/a.txt"]
  (g / "b.txt").write_text("A book too many .\n")  # another file counts too
  with pytest.raises(DataError, match="gutenberg: SHA-256 is"):
    cloze.read_books(g)
  with pytest.raises(DataError) as e:
    files.check_sha256(g / "a.txt", "text/nothing-pinned")
  assert "no SHA-256 known for text/nothing-pinned" in one_line(e)


def _jpeg_dir(root: Path) -> Path:
  d = root / flickr8k.NAME
  (d / flickr8k.IMAGES).mkdir(parents=True)
  names = [f"100{i}_abc.jpg" for i in range(2)]
  for i, n in enumerate(names):
    (d / flickr8k.IMAGES / n).write_bytes(b"\xff\xd8 not really a jpeg " + bytes([i]))
  (d / flickr8k.TOKEN_FILE).write_text(
      "\n".join(f"{n}#{k}\tCaption {k} ." for n in names for k in range(5)))
  for split, f in flickr8k.SPLIT_FILES.items():
    (d / f).write_text(names[0] if split == "train" else "")
  return d


def test_flickr8k_standin_is_checked_against_its_readme(tmp_path):
  d = _jpeg_dir(tmp_path)
  with pytest.raises(DataError) as e:
    flickr8k.load(d)
  assert one_line(e).startswith(f"{d / flickr8k.TOKEN_FILE}: SHA-256 is ")
  images = flickr8k.image_files(d)
  sums = {name: hashlib.sha256((d / name).read_bytes()).hexdigest()
          for name in (flickr8k.TOKEN_FILE, *flickr8k.SPLIT_FILES.values())}
  sums[flickr8k.IMAGES] = flickr8k.images_digest(images)
  split, _ = flickr8k.load(d, sums)
  assert [p.name for p in split["train"]] == ["1000_abc.jpg", "1001_abc.jpg"]
  _flip(images[1], 5, 1)
  with pytest.raises(DataError) as e:
    flickr8k.load(d, sums)
  assert one_line(e).startswith(f"{d / flickr8k.IMAGES}: digest of its 2 .jpg files is ")
  # A folder of another name is a Flickr8k of one's own: nothing pinned.
  os.rename(d, tmp_path / "mine")
  assert flickr8k.load(tmp_path / "mine")[1]["1000_abc.jpg"][0] == "Caption 0 ."


@pytest.mark.skipif(not (SHARED / "text").is_dir(), reason="no shared data")
def test_the_pins_are_the_shared_datas():
  for key in files.SHA256:
    if key == files.GUTENBERG:
      files.check_gutenberg(SHARED / key, sorted((SHARED / key).glob("*.txt")))
    else:
      files.check_sha256(SHARED / key, key)
  d = SHARED / flickr8k.NAME
  if d.is_dir():
    flickr8k.verify(d, flickr8k.image_files(d), flickr8k.SHA256)


# -- The IAM-OnDB parse cache. -------------------------------------------------

def _cache_file(cache: Path) -> Path:
  (path,) = (cache / iam.NAME).glob("parsed-*.npz")
  return path


def test_a_damaged_cache_is_rebuilt_with_a_notice_naming_it(tmp_path, capsys):
  sums = write_iam(tmp_path)
  cache = tmp_path / "cache"
  first = iam.load(tmp_path, cache_dir=cache, checksums=sums)
  path = _cache_file(cache)
  good = path.read_bytes()
  # One flipped bit in the rows (a CRC error), a cut, and garbage.
  rows_at = good.index(b"rows.npy")
  for damaged in (good[:rows_at + 200] + bytes([good[rows_at + 200] ^ 0x04]) + good[rows_at + 201:],
                  good[:len(good) // 2], b"garbage"):
    path.write_bytes(damaged)
    capsys.readouterr()
    again = iam.load(tmp_path, cache_dir=cache, checksums=sums)
    err = capsys.readouterr().err
    assert not again.from_cache
    assert err.count("\n") == 1 and err.startswith(f"lnorm: {path}: the IAM-OnDB parse cache "
                                                   "is damaged (")
    assert "rewriting it" in err
    np.testing.assert_array_equal(again.train.rows, first.train.rows)
    # Rewritten whole: the next load reads it, silently.
    assert path.read_bytes() == good
    assert iam.load(tmp_path, cache_dir=cache, checksums=sums).from_cache
    assert capsys.readouterr().err == ""


def test_an_unwritable_cache_is_skipped_with_a_warning_before_the_parse(
    tmp_path, monkeypatch, capsys):
  sums = write_iam(tmp_path)
  blocker = tmp_path / "a_file"
  blocker.write_text("not a folder")  # root ignores permission bits; a file in the way does not
  cache = blocker / "cache"
  parse = iam._parse
  seen = []
  monkeypatch.setattr(iam, "_parse", lambda *a: seen.append(capsys.readouterr().err) or parse(*a))
  ds = iam.load(tmp_path, cache_dir=cache, checksums=sums)
  assert not ds.from_cache and len(ds.train) > 0
  (warning,) = seen  # said before the parse began
  assert warning.count("\n") == 1 and warning.startswith(
      f"lnorm: warning: cannot write the IAM-OnDB parse cache in {cache / iam.NAME} (")
  assert "LNORM_CACHE_DIR" in warning
  assert blocker.read_text() == "not a folder"
  # Through $LNORM_CACHE_DIR, as a run finds it.
  monkeypatch.setenv("LNORM_CACHE_DIR", str(cache))
  assert len(iam.load(tmp_path, checksums=sums).train) == len(ds.train)


def test_nothing_is_left_when_the_data_is_refused(tmp_path):
  # The writability probe makes and removes its folders: a load that then
  # fails leaves no cache folder behind.
  assert files.unwritable(tmp_path / "x" / "y") is None
  assert not (tmp_path / "x").exists()
  assert files.unwritable(tmp_path) is None
  assert sorted(tmp_path.iterdir()) == []


def test_atomic_write_leaves_the_old_file_or_the_new_one(tmp_path):
  path = tmp_path / "c" / "f.npz"
  files.atomic_write(path, lambda f: f.write(b"old"))

  def half(f):
    f.write(b"half of the new")
    raise KeyboardInterrupt  # a kill between the first and the last byte

  with pytest.raises(KeyboardInterrupt):
    files.atomic_write(path, half)
  assert path.read_bytes() == b"old"
  assert sorted(p.name for p in path.parent.iterdir()) == ["f.npz"]  # no temporary left


# -- The reader's missing stand-in. ---------------------------------------------

def test_missing_standin_says_to_build_it_into_a_writable_folder(tmp_path, monkeypatch):
  from configs import reader as reader_config
  from experiments import reader as exp
  monkeypatch.setenv("LNORM_DATA_DIR", str(tmp_path / "shared"))
  with pytest.raises(DataError) as e:
    exp._questions(reader_config.get_config("smoke"), "training", 0)
  msg = one_line(e)
  assert "build the stand-in into a folder you can write, DIR, with `LNORM_DATA_DIR=DIR python " \
      f"scripts/make_cloze.py --standin cnn_standin_4 --text_dir {tmp_path / 'shared' / 'text'}`" \
      ", then point --config.data_dir=DIR (or $LNORM_DATA_DIR) at it" in msg
  assert f"writes into {tmp_path / 'shared'}" not in msg
