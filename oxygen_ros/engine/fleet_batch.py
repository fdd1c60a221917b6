"""Several robots' frame prefixes prefilled in one batch, their action chunks sampled in one batch.

Prefixes of different lengths L_i are right-padded to the longest, Lb, stacked, and
prefilled in one call into consecutive pool slots (row i in slot first + i) under a
per-row mask: row i's L_i real tokens see only its real tokens (and, for a causal
prefix, only earlier ones), at positions 0..L_i-1, so their K/V are those of robot i's
prefix prefilled alone. Padding tokens see everything: no softmax row is empty, so the
padding's K/V hold no NaN (which even a masked read would spread: 0 * NaN = NaN). This
is chunk_graphs.py's rule for one prefix padded to its bucket, with a length per row.

The action expert then denoises every chunk in one batch: row i's action tokens write
their K/V at [Lb, Lb + H) of its slot and read [0, Lb + H) under a mask hiding its
padding [L_i, Lb), with rope positions L_i..L_i+H-1, so each chunk is the one robot i's
prefix alone gives. A robot whose RTC guide guides anything is sampled on its own after
the batched prefill (the guided sampling reads the slot's real prefix [0, L_i) only and
writes nothing, so the padding never matters).

The batch needs a model whose prefix is an embedding tensor [1, L, W] and whose first
expert exposes `integrate` (those with `supports_graphs`: π0.5 and its kin), with no
further experts and no prefix hidden states kept in the pool (each frame has one such
buffer). Other models (Qwen3-VL's) get each robot's prefill and chunk in turn: the same
results, not batched; `batched` says which.
"""
from __future__ import annotations

import torch

from .kv_pool import KVPool
from .layers.engine_model import EngineModel
from .transfer import to_device


class FleetBatch:
    def __init__(self, model: EngineModel, pool: KVPool, fused: bool = False):
        self.model, self.pool, self.fused = model, pool, fused
        self.batched = (model.supports_graphs and hasattr(model.expert, "integrate")
                        and not model.cfg.extra_experts and pool.hidden is None)

    def horizon(self) -> int:
        return self.model.cfg.expert.horizon

    def check_length(self, length: int) -> None:
        """ValueError unless a prefix of `length` tokens and the action horizon fit a slot."""
        if not 1 <= length <= self.pool.max_len - self.horizon():
            raise ValueError(f"prefix of {length} tokens: the KV slot ({self.pool.max_len}) must also "
                             f"hold the action horizon ({self.horizon()})")

    # -- one robot (the fallback, and guided chunks) ----------------------------------------
    def prefill_one(self, prefix, slot: int) -> None:
        self.model.prefill(prefix, self.pool, slot)

    def sample_one(self, prefix, slot: int, noise: torch.Tensor, rtc=None) -> torch.Tensor:
        """Robot's chunk [H, D] from the prefix already in `slot` (sample_actions)."""
        return self.model.sample_actions(self.pool, slot, prefix.shape[1], noise, self.fused, rtc,
                                         prefix=prefix)

    # -- the batch ----------------------------------------------------------------------------
    def prefill(self, prefixes: list[torch.Tensor], first_slot: int) -> int:
        """Every prefix [1, L_i, W] into slots first_slot.. in one call; returns Lb."""
        lengths = [p.shape[1] for p in prefixes]
        for n in lengths:
            self.check_length(n)
        span, dev = max(lengths), self.model.device
        x = torch.zeros(len(prefixes), span, prefixes[0].shape[2], dtype=self.model.dtype, device=dev)
        for row, p in enumerate(prefixes):
            x[row, : p.shape[1]] = p[0]
        keys = torch.arange(span, device=dev)
        real = keys[None, :] < to_device(lengths, dev)[:, None]                  # [N, Lb]
        visible = real[:, None, :] | ~real[:, :, None]        # real rows see real keys, padding all
        if self.model.cfg.prefix_attention == "causal":
            visible = visible & (keys[None, :] <= keys[:, None])
        rows = slice(first_slot, first_slot + len(prefixes))
        self.model.backbone(x, keys[None].expand(len(prefixes), span), self.pool, rows, 0, span,
                            visible[:, None])
        for row, n in enumerate(lengths):
            self.pool.lengths[first_slot + row] = n
        return span

    def sample(self, lengths: list[int], span: int, noises: list[torch.Tensor], first_slot: int) -> torch.Tensor:
        """Every row's chunk [N, H, D] from the prefixes `prefill` left (padded to `span`)."""
        e, dev = self.model.cfg.expert, self.model.device
        n = len(lengths)
        noise = torch.stack([to_device(z, dev, self.model.dtype).reshape(e.horizon, e.action_dim) for z in noises])
        plen = to_device(lengths, dev)
        keys = torch.arange(span + e.horizon, device=dev)
        visible = (keys[None, :] < plen[:, None]) | (keys[None, :] >= span)      # padding hidden
        mask = visible[:, None, None, :].expand(n, 1, e.horizon, span + e.horizon)
        positions = plen[:, None] + torch.arange(e.horizon, device=dev)[None, :]
        rope = self.model.backbone.rope.tables(positions, self.model.dtype)
        schedule = self.model.expert.schedule(e.denoise_steps)
        return self.model.expert.integrate(noise, schedule, rope, self.pool, slice(first_slot, first_slot + n),
                                           span, mask)
