"""--help's field comments (experiments/runner/confighelp.py): every field of
every config, under every preset, shows the comment of its own declaration,
read here from the source's lines by a regular expression, not by the ast walk
--help uses."""

import ast
import re
from pathlib import Path

import ml_collections
import pytest

from experiments.runner import confighelp

CONFIGS = sorted(p for p in confighelp.CONFIGS.glob("*.py") if p.name != "__init__.py")


def _declared(source: str) -> dict[str, str]:
  """Field -> comment of its first ``c.<field> = ...`` line at the function
  body's indent: the trailing ``# ...`` with the comment lines aligned under it,
  else the comment lines just above."""
  lines, out = source.splitlines(), {}
  for i, line in enumerate(lines):
    m = re.match(r"  c\.(\w+) = [^#]*?(?:\s+#\s?(.*))?$", line)
    if not m or m.group(1) in out:
      continue
    if m.group(2):
      col, text, j = line.index("#", m.start(2) - 2), [m.group(2).strip()], i + 1
      while j < len(lines) and lines[j].strip().startswith("#") \
          and lines[j].index("#") == col:
        text.append(lines[j].strip()[1:].strip())
        j += 1
    else:
      text, j = [], i - 1
      while j >= 0 and lines[j].strip().startswith("#"):
        text.insert(0, lines[j].strip()[1:].strip())
        j -= 1
    out[m.group(1)] = " ".join(text)
  return out


def _rows(text: str) -> dict[str, str]:
  """Field -> what --help prints after its value."""
  out = {}
  for line in text.splitlines():
    m = re.match(r"  (\w+) = (.*)$", line)
    if m:
      out[m.group(1)] = m.group(2)
  return out


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_field_under_every_preset_shows_its_declarations_comment(path):
  source = path.read_text()
  declared = _declared(source)
  module = {}
  exec(compile(source, str(path), "exec"), module)  # pylint: disable=exec-used
  presets = confighelp._presets(source)  # pylint: disable=protected-access
  assert len(presets) >= 3, presets
  for preset in presets:
    config = module["get_config"](preset)
    rows = _rows(confighelp.describe(f"{path}:{preset}", config))
    assert set(rows) == set(config.keys()), preset
    for field in config.keys():
      comment = declared[field]
      assert comment, f"{path.name}: {field} has no comment"
      shown = rows[field]
      # "value  [default: value] comment (preset: its own comment)"
      after = shown.split("  ", 1)[1].strip() if "  " in shown else ""
      after = re.sub(r"^\[[^\]]*\] ", "", after) if after.startswith("[") else after
      assert after.startswith(comment), (path.name, preset, field, shown)


def test_a_comment_above_a_preset_line_setting_several_fields_is_none_of_theirs(tmp_path):
  source = (
      "def get_config(preset='a'):\n"
      "  c = {}\n"
      "  c.x = 1   # x's meaning\n"
      "  # y's meaning\n"
      "  c.y = 2\n"
      "  c.z = 3   # z's meaning,\n"
      "            # continued\n"
      "  if preset == 'a':\n"
      "    pass\n"
      "  elif preset == 'b':\n"
      "    # about preset b\n"
      "    c.x, c.y = 10, 20  # both for b\n"
      "    c.z = 30  # z for b\n"
      "  return c\n")
  path = tmp_path / "cfg.py"
  path.write_text(source.replace("c = {}", "import ml_collections\n"
                                 "  c = ml_collections.ConfigDict()"))
  config = ml_collections.ConfigDict({"x": 10, "y": 20, "z": 30})
  rows = _rows(confighelp.describe(f"{path}:b", config))
  assert rows["x"].endswith("[a: 1] x's meaning")
  assert rows["y"].endswith("[a: 2] y's meaning")
  assert rows["z"].endswith("[a: 3] z's meaning, continued (b: z for b)")
  assert _declared(source) == {"x": "x's meaning", "y": "y's meaning",
                               "z": "z's meaning, continued"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_docstring_is_short_and_links_results_that_exist(path):
  """At most 30 lines (issue 61): the section, the command, the presets with
  their runtime, and where the results are (which must exist)."""
  doc = ast.get_docstring(ast.parse(path.read_text()))
  assert len(doc.splitlines()) <= 30, len(doc.splitlines())
  assert "python " in doc and "Presets" in doc
  linked = re.findall(r"results/[\w/]+results\.md", doc)
  assert linked, "no results/<target>/results.md"
  for link in linked:
    assert (confighelp.CONFIGS.parent / link).is_file(), link
