"""Data parallelism (experiments/runner/parallel.py): the same training on 1 and on 8
devices, batch norm's local statistics, and a run over two processes.

XLA's device count is fixed when jax is imported, so the runs go in a
subprocess (``python -m tests.test_parallel SPEC.json``) with
``--xla_force_host_platform_device_count=8``. Data are tiny random images
written here; nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.run_records import REPO, metrics, without_timing

# End-to-end runs (minutes): the slow suite (`python -m pytest -m slow`).
pytestmark = pytest.mark.slow

NORMS = ("none", "layer", "batch", "weight", "rms")
# The whole set (every norm, two processes) takes minutes on 2 cores: .ci/run
# sets LNORM_TEST_PARALLEL=all; the default suite runs layer and batch norm.
ALL = os.environ.get("LNORM_TEST_PARALLEL") == "all"
QUICK_NORMS = ("layer", "batch")
PI_MNIST = dict(hidden=(16, 16), num_valid=16, num_train=0, batch_size=32, num_epochs=1,
                eval_batch_size=40, learning_rate=1e-3, bn_unbiased=False)
PI_MNIST_NUM = {"train": 176, "test": 24}  # 160 training images: 5 steps of 32
DRAW = dict(num_glimpses=2, features=8, latent=3, num_train=0, num_eval=0, batch_size=16,
            num_epochs=1, eval_batch_size=12)
DRAW_NUM = {"train": 48, "valid": 12, "test": 12}


# --- The subprocess ----------------------------------------------------------

def _flat(tree) -> dict[str, np.ndarray]:
  return {jax.tree_util.keystr(k): np.asarray(v)
          for k, v in jax.tree_util.tree_leaves_with_path(tree)}


def _worker(spec: dict) -> None:
  from configs import draw as draw_config  # pylint: disable=g-import-not-at-top
  from configs import pi_mnist as pi_config
  from experiments import classifier, draw, pi_mnist
  from experiments.runner import loop
  from lnorm.data import binarized_mnist, mnist
  from tests.test_binarized_mnist import write_amat
  from tests.tiny_data import write_dataset

  data = Path(spec["data"])
  _, md5 = write_dataset(data, num=PI_MNIST_NUM)
  mnist.MD5["mnist"] = md5
  _, sha = write_amat(data, num=DRAW_NUM)
  binarized_mnist.SHA256.clear()
  binarized_mnist.SHA256.update(sha)
  for run in spec["runs"]:
    base, fields = (pi_config, PI_MNIST) if run["experiment"] != "draw" else (draw_config, DRAW)
    config = base.get_config("smoke")
    config.update(fields)
    config.data_dir = str(data)
    config.update(run["overrides"])
    if run["experiment"] == "draw":
      state = draw.train_and_evaluate(config, run["workdir"])
    elif run["experiment"] == "pi_mnist_groups":
      # On one device, with the model told to take statistics over 8 groups.
      model = pi_mnist.create_model(config).clone(bn_groups=run["groups"])
      state = loop.run(config, run["workdir"], lambda c=config, m=model: classifier.task(
          c, m, classifier.load_data(c, flatten=True)))
    else:
      state = pi_mnist.train_and_evaluate(config, run["workdir"])
    stats = getattr(state, "batch_stats", {})
    np.savez(Path(run["workdir"]) / "state.npz", **_flat({"params": state.params,
                                                           "batch_stats": stats}))


def run_in_subprocess(tmp_path: Path, runs: list[dict], devices: int = 8) -> None:
  spec = tmp_path / "spec.json"
  spec.write_text(json.dumps({"data": str(tmp_path / "data"), "runs": runs}))
  # XLA's backend optimisations off: a third less compile time for these tiny
  # steps, the same arithmetic on 1 and 8 devices.
  env = {**os.environ, "JAX_PLATFORMS": "cpu",
         "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices} "
                      "--xla_backend_optimization_level=0"}
  p = subprocess.run([sys.executable, "-m", "tests.test_parallel", str(spec)], cwd=REPO,
                     env=env, capture_output=True, text=True, timeout=900)
  assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]


def state_of(wd: Path) -> dict[str, np.ndarray]:
  with np.load(wd / "state.npz") as f:
    return dict(f)


def assert_same_metrics(a: Path, b: Path, rtol: float = 1e-4, atol: float = 1e-5) -> None:
  ma, mb = without_timing(metrics(a)), without_timing(metrics(b))
  assert [r["step"] for r in ma] == [r["step"] for r in mb]
  for ra, rb in zip(ma, mb):
    assert ra.keys() == rb.keys()
    for k in ra:
      np.testing.assert_allclose(ra[k], rb[k], rtol=rtol, atol=atol, err_msg=k)


def assert_same_run(a: Path, b: Path, rtol: float = 1e-4, atol: float = 1e-5) -> None:
  assert_same_metrics(a, b, rtol, atol)
  sa, sb = state_of(a), state_of(b)
  assert sa.keys() == sb.keys()
  for k in sa:
    np.testing.assert_allclose(sa[k], sb[k], rtol=rtol, atol=atol, err_msg=k)


# --- One process, 8 devices ---------------------------------------------------

@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
  """Every run of the single-process tests, in one subprocess (one jax start)."""
  root = tmp_path_factory.mktemp("parallel")
  specs = []
  for norm in NORMS if ALL else QUICK_NORMS:
    for n in (1, 8):
      specs.append({"experiment": "pi_mnist", "workdir": str(root / f"{norm}_{n}"),
                    "overrides": {"norm": norm, "num_devices": n}})
  specs.append({"experiment": "pi_mnist", "workdir": str(root / "batch_local_8"),
                "overrides": {"norm": "batch", "num_devices": 8, "bn_stats": "local"}})
  specs.append({"experiment": "pi_mnist_groups", "workdir": str(root / "batch_groups_1"),
                "overrides": {"norm": "batch", "num_devices": 1}, "groups": 8})
  for n in (1, 8):
    specs.append({"experiment": "draw", "workdir": str(root / f"draw_{n}"),
                  "overrides": {"norm": "layer_c", "num_devices": n}})
  run_in_subprocess(root, specs)
  return root


@pytest.mark.parametrize("norm", NORMS)
def test_pi_mnist_on_8_devices_equals_1(runs, norm):
  if not (ALL or norm in QUICK_NORMS):
    pytest.skip("LNORM_TEST_PARALLEL=all runs every norm")
  # Batch norm here is global: the statistics of all 16 examples of each batch.
  assert_same_run(runs / f"{norm}_1", runs / f"{norm}_8")
  assert json.loads((runs / f"{norm}_8" / "config.json").read_text())["config"][
      "num_devices"] == 8


def test_draw_on_8_devices_equals_1(runs):
  assert_same_run(runs / "draw_1", runs / "draw_8")
  assert (runs / "draw_8" / "samples.png").stat().st_size


def test_local_batch_norm_is_per_device(runs):
  # 8 devices with local statistics train as one device whose batch norm takes
  # its statistics over 8 groups of 4 examples: and not as global batch norm.
  assert_same_run(runs / "batch_local_8", runs / "batch_groups_1")
  local, glob = state_of(runs / "batch_local_8"), state_of(runs / "batch_8")
  key = next(k for k in local if "dense0" in k and "kernel" in k)
  assert not np.allclose(local[key], glob[key], rtol=1e-3, atol=1e-4)


# --- In this process: the layer, and the errors --------------------------------

def test_grouped_batch_norm_equals_separate_shards():
  from lnorm.layers import NormDense  # pylint: disable=g-import-not-at-top
  G, Bg, D, F = 8, 3, 5, 4
  x = jax.random.normal(jax.random.key(0), (G * Bg, D)) * 3 + 1
  layer = NormDense(F, norm="batch", momentum=0.9, unbiased=True)
  variables = layer.init(jax.random.key(1), x, train=False)
  variables = {"params": {**variables["params"],
                          "gain": jnp.linspace(0.5, 2, F), "bias": jnp.arange(F) * 0.1},
               "batch_stats": variables["batch_stats"]}
  y, upd = layer.clone(groups=G).apply(variables, x, train=True, mutable=["batch_stats"])
  # Float64 numpy, each shard on its own.
  p = {k: np.asarray(v, np.float64) for k, v in variables["params"].items()}
  a = np.asarray(x, np.float64) @ p["kernel"]
  means, vars_ = [], []
  for g in range(G):
    a_g = a[g * Bg:(g + 1) * Bg]
    m, v = a_g.mean(0), a_g.var(0) * Bg / (Bg - 1)
    means.append(m), vars_.append(v)
    np.testing.assert_allclose(np.asarray(y[g * Bg:(g + 1) * Bg]),
                               p["gain"] * (a_g - m) / np.sqrt(v + 1e-5) + p["bias"],
                               rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(upd["batch_stats"]["mean"], 0.1 * np.mean(means, 0),
                             rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(upd["batch_stats"]["var"], 0.9 + 0.1 * np.mean(vars_, 0),
                             rtol=1e-4, atol=1e-6)


def test_grouped_batch_norm_of_a_convolution_equals_its_shards():
  from lnorm.layers import NormConv  # pylint: disable=g-import-not-at-top
  G, Bg = 4, 3
  x = jax.random.normal(jax.random.key(0), (G * Bg, 5, 6, 2)) + 2
  layer = NormConv(3, norm="batch", momentum=0.5)
  variables = layer.init(jax.random.key(1), x, train=False)
  y, upd = layer.clone(groups=G).apply(variables, x, train=True, mutable=["batch_stats"])
  shards = [layer.apply(variables, x[g * Bg:(g + 1) * Bg], train=True, mutable=["batch_stats"])
            for g in range(G)]
  np.testing.assert_allclose(y, jnp.concatenate([s[0] for s in shards]), rtol=1e-5, atol=1e-5)
  for k in ("mean", "var"):  # the mean of the shards' running-average updates
    np.testing.assert_allclose(upd["batch_stats"][k],
                               np.mean([s[1]["batch_stats"][k] for s in shards], 0),
                               rtol=1e-5, atol=1e-6)


def test_runner_rejects_bad_parallel_fields(tmp_path):
  from tests.run_records import run_cli  # pylint: disable=g-import-not-at-top
  env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
  for flag, words in (("--config.batch_size=12", ("batch_size=12", "8 devices")),
                      ("--config.bn_stats=sync", ("bn_stats='sync'", "global, local")),
                      ("--config.num_devices=9", ("num_devices=9", "8 devices"))):
    p = run_cli("--config", "configs/pi_mnist.py:smoke", "--workdir", str(tmp_path / "w"),
                flag, env=env)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and all(w in lines[0] for w in words), p.stderr
    assert not (tmp_path / "w").exists()


def test_cpu_devices_flag_splits_the_cpu(tmp_path):
  """--cpu_devices N makes N CPU devices (the batch check below names them),
  with no XLA_FLAGS; a count under -1 is one line."""
  from tests.run_records import run_cli  # pylint: disable=g-import-not-at-top
  env = {"XLA_FLAGS": "", "JAX_PLATFORMS": "cpu"}
  for flag, code, words in (("--cpu_devices=3", 2, ("batch_size=128", "3 devices")),
                            ("--cpu_devices=-2", 2, ("cpu_devices=-2",))):
    p = run_cli("--config", "configs/pi_mnist.py:smoke", "--workdir", str(tmp_path / "w"),
                flag, env=env)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == code and len(lines) == 1, p.stderr
    assert all(w in lines[0] for w in words), p.stderr
    assert not (tmp_path / "w").exists()


# --- Two processes ------------------------------------------------------------

PI_MNIST_FLAGS = [f"--config.{k}={','.join(map(str, v)) if isinstance(v, tuple) else v}"
                  for k, v in {**PI_MNIST, "num_epochs": 4, "norm": "batch"}.items()]


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _launch(tmp_path: Path, wd: Path, devices: int, process_id: int | None = None,
            num_processes: int = 2, port: int = 0) -> subprocess.Popen:
  args = [sys.executable, "tests/run_with_tiny_checksums.py", str(tmp_path / "md5.json"),
          "--config", "configs/pi_mnist.py:smoke", f"--config.data_dir={tmp_path / 'data'}",
          *PI_MNIST_FLAGS, "--workdir", str(wd)]
  if process_id is not None:
    args += [f"--coordinator_address=127.0.0.1:{port}", f"--num_processes={num_processes}",
             f"--process_id={process_id}"]
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO),
         "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
  log = open(tmp_path / f"{wd.name}_{process_id}.log", "a")
  return subprocess.Popen(args, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)


def _two_processes(tmp_path: Path, wd: Path) -> list[subprocess.Popen]:
  port = _free_port()
  return [_launch(tmp_path, wd, 4, i, port=port) for i in range(2)]


def _wait(procs: list[subprocess.Popen], tmp_path: Path, wd: Path) -> None:
  for p in procs:
    assert p.wait(timeout=900) == 0, (tmp_path / f"{wd.name}_0.log").read_text()[-3000:]


@pytest.mark.skipif(not ALL, reason="minutes on 2 cores: LNORM_TEST_PARALLEL=all "
                    "(.ci/run sets it)")
def test_two_processes_equal_one_and_resume_after_a_kill(tmp_path):
  from tests.tiny_data import write_dataset  # pylint: disable=g-import-not-at-top
  _, md5 = write_dataset(tmp_path / "data", num=PI_MNIST_NUM)
  (tmp_path / "md5.json").write_text(json.dumps(md5))
  # Two processes of 4 devices, killed after a checkpoint and resumed, against
  # one process of 8 run straight: equal metrics show both the split and the
  # resume (a straight two-process run as well took a minute of CI for nothing).
  one, killed = tmp_path / "one", tmp_path / "killed"
  _wait([_launch(tmp_path, one, 8)], tmp_path, one)

  procs = _two_processes(tmp_path, killed)
  deadline = time.time() + 900
  while not any(p.name.isdigit() for p in (killed / "checkpoints").glob("*")):
    assert time.time() < deadline and all(p.poll() is None for p in procs)
    time.sleep(0.01)
  # Paused first, so that a fast machine cannot finish the last steps before the kill.
  for p in procs:
    p.send_signal(signal.SIGSTOP)
  procs[1].send_signal(signal.SIGKILL)
  # The other process would wait in a collective for its peer (until JAX's
  # heartbeat timeout); a launcher (SLURM, a TPU pod) ends the job, as here.
  procs[0].send_signal(signal.SIGKILL)
  for p in procs:
    p.wait(timeout=60)
  assert procs[1].returncode == -signal.SIGKILL
  steps = [r["step"] for r in metrics(killed)]
  assert steps and steps[-1] < 20, "the run ended before the kill"
  _wait(_two_processes(tmp_path, killed), tmp_path, killed)
  log = (tmp_path / "killed_0.log").read_text()
  assert "resuming from step" in log.split("fresh run")[-1]
  assert_same_metrics(killed, one)
  # One line per evaluation: only process 0 writes metrics.jsonl.
  assert [r["step"] for r in metrics(killed)] == [5, 10, 15, 20]
  assert sorted(p.name for p in (killed / "checkpoints").iterdir()
                if p.name.isdigit()) == ["15", "20"]


if __name__ == "__main__":
  _worker(json.loads(Path(sys.argv[1]).read_text()))


def test_replicated_state_compiles_the_step_once():
  """A fresh TrainState's step is a Python 0: replicated as a weakly typed
  scalar, the step's strong int32 output would compile the step again."""
  from experiments.runner import parallel  # pylint: disable=g-import-not-at-top
  mesh = parallel.make_mesh(1)
  state = parallel.replicate({"step": 0, "w_D": np.ones(3, np.float32)}, mesh)
  assert isinstance(state["step"], jax.Array) and state["step"].dtype == jnp.int32
  step = jax.jit(parallel.data_parallel(
      lambda s, x_BxD: ({"step": s["step"] + 1, "w_D": s["w_D"] - x_BxD.mean(0)},
                        {"loss": x_BxD.sum()}), mesh, 4), donate_argnums=0)
  for _ in range(3):
    state, _ = step(state, jnp.ones((4, 3)))
  assert int(state["step"]) == 3
  assert step._cache_size() == 1  # pylint: disable=protected-access
