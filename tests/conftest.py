import jax
import pytest

from lnorm import fused_layer_norm
from lnorm import native
from lnorm.recurrent import lstm_scan

# Implicit rank promotion hides shape bugs: (B, H) + (H,) must be written out.
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture(params=["native", "xla"])
def impl(request, monkeypatch):
  """Runs a test on each CPU implementation: the native kernels (layer_norm's,
  rms_norm's and the LSTM's), then XLA alone. (Half precision, float64 and the
  norms over non-trailing axes take XLA either way.)"""
  if request.param == "native" and not native.load():
    pytest.skip("native kernels unavailable (LNORM_NATIVE=require makes this an error)")
  if request.param == "xla":
    monkeypatch.setattr(fused_layer_norm, "_native_ok", lambda *_: False)
    monkeypatch.setattr(lstm_scan, "_native_ok", lambda *_: False)
  jax.clear_caches()  # jit caches hold lowerings made with the other choice
  yield request.param
  jax.clear_caches()
