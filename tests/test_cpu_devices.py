"""How many devices the runner splits a CPU into (experiments/runner/parallel.py):
``--cpu_devices``, else a count the environment sets, else the experiment's
``CPU_DEVICES``; -1 is one a core, as many as divide the batch. The runs
themselves: tests/test_parallel.py (slow) and tests/test_transformer_run.py."""

from __future__ import annotations

import pytest

from experiments.runner import parallel
from experiments.runner.errors import UserError


@pytest.mark.parametrize("n, batch, cores, most, want", [
    (-1, 32, 2, 0, 2), (-1, 32, 6, 0, 4), (-1, 8, 3, 0, 2), (-1, 7, 4, 0, 1),
    (-1, 1, 16, 0, 1), (-1, None, 5, 0, 5), (-1, "32", 3, 0, 3), (-1, 32, 8, 2, 2),
    (-1, 32, 8, 3, 2), (-1, 32, 2, 8, 2), (0, 32, 2, 0, 0), (3, 32, 2, 0, 3),
    (1, 7, 4, 0, 1), (3, 32, 8, 1, 3)])
def test_cpu_devices_for(n, batch, cores, most, want):
  """-1 is one device a core, at most the run's num_devices where set, lowered
  to the largest count that divides the batch; any other count is itself."""
  assert parallel.cpu_devices_for(n, batch, cores, most) == want


def test_cpu_devices_below_minus_one_is_a_user_error():
  with pytest.raises(UserError, match="cpu_devices=-3"):
    parallel.cpu_devices_for(-3, 32, 2)


@pytest.mark.parametrize("flag, default, xla_flags, want", [
    (None, -1, "", "cores"),    # no flag: the experiment's CPU_DEVICES
    (None, 0, "", None),        # an experiment without one: JAX's default
    (None, -1, "--xla_force_host_platform_device_count=4", None),  # the user's count stays
    (0, -1, "", None),          # --cpu_devices=0: JAX's one device
    (3, -1, "--xla_force_host_platform_device_count=4", 3)])  # the flag wins
def test_set_cpu_devices_takes_the_flag_then_the_environment_then_the_experiment(
    monkeypatch, flag, default, xla_flags, want):
  set_to = []
  monkeypatch.setattr(parallel.jax.config, "update", lambda k, v: set_to.append((k, v)))
  monkeypatch.setenv("XLA_FLAGS", xla_flags)
  monkeypatch.delenv("JAX_NUM_CPU_DEVICES", raising=False)
  want = parallel.cpu_devices_for(-1, 32) if want == "cores" else want
  assert parallel.set_cpu_devices(flag, default, 32) == (want or 0)
  assert set_to == ([("jax_num_cpu_devices", want)] if want else [])


def test_a_count_in_jax_num_cpu_devices_stays(monkeypatch):
  set_to = []
  monkeypatch.setattr(parallel.jax.config, "update", lambda k, v: set_to.append((k, v)))
  monkeypatch.setenv("XLA_FLAGS", "")
  monkeypatch.setenv("JAX_NUM_CPU_DEVICES", "5")
  assert parallel.set_cpu_devices(None, -1, 32) == 0 and not set_to


def test_the_bench_times_an_update_from_the_records_after_the_first(tmp_path):
  """scripts/bench/cpu_devices.py: each record's epoch_time_s over the updates
  since the one before; the first record (compilation) and records without a
  time left out."""
  from scripts.bench.cpu_devices import per_update_s  # pylint: disable=g-import-not-at-top
  m = tmp_path / "metrics.jsonl"
  m.write_text('{"step": 100, "epoch_time_s": 40.0}\n{"step": 200, "epoch_time_s": 12.0}\n'
               '{"step": 200, "test_bpc": 2.5}\n\n{"step": 250, "epoch_time_s": 5.0}\n')
  assert per_update_s(m) == [0.12, 0.1]


def test_results_header_says_when_a_run_used_several_devices():
  """A results.md of runs on several devices says so (their late digits differ
  from one device's); runs all on one device leave the header as it was."""
  import argparse  # pylint: disable=g-import-not-at-top
  from scripts.paper import runs  # pylint: disable=g-import-not-at-top
  args = argparse.Namespace(target="transformer", preset="cpu", seeds=2, results_dir=None)
  rec = lambda devices, **kw: {"git_commit": "abc", "versions": {}, "devices": devices,
                               "host": {"cpu": "X", "cpu_threads": 2}, **kw}
  one = runs.header(args, [rec(["cpu:0"]), rec(["cpu:0"])], "T")
  assert "Devices" not in one
  mixed = runs.header(args, [rec(["cpu:0"]), rec(["cpu:0", "cpu:1"])], "T")
  assert "Devices a run: 1, 2 " in mixed
  resumed = runs.header(args, [rec(["cpu:0"], resumed_with=[
      {"git_commit": "def", "devices": ["cpu:0", "cpu:1"]}])], "T")
  assert "Devices a run: 1, 2 " in resumed
