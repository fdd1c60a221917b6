"""What every model the engine runs shares (VLAModel, Qwen3VLVLA): its device and dtype, the
packed weights, the action schedule, the greedy head, and the calls outside code uses beside
the engine's (`text_prefix`, `decode_logits`). Subclasses have `cfg` (with an `expert`
config, None for a language-only model), `backbone` (layers/decoder.Decoder), `expert` (the
first action head, or None) and `decode_hidden` (one decode step's hidden states)."""
from __future__ import annotations

import copy

import torch
from torch import nn

from .blocks import PACK_AFTER_COPY, onednn_enabled, packed_groups
from .mapped_weights import copy_out, mappings_of, move_to_file, reclaim, release_free_memory


class EngineModel(nn.Module):
    supports_graphs = True      # the CUDA-graph prefill, chunk and decode steps (chunk_graphs, decode_graphs)
    @property
    def device(self) -> torch.device:
        return self.backbone.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.backbone.embed_tokens.weight.dtype

    def to(self, *args, **kwargs):
        out = super().to(*args, **kwargs)
        self.backbone.rope.to(self.device)
        return out

    def pack_weights(self):
        """Lay out every projection for fast inference, in place. Call after the final
        weights, dtype and device are set. Each weight stays resident once (issue 44):
        where oneDNN runs, a group's products read its blocked copy alone (the expert's,
        for RTC's backward and the native expert too: Packed(dense=False)) and the layers'
        own weights, which only state_dict, copies and stale-copy fallbacks read, stay on a
        file: the one they are mapped from, or one of their own (mapped_weights.py); the
        tied token embedding too, whose rows the decode step looks up a page at a time.
        Elsewhere (GPU, other dtypes, small matrices) the packed dense matrix is the copy."""
        groups = packed_groups(self)
        on_blocked = {id(l.weight) for g in groups if onednn_enabled(g.linears[0].weight) for l in g.linears}
        mapped = copy_out(self, left_to_file=on_blocked)
        mapped += move_to_file(self, on_blocked)
        for group in groups:
            group.pack(dense=False)
        reclaim(mapped)
        release_free_memory()
        return self

    def __deepcopy__(self, memo):
        """nn.Module's deep copy, then a packed model's copy (the parallel baseline's second
        model) is packed as pack_weights does: its weights resident once too. Copying read
        this model's weights from their file: those pages go back."""
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        packed = any(g.is_packed for g in packed_groups(self))
        if packed:
            memo[id(PACK_AFTER_COPY)] = True      # the groups are packed once, by pack_weights below
        new.__setstate__(copy.deepcopy(self.__getstate__(), memo))
        memo.pop(id(PACK_AFTER_COPY), None)
        if packed:
            new.pack_weights()
            reclaim(mappings_of(self.parameters()))
        return new

    def set_action_schedule(self, horizon: int | None = None, denoise_steps: int | None = None) -> None:
        """Change the first expert's chunk horizon or its number of Euler steps (neither is
        a weight shape)."""
        if self.expert is None:
            raise ValueError(f"{self.cfg.name} has no action head (a language-only model): no action schedule")
        kw = {k: v for k, v in (("horizon", horizon), ("denoise_steps", denoise_steps)) if v is not None}
        if any(v < 1 for v in kw.values()):
            raise ValueError(f"horizon and denoise_steps must be >= 1, got {kw}")
        self.cfg = self.cfg.with_expert(**kw)
        self.expert.cfg = self.cfg.expert

    def weight_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.parameters())

    def greedy_next(self, hidden_rows: torch.Tensor) -> torch.Tensor:
        return self.backbone.logits(hidden_rows).argmax(dim=-1)

    # -- calls for outside code (scripts, tests, engine/generate.py); the scheduler uses none --
    def text_prefix(self, ids: list[int]):
        """What `prefill` takes for a prompt of token ids alone (no camera frames): here its
        token embeddings [1, L, W]; Qwen3-VL builds its Prefix."""
        return self.backbone.embed(torch.tensor([list(ids)], dtype=torch.long, device=self.device))

    def decode_logits(self, ids: torch.Tensor, pool, lengths: torch.Tensor, slots=None,
                      read_len: int | None = None) -> torch.Tensor:
        """`decode` for any pool slots, returning the logits [B, vocab] instead of the greedy
        tokens: row i's token ids[i] is written at lengths[i] of slot slots[i] (distinct pool
        slots, the staging slot included; None: slots 0..B-1, as decode) and attends over
        that slot's [0, lengths[i]]. Reads the rows by gather (a copy), so it is for outside
        code (sampling, scoring); the engine decodes its dense live slots with `decode`."""
        b = ids.shape[0]
        rows = slice(0, b) if slots is None else self._slot_rows(pool, slots, b)
        return self.backbone.logits(self.decode_hidden(ids, pool, lengths, read_len, rows)[:, 0])

    def _slot_rows(self, pool, slots, rows: int) -> torch.Tensor:
        """`slots` (ints) as a LongTensor on the device, checked: one per row, distinct, in the pool."""
        values = [int(s) for s in slots]
        n = pool.k.shape[1]
        if len(values) != rows or len(set(values)) != rows or not all(0 <= s < n for s in values):
            raise ValueError(f"slots must be {rows} distinct pool slots in 0..{n - 1}, got {values}")
        return torch.tensor(values, dtype=torch.long, device=self.device)

    def _layer_buffer(self, length: int) -> torch.Tensor:
        """Room for one prefill's per-layer hidden states [depth + 1, length, width]."""
        bb = self.cfg.backbone
        return torch.empty(bb.depth + 1, length, bb.width, dtype=self.dtype, device=self.device)
