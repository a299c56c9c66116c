import jax

# Implicit rank promotion hides shape bugs: (B, H) + (H,) must be written out.
jax.config.update("jax_numpy_rank_promotion", "raise")
