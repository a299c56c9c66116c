"""Table 1: the invariance properties of the normalizations, checked numerically."""

from __future__ import annotations


from scripts.paper.runs import header, out_dir, run_all


def table1(args) -> None:
  r = run_all(args, "configs/invariance.py", {0: ("table1", {})}, keep=("table1.md",))[0]
  (out_dir(args) / "results.md").write_text(
      header(args, [r], "Table 1") + (out_dir(args) / "table1" / "table1.md").read_text())
