"""``--help`` for a config: its fields with their comments and defaults, its
presets, and the configs there are. Comments come from the config file's source:
a field's comment is that of its declaration, the first ``c.<field> = value``
(``# comment`` at the end of the line and the comment lines aligned under it, or
the comment lines just above). A preset that changes the field adds its own
comment only where it is the trailing comment of a line setting that field
alone: a comment above a preset's line, or on a line setting several fields,
is about the preset, not one field."""

from __future__ import annotations

import ast
import importlib.util
import io
import tokenize
from pathlib import Path

import ml_collections

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def available() -> list[str]:
  return sorted(f"configs/{p.name}" for p in CONFIGS.glob("*.py") if p.name != "__init__.py")


def usage() -> str:
  return ("usage: python -m experiments.main --config configs/<experiment>.py[:preset] "
          "--workdir DIR [--config.<field>=<value> ...]\n"
          "  --config FILE[:preset]  the experiment's config (presets: paper, cpu, smoke)\n"
          "  --workdir DIR           where the run writes; a rerun there resumes\n"
          "  --help                  with --config: that config's fields\n\n"
          "configs: " + ", ".join(available()))


def _comment_of(node: ast.stmt, lines: list[str], trailing: dict[int, tuple[int, str]]) -> str:
  """The comment at the end of ``node``'s line with the comment-only lines
  aligned under it, else the comment block just above."""
  col, text = trailing.get(node.lineno, (0, ""))
  if text:
    i = node.end_lineno or node.lineno  # 1-based: the line after the statement, 0-based.
    while i < len(lines) and lines[i].strip().startswith("#") \
        and len(lines[i]) - len(lines[i].lstrip()) == col:
      text += " " + lines[i].strip().lstrip("#").strip()
      i += 1
  else:
    above, i = [], node.lineno - 2
    while i >= 0 and lines[i].strip().startswith("#"):
      above.insert(0, lines[i].strip().lstrip("#").strip())
      i -= 1
    text = " ".join(above)
  return text


def _assigned(node: ast.Assign) -> list[str]:
  """The ``c.<field>`` names an assignment sets (``c.a, c.b = 1, 2`` sets two)."""
  names = []
  for target in node.targets:
    for t in target.elts if isinstance(target, ast.Tuple) else [target]:
      if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name):
        names.append(t.attr)
  return names


def _trailing(source: str) -> dict[int, tuple[int, str]]:
  """Line number -> (column, text) of the comment ending a line of code."""
  lines, out = source.splitlines(), {}
  for tok in tokenize.generate_tokens(io.StringIO(source).readline):
    if tok.type == tokenize.COMMENT and lines[tok.start[0] - 1][:tok.start[1]].strip():
      out[tok.start[0]] = (tok.start[1], tok.string.lstrip("#").strip())
  return out


def _comments(source: str) -> dict[str, str]:
  """Field name -> the comment of its declaration, the first ``c.<field> = ...``
  of each field, in the order of the file."""
  trailing, lines = _trailing(source), source.splitlines()
  assigns = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Assign)]
  out: dict[str, str] = {}
  for node in sorted(assigns, key=lambda n: n.lineno):
    for name in _assigned(node):
      out.setdefault(name, _comment_of(node, lines, trailing))
  return out


def _preset_comments(source: str, preset: str) -> dict[str, str]:
  """Field name -> the trailing comment of a line in ``preset``'s branch that
  sets that field alone (``c.lr = 1e-3  # why``)."""
  trailing, lines = _trailing(source), source.splitlines()
  branch = [stmt for node in ast.walk(ast.parse(source)) if isinstance(node, ast.If)
            and _names_preset(node.test, preset) for stmt in node.body]
  out: dict[str, str] = {}
  for node in branch:
    names = _assigned(node) if isinstance(node, ast.Assign) else []
    if len(names) == 1 and node.lineno in trailing:
      out.setdefault(names[0], _comment_of(node, lines, trailing))
  return out


def _names_preset(test: ast.expr, preset: str) -> bool:
  return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
          and test.left.id == "preset"
          and any(isinstance(c, ast.Constant) and c.value == preset for c in test.comparators))


def _default_config(path: str, preset: str) -> ml_collections.ConfigDict | None:
  """The config file's ``get_config(preset)``, or None if it cannot be had."""
  try:
    spec = importlib.util.spec_from_file_location("_help_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(preset)
  except Exception:  # pylint: disable=broad-except  # --help must not fail on it.
    return None


def _presets(source: str) -> list[str]:
  out = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) \
        and node.left.id == "preset":
      for c in node.comparators:
        if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value not in out:
          out.append(c.value)
  return out


def _docline(source: str) -> str:
  doc = ast.get_docstring(ast.parse(source)) or ""
  return doc.strip().splitlines()[0] if doc.strip() else ""


def describe(spec: str, config: ml_collections.ConfigDict) -> str:
  """The fields with their values under ``spec``, each with its declaration's
  comment, written for the default preset's values: a field another preset (or
  a flag) changes shows the default's value beside it, and after the comment
  the preset's own comment on that field if it has one."""
  path, _, preset = spec.partition(":")
  source = Path(path).read_text()
  comments, presets = _comments(source), _presets(source)
  default = presets[0] if presets else ""
  preset = preset or default
  base = _default_config(path, default) if preset != default else None
  own = _preset_comments(source, preset) if preset != default else {}
  order = {k: i for i, k in enumerate(comments)}
  items = sorted(config.items(), key=lambda kv: order.get(kv[0], len(order)))
  rows = []
  for k, v in items:
    c = comments.get(k, "")
    if base is not None and k in base and base[k] != v:
      c = f"[{default}: {base[k]!r}] {c}" + (f" ({preset}: {own[k]})" if k in own else "")
    rows.append((k, repr(v), c))
  width = max(len(k) + len(v) for k, v, _ in rows) + 3
  out = [f"{path}: {_docline(source)}", "",
         f"fields (--config.<field>=<value>), with the values of preset {preset!r}"
         + (f" ([{default}: value] where the default preset's differs: the comments "
            "describe it)" if base is not None else "") + ":"]
  for k, v, c in rows:
    out.append(f"  {(k + ' = ' + v).ljust(width)}  {c}".rstrip())
  if presets:
    out += ["", f"presets: {', '.join(presets)} (the first is the default; "
                f"--config {path}:<preset>)"]
  out += ["", "configs: " + ", ".join(available()), "",
          "run: python -m experiments.main --config "
          f"{spec} --workdir DIR [--config.<field>=<value> ...]"]
  return "\n".join(out)
