"""Terminal progress for long runs: step, rate and ETA, within an epoch too.

On a terminal, a tqdm bar (on stderr) that moves after every jitted call; in a
log file, a plain line at most every ``every_s`` seconds. Either way, one line
per evaluation on stdout, framed by the run's first line (fresh or resumed:
:meth:`Progress.begin`) and its last (the summary: :meth:`Progress.done`).
"""

from __future__ import annotations

import math
import sys
import time

from tqdm import tqdm

from experiments.runner.records import higher_is_better


def epochs(steps: int, steps_per_epoch: int) -> str:
  """``steps`` in epochs, for people: "1 epoch", "3 epochs", "0.25 of an epoch"."""
  if steps % steps_per_epoch:
    n = steps / steps_per_epoch
    return f"{n:.3g} of an epoch" if n < 1 else f"{n:.3g} epochs"
  n = steps // steps_per_epoch
  return f"{n} epoch" + ("" if n == 1 else "s")


def epochs_touched(steps: int, steps_per_epoch: int | None) -> int | None:
  """The epochs a run of ``steps`` touches: a last partial one counts."""
  return -(-steps // steps_per_epoch) if steps_per_epoch else None


def duration(s: float) -> str:
  if s == float("inf"):
    return "?"
  s = int(s)
  return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class Progress:
  """The rate counts only steps trained in this process, over training time."""

  def __init__(self, total_steps: int, first_step: int, examples_per_step: int,
               steps_per_epoch: int | None, num_epochs: int | None, every_s: float = 60):
    self.total, self.first, self.per_step = total_steps, first_step, examples_per_step
    self.spe, self.num_epochs, self.every_s = steps_per_epoch, num_epochs, every_s
    self.train_s, self.step, self.last_line = 0.0, first_step, time.perf_counter()
    self.bar = None
    if sys.stderr.isatty() and total_steps > first_step:
      self.bar = tqdm(total=total_steps, initial=first_step, unit="step",
                      dynamic_ncols=True, file=sys.stderr, leave=False)

  def begin(self) -> None:
    """The line that says where the run starts: afresh, or resumed (where)."""
    total, first, spe, n = self.total, self.first, self.spe, self.num_epochs
    if first == 0:
      print(f"fresh run: {total} steps" + (f" ({epochs(total, spe)})" if spe else ""),
            flush=True)
      return
    where = "" if not spe else (f" (epoch {first // spe} of {n} done)" if first % spe == 0
                                else f" (in epoch {first // spe + 1} of {n})")
    print(f"resuming from step {first} of {total}{where}", flush=True)

  def rate(self) -> float:
    return (self.step - self.first) / self.train_s if self.train_s > 0 else 0.0

  def _where(self, step: int) -> str:
    if self.spe:
      epoch = -(-step // self.spe) if step else 1
      return f"epoch {epoch}/{self.num_epochs} step {step}/{self.total}"
    return f"step {step}/{self.total}"

  def _speed(self) -> str:
    rate = self.rate()
    eta = (self.total - self.step) / rate if rate > 0 else float("inf")
    return (f"{rate:,.0f} steps/s {rate * self.per_step:,.0f} ex/s | ETA {duration(eta)}"
            if rate >= 1 else
            f"{1 / rate if rate else float('inf'):,.2f} s/step {rate * self.per_step:,.1f} "
            f"ex/s | ETA {duration(eta)}")

  def advance(self, step: int, seconds: float) -> None:
    """``step`` reached after ``seconds`` more of training."""
    if self.bar is not None:
      self.bar.update(step - self.step)
    self.step, self.train_s = step, self.train_s + seconds
    now = time.perf_counter()
    if self.bar is None and now - self.last_line >= self.every_s and step < self.total:
      print(f"{self._where(step)} | {self._speed()}", flush=True)
      self.last_line = now

  def report(self, step: int, **metrics: float) -> None:
    """The line of an evaluation."""
    shown = " ".join(f"{k}={v:.4g}" for k, v in metrics.items())
    line = f"{self._where(step)} | {self._speed()} | {shown}"
    if self.bar is not None:
      self.bar.set_postfix_str(shown, refresh=False)
      tqdm.write(line, file=sys.stdout)
    else:
      print(line, flush=True)
    self.last_line = time.perf_counter()

  def close(self) -> None:
    if self.bar is not None:
      self.bar.close()

  def done(self, records: list[dict], show: tuple[str, ...], total_s: float,
           num_epochs: int | None) -> None:
    """The run's last line: the steps trained here and how long they took, and
    the final and best of the ``show`` metrics (default: the first three)."""
    first, step = self.first, self.step
    if step == first:
      why = ("the config asks for 0 steps" + (
          f" (num_epochs={num_epochs})" if num_epochs is not None else "")
          if self.total == 0 else f"the run is already at step {step} of {self.total}")
      print(f"nothing was trained: {why}", flush=True)
    if not records:
      return
    last = records[-1]
    shown = show or tuple(k for k in last if k not in ("step", "epoch", "wall_time"))[:3]
    final = " ".join(f"{k}={last[k]:.4g}" for k in shown if k in last)
    best = []
    for k in shown:
      b = _best(records, k)
      if b is not None:
        best.append(f"{k}={b[0]:.4g} (step {b[1]})")
    trained = step - first
    print(f"done: step {step} of {self.total}"
          + (f", {trained} trained here in {duration(self.train_s)} of training"
             f" ({duration(total_s)} in all)" if trained else "")
          + f" | final {final} | best {' '.join(best)}", flush=True)


def _best(records: list[dict], key: str) -> tuple[float, int] | None:
  vals = [(r[key], r["step"]) for r in records if key in r and math.isfinite(r[key])]
  if not vals:
    return None
  pick = max if higher_is_better(key) else min
  return pick(vals, key=lambda v: v[0])
