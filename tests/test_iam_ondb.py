"""IAM-OnDB loader on tiny lineStrokes / ascii files written here (nothing is
read from /work/shared)."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
import tarfile

import numpy as np
import pytest

from lnorm.data import DataError, iam_ondb as iam

# form -> strokes per line (each a list of (x, y) points); the form's CSR lines.
FORMS = {
    "a01-000u": ([[[(10, 20), (13, 24), (15, 21)], [(30, 20), (31, 25)]],
                  [[(5, 5), (9, 1), (9, 1), (12, 3)]]],
                 ["A MOVE to stop,", 'he said "no" 42']),
    "a01-000x": ([[[(0, 0), (2, 7)], [(4, 4), (6, 1), (1, 1)]]], ["one line"]),
    "b02-113": ([[[(1, 1), (4, 5), (8, 2)]], [[(0, 3), (3, 0)]], [[(7, 7), (9, 9)]]],
                ["first", "second"]),  # line 3 has no transcription
    "c03-001z": ([[[(2, 2), (5, 3)]]], None),  # no ascii file at all
}
for k in range(12):  # more forms, so that the hash split fills all three sides
  FORMS[f"d{k:02d}-{k:03d}"] = ([[[(0, 0), (k + 1, 2), (2 * k + 3, 1)]]], [f"text {k}"])


def line_xml(strokes, with_stroke_set: bool = True) -> bytes:
  body = "".join(
      "<Stroke colour=\"black\">" +
      "".join(f'<Point x="{x}" y="{y}" time="0.0"/>' for x, y in s) + "</Stroke>"
      for s in strokes)
  inner = f"<StrokeSet>{body}</StrokeSet>" if with_stroke_set else body
  return ('<?xml version="1.0" encoding="ISO-8859-1"?>\n<WhiteboardCaptureSession>'
          '<WhiteboardDescription/>' + inner + '</WhiteboardCaptureSession>').encode()


def ascii_txt(csr) -> bytes:
  return ("OCR:\n\nsome prompt text\n\nCSR:\n\n" + "\n".join(csr) + "\n").encode()


def files(forms=FORMS) -> dict[str, dict[str, bytes]]:
  out = {iam.STROKES: {}, iam.ASCII: {}}
  for form, (lines, csr) in forms.items():
    d = f"{form[:3]}/{form[:7]}"
    for n, strokes in enumerate(lines, 1):
      out[iam.STROKES][f"lineStrokes/{d}/{form}-{n:02d}.xml"] = line_xml(strokes)
    if csr is not None:
      out[iam.ASCII][f"ascii/{d}/{form}.txt"] = ascii_txt(csr)
  return out


def tar_gz(members: dict[str, bytes]) -> bytes:
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w:gz") as tf:
    for name in sorted(members):
      info = tarfile.TarInfo(name)
      info.size = len(members[name])
      tf.addfile(info, io.BytesIO(members[name]))
  return buf.getvalue()


def write(root: Path, archive: bool = True, forms=FORMS) -> dict[str, str]:
  """Writes root/iam_ondb/; returns the checksums of what it wrote."""
  d = root / iam.NAME
  d.mkdir(parents=True, exist_ok=True)
  sums = {}
  for kind, members in files(forms).items():
    if archive:
      data = tar_gz(members)
      (d / iam.ARCHIVES[kind]).write_bytes(data)
      sums[kind] = hashlib.sha256(data).hexdigest()
    else:
      for name, data in members.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(data)
      sums[kind] = iam.content_digest(iter(members.items()))
  return sums


def expected_rows(strokes) -> np.ndarray:
  """Independent of the loader: offsets to each point after the first, and
  whether that point ends its stroke; a first stroke of one point is a row
  (0, 0, 1) of its own, so that its pen lift is kept."""
  pts = [(x, y, k == len(s) - 1) for s in strokes for k, (x, y) in enumerate(s)]
  rows = [(b[0] - a[0], b[1] - a[1], int(b[2])) for a, b in zip(pts, pts[1:])]
  if len(strokes[0]) == 1:
    rows.insert(0, (0, 0, 1))
  return np.asarray(rows, np.float64).reshape(-1, 3)


def decode_strokes(rows: np.ndarray) -> list[list[tuple[int, int]]]:
  """Rows back to strokes, the line's first point at (0, 0), by walking them:
  a check that every stroke's last point carries the pen lift."""
  strokes, pos, cur = [], (0, 0), [(0, 0)]
  for k, (dx, dy, eos) in enumerate(np.asarray(rows).round().astype(int).tolist()):
    if k == 0 and (dx, dy) == (0, 0) and eos:
      strokes.append(cur)  # the first point, a stroke of its own
      cur = []
      continue
    pos = (pos[0] + dx, pos[1] + dy)
    cur.append(pos)
    if eos:
      strokes.append(cur)
      cur = []
  assert not cur, "the last point has no pen lift"
  return strokes


def relative(strokes) -> list[list[tuple[int, int]]]:
  x0, y0 = strokes[0][0]
  return [[(x - x0, y - y0) for x, y in s] for s in strokes]


def all_lines(ds):
  return {i: (s, ds_split.line(k), ds_split.texts[k])
          for s in iam.SPLITS for ds_split in [getattr(ds, s)]
          for k, i in enumerate(ds_split.ids)}


@pytest.mark.parametrize("archive", [True, False])
def test_pairs_lines_with_csr_and_skips_untranscribed(tmp_path, archive):
  sums = write(tmp_path, archive)
  ds = iam.load(tmp_path, cache_dir=tmp_path / "cache", checksums=sums)
  got = all_lines(ds)
  assert sorted(ds.skipped) == ["b02-113-03", "c03-001z-01"]
  assert ds.num_files == sum(len(l) for l, _ in FORMS.values())
  assert len(got) == ds.num_files - 2
  for form, (lines, csr) in FORMS.items():
    for n, strokes in enumerate(lines, 1):
      line_id = f"{form}-{n:02d}"
      if line_id in ds.skipped:
        continue
      _, rows, text = got[line_id]
      assert text == csr[n - 1]
      want = expected_rows(strokes)
      np.testing.assert_allclose(rows[:, :2] * ds.scale, want[:, :2], rtol=1e-5)
      np.testing.assert_array_equal(rows[:, 2], want[:, 2])


def test_scale_is_std_of_training_offsets(tmp_path):
  sums = write(tmp_path)
  ds = iam.load(tmp_path, cache_dir=tmp_path / "cache", checksums=sums)
  raw = []
  for form, (lines, _) in FORMS.items():
    for n, strokes in enumerate(lines, 1):
      if f"{form}-{n:02d}" in ds.train.ids:
        raw.append(expected_rows(strokes)[:, :2])
  raw = np.concatenate(raw)
  np.testing.assert_allclose(ds.scale, raw.std(0), rtol=1e-12)
  np.testing.assert_allclose(np.concatenate([ds.train.line(k) for k in range(len(ds.train))])[:, :2].std(0),
                             1.0, rtol=1e-5)


def test_split_by_form_is_deterministic(tmp_path):
  sums = write(tmp_path)
  ds = iam.load(tmp_path, cache_dir=tmp_path / "cache", checksums=sums)
  side = {}
  for s in iam.SPLITS:
    for i in getattr(ds, s).ids:
      assert side.setdefault(iam.form_of(i), s) == s  # a form never straddles
      assert iam.hash_split(iam.form_of(i)) == s
  assert {len(getattr(ds, s)) > 0 for s in iam.SPLITS} == {True}
  assert ds.split_source == "hash"


def test_official_split_files(tmp_path):
  sums = write(tmp_path)
  d = tmp_path / iam.NAME
  (d / "trainset.txt").write_text("a01-000u\nd00-000\n")
  (d / "testset_t.txt").write_text("b02-113-01\n")  # line ids work too
  (d / "testset_v.txt").write_text("a01-000x\n")
  (d / "testset_f.txt").write_text("d01-001\nb02-113-02\n")
  ds = iam.load(tmp_path, cache_dir=tmp_path / "cache", checksums=sums)
  assert ds.split_source == "official"
  assert sorted(ds.train.ids) == ["a01-000u-01", "a01-000u-02", "b02-113-01", "d00-000-01"]
  assert ds.valid.ids == ("a01-000x-01",)
  assert sorted(ds.test.ids) == ["b02-113-02", "d01-001-01"]
  (d / "testset_f.txt").unlink()
  with pytest.raises(DataError, match="testset_f.txt"):
    iam.load(tmp_path, cache_dir=tmp_path / "cache", checksums=sums)


def test_cache_hit_and_key(tmp_path):
  sums = write(tmp_path)
  cache = tmp_path / "cache"
  first = iam.load(tmp_path, cache_dir=cache, checksums=sums)
  assert not first.from_cache and len(list((cache / iam.NAME).glob("parsed-*.npz"))) == 1
  second = iam.load(tmp_path, cache_dir=cache, checksums=sums)
  assert second.from_cache
  assert second.train.ids == first.train.ids and second.train.texts == first.train.texts
  np.testing.assert_array_equal(second.train.rows, first.train.rows)
  # Other archives, another key: parsed afresh, not served the old arrays.
  forms = dict(FORMS)
  forms["a01-000x"] = ([[[(0, 0), (50, 70)]]], ["changed"])
  sums2 = write(tmp_path, forms=forms)
  third = iam.load(tmp_path, cache_dir=cache, checksums=sums2)
  assert not third.from_cache
  assert dict(zip(third.valid.ids + third.train.ids + third.test.ids,
                  third.valid.texts + third.train.texts + third.test.texts))["a01-000x-01"] == "changed"
  # An unreadable cache file is parsed again, not an error.
  for f in (cache / iam.NAME).glob("parsed-*.npz"):
    f.write_bytes(b"garbage")
  assert not iam.load(tmp_path, cache_dir=cache, checksums=sums2).from_cache


def test_folder_digest_matches_archive(tmp_path):
  a, f = tmp_path / "a", tmp_path / "f"
  sums_a, sums_f = write(a, True), write(f, False)
  for kind in (iam.STROKES, iam.ASCII):
    src = iam._Source(kind, a / iam.NAME / iam.ARCHIVES[kind], True)
    assert iam.content_digest(src.members()) == sums_f[kind]
  da = iam.load(a, cache_dir=tmp_path / "c", checksums=sums_a)
  df = iam.load(f, cache_dir=tmp_path / "c", checksums=sums_f)
  assert da.train.ids == df.train.ids
  np.testing.assert_array_equal(da.train.rows, df.train.rows)


def test_known_checksums_reject_other_archives(tmp_path):
  write(tmp_path)
  cache = tmp_path / "cache"
  with pytest.raises(DataError, match=r"lineStrokes-all.tar.gz: SHA-256 is [0-9a-f]{64}, expected "
                     + iam.SHA256[iam.STROKES]):
    iam.load(tmp_path, cache_dir=cache)
  assert not cache.exists()


def one_line(e: pytest.ExceptionInfo) -> str:
  msg = str(e.value)
  assert "\n" not in msg
  return msg


@pytest.mark.parametrize("verify", [True, False])
def test_truncated_archive(tmp_path, verify):
  sums = write(tmp_path)
  path = tmp_path / iam.NAME / iam.ARCHIVES[iam.STROKES]
  path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])
  cache = tmp_path / "cache"
  with pytest.raises(DataError) as e:
    iam.load(tmp_path, cache_dir=cache, checksums=sums, verify=verify)
  msg = one_line(e)
  assert str(path) in msg and "FKI" in msg
  assert ("SHA-256 is" if verify else "truncated or corrupt") in msg
  assert not cache.exists()


def test_xml_without_stroke_set(tmp_path):
  forms = dict(FORMS)
  members = files(forms)
  bad = "lineStrokes/a01/a01-000/a01-000x-01.xml"
  members[iam.STROKES][bad] = line_xml(FORMS["a01-000x"][0][0], with_stroke_set=False)
  d = tmp_path / iam.NAME
  d.mkdir()
  for kind, m in members.items():
    (d / iam.ARCHIVES[kind]).write_bytes(tar_gz(m))
  cache = tmp_path / "cache"
  with pytest.raises(DataError, match="a01-000x-01.xml: no <StrokeSet>") as e:
    iam.load(tmp_path, cache_dir=cache, verify=False)
  one_line(e)
  assert not cache.exists()
  members[iam.STROKES][bad] = b"<WhiteboardCaptureSession><StrokeSet>"
  (d / iam.ARCHIVES[iam.STROKES]).write_bytes(tar_gz(members[iam.STROKES]))
  with pytest.raises(DataError, match="a01-000x-01.xml: not valid XML"):
    iam.load(tmp_path, cache_dir=cache, verify=False)


def test_missing_files(tmp_path):
  with pytest.raises(DataError, match="iam_ondb/ not found.*FKI"):
    iam.load(tmp_path, cache_dir=tmp_path / "cache")
  write(tmp_path)
  (tmp_path / iam.NAME / iam.ARCHIVES[iam.ASCII]).unlink()
  with pytest.raises(DataError, match=r"ascii-all.tar.gz not found \(nor .*ascii/\)") as e:
    iam.load(tmp_path, cache_dir=tmp_path / "cache")
  one_line(e)


def test_alphabet_and_encode():
  assert iam.NUM_CHARS == 57 and len(set(iam.ALPHABET)) == 57
  ids = iam.encode('Hi, "x" 4!')
  assert ids.dtype == np.int32 and ids.tolist()[0] == iam.ALPHABET.index("H")
  assert ids[-2] == iam.UNKNOWN and ids[-1] == iam.UNKNOWN
  assert iam.decode(ids) == 'Hi, "x" ??'


def test_batch_shift_pad_and_points(tmp_path):
  sums = write(tmp_path)
  ds = iam.load(tmp_path, cache_dir=tmp_path / "cache", checksums=sums)
  split = ds.train
  lengths = split.lengths()
  b = iam.batch(split, [0, 1], max_len=3)
  assert b["inputs"].shape == b["targets"].shape == (2, 3, 3)
  for k in range(2):
    n = min(lengths[k], 3)
    np.testing.assert_array_equal(b["targets"][k, :n], split.line(k)[:n])
    assert b["mask"][k].tolist() == [True] * n + [False] * (3 - n)
    np.testing.assert_array_equal(b["inputs"][k, 0], 0)
    np.testing.assert_array_equal(b["inputs"][k, 1:], b["targets"][k, :-1])
    text = iam.encode(split.texts[k])
    np.testing.assert_array_equal(b["chars"][k, :len(text)], text)
    assert b["char_mask"][k].sum() == len(text)
  assert iam.batch(split, [0], max_len=4, max_chars=2)["chars"].shape == (1, 2)
  # to_points undoes the offsets: the strokes of the first training line.
  line_id = split.ids[0]
  form, n = iam.form_of(line_id), int(line_id.rsplit("-", 1)[1])
  strokes = FORMS[form][0][n - 1]
  got = iam.to_points(split.line(0), ds.scale)
  x0, y0 = strokes[0][0]
  assert len(got) == len(strokes)
  for g, s in zip(got, strokes):
    np.testing.assert_allclose(g, np.asarray(s, float) - (x0, y0), atol=1e-4)


def load_all(tmp_path, forms):
  sums = write(tmp_path, forms=forms)
  ds = iam.load(tmp_path, cache_dir=tmp_path / "cache", checksums=sums)
  return ds, all_lines(ds)


def test_csr_lines_break_at_percent_runs():
  text = "OCR:\r\n\r\nCSR:\r\n\r\nand there\r\nweeks to bone %%%%%%%%%%% pinned.\r\n"
  assert iam.csr_lines(text) == ["and there", "weeks to bone", "pinned."]
  text = "CSR:\nfirst\n%%%%%%%%%%%\nsecond\n  %%% \nthird %\n"
  assert iam.csr_lines(text) == ["first", "second", "third"]
  assert iam.csr_lines("OCR: no transcription") is None


def test_percent_run_is_a_line_break(tmp_path):
  # As in a08-551z: the CSR line 8 is lines 8 and 9 with '%'s between them.
  one = [[(0, 0), (3, 1)]]
  forms = dict(FORMS)
  forms["e05-551z"] = ([one] * 3, ["one", "two %%%%%%%%%%% three."])
  forms["e05-552z"] = ([one] * 3, ["one", "%%%%%%%%%%%", "two", "three."])
  ds, got = load_all(tmp_path, forms)
  for form in ("e05-551z", "e05-552z"):
    assert [got[f"{form}-{n:02d}"][2] for n in (1, 2, 3)] == ["one", "two", "three."]
    assert not [i for i in ds.skipped if i.startswith(form)]


def test_placeholder_text_is_skipped_and_counted(tmp_path):
  forms = dict(FORMS)
  forms["z00-001"] = ([[[(0, 0), (3, 1)]]], ["Please Enter Transcription here"])
  forms["z01-000z"] = ([[[(0, 0), (3, 1)]]] * 3, ["Please Enter Transcription here "])
  ds, got = load_all(tmp_path, forms)
  assert sorted(ds.placeholders) == ["z00-001-01", "z01-000z-01"]
  assert sorted(ds.skipped) == ["b02-113-03", "c03-001z-01", "z01-000z-02", "z01-000z-03"]
  assert not [i for i in got if i.startswith("z0")]
  assert "Please" not in "".join(t for _, _, t in got.values())
  assert "2 with the placeholder text" in ds.counts()
  again = iam.load(tmp_path, cache_dir=tmp_path / "cache", checksums=write(tmp_path, forms=forms))
  assert again.from_cache and again.placeholders == ds.placeholders


# Strokes whose first is one point (a tap before the writing), with the rows
# worked out by hand: the tap's pen lift is a row (0, 0, 1), the move from it
# to the next stroke a row of its own.
TAP = [[(5, 5)], [(7, 9), (8, 8)], [(1, 1)], [(3, 3), (4, 0)]]
TAP_ROWS = [(0, 0, 1), (2, 4, 0), (1, -1, 1), (-7, -7, 1), (2, 2, 0), (1, -3, 1)]


def test_single_point_first_stroke_keeps_its_pen_lift(tmp_path):
  rows = iam.parse_strokes(line_xml(TAP), "tap.xml")
  np.testing.assert_array_equal(rows, TAP_ROWS)
  np.testing.assert_array_equal(expected_rows(TAP), TAP_ROWS)
  assert decode_strokes(rows) == relative(TAP)
  two = [[(5, 5)], [(6, 6)], [(7, 9), (8, 8)]]  # a second tap: an ordinary row
  assert decode_strokes(iam.parse_strokes(line_xml(two), "two.xml")) == relative(two)
  forms = dict(FORMS)
  forms["e06-000"] = ([TAP, [[(1, 1)], [(2, 2), (4, 4)]]], ["tap", "dot"])
  ds, got = load_all(tmp_path, forms)
  for form, (lines, csr) in forms.items():
    for n, strokes in enumerate(lines, 1):
      line_id = f"{form}-{n:02d}"
      if line_id not in got:
        continue
      line = got[line_id][1]
      # Every stroke's last point carries the pen lift, and nothing else does.
      assert int(line[:, 2].sum()) == len(strokes)
      raw = np.concatenate([line[:, :2] * ds.scale, line[:, 2:]], 1)
      assert decode_strokes(raw) == relative(strokes)
      pts = iam.to_points(line, ds.scale)
      assert [np.round(p).astype(int).tolist() for p in pts] == [
          [list(q) for q in s] for s in relative(strokes)]


def test_cache_key_changes_with_reader_version(tmp_path, monkeypatch):
  a, b = "1" * 64, "2" * 64
  key = iam.cache_key(a, b)
  assert key == iam.cache_key(a, b, iam.READER_VERSION)
  assert iam.cache_key(a, b, iam.READER_VERSION + 1) != key
  assert iam.cache_key(b, a) != key
  assert iam.READER_VERSION >= 2  # 1: '%' runs, placeholders and first taps misread
  sums = write(tmp_path)
  cache = tmp_path / "cache"
  assert not iam.load(tmp_path, cache_dir=cache, checksums=sums).from_cache
  assert iam.load(tmp_path, cache_dir=cache, checksums=sums).from_cache
  monkeypatch.setattr(iam, "READER_VERSION", iam.READER_VERSION + 1)
  assert not iam.load(tmp_path, cache_dir=cache, checksums=sums).from_cache
  assert len(list((cache / iam.NAME).glob("parsed-*.npz"))) == 2
