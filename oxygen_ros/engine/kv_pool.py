"""The unified KV pool: every layer's keys and values for every live request, allocated once.

Layout per layer: [slots, kv_heads, max_len, head_dim]. Live requests occupy slots
0..live-1 with no holes, so a batched decode step reads `k[layer][:live, :, :max_len]`
as a view (no gather, no concatenation). The slot at index `live` is where the next
frame's prefix is prefilled; the action expert writes its own tokens' K/V just past
the prefix in that slot, so the prefix itself is never copied or mutated. One slot
beyond the request capacity is reserved so a frame can prefill even when the pool
is full.

`offsets[slot]` is the position offset of the slot's prefix (Qwen3-VL's rope_delta: a
token at cache index i has position i + offset; 0 for 1-D RoPE models): it travels with
the slot's K/V when a prefix is forked or a slot moves, so each request keeps its own.

`hidden` (when the profile has a consumer of them, e.g. StarVLA's head): the current
frame's prefix hidden states per layer, [depth + 1, max_len, width], written by the
prefill: the embeddings, then every layer's output (see Decoder.forward).
Allocated once here; language requests never fork it (they need only K/V).
"""
from __future__ import annotations

import torch


class PoolFullError(RuntimeError):
    pass


class KVPool:
    def __init__(self, depth: int, capacity: int, max_len: int, kv_heads: int, head_dim: int,
                 dtype=torch.float32, device="cpu", hidden_width: int = 0):
        if capacity < 1 or max_len < 1:
            raise ValueError("KV pool needs capacity >= 1 and max_len >= 1")
        self.capacity = capacity
        self.max_len = max_len
        shape = (depth, capacity + 1, kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.lengths = [0] * (capacity + 1)   # valid KV entries per slot
        self.offsets = torch.zeros(capacity + 1, dtype=torch.long, device=device)
        self.hidden = (torch.zeros(depth + 1, max_len, hidden_width, dtype=dtype, device=device)
                       if hidden_width else None)
        self.live = 0

    @property
    def bytes_total(self) -> int:
        extra = 0 if self.hidden is None else self.hidden.numel() * self.hidden.element_size()
        return 2 * self.k.numel() * self.k.element_size() + extra

    @property
    def bytes_per_token(self) -> int:
        depth, _, kvh, _, hd = self.k.shape
        return 2 * depth * kvh * hd * self.k.element_size()

    def bytes_in_use(self) -> int:
        return sum(self.lengths[: self.live]) * self.bytes_per_token

    @property
    def free_slots(self) -> int:
        return self.capacity - self.live

    @property
    def staging_slot(self) -> int:
        """Where the current frame's prefix goes: the first slot no request holds."""
        return self.live

    def claim(self, length: int) -> int:
        """Turn the staging slot into a live request slot holding `length` entries."""
        if self.live >= self.capacity:
            raise PoolFullError(f"KV pool full ({self.capacity} slots)")
        slot = self.live
        self.lengths[slot] = length
        self.live += 1
        return slot

    def copy_prefix(self, src: int, dst: int, length: int) -> None:
        """Fork a prefix into another slot (several requests admitted in one frame)."""
        self.k[:, dst, :, :length].copy_(self.k[:, src, :, :length])
        self.v[:, dst, :, :length].copy_(self.v[:, src, :, :length])
        self.lengths[dst] = length
        self.offsets[dst] = self.offsets[src]

    def release(self, slot: int) -> int | None:
        """Free a live slot; the last live slot moves into the hole to keep slots dense.

        Returns the index of the slot that moved into `slot` (or None if none did).
        """
        if not 0 <= slot < self.live:
            raise IndexError(f"slot {slot} is not live")
        last = self.live - 1
        moved = None
        if slot != last:
            n = self.lengths[last]
            self.k[:, slot, :, :n].copy_(self.k[:, last, :, :n])
            self.v[:, slot, :, :n].copy_(self.v[:, last, :, :n])
            self.lengths[slot] = n
            self.offsets[slot] = self.offsets[last]
            moved = last
        self.lengths[last] = 0
        self.live -= 1
        return moved
