"""Xiaomi-Robotics-0's action head: a DiT that reads the Qwen3-VL prefix K/V in place.

Structure (checked in three copies of the code; [copy] = a third-party copy):
  training code  xr0/mibot/models/VLA/XR0.py  (repo Anonymous-694/Xiaomi-Robotics-0) [copy]
  checkpoint code  modeling_mibot.py, class MiBoTForActionGeneration, what the deploy
    path loads with trust_remote_code (a copy vendored "from the pinned official
    checkpoint runtime" by the WorldFoundry project) [copy]
  OxyGen's runtime  oxygen_runtime.py, init_action / action_step [copy]

- Time: sinusoidal(256) of t * 1000, max period 10000, COS FIRST:
  freqs_j = exp(-ln(10000) * j / half), emb = [cos(1000 t freqs), sin(1000 t freqs)]
  (TimestepEmbedder.timestep_embedding), then Linear(256->W, no bias), SiLU,
  Linear(W->W, no bias); then t_projector = ONE Linear(W->6W, bias), no activation in
  between. Each layer adds its learned adaln_table [6, W]; the six vectors are, in
  order, shift/scale/gate of attention, shift/scale/gate of the MLP.
- Layer (DecoderLayer): x = middle_norm(x + gate_a * attn(modulate(input_norm(x))));
  x = final_norm(x + gate_m * mlp(modulate(post_norm(x)))), modulate(y) =
  y * (1 + scale) + shift. The four RMSNorms are Llama style (x * w, eps 1e-6) and
  two of them sit ON the residual stream, so zero modulation makes a layer
  x -> final_norm(middle_norm(x)), which is the identity only on RMS-normalised input
  with unit norm weights (not the identity in general as in DiT's AdaLN-Zero). The
  modulation is not zero-initialised there either (adaln_table = randn / sqrt(W)).
- Attention: qkv Linear(W->3W, bias) laid out [q | k | v], each W/head_dim heads; q/k
  RMSNorm over head_dim before RoPE; o_proj without bias; SDPA scale 1/sqrt(head_dim).
  Keys/values: [prefix K/V of backbone layer L - depth + i, own K/V] (DiT.forward
  "align with the tail of the VLM KV-cache"). MLP: SwiGLU with 4 * W hidden.
- Tokens: [sink (nn.Embedding(1, W)), state (Linear, GELU-tanh, Linear; no biases),
  actions (same MLP shape on the masked noisy action)]; output: the action tokens
  through Linear(W->action_dim), GELU-tanh, Linear(action_dim->action_dim), no biases.
- Positions: arange(T) + (prefix position_ids.max over the sequence, per axis) + 1:
  sink at P, state at P + 1, action j at P + 2 + j. RoPE: Qwen3VLTextRotaryEmbedding
  (interleaved MRoPE, the backbone's config). All three axes of every head token are
  equal and the prompt ends in text tokens (whose three axes are equal and exceed
  every earlier value), so the per-axis maxima agree: each frequency index takes
  inv_freq[j] * P from whichever axis owns it, i.e. interleaved MRoPE reduces exactly
  to 1-D RoPE here. The caller passes P as one integer, `prefix_next_position`
  (= the prefix's max MRoPE position + 1 = prefix length + rope_deltas). The angles
  are computed in float32 as transformers does.
- Flow: z_t = (1 - t) noise + t action, v = action - noise; inference x += v * (1/N)
  at t = k/N, k = 0..N-1 (t goes 0 -> 1), N = 5. The robot's action mask multiplies
  the noisy action before action_projector at every step; the velocity is not
  masked, so inactive dims come out as noise + sum v dt and the processor's
  decode_action picks the robot's dims (README of XiaomiRobotics/Xiaomi-Robotics-0;
  decode_action itself was not readable). `active_actions` does that selection.

Mask and position offset, the two conventions:
- Training (XR0.py, used for inference too inside that file's forward): [sink, state]
  causal among themselves, blind to actions; actions see sink + state + themselves
  and the previous `local_window` = 4 actions (tril * triu(diagonal=-4)); action
  tokens' positions get +10 (`position_ids[..., -action_len:] += 10`).
- Checkpoint / deploy (modeling_mibot.py MiBoTForActionGeneration.forward): a plain
  torch.tril over [sink, state, actions] and NO +10. OxyGen's oxygen_runtime.py
  init_action builds the same plain tril with no offset. Intel's port
  (physicalai XR0Model) notes the same and gates both to training.
  Served by default: mask "causal", offset 0. "train_window" and offset 10 stay
  selectable in XR0HeadConfig.

In-place reading: like expert.py, head layer i writes its own K/V just past the prefix
in the given slot of backbone layer L - depth + i of the pool and attends over one
contiguous view [0, prefix_len + T) of that layer: no copy of the prefix, and no write
below prefix_len. This is why the head's heads x head_dim must equal the backbone's
KV heads x head_dim (8 x 128 for Qwen3-VL-4B; the checkpoint's kv_group is 1 too).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ...layers.decoder import CacheView
from ...layers.blocks import GatedMLP, RMSNorm, apply_rope, grouped_attention
from ...layers.flow_steps import FlowStep
from ...layers.rtc_guidance import PrefixCacheView, check_guide, guided_forward_time

# `cfg` below is configuration.XR0HeadConfig, named in hints only: the config builds this
# head (XR0HeadConfig.build), so importing it back would be a circle.


def time_embedding(t: float, dim: int, scale: float = 1000.0, max_period: float = 10000.0,
                   device=None) -> torch.Tensor:
    """[cos(args), sin(args)], args = (t * scale) * exp(-ln(max_period) * j / (dim/2)),
    in float32 as the checkpoint computes it (t rounded to float32 first)."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=device) / half)
    args = (torch.tensor(t, dtype=torch.float32, device=device) * scale) * freqs
    return torch.cat([torch.cos(args), torch.sin(args)])


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float, dtype):
    """1-D RoPE (rotate-half) as Qwen3VLTextRotaryEmbedding computes it with equal axes:
    float32 inv_freq times float32 positions. positions [T] -> cos, signed sin
    [1, T, 1, head_dim] (the sine carries rotate-half's sign, see layers.apply_rope)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=positions.device)
                           .float() / head_dim))
    ang = positions.float()[:, None] * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], dim=-1)
    sin = torch.cat([-ang.sin(), ang.sin()], dim=-1)
    return cos[None, :, None].to(dtype), sin[None, :, None].to(dtype)


def mlp_projector(d_in: int, d_out: int) -> nn.Sequential:
    """XR-0's MLPProjector(num_layers=2, bias=False): Linear, GELU-tanh, Linear."""
    return nn.Sequential(nn.Linear(d_in, d_out, bias=False), nn.GELU(approximate="tanh"),
                         nn.Linear(d_out, d_out, bias=False))


class XR0Attention(nn.Module):
    def __init__(self, cfg: XR0HeadConfig):
        super().__init__()
        self.num_heads, self.head_dim = cfg.num_heads, cfg.head_dim
        self.qkv_proj = nn.Linear(cfg.width, 3 * cfg.width, bias=True)
        self.o_proj = nn.Linear(cfg.width, cfg.width, bias=False)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.norm_eps, "llama")
        self.k_norm = RMSNorm(cfg.head_dim, cfg.norm_eps, "llama")

    def forward(self, x, rope, cache: CacheView, mask):
        b, t, _ = x.shape
        q, k, v = self.qkv_proj(x).view(b, t, 3, self.num_heads, self.head_dim).unbind(2)
        q = apply_rope(self.q_norm(q), *rope).transpose(1, 2)
        k = apply_rope(self.k_norm(k), *rope).transpose(1, 2)
        keys, values = cache.write_and_read(k, v.transpose(1, 2))
        out = grouped_attention(q, keys, values, mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class XR0Layer(nn.Module):
    def __init__(self, cfg: XR0HeadConfig):
        super().__init__()
        self.attn = XR0Attention(cfg)
        self.mlp = GatedMLP(cfg.width, cfg.mlp_dim, "silu")
        self.input_layernorm = RMSNorm(cfg.width, cfg.norm_eps, "llama")
        self.middle_layernorm = RMSNorm(cfg.width, cfg.norm_eps, "llama")
        self.post_layernorm = RMSNorm(cfg.width, cfg.norm_eps, "llama")
        self.final_layernorm = RMSNorm(cfg.width, cfg.norm_eps, "llama")
        self.adaln_table = nn.Parameter(torch.randn(6, cfg.width) / cfg.width ** 0.5)

    def forward(self, x, mods, rope, cache: CacheView, mask):
        """mods [6, W]: this step's shift/scale/gate (attention), shift/scale/gate (MLP),
        the learned table already added."""
        shift_a, scale_a, gate_a, shift_m, scale_m, gate_m = mods.unbind(0)
        h = self.attn(self.input_layernorm(x) * (1 + scale_a) + shift_a, rope, cache, mask)
        x = self.middle_layernorm(x + gate_a * h)
        h = self.mlp(self.post_layernorm(x) * (1 + scale_m) + shift_m)
        return self.final_layernorm(x + gate_m * h)


class XR0DiT(nn.Module):
    def __init__(self, cfg: XR0HeadConfig):
        super().__init__()
        self.layers = nn.ModuleList(XR0Layer(cfg) for _ in range(cfg.depth))


class TimestepEmbedder(nn.Module):
    def __init__(self, cfg: XR0HeadConfig):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(cfg.time_embed_dim, cfg.width, bias=False), nn.SiLU(),
                                 nn.Linear(cfg.width, cfg.width, bias=False))


class XR0Head(nn.Module):
    """Module names follow the checkpoint's state dict (dit.layers.N.attn.qkv_proj, ...,
    state_projector.layers.0, t_embedder.mlp.0, t_projector.layers.0, sink)."""

    def __init__(self, cfg: XR0HeadConfig):
        super().__init__()
        self.cfg = cfg
        self.dit = XR0DiT(cfg)
        self.state_projector = mlp_projector(cfg.state_dim, cfg.width)
        self.action_projector = mlp_projector(cfg.action_dim, cfg.width)
        self.action_output_layer = nn.Sequential(
            nn.Linear(cfg.width, cfg.action_dim, bias=False), nn.GELU(approximate="tanh"),
            nn.Linear(cfg.action_dim, cfg.action_dim, bias=False))
        self.t_embedder = TimestepEmbedder(cfg)
        self.t_projector = nn.Sequential(nn.Linear(cfg.width, 6 * cfg.width, bias=True))
        self.sink = nn.Embedding(1, cfg.width)

    # ---- checks -------------------------------------------------------------------
    def check_backbone(self, kv_heads: int, head_dim: int, depth: int) -> None:
        cfg = self.cfg
        if kv_heads != cfg.num_heads or head_dim != cfg.head_dim:
            raise ValueError(f"XR-0 head reads the backbone's K/V in place: backbone KV "
                             f"{kv_heads} heads x {head_dim} must equal the head's "
                             f"{cfg.num_heads} heads x {cfg.head_dim}")
        if depth < cfg.depth:
            raise ValueError(f"XR-0 head has {cfg.depth} layers but the backbone only {depth}: "
                             "tail alignment needs backbone depth >= head depth")

    def first_backbone_layer(self, backbone_depth: int) -> int:
        """Head layer i reads backbone layer first + i (tail-aligned)."""
        return backbone_depth - self.cfg.depth

    # ---- what depends on the request's geometry ---------------------------------
    def token_positions(self, prefix_next_position: int, horizon: int, device=None) -> torch.Tensor:
        """[sink, state, actions]: P, P + 1, P + 2 + offset + j."""
        p = int(prefix_next_position)
        pos = torch.arange(p, p + 2 + horizon, device=device)
        pos[2:] += self.cfg.action_position_offset
        return pos

    def own_mask(self, horizon: int, device=None) -> torch.Tensor:
        """Boolean [T, T] over the head's own tokens (True = visible)."""
        t = 2 + horizon
        mask = torch.ones(t, t, dtype=torch.bool, device=device).tril()
        if self.cfg.mask_mode == "train_window":
            band = torch.ones(horizon, horizon, dtype=torch.bool, device=device).triu(-self.cfg.local_window)
            mask[2:, 2:] &= band
        return mask

    def attention_mask(self, prefix_len: int, horizon: int, device=None) -> torch.Tensor:
        """Boolean [1, 1, T, prefix_len + T]: every head token sees the whole prefix."""
        t = 2 + horizon
        prefix = torch.ones(t, prefix_len, dtype=torch.bool, device=device)
        return torch.cat([prefix, self.own_mask(horizon, device)], dim=1)[None, None]

    # ---- what depends on t only -------------------------------------------------
    def schedule(self, steps: int | None = None):
        """dt, the times t_k = k/N (float32), and per layer the modulations of every
        step [N, 6, W] (table + t_projector(t_embedder(emb(t_k))), one matmul a layer)."""
        steps = self.cfg.denoise_steps if steps is None else int(steps)
        w = self.t_projector[0].weight
        ts = [float(torch.tensor(k, dtype=torch.float32) / steps) for k in range(steps)]
        emb = torch.stack([time_embedding(t, self.cfg.time_embed_dim, self.cfg.time_scale,
                                          self.cfg.time_max_period, w.device) for t in ts]).to(w.dtype)
        cond = self.t_projector(self.t_embedder.mlp(emb)).view(steps, 6, -1)
        return 1.0 / steps, ts, [layer.adaln_table[None] + cond for layer in self.dit.layers]

    # ---- sampling -----------------------------------------------------------------
    @torch.no_grad()
    def sample_actions(self, pool_k_layers, pool_v_layers, slot: int, prefix_len: int,
                       prefix_next_position: int, state: torch.Tensor, noise: torch.Tensor,
                       action_mask: torch.Tensor | None = None, steps: int | None = None,
                       return_intermediates: bool = False):
        """Euler-integrate t = 0 -> 1 from `noise` [B, H, action_dim]; B rows read pool
        slots [slot, slot + B), which share prefix_len and prefix_next_position.

        pool_k_layers / pool_v_layers: the pool's per-layer tensors (KVPool.k / .v,
        [L, slots, kv_heads, max_len, head_dim], or a list of [slots, ...] per layer).
        state [B, state_dim] or [B, 1, state_dim]; action_mask bool [action_dim] or
        [B, action_dim] (None: all active). Returns [B, H, action_dim] like the
        checkpoint (inactive dims not zeroed; see active_actions). The head's K/V go
        to positions [prefix_len, prefix_len + H + 2) of those slots in the tail layers.
        return_intermediates: return (actions, [FlowStep per Euler step]) instead
        (layers/flow_steps.py: t_k = k/N, x_k, v_k, dt; x_{k+1} = x_k + dt v_k)."""
        b, horizon, adim = noise.shape
        if adim != self.cfg.action_dim:
            raise ValueError(f"noise has action dim {adim}, the head {self.cfg.action_dim}")
        depth = len(pool_k_layers)
        _, kv_heads, max_len, head_dim = pool_k_layers[0].shape
        self.check_backbone(kv_heads, head_dim, depth)
        t = 2 + horizon
        if prefix_len + t > max_len:
            raise ValueError(f"prefix {prefix_len} + {t} head tokens exceed the pool's max_len {max_len}")
        dev, dtype = noise.device, noise.dtype
        rope = rope_tables(self.token_positions(prefix_next_position, horizon, dev), self.cfg.head_dim,
                           self.cfg.rope_theta, dtype)
        mask = self.attention_mask(prefix_len, horizon, dev)
        first = self.first_backbone_layer(depth)
        rows = slice(slot, slot + b)
        caches = [CacheView(pool_k_layers[first + i], pool_v_layers[first + i], rows, prefix_len, prefix_len + t)
                  for i in range(self.cfg.depth)]
        state_tokens = self.state_projector(state.reshape(b, 1, self.cfg.state_dim).to(dtype))
        keep = self.dim_mask(action_mask, b, dev, dtype)
        record = [] if return_intermediates else None
        x = self.integrate(noise, state_tokens, keep, self.schedule(steps), rope, caches, mask, record)
        return (x, record) if return_intermediates else x

    def dim_mask(self, action_mask, batch: int, device, dtype) -> torch.Tensor:
        """The per-robot mask as a 0/1 multiplier [B or 1, 1, action_dim]."""
        if action_mask is None:
            return torch.ones(1, 1, self.cfg.action_dim, device=device, dtype=dtype)
        m = torch.as_tensor(action_mask, device=device)
        if m.shape[-1] != self.cfg.action_dim or m.dim() > 2 or (m.dim() == 2 and m.shape[0] not in (1, batch)):
            raise ValueError(f"action_mask must be [action_dim] or [B, action_dim] with action_dim "
                             f"{self.cfg.action_dim}; got {tuple(m.shape)}")
        return m.reshape(-1, 1, self.cfg.action_dim).to(dtype)

    def integrate(self, noise, state_tokens, keep, schedule, rope, caches, mask, record=None) -> torch.Tensor:
        """The denoise loop, device work only: x_{k+1} = x_k + dt * v(x_k, t_k); each step
        appended to the list `record` as a FlowStep when one is given."""
        dt, ts, layer_mods = schedule
        x = noise
        for k in range(layer_mods[0].shape[0]):
            v = self.velocity(x, state_tokens, keep, [m[k] for m in layer_mods], rope, caches, mask)
            if record is not None:
                record.append(FlowStep(ts[k], x, v, dt))
            x = x + v * dt
        return x

    def velocity(self, x, state_tokens, keep, step_mods, rope, caches, mask) -> torch.Tensor:
        """One step's velocity [B, H, action_dim] (the checkpoint's dit_forward)."""
        b = x.shape[0]
        h = torch.cat([self.sink.weight[None].expand(b, 1, -1), state_tokens,
                       self.action_projector(x * keep)], dim=1)
        for layer, mods, cache in zip(self.dit.layers, step_mods, caches):
            h = layer(h, mods, rope, cache, mask)
        return self.action_output_layer(h[:, 2:])

    @staticmethod
    def active_actions(actions: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
        """The robot's active dims of a chunk [B, H, action_dim] -> [B, H, n_active]."""
        return actions[..., torch.as_tensor(action_mask, dtype=torch.bool, device=actions.device)]

    # -- on the Qwen3-VL prefix (models/qwen3vl/modeling.py asks every head for these) ------
    def chunk(self, pool, slot: int, prefix_len: int, prefix, noise: torch.Tensor, rtc=None,
              action_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The chunk [1, H, D] on the frame's prefix in `slot` (its tail layers' K/V read in
        place, positions from prefix_len + the slot's rope_delta, the prefix's state cut or
        zero-padded to state_dim); under `rtc` (an active RTCGuide) guided."""
        e = self.cfg
        if prefix_len + e.tokens > pool.max_len:
            raise ValueError("KV slot too short for prefix + action head tokens")
        next_position = prefix_len + int(pool.offsets[slot])
        state = prefix.state[:, :e.state_dim]
        if state.shape[1] < e.state_dim:
            state = torch.nn.functional.pad(state, (0, e.state_dim - state.shape[1]))
        if rtc is not None:
            return self.sample_guided(noise, state, action_mask, pool, slot, prefix_len, next_position, rtc)
        return self.sample_actions(pool.k, pool.v, slot, prefix_len, next_position, state, noise, action_mask)

    def sample_guided(self, noise: torch.Tensor, state: torch.Tensor, action_mask, pool, slot: int,
                      prefix_len: int, prefix_next_position: int, guide) -> torch.Tensor:
        """The chunk [1, H, D] under a guided RTC guide (layers/rtc_guidance.guided_forward_time).
        Trained RTC needs per-token time conditioning, which XR-0's AdaLN-Zero (one time per
        chunk) does not have. Reads the prefix K/V as detached views; writes nothing."""
        check_guide(guide, noise, self.cfg)
        horizon = noise.shape[1]
        first = self.first_backbone_layer(len(pool.k))
        caches = [PrefixCacheView(pool.k[first + i], pool.v[first + i], slot, prefix_len)
                  for i in range(self.cfg.depth)]
        with torch.inference_mode(False), torch.enable_grad():
            dev, dtype = noise.device, noise.dtype
            rope = tuple(r.clone() for r in rope_tables(self.token_positions(prefix_next_position, horizon, dev),
                                                          self.cfg.head_dim, self.cfg.rope_theta, dtype))
            mask = self.attention_mask(prefix_len, horizon, dev).clone()
            with torch.no_grad():       # nothing x-independent needs a graph
                dt, ts, layer_mods = self.schedule()
                layer_mods = [m.clone() for m in layer_mods]
                state_tokens = self.state_projector(state.reshape(1, 1, self.cfg.state_dim).to(dtype)).clone()
            keep = self.dim_mask(action_mask, 1, dev, dtype).clone()

            def velocity(x, k):
                return self.velocity(x, state_tokens, keep, [m[k] for m in layer_mods], rope, caches, mask)

            return guided_forward_time(velocity, noise, [float(v) for v in ts], dt, guide)


def build_random(cfg: XR0HeadConfig, backbone_kv_heads: int, backbone_head_dim: int,
                 backbone_depth: int, seed: int = 0, dtype=torch.float32, device="cpu") -> XR0Head:
    """A seeded random head for tests and profiles (norm weights 1 + 0.1 N(0,1), so a
    wrong norm is visible), after checking it can read that backbone's K/V."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        head = XR0Head(cfg)
        head.check_backbone(backbone_kv_heads, backbone_head_dim, backbone_depth)
        with torch.no_grad():
            for m in head.modules():
                if isinstance(m, RMSNorm):
                    m.weight.add_(0.1 * torch.randn_like(m.weight))
    return head.to(device=device, dtype=dtype).eval()
