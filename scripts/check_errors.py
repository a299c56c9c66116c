r"""Every bad input and fault we know of, tried through the command line, and
what the user sees: results/errors/README.md.

  LNORM_DATA_DIR=../shared/data python scripts/check_errors.py [--out results/errors]

Each case runs ``python -m experiments.main`` (or a script) in a fresh
temporary folder and records the exit status, the lines on stderr, whether a
traceback was printed, and, where a run existed before the fault, whether it
was lost (its newest checkpoint gone, or the same command no longer resuming
from it). The full-disk and read-only cases need a small tmpfs and so root;
without it they are listed as not tried. Takes about 5 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
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

  @property
  def as_expected(self) -> bool:
    return len([l for l in self.stderr.splitlines() if l.strip()]) == self.lines


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


def outcome(case: str, kind: str, r: subprocess.CompletedProcess, lost=None, note="") -> Outcome:
  return Outcome(case, kind, r.returncode, r.stderr.strip(), "Traceback" in r.stderr + r.stdout,
                 lost, note)


def cases(tmp: Path, data: Path, mount: bool) -> list[Callable[[], Outcome]]:
  out: list[Callable[[], Outcome]] = []
  case = out.append

  def wd(name: str) -> Path:
    return tmp / name / "run"

  for name, args in [
      ("unknown config field", (PI, "--config.nrom=layer")),
      ("bad field value", (PI, "--config.norm=group")),
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
    o.lines = 0
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

  if mount:
    def read_only():
      with tmpfs(64, read_only=True) as d:
        return outcome("read-only workdir", "input", train(d / "run"))
    case(read_only)

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
  one = sum(r.status != 0 and r.as_expected for r in tried
            if r.case != "damaged newest checkpoint")
  errors = [r for r in tried if r.case != "damaged newest checkpoint"]
  tb = sum(r.traceback for r in tried)
  lost = sum(bool(r.lost) for r in tried)
  md = ("# Bad input and faults: what the user sees\n\n"
        f"From `LNORM_DATA_DIR=../shared/data python scripts/check_errors.py` at {commit}. "
        f"Each case runs the command line in a fresh folder.\n\n"
        f"**{len(tried)} kinds tried** ({sum(r.kind == 'input' for r in tried)} bad inputs, "
        f"{sum(r.kind == 'fault' for r in tried)} faults); **{one} of the {len(errors)} "
        f"that must fail did so in one line** (Ctrl-C: a notice at the signal, then one line at "
        f"the stop) with a non-zero exit; **{tb} tracebacks**; "
        f"**{lost} runs lost** (of {sum(r.lost is not None for r in tried)} cases with a run "
        "before the fault).\n\n"
        + (f"Not tried here (need root for a small tmpfs): {', '.join(skipped)}.\n\n"
           if skipped else "")
        + "| case | kind | exit | lines on stderr | traceback | run lost | what the user sees |\n"
        "|---|---|---|---|---|---|---|\n")
  for r in tried:
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    shown = (lines[-1] if lines else "(nothing on stderr)") + (f" ({r.note})" if r.note else "")
    shown = shown.replace("|", "\\|").replace(str(Path(tempfile.gettempdir())), "$TMP")
    md += (f"| {r.case} | {r.kind} | {r.status} | {len(lines)} | "
           f"{'yes' if r.traceback else 'no'} | "
           f"{'—' if r.lost is None else 'yes' if r.lost else 'no'} | {shown} |\n")
  return md


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--out", default=str(REPO / "results" / "errors"))
  a = p.parse_args(argv)
  data = Path(os.environ.get("LNORM_DATA_DIR", "~/.cache/lnorm/data")).expanduser()
  if not (data / "mnist").is_dir():
    print(f"error: {data}/mnist not found; set LNORM_DATA_DIR", file=sys.stderr)
    return 1
  mount = can_mount()
  results: list[Outcome] = []
  with tempfile.TemporaryDirectory(prefix="lnorm-errors-") as tmp:
    for c in cases(Path(tmp), data, mount):
      o = c()
      results.append(o)
      print(f"{o.case}: exit {o.status}, {len(o.stderr.splitlines())} line(s)"
            f"{'' if o.as_expected else ' (UNEXPECTED)'}"
            f"{', TRACEBACK' if o.traceback else ''}{', RUN LOST' if o.lost else ''}",
            flush=True)
  skipped = [] if mount else ["read-only workdir", "disk full while a checkpoint is written",
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
