"""lnorm: Layer Normalization (Ba, Kiros, Hinton 2016) in JAX/Flax."""
