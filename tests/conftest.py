import os
import shutil
import tempfile

import jax
import pytest

from lnorm import fused_layer_norm
from lnorm import native
from lnorm.recurrent import gru_scan, lstm_scan

# Three tiers. The fast suite (`python -m pytest`); the slow tests (`-m "slow
# and not grid"`): end-to-end runs, resumes, faults, data parallelism, and a
# cover of each costly grid; the grid remainder (`-m grid`, also marked slow):
# the cases of those grids beyond their cover, the rest of the products of
# parameter values each of which a cover already runs. `-m "not grid"` (the
# README's test command, what CI runs) is the fast and the slow tests.

# The heaviest cases of test families whose other cases stay in the fast suite
# (each the one case of a parameter value, so the slow tests run them).
SLOW_CASES = {
    "test_recurrent_lstm.py::test_lstm_gradients_exact_in_float64[layer]",
    "test_recurrent_lstm.py::test_lstm_gradients_exact_in_float64[layer_c]",
    "test_normalization.py::test_layer_norm_gradients_match_naive_float64[shape1-axis1]",
    "test_transformer.py::test_matches_float64_reference[rms-post-learned]",
    "test_transformer.py::test_matches_float64_reference[layer-pre-learned]",
    "test_recurrent_gru.py::test_gru_context_is_the_cells_scan_over_x_and_context[layer]",
    "test_recurrent_gru.py::test_gru_matches_nn_rnn_in_float64[layer]",
    "test_order_embeddings.py::test_model_invariants[none]",
    "test_recurrent_cells.py::test_batch_lstm_training_matches_numpy[5-3]",
    "test_fisher.py::test_closed_forms_match_autodiff[none-softmax]",
    "test_recurrent_lstm.py::test_lstm_params_are_the_cells[none-names0]",
    "test_recurrent_gru.py::test_gru_params_are_the_cells[none]",
    "test_recurrent_cells.py::test_step_shapes_and_dtypes[LSTMCell(none)]",
}
SLOW_PREFIXES = (  # every case but the first of these bad-input families
    "test_transformer_run.py::test_bad_config_is_one_line_before_anything_runs[flags",
    "test_order_embeddings_run.py::test_bad_input_is_one_line_and_a_nonzero_exit[",
)

# Grids whose every case costs seconds (a compile each): the fast suite runs the
# listed cases, chosen so that each value of each parameter appears at least
# once (every norm, flag and size, not their product); the grid remainder the rest.
FAST_COVER = {
    "test_recurrent_lstm.py::test_lstm_native_scans_match_xla_and_float64": {
        "layer-True-B11-H100-T6-I4",  # the size whose error bound once failed on AVX-512
        "layer_c-False-B11-H100-T6-I4-dW_by_xla",
        "none-True-B11-H100-T6-I12",
        "layer-False-B1-H13-T6-I4",
        "layer_c-True-B4-H5-T6-I4",
    },
    "test_recurrent_lstm.py::test_lstm_native_dw_matches_xla_dw": {"layer-True", "layer_c-False"},
    "test_recurrent_gru.py::test_gru_native_steps_match_xla_and_float64": {
        "layer-True-B1-H13", "none-False-B4-H5"},
    "test_norms_registry.py::test_sequence_layer_falls_back_to_the_cells_scan": {
        "LSTM-LSTMCell-True-dyt", "GRU-GRUCell-False-tests.user_norm:MyNorm"},
    "test_norms_registry.py::test_lstm_batch_norm_is_the_cells_scan_with_its_statistics": {
        "True"},
    "test_bench_transformer_peer.py::test_losses_and_update_agree_with_float64_torch": {
        "sdpa-post-layer", "manual-pre-rms"},
    "test_recurrent_gru.py::test_gru_hand_written_backward_in_float64": {"layer-True", "none-False"},
    "test_recurrent_gru.py::test_gru_empty_batch": {"native-none", "xla-layer"},
    "test_fused_layer_norm.py::test_forward_and_gradients_match_float64": {
        "native-shape0", "native-shape1", "native-shape2", "native-shape3", "native-shape4",
        "xla-shape0", "xla-shape4"},
    # The cells' numpy references (test_matches_numpy_reference) run whole in the fast suite.
    "test_recurrent_cells.py::test_mask_freezes_carry_and_zeroes_outputs": {
        "LSTMCell(none)", "LSTMCell(layer_c)", "GRUCell(layer)", "RNNCell(none)"},
    "test_recurrent_cells.py::test_float64_params_match_numpy_to_float64_precision": {
        "LSTMCell(layer)", "GRUCell(none)", "RNNCell(layer)"},
}

# The slow tests' share of each costly grid: for a FAST_COVER family, the cases
# that run the values its fast cover leaves out (sizes such as H=1100, norms
# such as scale); for a family marked slow in its file, a cover of its own.
# Each parameter value of each grid runs in the fast or the slow tests; the
# grid remainder (`-m grid`) is the rest of the products.
SLOW_COVER = {
    "test_recurrent_lstm.py::test_lstm_native_scans_match_xla_and_float64": {
        "none-False-B4-H257-T6-I4", "none-False-B1-H1100-T6-I4"},
    "test_recurrent_lstm.py::test_lstm_native_dw_matches_xla_dw": {"none-False"},
    "test_recurrent_gru.py::test_gru_native_steps_match_xla_and_float64": {"none-False-B4-H257"},
    "test_norms_registry.py::test_sequence_layer_falls_back_to_the_cells_scan": {
        "LSTM-LSTMCell-False-rms", "LSTM-LSTMCell-False-scale"},
    "test_norms_registry.py::test_lstm_batch_norm_is_the_cells_scan_with_its_statistics": {
        "False"},
    "test_bench_transformer_peer.py::test_losses_and_update_agree_with_float64_torch": {
        "sdpa-none"},
    "test_fused_layer_norm.py::test_forward_and_gradients_match_float64": {"native-shape5"},
    "test_recurrent_cells.py::test_mask_freezes_carry_and_zeroes_outputs": {
        "LSTMCell(layer)", "GRUCell(none)", "RNNCell(layer)"},
    "test_recurrent_cells.py::test_float64_params_match_numpy_to_float64_precision": {
        "LSTMCell(none)", "LSTMCell(layer_c)", "GRUCell(layer)", "RNNCell(none)"},
    # Families marked slow in their files:
    "test_recurrent_lstm.py::test_lstm_matches_recurrent_cell": {
        "native-none-True-256", "xla-layer-False-5", "native-layer_c-True-5"},
    "test_recurrent_lstm.py::test_lstm_second_order_and_vmap": {
        "native-layer", "xla-none", "native-layer_c"},
    "test_recurrent_lstm.py::test_lstm_matches_nn_rnn_and_defaults": {
        "native-layer", "xla-none", "native-layer_c"},
    "test_recurrent_lstm.py::test_lstm_empty_batch": {"native-layer", "xla-none", "xla-layer_c"},
    "test_recurrent_gru.py::test_gru_second_order_and_vmap": {"native-layer", "xla-none"},
    "test_recurrent_gru.py::test_gru_matches_recurrent_cell": {"native-layer-True", "xla-none-False"},
    "test_layers.py::test_dtype_and_param_dtype_as_in_flax": {
        "none-conv", "layer-dense", "batch-conv", "weight-dense", "rms-conv"},
    "test_reader_batching.py::test_cut_step_equals_full_step": {
        "none-False", "layer-False", "batch-True"},
}


# JAX's persistent compilation cache, shared by the session's processes (the
# xdist workers and the runs tests start as subprocesses inherit the
# environment): a resumed run, a test's second run of one config, and the slow
# suite's programs that the fast suite compiled load the executable instead of
# compiling it again. Its keys are the lowered programs, so the native and XLA
# lowerings (the ``impl`` fixture) never share an entry. A cache the user set
# (``JAX_COMPILATION_CACHE_DIR``) is used as it is; otherwise the session makes
# one and removes it at the end.
_CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"
_MADE_CACHE = []


def pytest_configure(config):
  if _CACHE_ENV not in os.environ and not hasattr(config, "workerinput"):
    _MADE_CACHE.append(tempfile.mkdtemp(prefix="lnorm_test_jax_cache_"))
    os.environ[_CACHE_ENV] = _MADE_CACHE[0]
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
  if _CACHE_ENV in os.environ:
    jax.config.update("jax_compilation_cache_dir", os.environ[_CACHE_ENV])
    jax.config.update("jax_persistent_cache_min_compile_time_secs",
                      float(os.environ.get("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", 1)))


def pytest_unconfigure(config):
  for d in _MADE_CACHE:
    shutil.rmtree(d, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
  seen = set()
  for item in items:
    name = item.nodeid.split("/")[-1]
    prefix = next((p for p in SLOW_PREFIXES if name.startswith(p)), None)
    family, _, case = name.partition("[")
    fast_cover, slow_cover = FAST_COVER.get(family), SLOW_COVER.get(family)
    if name in SLOW_CASES or (prefix is not None and prefix in seen):
      item.add_marker(pytest.mark.slow)
    elif fast_cover is not None and case[:-1] not in fast_cover:
      item.add_marker(pytest.mark.slow)
      if slow_cover is None or case[:-1] not in slow_cover:
        item.add_marker(pytest.mark.grid)
    elif fast_cover is None and slow_cover is not None and case[:-1] not in slow_cover:
      item.add_marker(pytest.mark.slow)
      item.add_marker(pytest.mark.grid)
    if prefix is not None:
      seen.add(prefix)
  # A renamed case would silently drop its family from its cover.
  names = {item.nodeid.split("/")[-1] for item in items}
  families = {n.partition("[")[0] for n in names}
  for label, covers in (("FAST_COVER", FAST_COVER), ("SLOW_COVER", SLOW_COVER)):
    missing = sorted(f"{f}[{c}]" for f, cases in covers.items() if f in families
                     for c in cases if f"{f}[{c}]" not in names)
    if missing and not config.getoption("keyword"):
      raise pytest.UsageError(f"{label} names cases that are not collected: {missing}")


@pytest.fixture(autouse=True)
def _registry_restored():
  """Each test sees the norm registry as lnorm makes it: a norm a test (or the
  README's code) registers goes with it, so it cannot join another test's grid."""
  from lnorm import norms
  saved = dict(norms._REGISTRY)  # pylint: disable=protected-access
  yield
  norms._REGISTRY.clear()  # pylint: disable=protected-access
  norms._REGISTRY.update(saved)  # pylint: disable=protected-access


# Implicit rank promotion hides shape bugs: (B, H) + (H,) must be written out.
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture(scope="module", params=["native", "xla"])
def impl_choice(request):
  """The implementation ``impl`` sets up. Module-scoped, so pytest runs a
  module's tests on one choice, then on the other, and the jit caches are
  cleared a few times a module rather than around every test."""
  if request.param == "native" and not native.load():
    pytest.skip("native kernels unavailable (LNORM_NATIVE=require makes this an error)")
  return request.param


@pytest.fixture
def impl(impl_choice, monkeypatch):
  """Runs a test on each CPU implementation: the native kernels (layer_norm's,
  rms_norm's, the LSTM's and the GRU's), then XLA alone. (Half precision,
  float64 and the norms over non-trailing axes take XLA either way.)"""
  if impl_choice == "xla":
    monkeypatch.setattr(fused_layer_norm, "_native_ok", lambda *_: False)
    monkeypatch.setattr(lstm_scan, "_native_ok", lambda *_: False)
    monkeypatch.setattr(gru_scan, "_native_ok", lambda *_: False)
  yield impl_choice


_jit_caches_made_with = ["native"]


@pytest.fixture(autouse=True)
def _clear_jit_caches_on_a_switch(request):
  """jit caches hold lowerings made with one implementation: they are cleared
  whenever a test runs on the other one than the test before it (a test
  without ``impl`` runs on the native kernels)."""
  params = getattr(getattr(request.node, "callspec", None), "params", {})
  mode = params.get("impl_choice", "native") if "impl" in request.fixturenames else "native"
  if mode != _jit_caches_made_with[0]:
    jax.clear_caches()
    _jit_caches_made_with[0] = mode
