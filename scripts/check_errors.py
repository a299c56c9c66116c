r"""Every bad input and fault we know of, tried through the command line, and
what the user sees: results/errors/README.md.

  LNORM_DATA_DIR=../shared/data python scripts/check_errors.py [--out results/errors]

Each case runs ``python -m experiments.main`` (or a script) in a fresh
temporary folder and records the exit status, the lines on stderr, whether a
traceback was printed, and, where a run existed before the fault, whether it
was lost (its newest checkpoint gone, or the same command no longer resuming
from it). The full-disk and read-only cases need a small tmpfs and so root;
without it they are listed as not tried. Took 20 minutes on 2 busy cores (70 cases).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
from pathlib import Path
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
MAIN = (sys.executable, "-m", "experiments.main")
PI = "--config=configs/pi_mnist.py:smoke"


@dataclasses.dataclass
class Outcome:
  case: str
  kind: str  # "input" (a mistake in what the user gave) or "fault" (the machine's)
  status: int | None  # None: not tried
  stderr: str = ""
  traceback: bool = False
  lost: bool | None = None  # None: no run existed before
  note: str = ""
  lines: int = 1  # the lines on stderr the case should print
  must_fail: bool = True  # False: the right thing is to go on (a notice, a rebuilt cache)
  silent: bool | None = None  # a result changed or was kept wrong without a word; None: n/a
  outside: bool | None = None  # the run wrote outside its workdir; None: not checked

  @property
  def as_expected(self) -> bool:
    ok = (self.status != 0) == self.must_fail
    return ok and len([l for l in self.stderr.splitlines() if l.strip()]) == self.lines


def run(args, cwd: Path, env: dict | None = None, timeout: float = 300
        ) -> subprocess.CompletedProcess:
  return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                        env={**os.environ, **(env or {})})


def train(wd: Path, *extra: str, env=None) -> subprocess.CompletedProcess:
  return run((*MAIN, PI, f"--workdir={wd}", *extra), wd.parent, env)


def steps(wd: Path) -> list[int]:
  d = wd / "checkpoints"
  return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit()) if d.is_dir() else []


def resumes(wd: Path, step: int, *extra: str) -> bool:
  """Whether the same command resumes from ``step`` (or finds nothing to do)."""
  r = train(wd, *extra)
  return r.returncode == 0 and (f"resuming from step {step}" in r.stdout
                                or "nothing was trained" in r.stdout)


@contextlib.contextmanager
def tmpfs(size_k: int, read_only: bool = False):
  """A small filesystem of its own (root only): a full disk without filling
  the real one."""
  d = Path(tempfile.mkdtemp(prefix="lnorm-tmpfs-"))
  opts = f"size={size_k}k" + (",ro" if read_only else "")
  subprocess.run(("mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(d)), check=True,
                 capture_output=True)
  try:
    yield d
  finally:
    subprocess.run(("umount", str(d)), capture_output=True)
    shutil.rmtree(d, ignore_errors=True)


def can_mount() -> bool:
  try:
    with tmpfs(64):
      return True
  except (subprocess.CalledProcessError, OSError):
    return False


def outcome(case: str, kind: str, r: subprocess.CompletedProcess, lost=None, note="",
            **kw) -> Outcome:
  return Outcome(case, kind, r.returncode, r.stderr.strip(), "Traceback" in r.stderr + r.stdout,
                 lost, note, **kw)


def flip(path: Path, offset: int | None = None, nbytes: int = 2) -> None:
  """XORs ``nbytes`` bytes of ``path`` in its middle (or at ``offset``)."""
  b = bytearray(path.read_bytes())
  i = len(b) // 2 if offset is None else offset
  for k in range(nbytes):
    b[i + k] ^= 0xFF
  path.write_bytes(bytes(b))


def timeless(md: str) -> list[list[str]]:
  """A results.md's table cells, less the columns of times and rates (a run
  trained again takes other seconds, not another result)."""
  out, drop = [], set()
  for line in md.splitlines():
    if not line.startswith("|"):
      drop = set()
      continue
    cells = [c.strip() for c in line.strip("|").split("|")]
    if not drop and not set(line) <= set("|-: "):
      drop = {i for i, c in enumerate(cells) if "time" in c or "/s" in c}
    out.append([c for i, c in enumerate(cells) if i not in drop])
  return out


def reproduce(*args: str, env=None, timeout: float = 900) -> subprocess.CompletedProcess:
  return run((sys.executable, "scripts/reproduce.py", *args), REPO, env, timeout)


def processes_mentioning(text: str) -> list[int]:
  """The pids whose command line holds ``text`` (Linux /proc)."""
  out = []
  for d in Path("/proc").iterdir():
    try:
      if d.name.isdigit() and text in (d / "cmdline").read_bytes().decode(errors="replace"):
        out.append(int(d.name))
    except OSError:
      pass
  return out


def cases(tmp: Path, data: Path, mount: bool) -> list[Callable[[], Outcome]]:
  out: list[Callable[[], Outcome]] = []
  case = out.append

  def wd(name: str) -> Path:
    return tmp / name / "run"

  for name, args in [
      ("unknown config field", (PI, "--config.nrom=layer")),
      ("bad field value", (PI, "--config.norm=grop")),
      ("bad number", (PI, "--config.batch_size=-4")),
      ("wrong type", (PI, "--config.num_epochs=two")),
      ("unknown preset", ("--config=configs/pi_mnist.py:fast",)),
      ("missing config file", ("--config=configs/nope.py",)),
      ("unknown flag", (PI, "--wrokdir=x")),
      ("no --workdir", (PI,)),
  ]:
    def f(name=name, args=args):
      (tmp / name).mkdir()
      extra = () if name == "no --workdir" else (f"--workdir={wd(name)}",)
      return outcome(name, "input", run((*MAIN, *args, *extra), tmp))
    case(f)

  def broken_config():
    (tmp / "broken").mkdir()
    (tmp / "broken" / "bad.py").write_text("def get_config(preset='paper'):\n  return nope\n")
    return outcome("config file that raises", "input", run(
        (*MAIN, f"--config={tmp / 'broken' / 'bad.py'}", f"--workdir={wd('broken')}"), tmp))
  case(broken_config)

  def workdir_file():
    (tmp / "wf").mkdir()
    (tmp / "wf" / "file").write_text("x")
    a = outcome("workdir is a file", "input", train(tmp / "wf" / "file"))
    return a
  case(workdir_file)

  def workdir_under_file():
    (tmp / "wu").mkdir()
    (tmp / "wu" / "file").write_text("x")
    return outcome("workdir under a file", "input", train(tmp / "wu" / "file" / "run"))
  case(workdir_under_file)

  def env_case(name, env, args=(PI,), kind="input"):
    def f():
      (tmp / name).mkdir()
      return outcome(name, kind, run((*MAIN, *args, f"--workdir={wd(name)}"), tmp, env))
    case(f)

  env_case("$LNORM_DATA_DIR without mnist/", {"LNORM_DATA_DIR": str(tmp / "empty")})
  env_case("$LNORM_NATIVE not a mode", {"LNORM_NATIVE": "sometimes"})

  def corrupt_mnist():
    d = tmp / "corrupt" / "data" / "mnist"
    shutil.copytree(data / "mnist", d)
    f = sorted(d.glob("train-images*"))[0]
    f.write_bytes(f.read_bytes()[:1000])
    r = train(tmp / "corrupt" / "run", env={"LNORM_DATA_DIR": str(d.parent)})
    return outcome("truncated MNIST file", "input", r)
  case(corrupt_mnist)

  # Skip-thoughts with the books but not SentEval: found before training.
  def no_senteval():
    d = tmp / "nosent" / "data"
    d.mkdir(parents=True)
    (d / "text").symlink_to(data / "text")
    t0 = time.perf_counter()
    r = run((*MAIN, "--config=configs/skipthoughts.py:smoke", f"--workdir={d.parent / 'run'}"),
            tmp, {"LNORM_DATA_DIR": str(d)})
    trained = (d.parent / "run" / "metrics.jsonl").exists()
    return outcome("skip-thoughts: data_dir without senteval/", "input", r,
                   note=f"after {time.perf_counter() - t0:.0f} s, "
                        + ("after training" if trained else "before the first update"))
  case(no_senteval)
  env_case("skip-thoughts: eval_max_examples below the folds", None,
           ("--config=configs/skipthoughts.py:smoke", "--config.eval_max_examples=1"))
  env_case("reader: stand-in not built", {"LNORM_DATA_DIR": str(tmp / "empty")},
           ("--config=configs/reader.py:cpu",))
  env_case("order embeddings: image features not extracted",
           {"LNORM_DATA_DIR": str(tmp / "empty"), "LNORM_CACHE_DIR": str(tmp / "empty")},
           ("--config=configs/order_embeddings.py:smoke",))
  env_case("transformer: data_dir without the novels", {"LNORM_DATA_DIR": str(tmp / "empty")},
           ("--config=configs/transformer.py:smoke",))

  def make_cloze_mismatch():
    (tmp / "mc").mkdir()
    r = run((sys.executable, "scripts/make_cloze.py", "--standin", "cnn_standin_4",
             "--context_sentences", "20"), tmp, {"LNORM_DATA_DIR": str(tmp / "mc")})
    return outcome("make_cloze: --standin with another --context_sentences", "input", r)
  case(make_cloze_mismatch)

  # Faults on an existing run: it must survive them.
  def finished_run(name: str, *extra: str) -> Path:
    w = wd(name)
    w.parent.mkdir()
    r = train(w, *extra)
    if r.returncode != 0:
      raise SystemExit(f"error: the run a fault is tried on failed: {r.stderr.strip()[-300:]}")
    return w

  for name, flag in (("resume with another config", "--config.learning_rate=0.1"),
                     ("resume with fewer epochs", "--config.num_epochs=1")):
    def refused(name=name, flag=flag):
      w = finished_run(name)
      before = steps(w)
      r = train(w, flag)
      return outcome(name, "input", r, lost=steps(w) != before or not resumes(w, before[-1]))
    case(refused)

  def damaged_config_json():
    w = finished_run("damaged")
    (w / "config.json").write_text('{"config": ')
    r = train(w)
    return outcome("damaged config.json", "fault", r, lost=not (w / "checkpoints").is_dir())
  case(damaged_config_json)

  def damaged_checkpoint():
    w = finished_run("ckpt")
    newest = w / "checkpoints" / str(steps(w)[-1])
    for f in newest.rglob("*"):
      if f.is_file():
        f.write_bytes(b"")
    r = train(w, "--config.num_epochs=3")
    ok = r.returncode == 0 and "does not restore" in r.stdout
    o = Outcome("damaged newest checkpoint", "fault", r.returncode, r.stderr.strip(),
                "Traceback" in r.stderr + r.stdout, lost=not ok,
                note=(next(l for l in r.stdout.splitlines() if "does not restore" in l)
                      + ", on stdout; the run goes on") if ok else r.stdout[-300:])
    o.lines, o.must_fail = 0, False
    return o
  case(damaged_checkpoint)

  def locked():
    w = finished_run("locked")
    holder = subprocess.Popen(
        (sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR);"
         " fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
         str(w / "lock")), stdout=subprocess.PIPE, text=True)
    holder.stdout.readline()
    try:
      r = train(w, "--config.num_epochs=3")
    finally:
      holder.kill()
      holder.wait()
    return outcome("workdir in use by another run", "input", r,
                   lost=not resumes(w, steps(w)[-1], "--config.num_epochs=3"))
  case(locked)

  def sigint():
    w = wd("sigint")
    w.parent.mkdir()
    p = subprocess.Popen((*MAIN, PI, f"--workdir={w}", "--config.num_epochs=40",
                          "--config.eval_every_steps=5"), cwd=REPO, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for line in p.stdout:
      if "step 10/" in line:
        break
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    r = subprocess.CompletedProcess(p.args, p.returncode, "", err)
    last = steps(w)[-1] if steps(w) else 0
    o = outcome("Ctrl-C during training", "fault", r,
                lost=not last or not resumes(w, last, "--config.num_epochs=40",
                                             "--config.eval_every_steps=5"),
                note="and at the signal: \"SIGINT: stopping after the current step(s); send it "
                     "again to stop at once\"")
    o.lines = 2
    return o
  case(sigint)

  def nan():
    (tmp / "nan").mkdir()
    r = train(wd("nan"), "--config.learning_rate=1e30", "--config.norm=none")
    return outcome("loss becomes NaN", "fault", r)
  case(nan)

  # -- Records: a damaged or missing one is made whole again, never dropped. ---
  def last_record(w: Path) -> dict:
    return json.loads((w / "metrics.jsonl").read_text().splitlines()[-1])

  def record_case(name: str, damage: Callable[[str], str]):
    def f():
      w = finished_run(name)
      whole = last_record(w)
      m = w / "metrics.jsonl"
      m.write_text(damage(m.read_text()))
      r = train(w)
      now = last_record(w) if r.returncode == 0 else {}
      same = {k: now.get(k) for k in ("step", "test_error")} == {
          k: whole.get(k) for k in ("step", "test_error")}
      said = next((l for l in r.stdout.splitlines() if "no record" in l), "nothing said")
      return outcome(name, "fault", r, lost=not steps(w), must_fail=False, lines=0,
                     silent=not same or said == "nothing said",
                     note=f"on stdout: {said}; final test_error {now.get('test_error')}, "
                          f"uninterrupted {whole.get('test_error')}")
    case(f)

  record_case("metrics.jsonl: last line cut short",
              lambda t: t[:len(t) - len(t.splitlines()[-1]) - 1] + t.splitlines()[-1][:40])
  record_case("metrics.jsonl: last record missing (killed after its checkpoint)",
              lambda t: "".join(l + "\n" for l in t.splitlines()[:-1]))

  def damaged_first_record():
    w = finished_run("rec1")
    m = w / "metrics.jsonl"
    lines = m.read_text().splitlines()
    m.write_text("".join(l + "\n" for l in [lines[0][:20], *lines[1:]]))
    before = m.read_bytes()
    r = train(w, "--config.num_epochs=3")
    return outcome("metrics.jsonl: an earlier record damaged", "fault", r,
                   lost=m.read_bytes() != before, note="nothing touched"
                   if m.read_bytes() == before else "metrics.jsonl CHANGED")
  case(damaged_first_record)

  # -- Nothing a run writes follows a link out of its workdir. ----------------
  def lock_symlink():
    (tmp / "link").mkdir()
    target = tmp / "link" / "outside"
    target.write_text("precious\n")
    w = wd("link")
    w.mkdir()
    (w / "lock").symlink_to(target)
    r = train(w)
    return outcome("workdir's lock a symlink to a file outside", "input", r,
                   outside=target.read_text() != "precious\n")
  case(lock_symlink)

  # -- Overrides are typed before anything runs. ---------------------------------
  for name, args in [
      ("tuple field given a word", ("--config.hidden=abc",)),
      ("tuple field given a float", ("--config.hidden=(64.5,32)",)),
      ("tuple field given a bare int", ("--config.hidden=1000",)),
      ("experiment naming a runner module", ("--config.experiment=runner.loop",)),
      ("experiment naming the entry point", ("--config.experiment=main",)),
  ]:
    env_case(name, None, (PI, *args))

  def empty_workdir():
    (tmp / "emptywd").mkdir()
    r = run((*MAIN, PI, "--workdir="), tmp / "emptywd")
    stray = [p.name for p in REPO.iterdir() if p.name in ("metrics.jsonl", "checkpoints", "lock")]
    return outcome("--workdir \"\"", "input", r, outside=bool(stray))
  case(empty_workdir)

  # -- Norms from the registry: one line naming what the model takes. ----------
  for name, args in [
      ("group norm whose groups do not divide a layer",
       (PI, "--config.norm=group", "--config.norm_groups=7")),
      ("a module:Name that is not a Norm", (PI, "--config.norm=tests.user_norm:NotANorm")),
      ("a module:Name whose module does not import", (PI, "--config.norm=nosuch.module:X")),
      ("transformer: batch norm", ("--config=configs/transformer.py:smoke", "--config.norm=batch")),
      ("DRAW: a norm its cells cannot take",
       ("--config=configs/draw.py:smoke", "--config.norm=group")),
  ]:
    env_case(name, None, args)

  for name, args in [
      ("reproduce norms: unknown task", ("--tasks", "nope")),
      ("reproduce norms: unknown norm", ("--norms", "foo")),
      ("reproduce norms: a norm no chosen task takes", ("--tasks", "handwriting", "--norms", "batch")),
  ]:
    def f(name=name, args=args):
      runs_dir = tmp / name / "runs"
      r = reproduce("norms", "--preset", "smoke", "--runs_dir", str(runs_dir),
                    "--results_dir", str(tmp / name / "res"), *args)
      return outcome(name, "input", r, note="AFTER runs" if runs_dir.exists() and any(
          runs_dir.rglob("metrics.jsonl")) else "before any run")
    case(f)

  # -- Resumes that change what the record says. -------------------------------
  def old_config_field():
    w = finished_run("oldfield")
    cj = json.loads((w / "config.json").read_text())
    del cj["config"]["eps"]  # a config.json from before the field existed
    (w / "config.json").write_text(json.dumps(cj))
    r = train(w, "--config.eps=0.5", "--config.num_epochs=3")
    after = json.loads((w / "config.json").read_text())
    claimed = after["config"].get("eps") == 0.5
    logged = any(e.get("config", {}).get("eps") == 0.5 for e in after.get("resumed_with", []))
    return outcome("resume changing a field absent from an old config.json", "input", r,
                   must_fail=False, lines=0, silent=claimed or not logged,
                   note="recorded under resumed_with, not as the whole run's" if logged
                   and not claimed else "config.json claims it for the whole run")
  case(old_config_field)

  def other_data_dir():
    w = finished_run("otherdata")
    d2 = tmp / "otherdata" / "data2"
    d2.mkdir()
    (d2 / "mnist").symlink_to(data / "mnist")
    before = json.loads((w / "config.json").read_text())["config"]["data_dir"]
    r = train(w, "--config.num_epochs=3", env={"LNORM_DATA_DIR": str(d2)})
    after = json.loads((w / "config.json").read_text())
    logged = any(str(d2) in json.dumps(e) for e in after.get("resumed_with", []))
    return outcome("resume reading another data_dir", "input", r, must_fail=False, lines=0,
                   silent=after["config"]["data_dir"] != before or not logged,
                   note="recorded under resumed_with; the original data_dir kept" if logged
                   else "NOT recorded")
  case(other_data_dir)

  def nan_strict_json():
    (tmp / "nanjson").mkdir()
    w = wd("nanjson")
    r = train(w, "--config.learning_rate=1e30", "--config.norm=none",
              "--config.eval_every_steps=5")
    bad, lines = [], []
    if (w / "metrics.jsonl").exists():
      lines = (w / "metrics.jsonl").read_text().splitlines()
      for line in lines:
        try:
          json.loads(line, parse_constant=lambda c: bad.append(c))
        except ValueError:
          bad.append(line[:40])
    return outcome("loss becomes NaN: the records stay strict JSON", "fault", r,
                   silent=bool(bad), note=f"bare {bad[0]!r} in metrics.jsonl" if bad
                   else f"metrics.jsonl's {len(lines)} record(s) parse as strict JSON; a "
                   "non-finite metric is written null, its value named under 'nonfinite' "
                   "(tests/test_run_faults.py)")
  case(nan_strict_json)

  # -- Damaged data: every file a loader reads is checked, and named. ---------
  def damaged_novels(name: str, config: str, *extra: str):
    def f():
      d = tmp / name / "data" / "text" / "novels"
      d.mkdir(parents=True)
      shutil.copy(data / "text" / "novels" / "novels.tar.gz", d)
      flip(d / "novels.tar.gz")  # gzip -t: a CRC error
      r = run((*MAIN, f"--config={config}", f"--workdir={wd(name)}", *extra), tmp,
              {"LNORM_DATA_DIR": str(tmp / name / "data")})
      return outcome(name, "input", r, silent=r.returncode == 0)
    case(f)

  damaged_novels("transformer: novels archive with 2 bytes flipped", "configs/transformer.py:smoke")
  damaged_novels("skip-thoughts: novels archive with 2 bytes flipped",
                 "configs/skipthoughts.py:smoke", "--config.corpus=novels")

  def damaged_book():
    name = "skip-thoughts: a Gutenberg book with one byte changed"
    d = tmp / "book" / "data"
    shutil.copytree(data / "text" / "gutenberg", d / "text" / "gutenberg")
    (d / "senteval").symlink_to(data / "senteval")
    flip(d / "text" / "gutenberg" / "carroll-alice.txt", 5000, 1)
    r = run((*MAIN, "--config=configs/skipthoughts.py:smoke", f"--workdir={wd('book')}"), tmp,
            {"LNORM_DATA_DIR": str(d)})
    return outcome(name, "input", r, silent=r.returncode == 0)
  case(damaged_book)

  def damaged_abc():
    d = tmp / "abc" / "text"
    d.mkdir(parents=True)
    shutil.copy(data / "text" / "abc.zip", d)
    flip(d / "abc.zip", nbytes=1)
    r = run((sys.executable, "scripts/make_cloze.py", "--out", str(tmp / "abc" / "cloze"),
             "--context_sentences", "4", "--stride", "10", "--text_dir", str(d), "--no_books"),
            tmp)
    return outcome("make_cloze: abc.zip with one byte changed", "input", r,
                   silent=r.returncode == 0)
  case(damaged_abc)

  # -- Derived caches: a damaged one is rebuilt, an unwritable one skipped. ----
  hw = ("--config=configs/handwriting.py:smoke",)
  no_native = {"LNORM_NATIVE": "off", "LNORM_DATA_DIR": str(data)}

  def damaged_cache():
    cache = tmp / "iamcache" / "cache"
    first = run((*MAIN, *hw, f"--workdir={wd('iamcache')}"), tmp,
                {**no_native, "LNORM_CACHE_DIR": str(cache)})
    if first.returncode != 0:
      raise SystemExit(f"error: the run that builds the IAM cache failed: {first.stderr[-300:]}")
    npz = sorted(cache.rglob("parsed-*.npz"))[0]
    before = npz.read_bytes()
    b = bytearray(before)
    b[len(b) // 2] ^= 0x04  # one bit
    npz.write_bytes(bytes(b))
    r = run((*MAIN, *hw, f"--workdir={tmp / 'iamcache' / 'run2'}"), tmp,
            {**no_native, "LNORM_CACHE_DIR": str(cache)})
    return outcome("IAM-OnDB parse cache with one bit flipped", "fault", r, must_fail=False,
                   silent=npz.read_bytes() != before,
                   note="rebuilt byte for byte; the run goes on" if npz.read_bytes() == before
                   else "cache NOT rebuilt as it was")
  case(damaged_cache)

  def unwritable_cache():
    (tmp / "nocache").mkdir()
    (tmp / "nocache" / "afile").write_text("x")
    r = run((*MAIN, *hw, f"--workdir={wd('nocache')}"), tmp,
            {**no_native, "LNORM_CACHE_DIR": str(tmp / "nocache" / "afile" / "cache")})
    return outcome("$LNORM_CACHE_DIR unwritable", "input", r, must_fail=False,
                   note="the run goes on without the cache")
  case(unwritable_cache)

  # -- The Transformer's switches. ----------------------------------------------
  for name, args in [
      ("transformer: qk_norm without a norm", ("--config.norm=none", "--config.qk_norm=True")),
      ("transformer: deepnorm without a norm",
       ("--config.norm=none", "--config.norm_position=deepnorm")),
      ("transformer: deepnorm with the GPT-2 init",
       ("--config.norm_position=deepnorm", "--config.scaled_residual_init=True")),
      ("transformer: unknown norm_position", ("--config.norm_position=middle",)),
  ]:
    env_case(name, None, ("--config=configs/transformer.py:smoke", *args))

  # -- reproduce.py and redraw.py. ------------------------------------------------
  def results_dir_file():
    (tmp / "rdf").mkdir()
    (tmp / "rdf" / "afile").write_text("x")
    r = reproduce("fig6", "--preset", "smoke", "--runs_dir", str(tmp / "rdf" / "runs"),
                  "--results_dir", str(tmp / "rdf" / "afile"))
    return outcome("reproduce: --results_dir is a file", "input", r,
                   note="before any run" if not (tmp / "rdf" / "runs" / "fig6").exists()
                   else "AFTER runs")
  case(results_dir_file)

  def missing_target_data():
    (tmp / "nofashion").mkdir()
    (tmp / "nofashion" / "data").mkdir()
    (tmp / "nofashion" / "data" / "mnist").symlink_to(data / "mnist")
    r = reproduce("convnet", "--preset", "smoke", "--runs_dir", str(tmp / "nofashion" / "runs"),
                  "--results_dir", str(tmp / "nofashion" / "res"),
                  env={"LNORM_DATA_DIR": str(tmp / "nofashion" / "data")})
    ran = (tmp / "nofashion" / "runs").exists() and any((tmp / "nofashion" / "runs").rglob(
        "metrics.jsonl"))
    return outcome("reproduce convnet without Fashion-MNIST", "input", r,
                   note="AFTER runs" if ran else "before the first run")
  case(missing_target_data)

  def fig6_truncated_record():
    """The last line of one run's metrics.jsonl cut short after the target
    finished: the table must come out as before (the run re-evaluated)."""
    runs_dir, res = tmp / "trunc" / "runs", tmp / "trunc" / "res"
    args = ("fig6", "--preset", "smoke", "--runs_dir", str(runs_dir), "--results_dir", str(res))
    first = reproduce(*args)
    if first.returncode != 0:
      raise SystemExit(f"error: fig6 smoke failed: {first.stderr[-300:]}")
    md = res / "fig6_smoke" / "results.md"
    before = timeless(md.read_text())
    m = sorted(runs_dir.rglob("layer_b128*/metrics.jsonl"))[0]
    text = m.read_text()
    m.write_text(text[:len(text) - len(text.splitlines()[-1]) // 2 - 1])
    r = reproduce(*args)
    return outcome("reproduce: a record's last line cut short", "fault", r, lost=False,
                   must_fail=False, lines=0, silent=timeless(md.read_text()) != before,
                   note="the run's last interval trained again from its checkpoint; results.md "
                   "as before but for times" if timeless(md.read_text()) == before
                   else "results.md CHANGED")
  case(fig6_truncated_record)

  def second_reproduce():
    runs_dir = tmp / "two" / "runs"
    args = ("scripts/reproduce.py", "fig6", "--preset", "smoke", "--runs_dir", str(runs_dir),
            "--results_dir", str(tmp / "two" / "res"))
    p = subprocess.Popen((sys.executable, *args), cwd=REPO, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
      deadline = time.time() + 120
      while time.time() < deadline and not list(runs_dir.rglob("lock")):
        time.sleep(0.2)
      time.sleep(1)
      r = run((sys.executable, *args), tmp)
    finally:
      p.kill()
      p.wait()
    return outcome("second reproduce.py on the same runs folder", "input", r)
  case(second_reproduce)

  def kill_reproduce():
    runs_dir = tmp / "kill9" / "runs"
    p = subprocess.Popen((sys.executable, "scripts/reproduce.py", "fig6", "--preset", "smoke",
                          "--runs_dir", str(runs_dir), "--results_dir", str(tmp / "kill9" / "r")),
                         cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not processes_mentioning(f"--workdir={runs_dir}"):
      time.sleep(0.2)
    p.kill()
    p.wait()
    deadline = time.time() + 120
    while time.time() < deadline and processes_mentioning(f"--workdir={runs_dir}"):
      time.sleep(0.5)
    left = processes_mentioning(f"--workdir={runs_dir}")
    for pid in left:
      os.kill(pid, signal.SIGKILL)
    o = Outcome("kill -9 of reproduce.py", "fault", p.returncode, "", False, lines=0,
                note=f"{len(left)} run(s) left running" if left else
                "its runs stopped with it (SIGTERM, resumable); none left running")
    o.silent = bool(left)
    return o
  case(kill_reproduce)

  def compare_without_out():
    (tmp / "cmp").mkdir()
    r = run((sys.executable, "scripts/compare.py", str(REPO / "results" / "fig6" / "layer_b128")),
            tmp / "cmp")
    return outcome("compare.py without --out", "input", r,
                   outside=(REPO / "compare.png").exists() or (tmp / "cmp" / "compare.png").exists())
  case(compare_without_out)

  def redraw_committed():
    target = REPO / "results" / "fig5_cpu"
    before = {f: f.read_bytes() for f in target.rglob("*") if f.is_file()}
    r = run((sys.executable, "scripts/redraw.py", "fig5", "--preset", "cpu"), REPO)
    changed = [f for f, b in before.items() if not f.exists() or f.read_bytes() != b]
    for f in changed:  # put the committed files back
      f.write_bytes(before[f])
    return outcome("redraw.py fig5 --preset cpu (its docstring's example)", "input", r,
                   must_fail=False, lines=0, silent=bool(changed),
                   note=f"{len(changed)} committed file(s) changed" if changed
                   else "the committed 3-seed figure redrawn identical")
  case(redraw_committed)

  if mount:
    def read_only():
      with tmpfs(64, read_only=True) as d:
        return outcome("read-only workdir", "input", train(d / "run"))
    case(read_only)

    def results_dir_read_only():
      with tmpfs(64, read_only=True) as d:
        runs_dir = tmp / "rdro" / "runs"
        r = reproduce("fig6", "--preset", "smoke", "--runs_dir", str(runs_dir),
                      "--results_dir", str(d / "res"))
        return outcome("reproduce: --results_dir read-only", "input", r,
                       note="AFTER runs" if (runs_dir / "fig6").exists() else "before any run")
    case(results_dir_read_only)

    def full_in_checkpoint():
      # 1000 KiB: the first checkpoint of the smoke run fits, the second does not.
      with tmpfs(1000) as d:
        w = d / "run"
        r = train(w)
        kept = steps(w)
        subprocess.run(("mount", "-o", "remount,size=4m", str(d)), check=True)
        lost = not kept or not resumes(w, kept[-1])
        return outcome("disk full while a checkpoint is written", "fault", r, lost=lost)
    case(full_in_checkpoint)

    def full_at_start():
      with tmpfs(200) as d:
        subprocess.run(("dd", "if=/dev/zero", f"of={d / 'fill'}", "bs=1k", "count=400"),
                       capture_output=True)
        r = train(d / "run")
        left = (d / "run").exists()
        return outcome("disk full at the start", "fault", r,
                       note="workdir left behind" if left else "nothing left behind")
    case(full_at_start)

    def no_room():
      with tmpfs(600) as d:
        return outcome("no room for one checkpoint", "fault", train(d / "run"))
    case(no_room)
  return out


def markdown(results: list[Outcome], skipped: list[str], commit: str) -> str:
  tried = [r for r in results if r.status is not None]
  fail = [r for r in tried if r.must_fail]
  go_on = [r for r in tried if not r.must_fail]
  yes = lambda v: "—" if v is None else "yes" if v else "no"
  md = ("# Bad input and faults: what the user sees\n\n"
        f"From `LNORM_DATA_DIR=../shared/data python scripts/check_errors.py` at {commit}. "
        f"Each case runs the command line in a fresh folder.\n\n"
        f"**{len(tried)} kinds tried** ({sum(r.kind == 'input' for r in tried)} bad inputs, "
        f"{sum(r.kind == 'fault' for r in tried)} faults). "
        f"**{sum(r.as_expected for r in fail)} of the {len(fail)} that must fail did so in one "
        f"line** (Ctrl-C: a notice at the signal, then one line at the stop) with a non-zero "
        f"exit; **{sum(r.as_expected for r in go_on)} of the {len(go_on)} that must go on did "
        f"so** (a rebuilt cache, a record made whole again, a redraw); "
        f"**{sum(r.traceback for r in tried)} tracebacks**; "
        f"**{sum(bool(r.silent) for r in tried)} silent results** (a result changed or kept "
        f"wrong without a word); **{sum(bool(r.outside) for r in tried)} writes outside the "
        f"workdir** (of {sum(r.outside is not None for r in tried)} cases checked); "
        f"**{sum(bool(r.lost) for r in tried)} runs lost** (of "
        f"{sum(r.lost is not None for r in tried)} cases with a run before the fault).\n\n"
        + (f"Not tried here (need root for a small tmpfs): {', '.join(skipped)}.\n\n"
           if skipped else "")
        + "| case | kind | exit | lines on stderr | traceback | silent | outside | run lost "
        "| what the user sees |\n|---|---|---|---|---|---|---|---|---|\n")
  for r in tried:
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    shown = (lines[-1] if lines else "(nothing on stderr)") + (f" ({r.note})" if r.note else "")
    shown = shown.replace("|", "\\|").replace(str(Path(tempfile.gettempdir())), "$TMP")
    shown = shown.replace(str(REPO.parent / "shared"), "../shared")
    md += (f"| {r.case} | {r.kind} | {r.status} | {len(lines)} | "
           f"{'yes' if r.traceback else 'no'} | {yes(r.silent)} | {yes(r.outside)} | "
           f"{yes(r.lost)} | {shown} |\n")
  return md


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--out", default=str(REPO / "results" / "errors"))
  p.add_argument("--only", default="", help="only the cases whose function name holds this "
                 "(for trying one case; the README is then written to --out all the same)")
  a = p.parse_args(argv)
  data = Path(os.environ.get("LNORM_DATA_DIR", "~/.cache/lnorm/data")).expanduser()
  if not (data / "mnist").is_dir():
    print(f"error: {data}/mnist not found; set LNORM_DATA_DIR", file=sys.stderr)
    return 1
  mount = can_mount()
  results: list[Outcome] = []
  with tempfile.TemporaryDirectory(prefix="lnorm-errors-") as tmp:
    for c in cases(Path(tmp), data, mount):
      if a.only and a.only not in c.__name__:
        continue
      o = c()
      results.append(o)
      print(f"{o.case}: exit {o.status}, {len(o.stderr.splitlines())} line(s)"
            f"{'' if o.as_expected else ' (UNEXPECTED)'}"
            f"{', TRACEBACK' if o.traceback else ''}{', RUN LOST' if o.lost else ''}"
            f"{', SILENT' if o.silent else ''}{', OUTSIDE' if o.outside else ''}",
            flush=True)
  skipped = [] if mount else ["read-only workdir", "reproduce: --results_dir read-only",
                              "disk full while a checkpoint is written",
                              "disk full at the start", "no room for one checkpoint"]
  commit = subprocess.run(("git", "rev-parse", "--short", "HEAD"), cwd=REPO,
                          capture_output=True, text=True).stdout.strip() or "unknown"
  out = Path(a.out)
  out.mkdir(parents=True, exist_ok=True)
  (out / "README.md").write_text(markdown(results, skipped, commit))
  print(f"wrote {out / 'README.md'}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
