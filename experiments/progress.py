"""Terminal progress for long runs: step, rate and ETA."""

import sys
import time


def _duration(s: float) -> str:
  s = int(s)
  return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class Progress:
  """Prints one line per report; the rate counts only steps run in this process."""

  def __init__(self, total_steps: int, first_step: int, examples_per_step: int):
    self.total, self.first, self.per_step = total_steps, first_step, examples_per_step
    self.t0 = time.perf_counter()

  def report(self, step: int, epoch: int, num_epochs: int, **metrics: float) -> None:
    dt = max(time.perf_counter() - self.t0, 1e-9)
    rate = (step - self.first) / dt
    eta = (self.total - step) / rate if rate > 0 else float("inf")
    shown = " ".join(f"{k}={v:.4g}" for k, v in metrics.items())
    print(f"epoch {epoch}/{num_epochs} step {step}/{self.total} | "
          f"{rate:,.0f} steps/s {rate * self.per_step:,.0f} ex/s | "
          f"ETA {_duration(eta) if eta != float('inf') else '?'} | {shown}",
          file=sys.stdout, flush=True)
