"""Roofline model of a frame: this machine's peaks and each phase's FLOPs and bytes.

A phase's roofline time is max(FLOPs / peak FLOP/s, bytes / peak bandwidth), where
FLOPs count 2 per multiply-add of the linear layers and of attention (QK^T and AV),
and bytes count the weights the phase streams once per forward pass plus the KV
entries it reads (fp32: 4 bytes each). Activations are ignored: they are small next
to the weights and stay in cache. The frame's roofline is the sum of its phases'.

The kernel floor (KernelFloor) is measured instead: every matrix product a phase
makes, run back to back with the engine's own kernels on random inputs of the same
shapes, and nothing else. Between floor and roofline lies the kernels' efficiency on
these shapes; between measured time and floor lies everything around the products
(norms, rope, attention, cache writes, Python). The floor's passes also raise the
peaks where they ran faster than the dedicated measurements (KernelFloor.raise_peaks).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..layers.blocks import ONEDNN_BATCH_HINT, Packed, onednn_enabled, packed_groups
from ..layers.engine_model import EngineModel


@dataclass
class Peaks:
    gflops: float     # fp32 matmul
    gbps: float       # weight streaming (matrix-vector over a matrix far larger than cache)


def _best_seconds(fn, repeats: int) -> float:
    fn(), fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def measure_peaks(repeats: int = 5) -> Peaks:
    """Best of several runs of a 1024^3 matmul and of a GEMV over a 256 MiB matrix, each
    with MKL and, where the engine uses it, with oneDNN-blocked weights: the peak is
    the fastest this machine was seen to go, so the engine's own kernels cannot beat it."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    w, x = torch.randn(16384, 4096), torch.randn(1, 4096)
    with torch.inference_mode():
        mm = [lambda: a @ b]
        mv = [lambda: torch.nn.functional.linear(x, w)]
        if onednn_enabled(w):
            b_blocked = torch.ops.mkldnn._reorder_linear_weight(b.t().contiguous(), ONEDNN_BATCH_HINT)
            w_blocked = torch.ops.mkldnn._reorder_linear_weight(w, ONEDNN_BATCH_HINT)
            mm.append(lambda: torch.ops.mkldnn._linear_pointwise(a, b_blocked, None, "none", [], ""))
            mv.append(lambda: torch.ops.mkldnn._linear_pointwise(x, w_blocked, None, "none", [], ""))
        best_mm = min(_best_seconds(f, repeats) for f in mm)
        best_mv = min(_best_seconds(f, repeats) for f in mv)
    return Peaks(gflops=2 * 1024 ** 3 / best_mm / 1e9, gbps=w.numel() * 4 / best_mv / 1e9)


def _params(module) -> int:
    return sum(p.numel() for p in module.parameters())


@dataclass
class Cost:
    flops: float = 0.0
    bytes: float = 0.0

    def __add__(self, o: "Cost") -> "Cost":
        return Cost(self.flops + o.flops, self.bytes + o.bytes)

    def __mul__(self, n: float) -> "Cost":
        return Cost(self.flops * n, self.bytes * n)

    def seconds(self, peaks: Peaks) -> float:
        return max(self.flops / (peaks.gflops * 1e9), self.bytes / (peaks.gbps * 1e9))


class FrameCosts:
    """Analytic costs of each phase for one model (weights in the model's dtype)."""

    def __init__(self, model: EngineModel):
        c = model.cfg
        self.cfg = c
        self.el = model.backbone.embed_tokens.weight.element_size()
        bb = model.backbone
        self.layer_params = _params(bb.layers)
        self.head_params = bb.head_weight().numel()
        self.vision_params = _params(model.vision) - model.vision.position_embedding.weight.numel()
        ex = model.expert
        # adaptive-norm weights are applied once per chunk (all steps' modulations at once)
        self.modulation_params = sum(_params(l.input_layernorm) + _params(l.post_attention_layernorm)
                                     for l in ex.layers) + _params(ex.norm)
        self.expert_params = _params(ex.layers) - self.modulation_params + _params(ex.norm) + \
            _params(ex.action_in_proj) + _params(ex.action_out_proj)
        self.q_width = c.backbone.num_heads * c.backbone.head_dim
        self.kv_per_token = 2 * c.backbone.depth * c.backbone.num_kv_heads * c.backbone.head_dim

    def _attn(self, queries: float, keys: float) -> float:
        """QK^T and AV over all layers for `queries` x `keys` pairs."""
        return 4 * queries * keys * self.q_width * self.cfg.backbone.depth

    def vision(self, images: int) -> Cost:
        v = self.cfg.vision
        t = v.tokens_per_image
        flops = images * (2 * self.vision_params * t + 4 * t * t * v.width * v.depth)
        return Cost(flops, self.vision_params * self.el if images else 0)

    def prefill(self, length: int) -> Cost:
        return Cost(2 * self.layer_params * length + self._attn(length, length),
                    self.layer_params * self.el)

    def action(self, prefix: int) -> Cost:
        e = self.cfg.expert
        per_step = Cost(2 * self.expert_params * e.horizon + self._attn(e.horizon, prefix + e.horizon),
                        (self.expert_params + prefix * self.kv_per_token) * self.el)
        once = Cost(2 * self.modulation_params * e.denoise_steps, self.modulation_params * self.el)
        return per_step * e.denoise_steps + once

    def admit(self, prefix: int, prompt: int, batch: int = 1) -> Cost:
        rows = prompt * batch
        return Cost(2 * self.layer_params * rows + self._attn(rows, prefix + prompt) + 2 * self.head_params * batch,
                    (self.layer_params + self.head_params + batch * prefix * self.kv_per_token) * self.el)

    def decode_step(self, context_lengths: list[int]) -> Cost:
        b, keys = len(context_lengths), sum(context_lengths)
        return Cost(2 * (self.layer_params + self.head_params) * b + self._attn(1, keys),
                    (self.layer_params + self.head_params + keys * self.kv_per_token) * self.el)


# a pass over at least this many weight bytes streams them from memory (4x the 32 MiB
# L3 of the dev machine), so its bytes/second is a bandwidth measurement
STREAMING_MIN_BYTES = 128 * 2 ** 20


class KernelFloor:
    """Measured seconds of each phase's matrix products alone (see the module docstring),
    with the same methods as FrameCosts. Each distinct product list is timed once
    (best of `repeats`) and cached."""

    def __init__(self, model: EngineModel, repeats: int = 3):
        self.cfg, self.repeats, self._cache = model.cfg, repeats, {}
        self.best_gflops = self.best_gbps = 0.0
        bb, ex = model.backbone, model.expert

        self.products = {
            "vision": packed_groups(model.vision), "backbone": packed_groups(bb.layers),
            "head": [bb._head], "expert": packed_groups(ex.layers),
            "modulations": [m.dense for l in ex.layers for m in (l.input_layernorm, l.post_attention_layernorm)]
                           + [ex.norm.dense]}
        self.dtype, self.device = model.dtype, model.device

    def _time(self, key: str, rows: int) -> float:
        """Best wall time of one pass over the products of `key` with `rows` input rows each."""
        if (key, rows) not in self._cache:
            products = self.products[key]
            inputs = [torch.randn(rows, p.in_features,
                                  dtype=self.dtype, device=self.device) for p in products]
            calls = [(p.matmul if isinstance(p, Packed) else p, x) for p, x in zip(products, inputs)]

            def run():
                for f, x in calls:
                    f(x)
                if self.device.type == "cuda":
                    torch.cuda.synchronize()
            with torch.inference_mode():
                seconds = _best_seconds(run, self.repeats)
            self._cache[key, rows] = seconds
            elements = sum(p.numel() if isinstance(p, Packed) else p.weight.numel() for p in products)
            weight_bytes = elements * torch.finfo(self.dtype).bits // 8
            self.best_gflops = max(self.best_gflops, 2 * rows * elements / seconds / 1e9)
            if weight_bytes >= STREAMING_MIN_BYTES:
                self.best_gbps = max(self.best_gbps, weight_bytes / seconds / 1e9)
        return self._cache[key, rows]

    def raise_peaks(self, peaks: Peaks) -> Peaks:
        """The peaks, raised to the fastest rates the passes timed so far reached: a
        roofline must not be beaten by the engine's own kernels."""
        return Peaks(max(peaks.gflops, self.best_gflops), max(peaks.gbps, self.best_gbps))

    def vision(self, images: int) -> float:
        return self._time("vision", images * self.cfg.vision.tokens_per_image) if images else 0.0

    def prefill(self, length: int) -> float:
        return self._time("backbone", length)

    def action(self, prefix: int) -> float:
        e = self.cfg.expert
        return (e.denoise_steps * self._time("expert", e.horizon)
                + self._time("modulations", e.denoise_steps))

    def admit(self, prefix: int, prompt: int, batch: int = 1) -> float:
        return self._time("backbone", prompt * batch) + self._time("head", batch)

    def decode_step(self, context_lengths: list[int]) -> float:
        b = len(context_lengths)
        return self._time("backbone", b) + self._time("head", b)
