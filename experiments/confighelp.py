"""``--help`` for a config: its fields with their comments and defaults, its
presets, and the configs there are. Comments come from the config file's source
(``c.<field> = value  # comment``, or the comment lines just above)."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import ml_collections

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def available() -> list[str]:
  return sorted(f"configs/{p.name}" for p in CONFIGS.glob("*.py") if p.name != "__init__.py")


def usage() -> str:
  return ("usage: python -m experiments.main --config configs/<experiment>.py[:preset] "
          "--workdir DIR [--config.<field>=<value> ...]\n"
          "  --config FILE[:preset]  the experiment's config (presets: paper, cpu, smoke)\n"
          "  --workdir DIR           where the run writes; a rerun there resumes\n"
          "  --help                  with --config: that config's fields\n\n"
          "configs: " + ", ".join(available()))


def _comments(source: str) -> dict[str, str]:
  """Field name -> its comment, for the first ``c.<field> = ...`` of each field,
  in the order of the file."""
  trailing: dict[int, str] = {}
  for tok in tokenize.generate_tokens(io.StringIO(source).readline):
    if tok.type == tokenize.COMMENT:
      trailing[tok.start[0]] = tok.string.lstrip("#").strip()
  lines = source.splitlines()
  out: dict[str, str] = {}
  assigns = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Assign)]
  for node in sorted(assigns, key=lambda n: n.lineno):
    if not isinstance(node, ast.Assign):
      continue
    for target in node.targets:
      if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
        name = target.attr
        if name in out:
          continue
        text = trailing.get(node.lineno, "")
        if not text:  # The comment block just above.
          above, i = [], node.lineno - 2
          while i >= 0 and lines[i].strip().startswith("#"):
            above.insert(0, lines[i].strip().lstrip("#").strip())
            i -= 1
          text = " ".join(above)
        out[name] = text
  return out


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
  path, _, preset = spec.partition(":")
  source = Path(path).read_text()
  comments, presets = _comments(source), _presets(source)
  order = {k: i for i, k in enumerate(comments)}
  items = sorted(config.items(), key=lambda kv: order.get(kv[0], len(order)))
  rows = [(k, repr(v), comments.get(k, "")) for k, v in items]
  width = max(len(k) + len(v) for k, v, _ in rows) + 3
  out = [f"{path}: {_docline(source)}", "",
         f"fields (--config.<field>=<value>), with the values of preset "
         f"{preset or (presets[0] if presets else '')!r}:"]
  for k, v, c in rows:
    out.append(f"  {(k + ' = ' + v).ljust(width)}  {c}".rstrip())
  if presets:
    out += ["", f"presets: {', '.join(presets)} (the first is the default; "
                f"--config {path}:<preset>)"]
  out += ["", "configs: " + ", ".join(available()), "",
          "run: python -m experiments.main --config "
          f"{spec} --workdir DIR [--config.<field>=<value> ...]"]
  return "\n".join(out)
