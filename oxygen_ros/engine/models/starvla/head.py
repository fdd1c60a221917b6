"""StarVLA QwenPI_v3's action head: a layer-wise cross-attention DiT over the backbone's
per-layer HIDDEN STATES of the prefix (not its K/V).

Sources (repo starVLA/starVLA unless marked; [copy] = read in a third-party copy; the
code was read for facts only, this is an independent implementation):
  framework  starVLA/model/framework/VLM4A/QwenPI_v3.py (Qwen_PI_v3, QwenPI_v3DefaultConfig)
  head       starVLA/model/modules/action_model/LayerwiseFM_ActionHeader.py
             (LayerwiseFlowmatchingActionHead, ActionEncoder, MLP)
  DiT        starVLA/model/modules/action_model/flow_matching_head/cross_attention_dit.py
             (DiT, BasicTransformerBlock, AdaLayerNorm, TimestepEncoder); the blocks are
             diffusers' Attention / FeedForward / Timesteps / TimestepEmbedding
  shapes     starVLA/model/framework/share_tools.py populate_layerwise_dit_cfg
  sinusoid   flow_matching_head/action_encoder.py SinusoidalPositionalEncoding (starVLA's
             file not readable; GR00T's original NVIDIA/Isaac-GR00T
             gr00t/model/action_head/action_encoder.py, which starVLA copies [copy])

Structure:
- Backbone: one forward with output_hidden_states; the framework takes
  `hidden_states[-depth:]` (depth = DiT blocks = 36, hard-coded `num_vl_layers = 36` in
  Qwen_PI_v3.__init__). transformers' tuple is [embeddings, layer 0 out, ..., layer L-1
  out] (L + 1 entries) so the last `depth` entries are the outputs of backbone layers
  L - depth .. L - 1 (all 36 for Qwen3-VL-4B): TAIL-ALIGNED, block i reads backbone layer
  L - depth + i. A third-party parity harness of the released checkpoint [copy] checks
  that the 36 taps are the decoder layers' outputs, the first three INCLUDING the
  DeepStack visual additions (the tap equals the next layer's input), and that the last
  tap is NOT the final RMSNorm's output. The caller passes exactly these.
- Per-layer projector `project_layers[i]` = Sequential(LayerNorm(W_b), Linear(W_b, W))
  (nn.LayerNorm defaults: eps 1e-5, affine), nn.Identity when W_b == W
  (`_project_vl_hidden_for_action`).
- DiT block (BasicTransformerBlock, norm_type "ada_norm"), pre-norm:
    n = LayerNorm(x, no affine, eps 1e-5) * (1 + scale) + shift,
        (scale, shift) = chunk(Linear(SiLU(temb)), 2)   # scale FIRST (AdaLayerNorm)
    [n = n + sinusoidal pe  only if positional_embeddings == "sinusoidal"]
    x = x + attn1(n, context)       # diffusers Attention, q/k/v/out with bias, 1/sqrt(d)
    x = x + ff(LayerNorm(x, no affine))   # FeedForward "gelu-approximate": Linear(W, 4W),
                                          # GELU-tanh, Linear(4W, W), biases
  context: cross blocks read the projected layer (to_k/to_v map W -> W: the encoder is
  pre-projected, cross_attention_dim = W); self blocks read n itself.
- Attention pattern (DiT.forward): block idx self-attends iff
  idx % 2 == 1 and interleave_self_attention and use_canonical_forward; every other
  block cross-attends to encoder_hidden_states[idx]. The released checkpoint:
  interleave_self_attention False (every block cross), use_canonical_forward True.
  use_canonical_forward False is the legacy "all cross" forward (odd blocks, built with
  cross_attention_dim None, still read their layer; same shapes since the encoder is
  pre-projected to W). QwenPI_v3's default YAML has interleave True; the released
  checkpoint's effective config has it False [copy, parity harness].
  The VLM padding mask goes to cross blocks only; self blocks see all head tokens.
- Time. temb (DiT.timestep_encoder): diffusers Timesteps(256, flip_sin_to_cos=True,
  downscale_freq_shift=1) = [cos(b f), sin(b f)], f_j = exp(-ln(1e4) j / (128 - 1)),
  b = the integer bucket; then TimestepEmbedding: linear_1 (256 -> W), SiLU, linear_2.
  The action encoder: a = layer1(action); tau = [sin(b g), cos(b g)],
  g_j = exp(-ln(1e4) j / (W/2)) (SIN first, no shift); swish(layer2(cat[a, tau]));
  layer3. Bucket b = int(t * num_timestep_buckets) (1000), t = k / N as a Python float.
- Tokens: [state token (only if a state is given; QwenPI_v3 passes None: state is TEXT
  in the prompt, `[STATE] b1 .. bn [ACTION]`), 32 learned future tokens
  (nn.Embedding(num_target_vision_tokens, W)), action tokens + position_embedding(0..H-1)
  (nn.Embedding(max_seq_len 1024, W), add_pos_embed True)].
- Output: DiT.forward(return_pre_output=True): the last block's output goes straight
  to action_decoder = MLP(W, 1024, action_dim): layer2(relu(layer1(x))); the last H
  tokens are the velocity. DiT's norm_out / proj_out_1 / proj_out_2 are built (they are
  in the state dict) but unused.
- Flow: x_t = (1 - t) noise + t action, v = action - noise; inference
  x <- x + (1/N) v(x, t_k), t_k = k/N, k = 0..N-1 (t goes 0 -> 1), N = 4.

Checkpoint mapping: the `.pt` is the framework's state dict: `qwen_vl_interface.*`
(the backbone), `project_layers.{i}.{0,1}.*`, `action_model.*`. This module's names are
those minus nothing: PIv3Head.project_layers and PIv3Head.action_model (dit.py; .model =
DiT: timestep_encoder.timestep_embedder.linear_{1,2}, transformer_blocks.{i}.norm1.linear,
.attn1.to_{q,k,v}, .attn1.to_out.0, .ff.net.0.proj, .ff.net.2, proj_out_{1,2};
.action_encoder.layer{1,2,3}; .action_decoder.layer{1,2}; .state_encoder.layer{1,2};
.future_tokens; .position_embedding). `head_state_dict(sd)` selects those keys (and
strips a DDP "module." prefix); `load_state_dict(..., strict=True)` then loads them.
"""
from __future__ import annotations

import torch
from torch import nn

from ...layers.flow_steps import FlowStep
from ...layers.rtc_guidance import check_guide, guided_forward_time
from .dit import ActionModel, DiT

# `cfg` below is configuration.PIv3HeadConfig, named in hints only: the config builds this
# head (PIv3HeadConfig.build), so importing it back would be a circle.
HEAD_PREFIXES = ("action_model.", "project_layers.")


def action_model(cfg: PIv3HeadConfig) -> ActionModel:
    """dit.py's modules from the config's numbers (they take plain numbers, as diffusers' do)."""
    dit = DiT(cfg.width, cfg.num_heads, cfg.head_dim, tuple(cfg.block_built_cross(i) for i in range(cfg.depth)),
              output_dim=cfg.dit_output_dim, time_proj_dim=cfg.time_proj_dim, time_freq_shift=cfg.time_freq_shift,
              time_max_period=cfg.time_max_period, ff_mult=cfg.ff_mult, norm_eps=cfg.norm_eps,
              positional_embeddings=cfg.positional_embeddings,
              max_num_positional_embeddings=cfg.max_num_positional_embeddings)
    return ActionModel(dit, width=cfg.width, action_dim=cfg.action_dim, state_dim=cfg.state_dim,
                       state_hidden=cfg.state_hidden, decoder_hidden=cfg.decoder_hidden,
                       future_tokens=cfg.future_tokens, max_seq_len=cfg.max_seq_len if cfg.add_pos_embed else 0,
                       time_max_period=cfg.time_max_period)


# ---- the flow's time buckets ------------------------------------------------------
def bucket_schedule(steps: int, buckets: int) -> list[int]:
    """t_k = k / N as Python floats, bucket = int(t_k * buckets) (predict_action)."""
    return [int((k / float(steps)) * buckets) for k in range(steps)]


def head_state_dict(checkpoint: dict) -> dict:
    """The head's tensors of a StarVLA framework state dict (the `.pt`): keys under
    `action_model.` and `project_layers.` (a leading DDP `module.` is stripped), names
    unchanged; the backbone's `qwen_vl_interface.*` are left out."""
    out = {}
    for key, value in checkpoint.items():
        k = key[len("module."):] if key.startswith("module.") else key
        if k.startswith(HEAD_PREFIXES):
            out[k] = value
    return out


class PIv3Head(nn.Module):
    """Names follow the framework's state dict: project_layers.{i}.{0,1}, action_model.*."""

    def __init__(self, cfg: PIv3HeadConfig):
        super().__init__()
        self.cfg = cfg
        self.project_layers = nn.ModuleList(
            nn.Identity() if cfg.backbone_hidden == cfg.width else
            nn.Sequential(nn.LayerNorm(cfg.backbone_hidden, eps=cfg.projector_eps),
                          nn.Linear(cfg.backbone_hidden, cfg.width))
            for _ in range(cfg.depth))
        self.action_model = action_model(cfg)

    # ---- which backbone layers ----------------------------------------------------
    def first_backbone_layer(self, backbone_layers: int) -> int:
        """Block i reads entry first + i of the per-layer list (hidden_states[-depth:])."""
        if backbone_layers < self.cfg.depth:
            raise ValueError(f"PI_v3 head has {self.cfg.depth} blocks but got hidden states of only "
                             f"{backbone_layers} backbone layers (it reads the last {self.cfg.depth})")
        return backbone_layers - self.cfg.depth

    def read_layers(self, backbone_layers: int) -> list[int | None]:
        """Per block, the index of the per-layer entry it cross-attends to (None: self)."""
        first = self.first_backbone_layer(backbone_layers)
        return [first + i if self.cfg.block_is_cross(i) else None for i in range(self.cfg.depth)]

    # ---- inputs -----------------------------------------------------------------------
    def encoder_mask(self, prefix_mask, batch: int, length: int, device) -> torch.Tensor | None:
        """None (every prefix token visible, as StarVLA at batch 1), a bool [B, T] mask
        (True = real token), or valid lengths [B] (the first n tokens are real) ->
        bool [B, 1, 1, T] or None."""
        if prefix_mask is None:
            return None
        m = torch.as_tensor(prefix_mask, device=device)
        if m.dtype == torch.bool:
            if m.shape != (batch, length):
                raise ValueError(f"prefix_mask must be bool [B, T] = [{batch}, {length}]; got {tuple(m.shape)}")
        else:
            if m.shape not in ((batch,), ()) or m.is_floating_point():
                raise ValueError(f"valid lengths must be integers [B] = [{batch}]; got {tuple(m.shape)}")
            if int(m.min()) < 1 or int(m.max()) > length:
                raise ValueError(f"valid lengths must be in [1, {length}]; got {m.tolist()}")
            m = torch.arange(length, device=device)[None] < m.reshape(-1, 1)
            m = m.expand(batch, length)
        if not bool(m.any(dim=1).all()):
            raise ValueError("every row needs at least one visible prefix token")
        return m[:, None, None, :]

    def prepare(self, layer_hidden, prefix_mask=None, state=None):
        """What depends on the prefix only: per block the cross K/V of its projected layer
        (None for self blocks), the encoder mask and the state token. Odd blocks in
        canonical interleaved mode read no layer, so those layers are not projected."""
        cfg = self.cfg
        n_layers = len(layer_hidden)
        reads = self.read_layers(n_layers)
        first = layer_hidden[0]
        if first.dim() != 3 or first.shape[-1] != cfg.backbone_hidden:
            raise ValueError(f"each layer's hidden states must be [B, T, {cfg.backbone_hidden}]; "
                             f"got {tuple(first.shape)}")
        b, t, _ = first.shape
        p = self.action_model.future_tokens.weight
        mask = self.encoder_mask(prefix_mask, b, t, p.device)
        kvs = []
        for i, idx in enumerate(reads):
            if idx is None:
                kvs.append(None)
                continue
            h = layer_hidden[idx]
            if h.shape != first.shape:
                raise ValueError(f"layer {idx} hidden states {tuple(h.shape)} != layer 0's {tuple(first.shape)}")
            ctx = self.project_layers[i](h.to(p.dtype))
            kvs.append(self.action_model.model.transformer_blocks[i].attn1.kv(ctx))
        state_tok = self.state_token(state, b, p.dtype)
        return kvs, mask, state_tok

    def state_token(self, state, batch: int, dtype):
        if state is None:
            return None
        if self.cfg.state_mode != "encoder":
            raise ValueError("this head takes the state as text (state_mode 'text'); pass state=None "
                             "or build it with state_mode='encoder'")
        s = torch.as_tensor(state).reshape(batch, -1, self.cfg.state_dim)
        return self.action_model.state_encoder(s.to(dtype))

    def tokens(self, x: torch.Tensor, buckets: torch.Tensor, state_tok=None) -> torch.Tensor:
        """DiT input [state?, future tokens, action tokens + position embedding]."""
        am = self.action_model
        b, h, _ = x.shape
        act = am.action_encoder(x, buckets)
        if am.position_embedding is not None:
            act = act + am.position_embedding.weight[:h][None]
        parts = [am.future_tokens.weight[None].expand(b, -1, -1), act]
        if state_tok is not None:
            parts.insert(0, state_tok)
        return torch.cat(parts, dim=1)

    # ---- sampling ---------------------------------------------------------------------
    def velocity(self, x: torch.Tensor, bucket: int, prepared) -> torch.Tensor:
        """One Euler step's velocity [B, H, A] at timestep bucket `bucket`."""
        kvs, mask, state_tok = prepared
        am = self.action_model
        buckets = torch.full((x.shape[0],), bucket, dtype=torch.long, device=x.device)
        temb = am.model.timestep_encoder(buckets)
        hs = self.tokens(x, buckets, state_tok)
        for block, kv in zip(am.model.transformer_blocks, kvs):
            hs = block(hs, temb, kv, mask if kv is not None else None)
        return am.action_decoder(hs[:, -x.shape[1]:])

    @torch.no_grad()
    def sample_actions(self, layer_hidden, prefix_mask, noise: torch.Tensor, steps: int | None = None,
                       state: torch.Tensor | None = None, return_intermediates: bool = False):
        """Euler-integrate t = 0 -> 1 from `noise` [B, H, action_dim].

        layer_hidden: the backbone's per-layer hidden states of the prefix, a tensor
        [L_b, B, T, W_backbone] or a list of [B, T, W_backbone]: transformers'
        `hidden_states` (L + 1 entries, embeddings first) or the L layer outputs; block i
        reads entry L_b - depth + i (the last `depth`, as QwenPI_v3 slices them).
        prefix_mask: None (all visible), bool [B, T] or valid lengths [B]; it masks the
        cross-attention keys only. steps: Euler steps (default cfg.denoise_steps).
        state: only with state_mode 'encoder' (QwenPI_v3 puts the state in the prompt).
        return_intermediates: return (actions, [FlowStep per Euler step]) instead
        (layers/flow_steps.py: t_k = k/N, whose bucket int(t_k * timestep_buckets) the
        network sees, x_k, v_k, dt; x_{k+1} = x_k + dt v_k)."""
        cfg = self.cfg
        if noise.dim() != 3 or noise.shape[-1] != cfg.action_dim:
            raise ValueError(f"noise must be [B, H, {cfg.action_dim}]; got {tuple(noise.shape)}")
        b, h, _ = noise.shape
        if not 1 <= h <= cfg.max_seq_len:
            raise ValueError(f"horizon {h} outside [1, {cfg.max_seq_len}]")
        if len(layer_hidden) == 0 or layer_hidden[0].shape[0] != b:
            raise ValueError(f"layer_hidden batch must match noise batch {b}")
        steps = cfg.denoise_steps if steps is None else int(steps)
        if steps < 1:
            raise ValueError("steps must be >= 1")
        prepared = self.prepare(layer_hidden, prefix_mask, state)
        dt = 1.0 / steps
        x = noise.to(self.action_model.future_tokens.weight.dtype)
        record = [] if return_intermediates else None
        for k, bucket in enumerate(bucket_schedule(steps, cfg.timestep_buckets)):
            v = self.velocity(x, bucket, prepared)
            if record is not None:
                record.append(FlowStep(k / float(steps), x, v, dt))
            x = x + dt * v
        return (x, record) if return_intermediates else x

    # -- on the Qwen3-VL prefix (models/qwen3vl/modeling.py asks every head for these) ------
    def chunk(self, pool, slot: int, prefix_len: int, prefix, noise: torch.Tensor, rtc=None,
              action_mask=None) -> torch.Tensor:
        """The chunk [1, H, D] from the prefix's per-layer hidden states the pool keeps
        (KVPool.hidden, read in place); under `rtc` (an active RTCGuide) guided."""
        layers = pool.hidden[:, None, :prefix_len]
        if rtc is not None:
            return self.sample_guided(noise, layers, rtc)
        return self.sample_actions(layers, None, noise)

    def sample_guided(self, noise: torch.Tensor, layer_hidden: torch.Tensor, guide) -> torch.Tensor:
        """The chunk [1, H, D] under a guided RTC guide (layers/rtc_guidance.guided_forward_time:
        this flow also runs t = k / N from 0 to 1, v = action - noise). `layer_hidden`
        [L + 1, 1, T, W]; the cross-attention K/V of the projected layers are computed once,
        without a graph, since they do not depend on x. One time per chunk: guided only."""
        check_guide(guide, noise, self.cfg)
        steps = self.cfg.denoise_steps
        with torch.inference_mode(False), torch.enable_grad():
            with torch.no_grad():       # outside inference mode: normal tensors autograd may save
                prepared = self.prepare(layer_hidden)
            buckets = bucket_schedule(steps, self.cfg.timestep_buckets)
            x = noise.to(self.action_model.future_tokens.weight.dtype)
            return guided_forward_time(lambda x, k: self.velocity(x, buckets[k], prepared), x,
                                       [k / float(steps) for k in range(steps)], 1.0 / steps, guide)


def build_random(cfg: PIv3HeadConfig, seed: int = 0, dtype=torch.float32, device="cpu") -> PIv3Head:
    """A seeded random head for tests and profiles: nn defaults, future tokens and
    position embedding N(0, 0.02) as StarVLA initialises them, projector LayerNorm
    weights 1 + 0.1 N(0, 1) and biases 0.1 N(0, 1) so a wrong norm is visible."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        head = PIv3Head(cfg)
        with torch.no_grad():
            am = head.action_model
            nn.init.normal_(am.future_tokens.weight, std=0.02)
            if am.position_embedding is not None:
                nn.init.normal_(am.position_embedding.weight, std=0.02)
            for m in head.project_layers.modules():
                if isinstance(m, nn.LayerNorm):
                    m.weight.add_(0.1 * torch.randn_like(m.weight))
                    m.bias.add_(0.1 * torch.randn_like(m.bias))
    return head.to(device=device, dtype=dtype).eval()

