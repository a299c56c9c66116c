import jax
import pytest

from lnorm import fused_layer_norm
from lnorm import native

# Implicit rank promotion hides shape bugs: (B, H) + (H,) must be written out.
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture(params=["native", "xla"])
def impl(request, monkeypatch):
  """Runs a layer_norm test on each CPU implementation: the fused native
  kernels and the XLA version. (Half precision, float64 and non-trailing
  axes take the XLA version either way.)"""
  if request.param == "native" and not native.load():
    pytest.skip("native kernels unavailable (LNORM_NATIVE=require makes this an error)")
  if request.param == "xla":
    monkeypatch.setattr(fused_layer_norm, "_native_ok", lambda *_: False)
  jax.clear_caches()  # jit caches hold lowerings made with the other choice
  yield request.param
  jax.clear_caches()
