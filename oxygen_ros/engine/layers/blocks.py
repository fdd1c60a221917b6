"""Building blocks shared by the backbone, the action expert and the vision encoder."""
from __future__ import annotations

import copy
import math
import os

import torch
import torch.nn.functional as F
from torch import nn

from .. import native
from .mrope import frequency_axes, interleaved_tables


class RMSNorm(nn.Module):
    """Gemma style scales by (1 + w), Llama style by w; the math runs in float32."""

    def __init__(self, dim: int, eps: float, style: str = "gemma"):
        super().__init__()
        if style not in ("gemma", "llama"):
            raise ValueError(f"unknown norm style {style!r}")
        self.eps = eps
        self.offset = 1.0 if style == "gemma" else 0.0
        self.weight = nn.Parameter(torch.zeros(dim) if style == "gemma" else torch.ones(dim))

    def scale(self) -> torch.Tensor:
        """What the normalised rows are multiplied by, in float32."""
        return self.weight.float() if self.offset == 0.0 else self.weight.float() + self.offset

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the math runs in float32; in reduced precision the weight is applied before
        # rounding back, as the references do
        if x.dtype == torch.float32:
            return rms_normalize(x, self.scale(), None, self.eps)
        y = F.rms_norm(x.float(), (x.shape[-1],), None, self.eps)
        return (y * (self.offset + self.weight.float())).to(x.dtype)


class AdaRMSNorm(nn.Module):
    """pi0.5's adaptive RMSNorm: scale, shift and a residual gate from the condition."""

    def __init__(self, dim: int, cond_dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.dense = nn.Linear(cond_dim, 3 * dim)
        nn.init.zeros_(self.dense.weight)
        nn.init.zeros_(self.dense.bias)


def native_inference(*tensors: torch.Tensor | None) -> bool:
    """Whether the native kernels (engine/native) take this work: float32 on CPU with no
    gradient to track, the library loaded. The fused expert calls the same kernels, so
    both paths compute alike; with autograd (RTC's guidance, training) ATen's run."""
    present = [t for t in tensors if t is not None]
    return (all(t.device.type == "cpu" and t.dtype == torch.float32 for t in present)
            and not (torch.is_grad_enabled() and any(t.requires_grad for t in present))
            and native.available())


# the gated MLP activations engine/native/activations.cpp computes
NATIVE_ACTIVATIONS = ("gelu_tanh", "silu")


def rms_normalize(x: torch.Tensor, scale: torch.Tensor | None, shift: torch.Tensor | None,
                  eps: float) -> torch.Tensor:
    """`rmsnorm(x) * scale + shift` (each term optional) over float32 x: one native pass
    per row (engine/native/norms.cpp) where native_inference allows, else ATen's rms_norm
    and addcmul."""
    if native_inference(x, scale, shift):
        return torch.ops.oxygen_native.rms_norm(x, scale, shift, eps)
    if shift is None:
        return F.rms_norm(x, (x.shape[-1],), scale, eps)
    return torch.addcmul(shift, F.rms_norm(x, (x.shape[-1],), None, eps), scale)


def ada_rms_normalize(x: torch.Tensor, one_plus_scale: torch.Tensor, shift: torch.Tensor,
                      eps: float) -> torch.Tensor:
    """`rmsnorm(x) * (1 + scale) + shift`, all in float32 and rounded to x's dtype once
    (as openpi/LeRobot do). The float32 terms come precomputed for every denoise step."""
    return rms_normalize(x.float(), one_plus_scale, shift, eps).to(x.dtype)


def norm_terms(scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """An adaptive norm's (1 + scale, shift) in float32, stacked on dim -2."""
    return torch.stack([1 + scale.float(), shift.float()], dim=-2)


def activation(name: str):
    if name == "gelu_tanh":
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "silu":
        return F.silu
    raise ValueError(f"unknown activation {name!r}")


# oneDNN's prepacked fp32 linear streams weights ~2x faster than MKL's GEMM for the
# 10-30 rows the action expert and a batched decode step multiply (measured on the
# dev CPU with SmolLM2's shapes: M=10 20 vs 10 GB/s, M=30 11 vs 6 GB/s, M=1 22 vs 17).
# The products read a blocked copy of the weights (the layers' own stay on a file:
# EngineModel.pack_weights); OXYGEN_ONEDNN=0 turns it off.
# Below ~256 KB a matrix is cache-resident and oneDNN's per-call overhead dominates.
ONEDNN_BATCH_HINT = 64
ONEDNN_MIN_ELEMENTS = 1 << 16
# oneDNN caches a primitive (with buffers that grow with the rows, ~2-4 MB at 250 rows)
# for every row count it meets, up to 1024 of them. Prefixes and question prompts have
# ever new lengths (and prompts admitted together make products of requests x longest
# prompt rows), so a node's RSS crept up for an hour. Products of more than
# ONEDNN_EXACT_ROWS rows run in tiles of at most ONEDNN_MAX_ROWS rows, the last tile padded
# up to one of eight row counts per octave (36, 40, ... 64, 72, ... 128, 144, ... 256): 56
# row counts in all, the common ones met in the first minutes, and under 12.5% padding (a
# 33-token prompt runs as 36 rows, smol's 174-token prefix as 176; quarter octaves made
# them 40 and 192, multiples of 32, the first buckets, 64 and the admit phase +40%).
# Capping oneDNN's and ideep's caches instead (ONEDNN_PRIMITIVE_CACHE_CAPACITY,
# LRU_CACHE_CAPACITY) still grew the process ~9x as much over new lengths.
# Padding rows leaves the other rows' results bitwise unchanged, and so does the tiling
# (checked in test_model_packed_weights); a product of fewer than ~14 rows runs another
# kernel, so counts up to ONEDNN_EXACT_ROWS run as they are.
ONEDNN_EXACT_ROWS = 32
ONEDNN_MAX_ROWS = 256


def _row_bucket(rows: int) -> int:
    """rows (>= 8) rounded up to the next eighth of its octave: 33 -> 36, 65 -> 72, 129 -> 144."""
    step = 1 << (rows.bit_length() - 4)
    return -(-rows // step) * step


def onednn_tiles(m: int) -> list[int]:
    """The row counts a product of m rows runs as on oneDNN (their sum: m plus the padding)."""
    if m <= ONEDNN_EXACT_ROWS:
        return [m]
    full, rest = divmod(m, ONEDNN_MAX_ROWS)
    return [ONEDNN_MAX_ROWS] * full + ([_row_bucket(max(rest, ONEDNN_EXACT_ROWS))] if rest else [])


def onednn_enabled(t: torch.Tensor) -> bool:
    return (os.environ.get("OXYGEN_ONEDNN", "1") != "0" and t.device.type == "cpu"
            and t.dtype == torch.float32 and t.numel() >= ONEDNN_MIN_ELEMENTS
            and torch.backends.mkldnn.is_available())


def onednn_product(rows: torch.Tensor, blocked: torch.Tensor, bias: torch.Tensor | None,
                   gelu_tanh: bool = False) -> torch.Tensor:
    """rows [m, in] times a oneDNN-blocked weight (+ bias, optionally through tanh GELU),
    run as onednn_tiles(m) row counts -> [m, out]."""
    post, algorithm = ("gelu", "tanh") if gelu_tanh else ("none", "")
    m = rows.shape[0]
    if m <= ONEDNN_EXACT_ROWS:       # the common case (decode, the expert, prompts): one call as is
        return torch.ops.mkldnn._linear_pointwise(rows, blocked, bias, post, [], algorithm)
    tiles = onednn_tiles(m)
    outs = [torch.ops.mkldnn._linear_pointwise(t, blocked, bias, post, [], algorithm)
            for t in _pad_rows(rows, sum(tiles)).split(tiles)]
    return (outs[0] if len(outs) == 1 else torch.cat(outs))[:m]


def _pad_rows(rows: torch.Tensor, total: int) -> torch.Tensor:
    """rows [m, n] with zero rows appended up to `total` (F.pad would fill the whole copy
    first; only the padding rows need zeros)."""
    m = rows.shape[0]
    if total == m:
        return rows
    padded = rows.new_empty(total, rows.shape[1])
    padded[:m] = rows
    padded[m:].zero_()
    return padded


def tiled_rows(x: torch.Tensor, block, first: "Packed") -> torch.Tensor:
    """block(x) for a row-wise block of products (an MLP) whose first product is `first`,
    run on the row tiles that product's oneDNN path would use: x is padded once and the
    block's output joined once, where each product would pad its input and join its tiles'
    outputs (the 8192-wide gate/up product of pi05-quarter's 598-token prefix: 20 MB a
    layer). Each row's values are unchanged: every product sees the same tiles."""
    rows = x.reshape(-1, x.shape[-1])
    m = rows.shape[0]
    if m <= ONEDNN_EXACT_ROWS or first.current_blocked() is None:
        return block(x)
    tiles = onednn_tiles(m)
    outs = [block(t) for t in _pad_rows(rows, sum(tiles)).split(tiles)]
    out = outs[0] if len(outs) == 1 else torch.cat(outs)
    return out[:m].reshape(*x.shape[:-1], -1)


class _BlockedProduct(torch.autograd.Function):
    """onednn_product with a backward for its rows (oneDNN's linear has none: a backward
    through it silently yields no gradient). The weights are constants (RTC's guided
    sampling differentiates with respect to the actions only); the backward unpacks the
    blocked copy for the call alone (a reorder, exact), so no dense copy stays resident."""

    @staticmethod
    def forward(ctx, rows, blocked, bias):
        ctx.blocked = blocked     # not save_for_backward: it may be an inference tensor
        return onednn_product(rows, blocked, bias)

    @staticmethod
    def backward(ctx, grad):
        return grad @ ctx.blocked.to_dense(), None, None


_NO_MATRIX = torch.empty(0)
# a deep copy's memo holds id(PACK_AFTER_COPY) while EngineModel.__deepcopy__ copies: it
# packs the whole copy afterwards, so the groups are not packed twice
PACK_AFTER_COPY = object()


class Packed:
    """Linear layers that read the same input, as one product (+ one bias).

    A row of activations times a contiguous [in, out] matrix streams the weights
    markedly faster on CPU than x @ W.T with W [out, in] (measured 16 vs 11 GB/s over
    SmolLM2's layers), and one call replaces several. On CPU in fp32 a oneDNN-blocked
    copy is faster still (see ONEDNN_BATCH_HINT). pack() chooses the layout:
    - dense=True: the layers' weights (and biases) are re-homed as views into one packed
      [in, sum(out)] matrix (no second dense copy; loading through the parameters with
      copy_ keeps it current), plus the blocked copy where oneDNN runs;
    - dense=False (EngineModel.pack_weights): where oneDNN runs, the blocked copy is the
      only one the products read, autograd's included (_BlockedProduct) and the native
      expert's (operands()), and the layers keep their own weights untouched (so they can
      be left on a file, see mapped_weights.py); elsewhere as dense=True.
    The blocked copy is dropped if a weight is modified in place later, and if a weight
    is replaced by a new tensor (e.g. a dtype change) matmul() uses the layers directly.
    """

    def __init__(self, *linears: nn.Module):   # nn.Linear, or a tied nn.Embedding
        self.linears = linears
        self.sizes = [l.weight.shape[0] for l in linears]
        biases = [getattr(l, "bias", None) is not None for l in linears]
        if any(biases) and not all(biases):
            raise ValueError("packed layers must all have a bias or none")
        self.has_bias = all(biases)
        self.dense = True
        self.matrix: torch.Tensor | None = None
        self.bias: torch.Tensor | None = None
        self.blocked: torch.Tensor | None = None
        self._pointers: list[int] | None = None

    @property
    def in_features(self) -> int:
        return self.linears[0].weight.shape[1]

    def numel(self) -> int:
        return sum(l.weight.numel() for l in self.linears)

    def pack(self, dense: bool = True) -> None:
        self.dense = dense
        weights = [l.weight.detach() for l in self.linears]
        with torch.no_grad():
            if self.has_bias:
                self.bias = torch.cat([l.bias.detach() for l in self.linears])
                self._rehome("bias", self.bias)
            self.matrix, self.blocked = None, None
            if not dense and onednn_enabled(weights[0]):
                self.blocked = torch.ops.mkldnn._reorder_linear_weight(torch.cat(weights), ONEDNN_BATCH_HINT)
            else:
                self.matrix = torch.cat(weights).t().contiguous()
                self._rehome("weight", self.matrix.t())
                if onednn_enabled(self.matrix):
                    self.blocked = torch.ops.mkldnn._reorder_linear_weight(self.matrix.t().contiguous(),
                                                                           ONEDNN_BATCH_HINT)
            self._pointers = self._layer_pointers()
            self._versions = self._weight_versions()

    def _rehome(self, name: str, packed: torch.Tensor) -> None:
        """Each layer's `name` parameter becomes its rows of `packed` (a view, no copy)."""
        start = 0
        for l, n in zip(self.linears, self.sizes):
            setattr(l, name, nn.Parameter(packed[start:start + n], requires_grad=False))
            start += n

    # (the checks below run before every product: they read the layers' parameter dicts
    # directly, as nn.Module's attribute lookup costs more than the rest of the check)
    def _layer_pointers(self) -> list[int]:
        names = ("weight", "bias") if self.has_bias else ("weight",)
        return [l._parameters[n].data_ptr() for l in self.linears for n in names]

    def _weight_versions(self) -> tuple | None:
        try:      # views share their base's counter, so a copy_ into the matrix counts too
            return tuple(l._parameters["weight"]._version for l in self.linears)
        except RuntimeError:       # packed under inference_mode: no version counter
            return None

    def __deepcopy__(self, memo) -> "Packed":
        # parameters deep-copy as clones (not views) and the blocked copy is an opaque
        # oneDNN tensor, so the copy packs its own layers again (unless its model will)
        new = Packed(*copy.deepcopy(self.linears, memo))
        if self._pointers is not None and id(PACK_AFTER_COPY) not in memo:
            new.pack(self.dense)
        return new

    @property
    def is_packed(self) -> bool:
        return self._pointers is not None

    def _current(self) -> bool:
        """Packed, and no layer's weight or bias replaced since."""
        return self._pointers is not None and self._layer_pointers() == self._pointers

    def current_blocked(self) -> torch.Tensor | None:
        """The oneDNN-blocked copy if it is in use and up to date, else None (dropped if stale)."""
        if self.blocked is not None and (not self._current() or self._weight_versions() != self._versions):
            self.blocked = None
        return self.blocked

    def operands(self) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """(packed matrix, up-to-date oneDNN copy or None) for code that runs the product
        itself (engine/native: it reads the blocked copy where there is one, else the
        matrix; an empty matrix where the blocked copy is the only one); None where that
        code cannot: biases, stale layers, neither layout."""
        if self.has_bias or not self._current():
            return None
        blocked = self.current_blocked()
        if blocked is not None:
            return (self.matrix if self.matrix is not None else _NO_MATRIX), blocked
        return None if self.matrix is None else (self.matrix, None)

    def matmul(self, x: torch.Tensor, gelu_tanh: bool = False) -> torch.Tensor:
        """x [..., in] -> every layer's output side by side [..., sum(out)], optionally
        through tanh-approximated GELU (fused into the product where oneDNN runs it)."""
        blocked = self.current_blocked()    # None too if the weights changed
        if blocked is not None:
            rows = x.reshape(-1, x.shape[-1])
            if torch.is_grad_enabled() and x.requires_grad:
                out = _BlockedProduct.apply(rows, blocked, self.bias)
                out = F.gelu(out, approximate="tanh") if gelu_tanh else out
            else:
                out = onednn_product(rows, blocked, self.bias, gelu_tanh)
            return out.reshape(*x.shape[:-1], -1)
        if self.matrix is not None and self._current():
            out = x @ self.matrix if self.bias is None else torch.addmm(self.bias, x.reshape(-1, x.shape[-1]),
                                                                        self.matrix).reshape(*x.shape[:-1], -1)
        else:
            outs = [F.linear(x, l.weight, getattr(l, "bias", None)) for l in self.linears]
            out = torch.cat(outs, dim=-1) if len(outs) > 1 else outs[0]
        return F.gelu(out, approximate="tanh") if gelu_tanh else out

    def apply(self, x: torch.Tensor) -> list[torch.Tensor]:
        """x [..., in] -> each layer's output."""
        out = self.matmul(x)
        return list(out.split(self.sizes, dim=-1)) if len(self.sizes) > 1 else [out]


def packed_groups(module: nn.Module) -> list[Packed]:
    """Every Packed group held by `module` or its submodules, in registration order."""
    return [v for m in module.modules() for v in vars(m).values() if isinstance(v, Packed)]


class GatedMLP(nn.Module):
    def __init__(self, width: int, mlp_dim: int, act: str):
        super().__init__()
        self.gate_proj = nn.Linear(width, mlp_dim, bias=False)
        self.up_proj = nn.Linear(width, mlp_dim, bias=False)
        self.down_proj = nn.Linear(mlp_dim, width, bias=False)
        self.act, self.act_name = activation(act), act
        self._gate_up, self._down = Packed(self.gate_proj, self.up_proj), Packed(self.down_proj)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return tiled_rows(x, self._rows, self._gate_up)

    def _rows(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = self._gate_up.matmul(x)
        if self.act_name in NATIVE_ACTIVATIONS and native_inference(gate_up):
            return self._down.matmul(torch.ops.oxygen_native.gated_activation(gate_up, self.act_name))
        gate, up = gate_up.split(self._gate_up.sizes, dim=-1)
        return self._down.matmul(self.act(gate) * up)


class Rope:
    """Rotary embedding, "rotate half" convention, tables computed once per device.

    The sine table carries rotate-half's sign (-sin on the first half), so applying it
    is a swap of halves and one multiply-add. With `mrope_section` (Qwen3-VL) positions
    may also be [3, B, T], one row per axis (t, h, w), interleaved as in mrope.py; the
    module keeps no per-request state (callers add each request's rope_delta).
    """

    def __init__(self, head_dim: int, theta: float, max_positions: int = 8192,
                 mrope_section: tuple[int, ...] | None = None):
        inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
        ang = torch.arange(max_positions, dtype=torch.float64)[:, None] * inv[None, :]
        self.cos = torch.cat([ang.cos(), ang.cos()], dim=-1).float()
        self.sin = torch.cat([-ang.sin(), ang.sin()], dim=-1).float()
        self.mrope_section = None if mrope_section is None else tuple(mrope_section)
        self.axes = None if mrope_section is None else frequency_axes(self.mrope_section, head_dim)

    def to(self, device) -> "Rope":
        self.cos, self.sin = self.cos.to(device), self.sin.to(device)
        if self.axes is not None:
            self.axes = self.axes.to(device)
        return self

    def tables(self, positions: torch.Tensor, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [B, T] (or [3, B, T] with mrope_section) -> cos, signed sin
        [B, T, 1, head_dim], broadcast over heads of activations laid out [B, T, heads, head_dim]."""
        if positions.dim() == 3:
            if self.axes is None:
                raise ValueError("three-axis positions [3, B, T] need a Rope with mrope_section")
            cos, sin = interleaved_tables(self.cos, self.sin, positions, self.axes)
            return cos.unsqueeze(2).to(dtype), sin.unsqueeze(2).to(dtype)
        return self.cos[positions].unsqueeze(2).to(dtype), self.sin[positions].unsqueeze(2).to(dtype)


def native_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether attention runs natively: native_inference, and each row's keys and values
    contiguous [L, d] (as in the KV pool)."""
    return (all(t.stride(-1) == 1 and t.stride(-2) == t.shape[-1] for t in (k, v))
            and native_inference(q, k, v))


def apply_rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    swapped = torch.cat([x[..., half:], x[..., :half]], dim=-1)
    return torch.addcmul(x * cos, swapped, signed_sin)


def grouped_mask(mask: torch.Tensor, group: int, dtype: torch.dtype) -> torch.Tensor:
    """A mask [B, 1, T, L] for queries folded as grouped_attention folds them (each of the
    `group` query heads sharing a KV head repeats the T rows: [B, 1, group * T, L]), and
    additive in the queries' dtype (what the attention kernel turns a boolean mask into).
    A pass over many layers builds it once (Decoder.forward) instead of once a layer."""
    b, _, t, length = mask.shape
    if group > 1 and t > 1:      # one query per row (decode) broadcasts as is
        mask = mask.unsqueeze(2).expand(b, 1, group, t, length).reshape(b, 1, group * t, length)
    if mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))
    return mask


def grouped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      mask: torch.Tensor | None, visible: torch.Tensor | None = None) -> torch.Tensor:
    """Attention for GQA/MQA without repeating the shared KV heads.

    q [B, H, T, d]; k, v [B, Hkv, L, d] (may be strided views into the KV pool);
    mask [B, 1, T, L] boolean (True = visible) or additive float, or None, or already
    folded by grouped_mask. Query heads that share a KV head are folded into the query
    length, so K/V are read once per KV head. visible [B] (decode, T = 1): row b sees
    keys [0, visible[b]), which is what `mask` says; CPU inference in float32 then runs
    the native kernel (engine/native/attention.cpp). (For the action expert's 30
    queries per KV head ATen's flash kernel is as fast or faster: a smol chunk took
    150-160 ms with it, 160-163 ms with the native one.)
    """
    b, h, t, d = q.shape
    hkv = k.shape[1]
    g = h // hkv
    qg = q.reshape(b, hkv, g * t, d)
    if visible is not None and t == 1 and native_attention(qg, k, v):
        out = torch.ops.oxygen_native.attention(qg, k, v, visible, 1.0 / math.sqrt(d))
        return out.reshape(b, h, t, d)
    if mask is not None and mask.shape[-2] == t:
        mask = grouped_mask(mask, g, q.dtype)
    if t == 1 and q.device.type == "cpu" and mask is not None and mask.is_floating_point():
        # decode on CPU: two batched matmuls beat the flash kernel for single queries
        # (0.70 vs 0.84 ms a layer for 30 rows of SmolLM2)
        scores = torch.matmul(qg * (1.0 / math.sqrt(d)), k.transpose(-1, -2)) + mask
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
    else:
        out = F.scaled_dot_product_attention(qg, k, v, attn_mask=mask, scale=1.0 / math.sqrt(d))
    return out.reshape(b, h, t, d)
