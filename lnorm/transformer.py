"""A decoder-only Transformer language model over bytes, with the norm and
its place as switches (beyond the paper: where layer norm is used most).

``norm_position`` picks the block (F is Attn, then MLP)::

    post (Vaswani et al. 2017):     x = N(x + F(x))
    pre  (Xiong et al. 2020):       x = x + F(N(x))
    peri (Kim et al. 2025):         x = x + N_out(F(N(x)))
    deepnorm (Wang et al. 2022):    x = N(alpha x + F(x))
    none:                           x = x + F(x)

and ``norm`` the N: any norm of a sublayer in the registry (``accepted()``,
lnorm/norms.py), e.g. ``layer`` (``normalization.layer_norm``, gain and
bias), ``rms`` (``normalization.rms_norm``, gain only, as Zhang & Sennrich
2019), ``dyt``, ``derf``, ``scale``, ``group``, a norm of your own, or
``none``; every N has its own parameters. Pre- and peri-norm stacks end with
one more N before the output layer (the residual stream is never normalized
otherwise); post- and deepnorm stacks already end in one. Peri-LN also
normalizes the input (embeddings plus positions): Kim et al.'s embedding
norm, which they list as optional. DeepNet's alpha = (2 L)^(1/4) scales the
residual and its beta = (8 L)^(-1/4) multiplies the Xavier init of W^V, W^O,
W^1 and W^2 (the table in their Figure 2, for a decoder-only stack of L
blocks; ``deepnorm_alpha_beta``).

``qk_norm=True`` (Henry et al. 2020; Dehghani et al. 2023) normalizes each
head's queries and keys over the head's K features before their dot product,
with the N of ``norm`` and its own parameters (K gains, shared by the heads;
the 1/sqrt(K) scale stays), under any placement.

``norm_position='none'`` takes ``norm='none'`` (or a norm for the queries
and keys alone, with ``qk_norm``); ``norm='none'`` with ``post``, ``pre`` or
``peri`` is the same network as ``none`` (same parameters, same outputs), so a
grid may leave the position at its default. ``deepnorm`` needs a norm, and
sets its own init (so not ``scaled_residual_init``).

Tokens are bytes (vocabulary 256). The input is ``E[x_t] * sqrt(D)`` plus a
position code: ``learned`` (a table of ``max_len`` rows, initialised like
the tokens, so both have unit-variance entries) or ``sinusoidal`` (Vaswani et
al.'s fixed table). Causal multi-head self-attention (separate W^Q, W^K,
W^V, W^O), an MLP of ``d_ff`` units (ReLU, as Vaswani et al. and Xiong et al.;
or GELU), and an untied output layer. Weights are Xavier-uniform and biases
zero, as in the setting Xiong et al. analyse (``scaled_residual_init``:
W^O and W^2 scaled by 1/sqrt(2 L) as in GPT-2, which an unnormalized deep
stack needs to start with a bounded stream); no dropout.

Precision: parameters are float32; ``dtype='bfloat16'`` runs activations and
matmuls in bfloat16 (Flax casts the parameters at use, so their gradients
are float32). The attention softmax and the loss are float32, and the
norms' statistics are float32 whatever the input dtype (lnorm/normalization.py);
a norm's output is rounded to the activation dtype once, at the end.

Parameter names (for ``grad_norms``): ``embed``, ``pos`` (learned only),
``embed_norm`` (peri only), ``block_<l>`` holding ``attn/{query,key,value,out}``
(and ``attn/{query_norm,key_norm}`` with qk_norm), ``mlp/{fc,proj}`` (``proj``
is Xiong et al.'s W^2) and ``norm_attn``, ``norm_mlp`` (peri adds
``norm_attn_out``, ``norm_mlp_out``); then ``final_norm`` (pre and peri) and
``logits``.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lnorm import norms
from lnorm.layers import Normalize

Array = jax.Array



def accepted() -> tuple[str, ...]:
  """The norms of a sublayer (``norms.SUBLAYER``) that need no host of their
  own: no running statistics (batch norm), no kernel (weight norm)."""
  return norms.names(norms.SUBLAYER, running_stats=False, kernel=False)

NORM_POSITIONS = ("post", "pre", "peri", "deepnorm", "none")
POSITIONS = ("learned", "sinusoidal")
DTYPES = ("float32", "bfloat16")
ACTIVATIONS = ("relu", "gelu")
VOCAB = 256  # bytes


# -- Configuration checks: each raises one ValueError line. ------------------

def check_norm_position(norm_position: object) -> None:
  if norm_position not in NORM_POSITIONS:
    raise ValueError(f"norm_position={norm_position!r} is not valid; choose one of: "
                     f"{', '.join(NORM_POSITIONS)}")


def check_positions(positions: object) -> None:
  if positions not in POSITIONS:
    raise ValueError(f"positions={positions!r} is not valid; choose one of: "
                     f"{', '.join(POSITIONS)}")


@functools.lru_cache(maxsize=None)
def _platform_error(name: str, backend: str) -> str | None:
  """Why the default backend cannot run a matmul and a reduction in ``name``
  (None if it can): a dtype can be named by NumPy yet absent on a device."""
  try:
    dt = jnp.dtype(name)
    a = jnp.ones((4, 4), dt)
    jax.block_until_ready(jax.jit(lambda a: (a @ a).sum())(a))
  except Exception as e:  # pylint: disable=broad-except
    lines = str(e).strip().splitlines()
    return (lines[0] if lines else type(e).__name__)[:160]
  return None


def check_dtype(dtype: object) -> jnp.dtype:
  """``dtype`` (a name or a dtype) as a jnp dtype, if it is one of ``DTYPES``
  and the default backend computes in it."""
  try:
    name = jnp.dtype(dtype).name
  except TypeError:
    name = None
  if name not in DTYPES:
    raise ValueError(f"dtype={dtype!r} is not valid; choose one of: {', '.join(DTYPES)}")
  backend = jax.default_backend()
  why = _platform_error(name, backend)
  if why is not None:
    raise ValueError(f"dtype={name!r} is not supported on this platform ({backend}): {why}")
  return jnp.dtype(name)


def check_seq_len(seq_len: int, max_len: int) -> None:
  if not 1 <= seq_len <= max_len:
    raise ValueError(f"sequence length {seq_len} is beyond the position table of "
                     f"max_len={max_len} positions; raise max_len or shorten the windows")


def deepnorm_alpha_beta(num_layers: int) -> tuple[float, float]:
  """DeepNet's constants for a decoder-only stack of ``num_layers`` blocks
  (Wang et al. 2022, the table in their Figure 2): the residual's alpha =
  (2 N)^(1/4) and the init gain beta = (8 N)^(-1/4) of W^V, W^O and the MLP's
  two matrices."""
  return (2 * num_layers) ** 0.25, (8 * num_layers) ** -0.25


def check_config(*, norm: object = "layer", norm_position: object = "pre",
                 positions: object = "learned", dtype: object = "float32",
                 num_layers: int = 1, d_model: int = 64, num_heads: int = 1,
                 d_ff: int = 0, max_len: int = 1, seq_len: int | None = None,
                 activation: object = "relu", eps: float = 1e-5,
                 qk_norm: object = False, scaled_residual_init: object = False) -> None:
  """Every check of a model's fields (and, with ``seq_len``, of its windows),
  for a config's ``validate``; the model runs the same ones when built."""
  nm = norms.accept(norm, norms.SUBLAYER, running_stats=False, kernel=False)
  check_norm_position(norm_position)
  if not isinstance(qk_norm, (bool, np.bool_)):
    raise ValueError(f"qk_norm={qk_norm!r} is not valid; it must be True or False")
  if norm_position == "none" and not nm.identity and not qk_norm:
    raise ValueError(f"norm_position='none' has no norm; it takes norm='none', "
                     f"not {norm!r} (or qk_norm=True, to normalize queries and keys alone)")
  if qk_norm and nm.identity:
    raise ValueError("qk_norm=True normalizes queries and keys with the norm, and "
                     f"norm={norm!r} is none; choose one of: "
                     f"{', '.join(n for n in accepted() if not norms.get(n).identity)}")
  if norm_position == "deepnorm" and nm.identity:
    raise ValueError("norm_position='deepnorm' is post-norm with a scaled residual; it "
                     "needs a norm, not norm='none'")
  if norm_position == "deepnorm" and scaled_residual_init:
    raise ValueError("norm_position='deepnorm' sets its own init (Xavier times "
                     "(8 num_layers)^(-1/4)); it takes scaled_residual_init=False")
  check_positions(positions)
  if activation not in ACTIVATIONS:
    raise ValueError(f"activation={activation!r} is not valid; choose one of: "
                     f"{', '.join(ACTIVATIONS)}")
  for name, v in (("num_layers", num_layers), ("d_model", d_model),
                  ("num_heads", num_heads), ("max_len", max_len)):
    if not isinstance(v, (int, np.integer)) or v < 1:
      raise ValueError(f"{name}={v!r} is not valid; it must be an integer >= 1")
  if d_ff < 0:
    raise ValueError(f"d_ff={d_ff} is not valid; it must be 0 (4 d_model) or more")
  if d_model % num_heads:
    raise ValueError(f"d_model={d_model} does not split into num_heads={num_heads} heads")
  if positions == "sinusoidal" and d_model % 2:
    raise ValueError(f"positions='sinusoidal' needs an even d_model, not {d_model}")
  if not eps > 0:
    raise ValueError(f"eps={eps} is not valid; it must be > 0")
  check_dtype(dtype)
  if seq_len is not None:
    check_seq_len(seq_len, max_len)


# -- The model. ---------------------------------------------------------------

def sinusoids(max_len: int, d_model: int) -> np.ndarray:
  """Vaswani et al.'s table (max_len, d_model), float32: sin on even
  features, cos on odd, wavelengths 2 pi .. 10000 * 2 pi."""
  pos_Tx1 = np.arange(max_len, dtype=np.float64)[:, None]
  freq_H = np.exp(-math.log(10000.0) * np.arange(0, d_model, 2) / d_model)
  t = np.zeros((max_len, d_model))
  t[:, 0::2], t[:, 1::2] = np.sin(pos_Tx1 * freq_H), np.cos(pos_Tx1 * freq_H)
  return t.astype(np.float32)


# Every norm of the model (blocks, final, embeddings, queries and keys) is a
# ``Normalize(norm, eps)`` over the features (last axis): the registry's
# definition (lnorm/norms.py) makes its parameters ("gain", and "bias" where
# the norm has one: layer's gain and bias, rms's gain) and applies it, float32
# statistics, output in x's dtype.
Norm = Normalize


def _dense(features: int, dtype, name: str, scale: float = 1.0) -> nn.Dense:
  init = nn.initializers.xavier_uniform()
  if scale != 1.0:
    init = lambda key, shape, dt, f=init: f(key, shape, dt) * scale
  return nn.Dense(features, dtype=dtype, param_dtype=jnp.float32, kernel_init=init,
                  name=name)


class CausalSelfAttention(nn.Module):
  num_heads: int
  dtype: Any = jnp.float32
  out_scale: float = 1.0    # W^O's init, times Xavier's
  value_scale: float = 1.0  # W^V's init, times Xavier's
  qk_norm: str = "none"     # the norm of each head's queries and keys (none: as they are)
  eps: float = 1e-5

  @nn.compact
  def __call__(self, x_BxTxD: Array) -> Array:
    B, T, D = x_BxTxD.shape
    H = self.num_heads
    split = lambda y: y.reshape(B, T, H, D // H)
    q_BxTxHxK = split(_dense(D, self.dtype, "query")(x_BxTxD))
    k_BxTxHxK = split(_dense(D, self.dtype, "key")(x_BxTxD))
    v_BxTxHxK = split(_dense(D, self.dtype, "value", self.value_scale)(x_BxTxD))
    if not norms.get(self.qk_norm).identity:  # over each head's K features, gains shared by the heads
      q_BxTxHxK = Norm(self.qk_norm, self.eps, name="query_norm")(q_BxTxHxK)
      k_BxTxHxK = Norm(self.qk_norm, self.eps, name="key_norm")(k_BxTxHxK)
    q_BxTxHxK = q_BxTxHxK * jnp.asarray(1 / math.sqrt(D // H), self.dtype)
    s_BxHxTxS = jnp.einsum("bthk,bshk->bhts", q_BxTxHxK, k_BxTxHxK)
    # The softmax in float32: bfloat16's 8 bits would blur near-equal scores.
    causal_TxS = jnp.tril(jnp.ones((T, T), bool))
    s_BxHxTxS = jnp.where(causal_TxS[None, None], s_BxHxTxS.astype(jnp.float32), -1e30)
    p_BxHxTxS = jax.nn.softmax(s_BxHxTxS, axis=-1).astype(self.dtype)
    o_BxTxHxK = jnp.einsum("bhts,bshk->bthk", p_BxHxTxS, v_BxTxHxK)
    return _dense(D, self.dtype, "out", self.out_scale)(o_BxTxHxK.reshape(B, T, D))


class MLP(nn.Module):
  d_ff: int
  activation: str = "relu"
  dtype: Any = jnp.float32
  out_scale: float = 1.0  # W^2's init, times Xavier's
  fc_scale: float = 1.0   # W^1's init, times Xavier's

  @nn.compact
  def __call__(self, x_BxTxD: Array) -> Array:
    f = jax.nn.relu if self.activation == "relu" else jax.nn.gelu
    h_BxTxF = f(_dense(self.d_ff, self.dtype, "fc", self.fc_scale)(x_BxTxD))
    return _dense(x_BxTxD.shape[-1], self.dtype, "proj", self.out_scale)(h_BxTxF)


class Block(nn.Module):
  num_heads: int
  d_ff: int
  norm: str = "layer"
  norm_position: str = "pre"
  activation: str = "relu"
  eps: float = 1e-5
  dtype: Any = jnp.float32
  out_scale: float = 1.0   # W^O's and W^2's init, times Xavier's
  qk_norm: bool = False
  in_scale: float = 1.0    # W^V's and W^1's init, times Xavier's (deepnorm's beta)
  alpha: float = 1.0       # deepnorm's residual scale

  @nn.compact
  def __call__(self, x_BxTxD: Array) -> Array:
    attn = CausalSelfAttention(self.num_heads, self.dtype, self.out_scale, self.in_scale,
                               self.norm if self.qk_norm else "none", self.eps, name="attn")
    mlp = MLP(self.d_ff, self.activation, self.dtype, self.out_scale, self.in_scale,
              name="mlp")
    x = x_BxTxD
    if norms.get(self.norm).identity or self.norm_position == "none":
      x = x + attn(x)
      return x + mlp(x)
    n_attn = Norm(self.norm, self.eps, name="norm_attn")
    n_mlp = Norm(self.norm, self.eps, name="norm_mlp")
    if self.norm_position == "pre":
      x = x + attn(n_attn(x))
      return x + mlp(n_mlp(x))
    if self.norm_position == "peri":
      x = x + Norm(self.norm, self.eps, name="norm_attn_out")(attn(n_attn(x)))
      return x + Norm(self.norm, self.eps, name="norm_mlp_out")(mlp(n_mlp(x)))
    if self.norm_position == "deepnorm":
      a = jnp.asarray(self.alpha, x.dtype)
      x = n_attn(a * x + attn(x))
      return n_mlp(a * x + mlp(x))
    x = n_attn(x + attn(x))
    return n_mlp(x + mlp(x))


class TransformerLM(nn.Module):
  """Byte logits (B, T, 256), float32, of each next byte given the ones
  before it. Input: int (B, T) bytes, T <= ``max_len``. Every field is
  checked when the model is built (``check_config``): one ValueError line."""
  num_layers: int = 2
  d_model: int = 128
  num_heads: int = 4
  d_ff: int = 0                 # 0 = 4 * d_model
  max_len: int = 256            # rows of the position table
  positions: str = "learned"    # learned | sinusoidal
  norm: str = "layer"           # none | layer | rms
  norm_position: str = "pre"    # post | pre | peri | deepnorm | none
  activation: str = "relu"      # relu | gelu
  dtype: Any = "float32"        # float32 | bfloat16: activations and matmuls
  eps: float = 1e-5
  # W^O and W^2 (the sublayers' last matrices) start at Xavier / sqrt(2 L), as
  # GPT-2 does: each of the 2 L residual branches then adds 1 / (2 L) of the
  # stream's variance at init. Without it (the setting Xiong et al. analyse),
  # an unnormalized stack's stream grows nearly 3x in variance a block (std
  # 1.9 after block 0, 499 after block 11, at d_model 64: a loss of ~860 at init).
  scaled_residual_init: bool = False
  qk_norm: bool = False         # normalize each head's queries and keys with the norm

  def __post_init__(self):
    check_config(norm=self.norm, norm_position=self.norm_position,
                 positions=self.positions, dtype=self.dtype, num_layers=self.num_layers,
                 d_model=self.d_model, num_heads=self.num_heads, d_ff=self.d_ff,
                 max_len=self.max_len, activation=self.activation, eps=self.eps,
                 qk_norm=self.qk_norm, scaled_residual_init=self.scaled_residual_init)
    super().__post_init__()

  @property
  def normalized(self) -> bool:
    """Whether the blocks have norms (qk_norm aside)."""
    return not norms.get(self.norm).identity and self.norm_position != "none"

  @nn.compact
  def __call__(self, tokens_BxT: Array) -> Array:
    _, T = tokens_BxT.shape
    check_seq_len(T, self.max_len)
    D, dt = self.d_model, jnp.dtype(self.dtype)
    init = nn.initializers.normal(stddev=D ** -0.5)  # times sqrt(D): unit entries
    embed = nn.Embed(VOCAB, D, embedding_init=init, param_dtype=jnp.float32, name="embed")
    x_BxTxD = embed(tokens_BxT.astype(jnp.int32)) * math.sqrt(D)
    if self.positions == "learned":
      p_PxD = self.param("pos", init, (self.max_len, D), jnp.float32) * math.sqrt(D)
    else:
      p_PxD = jnp.asarray(sinusoids(self.max_len, D))
    x_BxTxD = (x_BxTxD + p_PxD[None, :T]).astype(dt)
    if self.normalized and self.norm_position == "peri":
      x_BxTxD = Norm(self.norm, self.eps, name="embed_norm")(x_BxTxD)
    alpha, beta = 1.0, 1.0
    if self.normalized and self.norm_position == "deepnorm":
      alpha, beta = deepnorm_alpha_beta(self.num_layers)
    out_scale = (2 * self.num_layers) ** -0.5 if self.scaled_residual_init else beta
    for l in range(self.num_layers):
      x_BxTxD = Block(self.num_heads, self.d_ff or 4 * D, self.norm, self.norm_position,
                      self.activation, self.eps, dt, out_scale, qk_norm=self.qk_norm,
                      in_scale=beta, alpha=alpha, name=f"block_{l}")(x_BxTxD)
    if self.normalized and self.norm_position in ("pre", "peri"):
      x_BxTxD = Norm(self.norm, self.eps, name="final_norm")(x_BxTxD)
    return _dense(VOCAB, dt, "logits")(x_BxTxD).astype(jnp.float32)


# -- Loss and gradient norms. ---------------------------------------------------

def nll(logits_BxTxV: Array, targets_BxT: Array) -> Array:
  """Per-byte negative log likelihood (B, T) in nats, float32."""
  logp = jax.nn.log_softmax(logits_BxTxV.astype(jnp.float32))
  return -jnp.take_along_axis(logp, targets_BxT.astype(jnp.int32)[..., None], -1)[..., 0]


def loss(model: TransformerLM, params: Any, windows_BxT1: Array
         ) -> tuple[Array, dict[str, Array]]:
  """Mean next-byte NLL (nats) of windows of T + 1 bytes (inputs ``[:, :-1]``,
  targets ``[:, 1:]``). Metrics: ``nll`` (nats) and ``bpc`` (bits a byte)."""
  logits = model.apply({"params": params}, windows_BxT1[:, :-1])
  m = nll(logits, windows_BxT1[:, 1:]).mean()
  return m, {"nll": m, "bpc": m / math.log(2)}


def _key(path) -> str:
  return "/".join(str(getattr(k, "key", getattr(k, "name", k))) for k in path)


def _layer_order(name: str) -> tuple[int, int, str]:
  """Input to output: embed, pos, embed_norm, block_0, block_1, ..., final_norm,
  logits."""
  top = name.split("/")[0]
  m = re.fullmatch(r"block_(\d+)", top)
  rank = {"embed": (0, 0), "pos": (0, 1), "embed_norm": (0, 2), "final_norm": (2, 0),
          "logits": (2, 1)}
  return (1, int(m.group(1)), name) if m else (*rank.get(top, (3, 0)), name)


def grad_norms(grads: Mapping[str, Any], depth: int | None = 1) -> dict[str, Array]:
  """The L2 norm of the gradient of each layer's parameters, input to output.

  ``depth=1``: one entry per top-level layer (``embed``, ``pos``, ``embed_norm``,
  ``block_0`` .. ``block_{L-1}``, ``final_norm``, ``logits``); ``depth=2``
  per sublayer (``block_3/attn``, ``block_3/mlp``, ``block_3/norm_attn``,
  ...); ``None`` per parameter (``block_3/mlp/proj/kernel``: Xiong et al.'s
  W^{2,l}, whose expected gradient norm their Theorem 1 bounds). Norms are
  float32 sums of squares of the float32 gradients."""
  sq: dict[str, Array] = {}
  for path, g in jax.tree_util.tree_leaves_with_path(grads):
    name = _key(path)
    if depth is not None:
      name = "/".join(name.split("/")[:depth])
    s = jnp.sum(jnp.square(jnp.asarray(g, jnp.float32)))
    sq[name] = sq[name] + s if name in sq else s
  return {k: jnp.sqrt(sq[k]) for k in sorted(sq, key=_layer_order)}


def block_grad_norms(grads: Mapping[str, Any], param: str = "mlp/proj/kernel") -> Array:
  """(L,): the gradient norm of ``param`` in each block, first block first;
  ``param=''`` for the whole block."""
  blocks = sorted((k for k in grads if re.fullmatch(r"block_\d+", k)),
                  key=lambda k: int(k.split("_")[1]))
  if not blocks:
    raise ValueError("grads has no block_<l> layers")
  out = []
  for b in blocks:
    sub: Any = grads[b]
    for part in (p for p in param.split("/") if p):
      if part not in sub:
        raise ValueError(f"{b} has no parameter {param!r}; it has: {', '.join(sub)}")
      sub = sub[part]
    out.append(jnp.sqrt(sum(jnp.sum(jnp.square(jnp.asarray(g, jnp.float32)))
                            for g in jax.tree_util.tree_leaves(sub))))
  return jnp.stack(out)


def loss_grads(model: TransformerLM, params: Any, windows_BxT1: Array) -> Any:
  """Gradients of ``loss`` with respect to ``params`` (float32, like them)."""
  return jax.grad(lambda p: loss(model, p, windows_BxT1)[0])(params)


def init_grad_norms(model: TransformerLM, params: Any, windows_BxT1: Array,
                    depth: int | None = 1) -> dict[str, float]:
  """``grad_norms`` of the loss on one batch at ``params`` (at initialisation
  for Xiong et al.'s Figure 3; after training, the same call), as floats."""
  g = jax.jit(functools.partial(loss_grads, model))(params, windows_BxT1)
  return {k: float(v) for k, v in grad_norms(g, depth).items()}


def num_params(params: Any) -> int:
  return sum(int(np.prod(p.shape)) for p in jax.tree_util.tree_leaves(params))
