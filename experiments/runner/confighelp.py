"""``--help`` for a config: its fields with their comments and defaults, its
presets, and the configs there are. Comments come from the config file's source
(``c.<field> = value  # comment``, or the comment lines just above)."""

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


def _comment_of(node: ast.stmt, lines: list[str], trailing: dict[int, str]) -> str:
  """The comment at the end of ``node``'s line, else the comment block just above."""
  text = trailing.get(node.lineno, "")
  if not text:
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


def _comments(source: str, preset: str | None = None) -> dict[str, str]:
  """Field name -> its comment, for the first ``c.<field> = ...`` of each field,
  in the order of the file; with ``preset``, only the assignments in that
  preset's ``if preset == ...`` branch."""
  trailing: dict[int, str] = {}
  for tok in tokenize.generate_tokens(io.StringIO(source).readline):
    if tok.type == tokenize.COMMENT:
      trailing[tok.start[0]] = tok.string.lstrip("#").strip()
  lines = source.splitlines()
  root: list[ast.AST] = [ast.parse(source)]
  if preset is not None:
    root = [stmt for node in ast.walk(root[0]) if isinstance(node, ast.If)
            and _names_preset(node.test, preset) for stmt in node.body]
  assigns = [n for r in root for n in ast.walk(r) if isinstance(n, ast.Assign)]
  out: dict[str, str] = {}
  for node in sorted(assigns, key=lambda n: n.lineno):
    for name in _assigned(node):
      out.setdefault(name, _comment_of(node, lines, trailing))
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
  """The fields with their values under ``spec``. The comments were written for
  the default preset's values: a field another preset (or a flag) changes
  shows the default's value beside it, and the preset's own comment if it has
  one."""
  path, _, preset = spec.partition(":")
  source = Path(path).read_text()
  comments, presets = _comments(source), _presets(source)
  default = presets[0] if presets else ""
  preset = preset or default
  base = _default_config(path, default) if preset != default else None
  own = _comments(source, preset) if preset != default else {}
  order = {k: i for i, k in enumerate(comments)}
  items = sorted(config.items(), key=lambda kv: order.get(kv[0], len(order)))
  rows = []
  for k, v in items:
    c = comments.get(k, "")
    if base is not None and k in base and base[k] != v:
      c = f"[{default}: {base[k]!r}] " + (own.get(k) or c)
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
