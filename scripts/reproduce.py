r"""One command per table or figure of the paper.

  python scripts/reproduce.py table1   [--preset paper|cpu|smoke]   # Table 1
  python scripts/reproduce.py fig6_lr  [--preset ...]   # learning-rate search for fig6
  python scripts/reproduce.py fig6     [--preset ...]   # Figure 6, permutation-invariant MNIST
  python scripts/reproduce.py convnet  [--preset ...]   # section 6.7
  python scripts/reproduce.py fig4     [--preset ...]   # Figure 4, DRAW on binarized MNIST
  python scripts/reproduce.py fig2     [--preset ...]   # Figure 2, attentive reader (stand-in data)
  python scripts/reproduce.py fig5     [--preset ...]   # Figure 5, handwriting on IAM-OnDB
  python scripts/reproduce.py table3   [--preset ...]   # Table 3, Figure 3, skip-thoughts (stand-in books)
  python scripts/reproduce.py table2   [--preset ...]   # Table 2, Figure 1, order embeddings (stand-in images)
  python scripts/reproduce.py geometry                  # section 5.2, Fisher of normalized GLMs
  python scripts/reproduce.py transformer [--preset cpu] # beyond the paper: norms in a byte Transformer
  python scripts/reproduce.py norms --preset cpu [--tasks T,...] [--norms N,...] [--plan]
                                                        # every norm on every task (issue 62)

Each run goes through ``experiments.main`` into ``<runs_dir>/<target>/<preset>/<run>``
(rerunning the command resumes there), then its config.json, metrics.jsonl
and outputs are copied into ``<results_dir>/<target>/`` (``<target>_<preset>/``
for the cpu and smoke presets) beside a results.md that names the command and
commit that made them. ``--results_dir`` is ``<runs_dir>/results`` unless told
otherwise: ``--results_dir results`` rewrites the committed results.

``--seeds N`` runs each run with N seeds (the config's seed, then the next
N - 1; workdirs ``<run>``, ``<run>_seed<s>``): the tables then give the mean
and standard deviation over the seeds, and the figures draw the mean with a
band over the seeds' range. ``--jobs N`` runs up to N of a target's runs at
once, each logging to ``<run>.log`` beside its workdir: on a small CPU machine,
where one XLA process leaves cores idle, that can finish sooner (README,
ConvNets).

A target too long for one sitting is split across sittings (or machines):
``--only a,b`` runs only the named runs (workdir names, seed suffixes
included), copies their records into the results folder and writes a
results.md that says which runs are recorded and which are still to run;
``--adopt_results`` counts a finished record already in the results folder
(one an earlier sitting committed) as done, for a run with an empty workdir,
so the last sitting writes the tables without running it again. It is opt-in:
a committed record may come from older code or data.

Before the first run: the results and runs folders must be writable (or
creatable), every run to be started must have its data
(``scripts/paper/inputs.py``) and no other process may hold its workdir;
else one line and exit 1. The runs die with this process (a ``kill -9``
included: they get SIGTERM and stop at a safe point, resumable). A run that
ends without a whole record stops the target in one line naming it: tables
and figures are made only from complete records.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# pylint: disable=wrong-import-position
from scripts.paper import convnet, fig2, fig4, fig5, fig6, geometry, table1, table2, table3  # noqa: E402
from lnorm.data import DataError  # noqa: E402
from scripts.paper import transformer  # noqa: E402
from scripts.paper import norms as norms_study  # noqa: E402
from scripts.paper import verdicts  # noqa: E402
from scripts.paper.runs import check_writable, out_dir, results_dir  # noqa: E402

# One module a table or figure (scripts/paper/); each target is a function of
# the parsed arguments that runs what it needs and writes its results.md.
TARGETS = {"table1": table1.table1, "fig6_lr": fig6.fig6_lr, "fig6": fig6.fig6,
           "convnet": convnet.convnet, "fig4": fig4.fig4, "fig2": fig2.fig2, "fig5": fig5.fig5,
           "geometry": geometry.geometry, "table2": table2.table2, "table3": table3.table3,
           "transformer": transformer.transformer, "norms": norms_study.norms_study}
# Targets whose tables and figures report every seed's runs (--seeds N > 1).
SEEDED = {"fig6", "convnet", "fig4", "fig2", "fig5", "table2", "table3", "transformer", "norms"}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("target", choices=sorted(TARGETS))
  p.add_argument("--preset", default="paper", choices=("paper", "cpu", "smoke"))
  p.add_argument("--runs_dir", default="runs", type=Path)
  p.add_argument("--results_dir", default=None, type=Path,
                 help="where results go (default <runs_dir>/results); `results` rewrites "
                      "the committed ones")
  p.add_argument("--jobs", default=1, type=int,
                 help="runs at a time (default 1); each then logs to <runs_dir>/.../<run>.log")
  p.add_argument("--seeds", default=1, type=int,
                 help="seeds per run (default 1); tables give mean ± sd, figures bands")
  p.add_argument("--only", default=None, type=lambda s: [n for n in s.split(",") if n],
                 help="comma-separated run names: run just these, record them, no tables yet")
  p.add_argument("--adopt_results", action="store_true",
                 help="take a finished record in the results folder as done (runs of an "
                      "earlier sitting)")
  p.add_argument("--tasks", default=None,
                 help="norms: comma-separated tasks, a part of the grid (default all)")
  p.add_argument("--norms", default=None,
                 help="norms: comma-separated norms of the registry, or package.module:Name "
                      "(default every norm each task's model accepts)")
  p.add_argument("--plan", action="store_true",
                 help="norms: print each task's runs and estimated hours, and run nothing")
  args = p.parse_args(argv)
  if args.jobs < 1:
    p.error(f"--jobs must be at least 1, got {args.jobs}")
  if args.seeds < 1:
    p.error(f"--seeds must be at least 1, got {args.seeds}")
  if args.seeds > 1 and args.target not in SEEDED:
    p.error(f"--seeds is not supported by {args.target}; targets with seeds: "
            f"{', '.join(sorted(SEEDED))}")
  if (args.tasks or args.norms or args.plan) and args.target != "norms":
    p.error("--tasks, --norms and --plan are the norms target's")
  if (args.only or args.adopt_results) and args.target == "geometry":
    p.error("--only and --adopt_results are for targets that train runs; geometry trains none")
  return args


def run(args: argparse.Namespace) -> None:
  """Runs the target of ``args``, after checking where it writes: a results
  folder that is a file or read-only fails here, not after every run."""
  res = getattr(args, "write_dir", None) or results_dir(args)
  where = [] if args.target == "geometry" else [(REPO / args.runs_dir, "--runs_dir")]
  where += [(REPO / res, "--results_dir" if args.results_dir is not None else "results folder"),
            (out_dir(args), "results folder")]
  for directory, flag in where:
    if (line := check_writable(directory, flag)) is not None:
      sys.exit(line + ". Nothing was run")
  try:
    with verdicts.smoke(args.preset == "smoke"):  # a smoke run judges no claim
      TARGETS[args.target](args)
  except DataError as e:  # data a table reads itself (fig4's mean image, fig2's baselines)
    sys.exit(f"error: {args.target}'s tables read the data too: {e}")


def main(argv: list[str] | None = None) -> None:
  args = parse(argv)
  run(args)
  print(f"results in {out_dir(args)}"
        + ("" if args.results_dir is not None else
           " (a scratch folder; --results_dir results rewrites the committed results)"))


if __name__ == "__main__":
  main()
