"""Table 1: the invariance properties of the normalizations, checked numerically."""

from __future__ import annotations


from scripts.paper.runs import header, out_dir, run_all


def table1(args) -> None:
  r = run_all(args, "configs/invariance.py", {0: ("table1", {})}, keep=("table1.md",))[0]
  # The run's table1.md opens with its own title: results.md's one heading.
  md = (out_dir(args) / "table1" / "table1.md").read_text()
  title, body = md.split("\n", 1) if md.startswith("# ") else ("# Table 1", md)
  (out_dir(args) / "results.md").write_text(header(args, [r], title[2:]) + body.lstrip("\n"))
