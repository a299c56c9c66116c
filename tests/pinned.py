"""Pinning the checksum of a file a test wrote, for loaders that check the
shared corpora against ``lnorm.data.files.SHA256``."""

from __future__ import annotations

from pathlib import Path

from lnorm.data import files


def pin(monkeypatch, key: str, path: Path) -> None:
  """``files.SHA256[key]`` := the SHA-256 of ``path`` (a folder: of its
  ``*.txt`` concatenated in name order, as for text/gutenberg), for this
  test only."""
  path = Path(path)
  digest = (files.concat_sha256(sorted(path.glob("*.txt"))) if path.is_dir()
            else files.sha256_file(path))
  monkeypatch.setitem(files.SHA256, key, digest)
