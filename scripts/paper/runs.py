"""What every target of scripts/reproduce.py shares: running (or resuming) a
target's runs, collecting their records into the results folder, the header
of a results.md, and the tables and curves several targets print."""

from __future__ import annotations

import ctypes
import fcntl
import importlib.util
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from experiments.runner import figures
from experiments.runner import records as run_records
from scripts.paper import inputs

REPO = Path(__file__).resolve().parents[2]

TIME_NOTE = ("\nTrain time: the training epochs' seconds, summed. It leaves out evaluation, "
             "checkpoints, compilation and any time between a stop and its resume.\n")
SMOKE_NOTE = ("**Smoke preset: this checks the plumbing, not the claims.** Its runs are the "
              "smallest that exercise the code (tiny models, a few updates or trials): they show "
              "that every run, record, table and figure is made; none of their numbers bears on "
              "the paper's claims, and the verdict cells say so. For the claims: `--preset cpu` "
              "or the paper preset.\n\n")


def run_all(args, config: str, runs: dict, keep=(), optional=(), stops=None,
            single=(), final_step=None) -> dict:
  """Runs (or resumes) each of ``runs`` ({key: (name, overrides)}), each with
  ``--seeds`` seeds, up to ``--jobs`` at a time, then copies each run's record
  into the results folder and returns the records by key: the first seed's,
  with every seed's record (itself first) under ``seeds``. With one job a
  run's progress goes to the terminal; with more, each run writes it to
  ``<name>.log`` beside its workdir. A workdir that holds a finished record
  of the same config is not run again (:func:`finished`).

  Before the first run starts, the data of every run to be started is checked
  (scripts/paper/inputs.py), and so is each workdir's lock: a missing data
  set, or a workdir another process is running, is one line then, not after
  hours of the other runs. A run that ends (exit 0) without a whole record
  (:func:`record_state`: every metrics line parses, the last is the final
  step's, with the final evaluation's metrics) stops the target with one line
  naming it: no table or figure is made from a partial set of records.

  A target too long for one sitting is split across sittings or machines:
  ``--only a,b`` runs those of its runs alone, copies their records into the
  results folder and stops before the tables (results.md then says which runs
  are recorded and which are not); ``--adopt_results`` takes a finished
  record found there (one committed by an earlier sitting) as done, for a run
  whose workdir holds nothing.

  ``keep``: files every run writes beside its metrics, copied too (a record
  without them is not finished); ``optional``: files a run may write, copied
  where they exist; ``stops``: {exit status: file}, the ways a run may end
  early that are results, not failures (the transformer's NaN stop: exit 3,
  diverged.json). Any other non-zero exit stops the target before its tables.
  ``final_step``: (workdir, config) -> the run's last step, for runs whose
  step count the config alone does not give (order embeddings: epochs of the
  data's passes); by default ``num_steps``, or ``num_epochs`` read from the
  records' ``epoch``.

  ``single``: keys of ``runs`` that run at the first seed only (as one-seed runs do)."""
  stops = stops or {}
  runs = expand(runs, seed_names(args, config), single)
  every = [r for rs in runs.values() for r in rs]
  only = set(getattr(args, "only", None) or ())
  unknown = sorted(only - {name for name, _ in every})
  if unknown:
    sys.exit(f"error: --only names no run of {args.target} (--seeds {args.seeds}): "
             f"{', '.join(unknown)}; its runs: {', '.join(name for name, _ in every)}")
  files = ("config.json", "metrics.jsonl", *keep, *optional, *stops.values())
  state_of = lambda wd, overrides: record_state(wd, config, args.preset, overrides,
                                                stops.values(), keep, final_step)
  pending, active, failed, tails = list(every), [], {}, {}
  # JAX's persistent compilation cache, shared by the target's runs: seeds of a
  # run, and a resumed run, load its programs instead of compiling them again.
  env = {"JAX_COMPILATION_CACHE_DIR": str(REPO / args.runs_dir / "jax_cache"),
         **blas_threads(args.jobs), **os.environ}
  for name, overrides in every:
    wd = workdir(args, name)
    state = state_of(wd, overrides)[0]
    if not state and getattr(args, "adopt_results", False) and not (wd / "config.json").exists():
      state = state_of(out_dir(args) / name, overrides)[0]
      if state:
        adopt(out_dir(args) / name, wd, files)
        state += ", adopted from the results folder"
    if state:
      print(f"{state}: {name} (its record is complete; not run again)", flush=True)
      pending.remove((name, overrides))
  left = [r for r in pending if only and r[0] not in only]
  pending = [r for r in pending if r not in left]
  if pending and getattr(args, "no_training", None):
    name, overrides = pending[0]
    sys.exit(f"error: {args.no_training / name} is not a whole record of {args.target} "
             f"({state_of(workdir(args, name), overrides)[1]}); redraw.py draws from whole "
             "records only and trains nothing")
  # Every input of the runs to come, before the first of them starts.
  inputs.check(args.target, [config_dict(config, args.preset, o) for _, o in pending])
  for name, _ in pending:
    if (holder := lock_holder(workdir(args, name))) is not None:
      sys.exit(in_use(name, workdir(args, name), holder))
  while active or (pending and not failed):
    while pending and not failed and len(active) < args.jobs:
      name, overrides = pending.pop(0)
      wd = workdir(args, name)
      if (holder := lock_holder(wd)) is not None:  # taken since the check above
        failed[name] = in_use(name, wd, holder)
        break
      cmd = [sys.executable, "-m", "experiments.main", f"--config={config}:{args.preset}",
             f"--workdir={wd}", *(f"--config.{k}={v}" for k, v in overrides.items())]
      print("+", " ".join(cmd[1:]), flush=True)
      log = None
      if args.jobs > 1:
        wd.parent.mkdir(parents=True, exist_ok=True)
        log = open(wd.parent / f"{name}.log", "ab")  # pylint: disable=consider-using-with
      active.append((name, overrides, log, subprocess.Popen(
          cmd, cwd=REPO, stdout=log, env=env, stderr=subprocess.STDOUT if log else None,
          preexec_fn=die_with_parent())))
    done = [j for j in active if j[3].poll() is not None]
    if not done:
      time.sleep(0.5)
    for job in done:
      active.remove(job)
      name, overrides, log, proc = job
      rc = proc.returncode
      what = ("finished" if rc == 0 else Path(stops[rc]).stem if rc in stops else "failed")
      if log:
        log.close()
      if log or rc in stops:
        print(f"{what}: {name}" + (f" (log: {log.name})" if log else ""), flush=True)
      wd = workdir(args, name)
      if rc in stops and not (wd / stops[rc]).exists() and (wd / "config.json").exists():
        # An experiment that writes no record of its stop (the classifiers'
        # NaN stop, exit 3): the exit status is the record, its metrics the
        # evaluations before the stop.
        (wd / stops[rc]).write_text(json.dumps({"exit_status": rc}) + "\n")
      if what == "failed":
        holder = lock_holder(wd)
        failed[name] = in_use(name, wd, holder) if holder is not None else None
        if log and failed[name] is None:
          tails[name] = last_line(Path(log.name))
        continue
      state, why = state_of(wd, overrides)
      if state is None:
        failed[name] = (f"error: run {name} ended, but its record in {wd} is incomplete ({why}); "
                        f"no tables or figures are made from a partial set of records")
  if failed:
    order = [name for rs in runs.values() for name, _ in rs if name in failed]  # target's order
    said = [failed[name] for name in order if failed[name]]
    if said:
      sys.exit(said[0] + (f" (and run(s) {', '.join(n for n in order if failed[n] != said[0])} "
                          "failed)" if len(order) > 1 else ""))
    tail = next(((n, tails[n]) for n in order if tails.get(n)), None)
    sys.exit(f"error: run(s) {', '.join(order)} failed"
             + (f" ({tail[0]}'s log ends: {tail[1]})" if tail else "")
             + "; rerun the same command to resume")
  if left:
    done = [name for name, _ in every if (name, _) not in left]
    for name in done:
      collect(args, name, keep, (*optional, *stops.values()))
    note_partial(args, done, [name for name, _ in left])
    raise SystemExit(0)
  records = {}
  for key, rs in runs.items():
    per_seed = [collect(args, name, keep, (*optional, *stops.values())) for name, _ in rs]
    records[key] = {**per_seed[0], "seeds": per_seed}
  return records


def last_line(path: Path) -> str:
  """The last non-empty line of a run's log (its error, where it failed), cut
  to 300 characters; '' if none."""
  try:
    with open(path, "rb") as f:
      f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
      lines = [l.strip() for l in f.read().decode(errors="replace").splitlines() if l.strip()]
  except OSError:
    return ""
  return lines[-1][:300] if lines else ""


def in_use(name: str, wd: Path, pid: str) -> str:
  return (f"error: run {name}'s workdir {wd} is in use by another process (pid {pid}), "
          "another reproduce.py or experiments.main running it; wait for it to end, or use "
          "another --runs_dir")


def lock_holder(wd: Path) -> str | None:
  """The pid in ``<wd>/lock`` if a live process holds that lock (the run
  loop's flock, experiments/runner/workdir.py), else None. Only reads: the
  file is neither made nor followed through a symlink, and a shared lock,
  taken for a moment, tells whether another holds the exclusive one."""
  try:
    fd = os.open(wd / "lock", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
  except OSError:
    return None  # no lock file: no run there (a symlink: the run itself refuses)
  try:
    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
  except BlockingIOError:
    return os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
  except OSError:
    return None
  finally:
    os.close(fd)
  return None


_PR_SET_PDEATHSIG = 1


def die_with_parent() -> Callable[[], None] | None:
  """A ``preexec_fn`` that has the kernel send the child SIGTERM when this
  process dies, however it dies (``kill -9`` included), so that no run trains
  on unwatched after reproduce.py is gone. SIGTERM, not SIGKILL: the run stops
  at its next safe point and its workdir resumes. Linux only (prctl); None
  elsewhere. libc is loaded here, in the parent: the child between fork and
  exec only calls it."""
  try:
    prctl = ctypes.CDLL(None, use_errno=True).prctl
  except (OSError, AttributeError):
    return None
  parent = os.getpid()

  def set_deathsig() -> None:
    prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
      os.kill(os.getpid(), signal.SIGTERM)
  return set_deathsig


BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def blas_threads(jobs: int, cores: int | None = None) -> dict[str, str]:
  """Thread counts for numpy's and scikit-learn's BLAS in each of ``jobs``
  runs side by side: the cores shared out, at least 1 (a variable the caller
  set wins, as the caller's environment is laid over these). A BLAS that
  starts a thread per core in every run oversubscribes the cores: with two
  skip-thought runs on 2 cores, OpenBLAS's spinning threads made SICK's
  scikit-learn classifiers take 291-313 s instead of 42-50 s, and MR, CR,
  SUBJ and MPQA 25-47 s instead of 1.2-2.1 s (BENCHMARKS.md, Table 3)."""
  if jobs <= 1:
    return {}
  n = str(max(1, (cores or os.cpu_count() or 1) // jobs))
  return {k: n for k in BLAS_THREADS}


def _as_json(c) -> dict:
  return json.loads(json.dumps(c.to_dict()))  # tuples as JSON lists


def config_dict(config: str, preset: str, overrides: dict) -> dict:
  """The config a run of ``config:preset`` with ``overrides`` records, as JSON."""
  return json.loads(json.dumps({**_as_json(config_module(config).get_config(preset)),
                                **overrides}))  # tuples as JSON lists


def finished(wd: Path, config: str, preset: str, overrides: dict, stops=(), keep=(),
             final_step=None) -> str | None:
  """'finished' when ``wd`` holds a whole run of ``config:preset`` with
  ``overrides`` (:func:`record_state`); the name of a ``stops`` file (e.g.
  'diverged') when the run ended early in that way; else None. Such a record
  needs no checkpoint: the config.json and metrics.jsonl that results/ keeps,
  copied back into a runs folder on another machine, count as done, as do
  records made before a config field was added."""
  return record_state(wd, config, preset, overrides, stops, keep, final_step)[0]


IDENTITY = ("step", "epoch", "wall_time")


def record_state(wd: Path, config: str, preset: str, overrides: dict, stops=(), keep=(),
                 final_step: Callable[[Path, dict], int | None] | None = None
                 ) -> tuple[str | None, str]:
  """(state, why not): state as :func:`finished` gives it, and when it is None
  the reason, for a line that names it. A whole run: a config.json of that
  very config (the data path aside), every line of metrics.jsonl a record, the
  last of them at the run's final step (``final_step``, else ``num_steps``,
  else epoch ``num_epochs``) and holding every metric the earlier evaluations
  hold (the final evaluation's), and each of ``keep``."""
  try:
    recorded = json.loads((wd / "config.json").read_text())["config"]
  except OSError:
    return None, "no config.json"
  except (ValueError, KeyError, TypeError):
    return None, "config.json does not parse"
  if not isinstance(recorded, dict):
    return None, "config.json holds no config"
  defaults = _as_json(config_module(config).get_config(preset))
  want = json.loads(json.dumps({**defaults, **overrides}))  # tuples as JSON lists
  # Where the data lives is not what the run is (the loaders check what they read).
  # A field added to the config after the run was made is not in its record:
  # a new field's preset value keeps the old behaviour (the house's rule for
  # new fields), so it counts as that value unless an override sets it.
  recorded = {**{k: v for k, v in defaults.items() if k not in overrides}, **recorded}
  strip = lambda c: {k: v for k, v in c.items() if k not in ("data_dir", "questions_dir")}
  if strip(recorded) != strip(want):
    diff = sorted(k for k in strip({**recorded, **want}) if recorded.get(k) != want.get(k))
    return None, f"another config: {', '.join(diff)}"
  try:
    lines = (wd / "metrics.jsonl").read_text().splitlines()
  except FileNotFoundError:
    lines = None
  except (OSError, UnicodeDecodeError) as e:
    return None, f"metrics.jsonl cannot be read ({e})"
  metrics = []
  for i, line in enumerate(lines or []):
    try:  # the runner's reading: an integer step, non-finite metrics as floats again
      metrics.append(run_records.decode(line))
    except ValueError:
      return None, f"metrics.jsonl line {i + 1} of {len(lines)} is not a whole record"
  for stop in stops:
    if (wd / stop).exists():
      return Path(stop).stem, ""
  if not metrics:
    return None, "no metrics.jsonl" if lines is None else "metrics.jsonl holds no record"
  missing = [f for f in keep if not (wd / f).is_file()]
  if missing:
    return None, f"no {', '.join(missing)}"
  last = metrics[-1]
  end = final_step(wd, want) if final_step is not None else None
  if final_step is not None and end is None:
    return None, "its final step cannot be told"
  if end is not None or want.get("num_steps", 0) > 0:
    end = end if end is not None else want["num_steps"]
    if last["step"] != end:
      return None, f"its last record is at step {last['step']}, the run ends at step {end}"
  elif "num_epochs" in want:
    if last.get("epoch") != want["num_epochs"]:
      return None, (f"its last record is at epoch {last.get('epoch')}, the run ends at epoch "
                    f"{want['num_epochs']}")
  else:
    return None, "its config gives no final step"
  lacks = sorted({k for r in metrics[:-1] for k in r} - set(last))
  if lacks or not set(last) - set(IDENTITY):
    return None, (f"its last record (step {last['step']}) lacks the final evaluation's "
                  + (", ".join(lacks) if lacks else "metrics"))
  return "finished", ""


def config_module(config: str):
  spec = importlib.util.spec_from_file_location("_config", REPO / config)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def seed_names(args, config: str) -> list[tuple[str, dict]]:
  """(workdir suffix, overrides) per seed: the config's own seed first, in the
  workdir a one-seed run uses, so that adding seeds keeps the runs made."""
  if args.seeds == 1:
    return [("", {})]
  base = config_module(config).get_config(args.preset).seed
  return [("", {})] + [(f"_seed{s}", {"seed": s}) for s in range(base + 1, base + args.seeds)]


def expand(runs: dict, seeds: list[tuple[str, dict]], single=()) -> dict:
  """{key: [(workdir name, overrides) per seed]} of ``runs`` ({key: (name,
  overrides)}) and ``seeds`` (:func:`seed_names`): a key in ``single`` gets
  the first seed alone, its workdir the one-seed run's."""
  return {key: [(name + suffix, {**overrides, **seed})
                for suffix, seed in (seeds[:1] if key in single else seeds)]
          for key, (name, overrides) in runs.items()}


def seeds(record: dict) -> list[dict]:
  """A record's per-seed records (itself alone when it has none)."""
  return record.get("seeds", [record])


mean_sd = figures.mean_sd


def per_seed(values) -> str:
  """Each seed's value, in seed order, or one value that all seeds share: for
  counts such as epochs to a level, which a mean would hide ("not reached")."""
  values = [str(v) for v in values]
  return values[0] if len(set(values)) == 1 else " / ".join(values)


def workdir(args, name: str) -> Path:
  return (REPO / args.runs_dir / args.target / args.preset / name).resolve()


def collect(args, name: str, keep=(), optional=()) -> dict:
  """Copies the run's record (config.json, metrics.jsonl, ``keep``, and each
  of ``optional`` that it wrote) into the results folder and reads it:
  config.json with ``metrics`` (none for a run stopped before its first
  evaluation) and ``name``."""
  wd = workdir(args, name)
  dest = out_dir(args) / name
  dest.mkdir(parents=True, exist_ok=True)
  for f in ("config.json", *keep):
    shutil.copy2(wd / f, dest / f)
  for f in ("metrics.jsonl", *optional):
    if (wd / f).exists():
      shutil.copy2(wd / f, dest / f)
    else:
      (dest / f).unlink(missing_ok=True)  # a stale copy from an earlier collection
  record = json.loads((wd / "config.json").read_text())
  record["metrics"] = figures.read_metrics(wd) if (wd / "metrics.jsonl").exists() else []
  record["name"] = name
  return record


def adopt(src: Path, wd: Path, files) -> None:
  """Copies a finished record (``files`` that ``src`` holds) into an empty workdir."""
  wd.mkdir(parents=True, exist_ok=True)
  for f in files:
    if (src / f).exists():
      shutil.copy2(src / f, wd / f)


def command(args) -> str:
  """The reproduce.py command line of ``args`` (without --jobs, --runs_dir, --only)."""
  c = f"python scripts/reproduce.py {args.target} --preset {args.preset}"
  if args.seeds > 1:
    c += f" --seeds {args.seeds}"
  if args.results_dir is not None:
    c += f" --results_dir {args.results_dir}"
  return c


def note_partial(args, done: list[str], left: list[str]) -> None:
  """results.md of a target whose runs are not all recorded yet: which are, and
  the command that adds the rest and writes the tables."""
  md = (f"# {args.target} ({args.preset} preset): {len(done)} of {len(done) + len(left)} runs "
        "recorded; no tables yet\n\nThe runs were split across sittings (`--only`). Recorded "
        "here (config.json, metrics.jsonl): " + (", ".join(done) or "none") + ".  \nStill to "
        "run: " + ", ".join(left) + ".\n\nThe rest, then the tables: `" + command(args)
        + " --adopt_results` (`--only NAME,...` for some of them).\n")
  out_dir(args).mkdir(parents=True, exist_ok=True)
  (out_dir(args) / "results.md").write_text(md)
  print(f"{len(done)} of {len(done) + len(left)} runs recorded in {out_dir(args)}; still to run: "
        f"{', '.join(left)}; no tables until they are", flush=True)


def out_dir(args) -> Path:
  """<results_dir>/<target> for the paper preset, <results_dir>/<target>_<preset>
  otherwise. ``args.write_dir``, where set, takes the results_dir's place
  (scripts/redraw.py: a redrawn target in a scratch folder, its results.md
  naming the command as committed)."""
  suffix = "" if args.preset == "paper" else f"_{args.preset}"
  return REPO / (getattr(args, "write_dir", None) or results_dir(args)) / f"{args.target}{suffix}"


def check_writable(directory: Path, flag: str) -> str | None:
  """One line if ``directory`` cannot be written or made (a file on its path,
  no permission, a read-only filesystem), else None: probed by making and
  removing a file in its nearest existing folder."""
  existing = directory
  while not existing.exists() and existing != existing.parent:
    existing = existing.parent
  if not existing.is_dir():
    return (f"error: {flag} {directory} " + ("is a file" if existing == directory else
                                                f"is under {existing}, which is a file")
            + "; give a directory, new or writable")
  try:
    fd, probe = tempfile.mkstemp(prefix=".probe", dir=existing)
    os.close(fd)
    os.unlink(probe)
  except OSError as e:
    why = os.strerror(e.errno).lower() if e.errno else str(e)
    return (f"error: {flag} {directory} is not writable ({existing}: {why}); give a "
            "directory, new or writable")
  return None


def results_dir(args) -> Path:
  return args.results_dir if args.results_dir is not None else args.runs_dir / "results"


def header(args, records: list[dict], title: str) -> str:
  records = [s for r in records for s in seeds(r)]
  commits = sorted({r["git_commit"] for r in records})
  resumed = sorted({x["git_commit"] for r in records for x in r.get("resumed_with", [])})
  # The core count matters: XLA's CPU thread pool follows it, and with another
  # count some sums round differently (README, "Running experiments").
  hosts = sorted({f"{h['cpu']}, {h['cpu_threads']} core(s)" for r in records
                  for h in [r.get("host"), *(x.get("host") for x in r.get("resumed_with", []))]
                  if h})
  # Several devices (the Transformer's default on a CPU host since bd8bc60) sum
  # in another order than one: said where any run used more than one.
  devices = sorted({len(d) for r in records
                    for d in [r.get("devices"), *(x.get("devices") for x in r.get("resumed_with", []))]
                    if d})
  return (f"# {title}\n\n" + (SMOKE_NOTE if args.preset == "smoke" else "")
          + f"Command: `{command(args)}`  \nCommit: {', '.join(commits)}  \n"
          + (f"Resumed or re-read by: {', '.join(resumed)}  \n" if resumed else "")
          + (f"Host: {'; '.join(hosts)}  \n" if hosts else "")
          + (f"Devices a run: {', '.join(map(str, devices))} (config.json's devices)  \n"
             if any(n > 1 for n in devices) else "") +
          f"Versions: {json.dumps(records[0]['versions'])}\n\n"
          + (f"Seeds: {args.seeds} per run. A cell reads mean ± standard deviation over the "
             "seeds, or each seed's value in turn (a / b / ...); a figure's band spans the "
             "lowest to the highest seed.\n\n" if args.seeds > 1 else ""))


def first(metrics: list[dict], key: str, threshold: float, at: str = "epoch") -> float:
  """``at`` (epoch or step) of the first record with ``key`` <= ``threshold``;
  inf if none (records without ``key`` never count)."""
  return next((m[at] for m in metrics if m.get(key, math.inf) <= threshold), math.inf)


def reached(x: float) -> str:
  return "not reached" if x == math.inf else str(x)


def epochs_to(metrics: list[dict], key: str, threshold: float) -> str:
  return reached(first(metrics, key, threshold))


def steps_table(ms: dict, key: str, levels, fmt: str = "g") -> str:
  """A row per named run (its metrics, or a list of its seeds' metrics): the
  first step at which ``key`` <= each level, each seed's in turn (per_seed)."""
  return ("| run | " + " | ".join(f"<= {v:{fmt}}" for v in levels) + " |\n|---|"
          + "---|" * len(levels) + "\n" + "".join(
              f"| {name} | " + " | ".join(per_seed(reached(first(s, key, v, "step"))
                                                   for s in figures.seeds_of(m)) for v in levels)
              + " |\n" for name, m in ms.items()))


def update_seconds(m: list[dict]) -> list[float]:
  """Each timed record's training seconds per update: its ``epoch_time_s``
  (no evaluation, checkpoints or compiling) over the updates since the record
  before it."""
  return [x["epoch_time_s"] / max(x["step"] - p, 1)
          for x, p in zip(m, [0] + [y["step"] for y in m]) if "epoch_time_s" in x]


def median_update_seconds(m: list[dict]) -> float:
  """The median evaluation interval's training seconds per update (the upper
  one of an even count)."""
  per = sorted(update_seconds(m))
  return per[len(per) // 2]


def train_time_and_rate(m: list[dict]) -> tuple[float, float]:
  """Seconds spent in the training epochs, summed (no evaluation, checkpoints,
  compilation, or time between a stop and its resume), and the median epoch's
  training examples/s."""
  return (sum(x["epoch_time_s"] for x in m),
          sorted(x["examples_per_sec"] for x in m)[len(m) // 2])


def seconds(values) -> str:
  """Seconds (mean ± sd over seeds): whole from 10 s up, else two digits, so
  that a smoke run's 0.3 s of training does not read 0."""
  values = list(values)
  return mean_sd(values, ".0f" if min(values) >= 10 else ".2g")


def train_nll_table(records: dict[str, dict]) -> str:
  """Training NLL at a few epochs, and the epochs each run needs to get below
  a few levels: how fast each one trains (claim (c) of Figure 6, and section
  6.7's "speedup")."""
  n = max(len(s["metrics"]) for r in records.values() for s in seeds(r))
  epochs = [e for e in (1, 2, 5, 10, 20, 40, 60) if e <= n]
  levels = (0.1, 0.03, 0.01, 0.001)
  md = ("\nTraining NLL (the mean over an epoch's minibatches) by epoch, and the first "
        "epoch at or below a level:\n\n| run | " + " | ".join(f"epoch {e}" for e in epochs) + " | "
        + " | ".join(f"<= {v:g}" for v in levels) + " |\n|---|"
        + "---|" * (len(epochs) + len(levels)) + "\n")
  for name, r in records.items():
    ms = [s["metrics"] for s in seeds(r)]
    md += (f"| {name} | " + " | ".join(
        mean_sd((m[e - 1]["train_nll"] for m in ms), ".3g") if all(e <= len(m) for m in ms)
        else "" for e in epochs) + " | "
        + " | ".join(per_seed(epochs_to(m, "train_nll", v) for m in ms) for v in levels)
        + " |\n")
  return md


def summary_row(name: str, r: dict, extra: str) -> str:
  ms = [s["metrics"] for s in seeds(r)]
  times = [train_time_and_rate(m) for m in ms]
  return (f"| {name} | {extra}{mean_sd(m[-1]['test_error'] for m in ms)} | "
          f"{mean_sd(min(x['test_error'] for x in m) for m in ms)} | "
          f"{per_seed(epochs_to(m, 'test_error', 0.02) for m in ms)} | "
          f"{mean_sd((m[-1]['train_nll'] for m in ms), '.3g')} | "
          f"{seconds(t for t, _ in times)} | {mean_sd((v for _, v in times), ',.0f')} | "
          f"{r['config']['learning_rate']:g} |\n")


def curves(records: dict, path: Path, title: str, panel, label) -> None:
  """Per panel (a row): training NLL on a log scale and test error, by epoch;
  a run of several seeds is their mean, with a band."""
  panels = {}
  for key, r in records.items():
    panels.setdefault(panel(key), {})[label(key)] = [s["metrics"] for s in seeds(r)]
  figures.plot_panels(panels, path, [figures.Axis("train_nll", "train NLL (nats per image)",
                                                  yscale="log"),
                                     figures.Axis("test_error", "test error (fraction)",
                                                  ymax=0.1)],
                      title=title)
