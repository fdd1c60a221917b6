"""The frame's prefill and its whole action chunk replayed from CUDA graphs.

The action expert's chunk is denoise steps x layers x ~25 small kernels (π0.5: ~4,500
launches, more than a 30 Hz period at 5-10 us each). `ChunkStep` runs the prefill and
the chunk on static buffers and, on CUDA, replays two graphs per prefix-length bucket
(one for the prefill, one for all denoise steps):
- the prefix is copied into a static buffer, zero-padded to its length rounded up to a
  multiple of `bucket` (Lb, at most the slot length minus the action horizon), and its
  true length L goes in a device scalar;
- the prefill runs over Lb tokens with a mask in which the L real tokens see only real
  tokens (and, for a causal prefix, only earlier ones): their K/V and hidden states are
  those of an unpadded prefill. Padding tokens see everything, so no softmax row is
  empty (what an all-masked row yields depends on the attention backend, NaN in some,
  and a NaN in the padding's K/V would poison even masked reads: 0 * NaN = NaN);
- the expert writes its K/V at [Lb, Lb + H) and reads [0, Lb + H) under a mask hiding
  the padding [L, Lb); its rope positions are L..L+H-1 from the device scalar, so the
  chunk is the unpadded one's;
- everything that needs the host (the time conditioning of every denoise step) is
  computed once, outside the graphs; the noise is an input buffer.
The prefix goes into the pool's reserved extra slot (index `capacity`), which no live
request ever holds, so one graph per bucket serves every frame; admitted requests fork
the prefix's real L entries from it, and their prompts overwrite the padding from L on.
Padded decode rows may scribble in that slot after admission; the next prefill and
chunk write every entry they read before reading it.

`capture_all()` records every graph when the engine is built (at configure), never in a
control frame. Without CUDA (or with graphs=False) and no `bucket`, calls go straight to
`EngineModel.prefill` / `sample_actions` in the staging slot (`fused`: the native sampling); with a
`bucket` the same static-buffer path runs eagerly, which is how the CPU tests exercise it.
"""
from __future__ import annotations

import math

import torch

from .kv_pool import KVPool
from .layers.engine_model import EngineModel
from .transfer import to_device


class ChunkStep:
    def __init__(self, model: EngineModel, pool: KVPool, graphs: bool = True, bucket: int | None = None,
                 fused: bool = False):
        self.model, self.pool, self.fused = model, pool, fused
        self.graphs = graphs and model.device.type == "cuda" and model.supports_graphs
        self.static = self.graphs or bucket is not None
        self._frame_prefix = None      # the last prefill's prefix (a head may read more than its K/V)
        self.bucket = bucket or (64 if self.graphs else 1)
        self._captured: dict[tuple[str, int], tuple[torch.cuda.CUDAGraph, torch.Tensor | None]] = {}
        self._memory = torch.cuda.graph_pool_handle() if self.graphs else None
        self._schedule_key = None
        if self.static:
            dev, dt = model.device, model.dtype
            self._prefix = torch.zeros(1, pool.max_len, model.cfg.backbone.width, dtype=dt, device=dev)
            self._plen = torch.zeros((), dtype=torch.long, device=dev)
            self._set_schedule()

    @property
    def captured(self) -> int:
        return len(self._captured)

    @property
    def slot(self) -> int:
        """Where the frame's prefix goes: the reserved extra slot on the static path (never
        live, so its addresses never change), else the pool's staging slot."""
        return self.pool.capacity if self.static else self.pool.staging_slot

    def _horizon(self) -> int:
        return self.model.cfg.expert.horizon

    def prefix_bucket(self, length: int) -> int:
        """The padded length a prefix of `length` tokens runs with."""
        top = self.pool.max_len - self._horizon()
        if not 1 <= length <= top:
            raise ValueError(f"prefix of {length} tokens: the KV slot ({self.pool.max_len}) must also "
                             f"hold the action horizon ({self._horizon()})")
        return min(math.ceil(length / self.bucket) * self.bucket, top)

    def buckets(self) -> list[int]:
        """Every padded prefix length a frame can run with."""
        top = self.pool.max_len - self._horizon()
        return sorted({self.prefix_bucket(n) for n in range(1, top + 1, self.bucket)} | {top})

    # -- the frame's two calls -----------------------------------------------------------
    def prefill(self, prefix: torch.Tensor) -> None:
        """Same as EngineModel.prefill(prefix, pool, self.slot), hidden states not returned."""
        self._frame_prefix = prefix
        if not self.static:
            self.model.prefill(prefix, self.pool, self.slot)
            return
        self._set_schedule()
        length = prefix.shape[1]
        span = self.prefix_bucket(length)
        self._prefix[:, :length].copy_(prefix)
        self._prefix[:, length:span].zero_()
        self._plen.fill_(length)
        self._run("prefill", span)
        self.pool.lengths[self.slot] = length

    def sample(self, prefix_len: int, noise, rtc=None) -> torch.Tensor:
        """Same as EngineModel.sample_actions(pool, self.slot, prefix_len, noise, rtc=rtc): a fresh
        [H, D]. A guide that guides anything runs eagerly, never from a graph: the RTC
        sampling reads the real prefix [0, L) of the slot only and keeps the action tokens'
        K/V to itself, so the bucket's padding past L never matters."""
        if not self.static or (rtc is not None and rtc.active(self._horizon())):
            return self.model.sample_actions(self.pool, self.slot, prefix_len, noise, self.fused, rtc,
                                             prefix=self._frame_prefix)
        self._set_schedule()
        e = self.model.cfg.expert
        span = self.prefix_bucket(prefix_len)
        self._plen.fill_(prefix_len)
        self._noise.copy_(to_device(noise, self.model.device).reshape(1, e.horizon, e.action_dim))
        out = self._run("chunk", span)
        return out.clone()     # graphs share one memory pool: the next replay reuses `out`

    # -- graphs ------------------------------------------------------------------------------
    def capture_all(self) -> None:
        """Capture the prefill and chunk graphs of every bucket now (at engine build).
        The captures' warm-up runs write only the reserved slot, which no request holds."""
        self._plen.fill_(1)
        for span in self.buckets():
            for kind in ("prefill", "chunk"):
                if (kind, span) not in self._captured:
                    self._capture(kind, span)

    def _body(self, kind: str):
        return self._prefill_graph_body if kind == "prefill" else self._chunk_graph_body

    def _run(self, kind: str, span: int):
        if not self.graphs:
            return self._body(kind)(span)
        entry = self._captured.get((kind, span))
        if entry is None:
            entry = self._capture(kind, span)
        graph, out = entry
        graph.replay()
        return out

    def _capture(self, kind: str, span: int):
        fn = self._body(kind)
        with torch.no_grad():
            side = torch.cuda.Stream()     # warm-up on a side stream, as capture requires
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fn(span)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # thread_local: the node's other threads may use CUDA while this one captures
            with torch.cuda.graph(graph, pool=self._memory, capture_error_mode="thread_local"):
                out = fn(span)
        self._captured[(kind, span)] = (graph, out)
        return graph, out

    # -- what the graphs hold (device work only, on the static buffers) --------------------------
    def _set_schedule(self) -> None:
        """The chunk's static inputs for the current horizon and denoise steps; a change
        (set_action_schedule after the build) drops the chunk graphs, which are then
        captured again on first use."""
        e = self.model.cfg.expert
        key = (e.horizon, e.action_dim, e.denoise_steps)
        if key == self._schedule_key:
            return
        if self._schedule_key is not None:
            self._captured.clear()     # the prefill's buckets depend on the horizon too
        dev = self.model.device
        with torch.no_grad():
            self._schedule = self.model.expert.schedule(e.denoise_steps)
            self._noise = torch.zeros(1, e.horizon, e.action_dim, dtype=self.model.dtype, device=dev)
            self._offsets = torch.arange(e.horizon, device=dev)
        self._schedule_key = key

    def _prefill_graph_body(self, span: int) -> None:
        keys = torch.arange(span, device=self.model.device)
        real = keys < self._plen
        visible = real[None, :] | ~real[:, None]          # real rows see real keys, padding all
        if self.model.cfg.prefix_attention == "causal":
            visible = visible & (keys[None, :] <= keys[:, None])
        s = self.slot
        self.model.backbone(self._prefix[:, :span], keys[None], self.pool, slice(s, s + 1), 0, span,
                            visible[None, None])

    def _chunk_graph_body(self, span: int) -> torch.Tensor:
        e = self.model.cfg.expert
        keys = torch.arange(span + e.horizon, device=self.model.device)
        visible = (keys < self._plen) | (keys >= span)   # the prefix's padding stays hidden
        mask = visible.expand(e.horizon, -1)[None, None]
        rope = self.model.backbone.rope.tables((self._plen + self._offsets)[None], self.model.dtype)
        x = self.model.expert.integrate(self._noise, self._schedule, rope, self.pool, self.slot, span, mask)
        return x[0]
