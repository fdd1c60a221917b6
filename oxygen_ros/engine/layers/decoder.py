"""Decoder-only transformer (Gemma, Llama and Qwen3-VL text families) that reads and
writes the KV pool. Qwen3-VL adds, by configuration, three-axis RoPE positions and
DeepStack (visual features added at the image positions after the first layers)."""
from __future__ import annotations

import math

import torch
from torch import nn

from ..config import DecoderConfig
from .blocks import (NATIVE_ACTIVATIONS, ONEDNN_EXACT_ROWS, GatedMLP, Packed, RMSNorm, Rope, apply_rope,
                     grouped_attention, grouped_mask, native_inference)


_NOT_BLOCKED = torch.empty(0)


class Attention(nn.Module):
    """Q/K/V/O projections; K and V go into the pool before attending."""

    def __init__(self, width: int, num_heads: int, num_kv_heads: int, head_dim: int,
                 qk_norm_eps: float | None = None, norm_style: str = "gemma"):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.q_proj = nn.Linear(width, num_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(width, num_kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(width, num_kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * head_dim, width, bias=False)
        self.q_norm = self.k_norm = None
        if qk_norm_eps is not None:
            self.q_norm = RMSNorm(head_dim, qk_norm_eps, norm_style)
            self.k_norm = RMSNorm(head_dim, qk_norm_eps, norm_style)
        self._qkv, self._o = Packed(self.q_proj, self.k_proj, self.v_proj), Packed(self.o_proj)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], cache: "CacheView",
                mask: torch.Tensor | None) -> torch.Tensor:
        b, t, _ = x.shape
        h, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        qkv = self._qkv.matmul(x)
        targets = cache.pass_targets(t) if self.q_norm is None and native_inference(qkv) else None
        if targets is not None:
            # one native pass (engine/native/rope.cpp): the rotated queries [B, H, T, d] and
            # the keys and values written into the pool; bitwise the lines below
            q = torch.ops.oxygen_native.rope_split(qkv, *rope, h, hkv, *targets)
            keys, values = cache.read()
        else:
            # queries and keys stay side by side [B, T, H + Hkv, d] so one rope call covers both
            qk = qkv[..., :(h + hkv) * d].unflatten(-1, (h + hkv, d))
            v = qkv[..., (h + hkv) * d:].unflatten(-1, (hkv, d)).transpose(1, 2)
            if self.q_norm is not None:
                qk = torch.cat([self.q_norm(qk[:, :, :h]), self.k_norm(qk[:, :, h:])], dim=2)
            qk = apply_rope(qk, *rope)
            q, k = qk[:, :, :h].transpose(1, 2), qk[:, :, h:].transpose(1, 2)
            keys, values = cache.write_and_read(k, v)
        out = grouped_attention(q, keys, values, mask, cache.visible())
        return self._o.matmul(out.transpose(1, 2).reshape(b, t, -1))


class CacheView:
    """Where one forward pass writes its K/V in one layer of the pool and what it reads.

    slots: a contiguous range of pool slots (a slice: the engine's paths, read as views),
      or any distinct pool slots as a LongTensor [B] (row i is slot slots[i]; read as a
      gather, so a copy: for callers that address arbitrary slots, e.g. decode_logits).
    write_at: an int (every row writes positions [write_at, write_at+T)) or a LongTensor
      [B] (decode: row i writes its single token at write_at[i]).
    read_len: every row attends over pool positions [0, read_len) of its slot.
    """

    def __init__(self, k_layer: torch.Tensor, v_layer: torch.Tensor, slots: slice | torch.Tensor,
                 write_at, read_len: int):
        self.k_layer, self.v_layer = k_layer, v_layer
        self.slots, self.write_at, self.read_len = slots, write_at, read_len

    def write_and_read(self, k: torch.Tensor, v: torch.Tensor):
        kl, vl, s = self.k_layer, self.v_layer, self.slots
        if isinstance(self.write_at, int):
            t = k.shape[2]
            kl[s, :, self.write_at:self.write_at + t] = k
            vl[s, :, self.write_at:self.write_at + t] = v
        else:
            rows = torch.arange(s.start, s.stop, device=kl.device) if isinstance(s, slice) else s
            kl[rows, :, self.write_at] = k[:, :, 0]
            vl[rows, :, self.write_at] = v[:, :, 0]
        return self.read()

    def read(self):
        return self.k_layer[self.slots, :, : self.read_len], self.v_layer[self.slots, :, : self.read_len]

    def pass_targets(self, t: int):
        """The pool's K and V views [B, Hkv, T, d] a pass of T positions from write_at writes,
        for a kernel that writes them itself; None where the write is not to a view (slots
        gathered, or one position per row)."""
        if isinstance(self.write_at, int) and isinstance(self.slots, slice):
            where = (self.slots, slice(None), slice(self.write_at, self.write_at + t))
            return self.k_layer[where], self.v_layer[where]
        return None

    def visible(self) -> torch.Tensor | None:
        """Decode (one token per row at write_at[i]): how many of the read_len keys row i
        sees, [B], as the decode mask says (a padding row of a bucketed step may sit past
        read_len: it sees them all). None for a pass at one position."""
        return None if isinstance(self.write_at, int) else (self.write_at + 1).clamp_(max=self.read_len)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.width, cfg.norm_eps, cfg.norm)
        self.self_attn = Attention(cfg.width, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim,
                                   cfg.norm_eps if cfg.qk_norm else None, cfg.norm)
        self.post_attention_layernorm = RMSNorm(cfg.width, cfg.norm_eps, cfg.norm)
        self.mlp = GatedMLP(cfg.width, cfg.mlp_dim, cfg.activation)

    def forward(self, x, rope, cache: CacheView, mask):
        h = x + self.self_attn(self.input_layernorm(x), rope, cache, mask)
        return h + self.mlp(self.post_attention_layernorm(h))


class Decoder(nn.Module):
    def __init__(self, cfg: DecoderConfig, max_positions: int = 8192):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.width)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.depth))
        self.norm = RMSNorm(cfg.width, cfg.norm_eps, cfg.norm)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.width, cfg.vocab_size, bias=False)
        # packed, the tied embedding becomes a view of the [width, vocab] head matrix
        self._head = Packed(self.embed_tokens if self.lm_head is None else self.lm_head)
        self.rope = Rope(cfg.head_dim, cfg.rope_theta, max_positions, cfg.mrope_section)
        self.embed_multiplier = math.sqrt(cfg.width) if cfg.embed_scale else 1.0

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(ids)
        if self.embed_multiplier != 1.0:
            # Gemma rounds the multiplier to the activation dtype before scaling.
            x = x * torch.tensor(self.embed_multiplier, dtype=x.dtype)
        return x

    def embed_with_images(self, ids: torch.Tensor, visual_mask: torch.Tensor,
                          image_embeds: torch.Tensor) -> torch.Tensor:
        """Token embeddings [B, T, W] with the rows at `visual_mask` (bool [B, T], the
        image tokens in row-major order) replaced by `image_embeds` [n_image_tokens, W]."""
        x = self.embed(ids)
        n = int(visual_mask.sum()) if visual_mask.device.type == "cpu" else None   # no sync on a GPU
        if image_embeds.dim() != 2 or image_embeds.shape[1] != x.shape[-1] or n not in (None, image_embeds.shape[0]):
            raise ValueError(f"{n} image tokens need image embeddings [{n}, {x.shape[-1]}], "
                             f"got {list(image_embeds.shape)}")
        return x.masked_scatter(visual_mask[..., None], image_embeds.to(x.dtype))

    def head_weight(self) -> torch.Tensor:
        return self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm + LM head on the given rows only (callers pass just the last token)."""
        return self._head.matmul(self.norm(hidden))

    def forward(self, x: torch.Tensor, positions: torch.Tensor, pool, slots: slice | torch.Tensor, write_at,
                read_len: int, mask: torch.Tensor | None, visual_mask: torch.Tensor | None = None,
                deepstack: list[torch.Tensor] | None = None, hidden_out: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, T, W] -> hidden states [B, T, W] (before the final norm).

        positions: [B, T], or [3, B, T] (t, h, w) where the config has mrope_section.
        deepstack (DeepStack): deepstack[i] [n_image_tokens, W] is added after layer i
        to the rows at visual_mask (bool [B, T], row-major order), i < len(deepstack).
        hidden_out [depth + 1, >= T, W] (one row, B = 1): the per-layer hidden states as
        StarVLA's released checkpoint reads them (transformers 4.57's hidden_states, found by
        a parity run against it): [0] the input embeddings, [i + 1] layer i's output with
        DeepStack's addition, the last one before the final norm. (transformers 5.x records
        layer outputs before DeepStack and ends with the normed state.)
        """
        rope = self.rope.tables(positions, x.dtype)
        if (x.shape[1] == 1 and torch.is_tensor(write_at) and isinstance(slots, slice)
                and slots == slice(0, x.shape[0]) and not deepstack
                and hidden_out is None):
            native_out = self._decode_native(x, rope, pool, write_at, read_len)
            if native_out is not None:
                return native_out
        if mask is not None and mask.shape[-2] > 1:
            mask = grouped_mask(mask, self.cfg.num_heads // self.cfg.num_kv_heads, x.dtype)
        n_stack = self._check_deepstack(x, visual_mask, deepstack)
        t = x.shape[1]
        if hidden_out is not None:
            if x.shape[0] != 1 or hidden_out.shape[0] != len(self.layers) + 1 or hidden_out.shape[1] < t:
                raise ValueError(f"hidden_out must be [{len(self.layers) + 1}, >= {t}, W] for one row")
            hidden_out[0, :t] = x[0]
        for i, layer in enumerate(self.layers):
            x = layer(x, rope, CacheView(pool.k[i], pool.v[i], slots, write_at, read_len), mask)
            if i < n_stack:
                # x + 0 off the image rows, x + feature on them: the reference's values,
                # with no host sync (graph capturable)
                x = x + torch.zeros_like(x).masked_scatter_(visual_mask[..., None], deepstack[i].to(x.dtype))
            if hidden_out is not None:
                hidden_out[i + 1, :t] = x[0]
        return x

    def _decode_native(self, x, rope, pool, write_at: torch.Tensor, read_len: int) -> torch.Tensor | None:
        """A decode step's layers as one native call (engine/native/decode.cpp: the same
        kernels as the loop in forward, bitwise its results); None where that call does
        not compute what the layers do (q/k norms, another activation, unpacked or stale
        weights, more rows than oneDNN takes untiled, no native library): the loop runs."""
        if x.shape[0] > ONEDNN_EXACT_ROWS or not native_inference(x):
            return None
        params, blocked = [], []
        for layer in self.layers:
            attn, mlp = layer.self_attn, layer.mlp
            if attn.q_norm is not None or mlp.act_name not in NATIVE_ACTIVATIONS:
                return None
            operands = [g.operands() for g in (attn._qkv, attn._o, mlp._gate_up, mlp._down)]
            if None in operands:
                return None
            params += [layer.input_layernorm.scale(), layer.post_attention_layernorm.scale(),
                       *(matrix for matrix, _ in operands)]
            blocked += [_NOT_BLOCKED if copy is None else copy for _, copy in operands]
        attn = self.layers[0].self_attn
        depth = len(self.layers)
        return torch.ops.oxygen_native.decode_layers(
            x, params, blocked, [pool.k[i] for i in range(depth)], [pool.v[i] for i in range(depth)], write_at,
            read_len, *rope, attn.num_heads, attn.num_kv_heads, attn.head_dim, self.cfg.norm_eps,
            self.layers[0].mlp.act_name)

    def _check_deepstack(self, x, visual_mask, deepstack) -> int:
        """How many layers get DeepStack features (0: none); ValueError if they do not fit."""
        if not deepstack:
            return 0
        if len(deepstack) > self.cfg.deepstack_layers:
            raise ValueError(f"{len(deepstack)} DeepStack feature sets for a decoder configured "
                             f"with deepstack_layers={self.cfg.deepstack_layers}")
        if visual_mask is None or visual_mask.dtype != torch.bool or visual_mask.shape != x.shape[:2]:
            raise ValueError(f"DeepStack needs a bool visual_mask [B, T] = {list(x.shape[:2])}")
        n = int(visual_mask.sum()) if visual_mask.device.type == "cpu" else None   # no sync on a GPU
        for feats in deepstack:
            if feats.dim() != 2 or feats.shape[1] != x.shape[-1] or n not in (None, feats.shape[0]):
                raise ValueError(f"DeepStack features must be [{n if n is not None else 'image tokens'}, "
                                 f"{x.shape[-1]}], got {list(feats.shape)}")
        return len(deepstack)
