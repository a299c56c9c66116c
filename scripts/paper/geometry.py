"""Section 5.2: the geometry (Fisher information) of normalized GLMs."""

from __future__ import annotations


from scripts.paper.runs import out_dir


def geometry(args) -> None:
  """Section 5.2: no training runs; the Fisher of small GLMs in float64 (a few
  minutes on CPU). The presets are all the same computation."""
  from experiments import geometry as geo  # pylint: disable=g-import-not-at-top
  command = "python scripts/reproduce.py geometry" + (
      f" --results_dir {args.results_dir}" if args.results_dir is not None else "")
  print(geo.write_results(out_dir(args), command))
