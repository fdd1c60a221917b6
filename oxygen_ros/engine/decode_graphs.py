"""The batched decode step replayed from CUDA graphs.

One decode step of a small batch is hundreds of tiny kernels, so on a GPU its launch
cost rivals its work. `DecodeStep` runs `VLAModel.decode` on static input buffers and,
on CUDA, captures one graph per (live requests, read-length bucket) the first time that
pair occurs and replays it after. The read length is rounded up to a multiple of
`bucket` (the decode mask already hides every entry past a row's own length), so a
request crossing a bucket edge costs one capture and the steady state only replays.
The KV pool is allocated once, so its views are stable addresses for the graphs.

Without CUDA (or with graphs=False) the same static-buffer path runs eagerly with no
rounding unless a bucket is given, which is how the CPU tests exercise the bucketing
and buffer handling.
"""
from __future__ import annotations

import math

import torch

from .kv_pool import KVPool
from .model import VLAModel


class DecodeStep:
    def __init__(self, model: VLAModel, pool: KVPool, graphs: bool = True, bucket: int | None = None):
        self.model, self.pool = model, pool
        self.graphs = graphs and model.device.type == "cuda"
        # eagerly, reading the exact length is cheapest; graphs want few distinct shapes
        self.bucket = bucket or (64 if self.graphs else 1)
        rows = pool.capacity + 1
        self._ids = torch.zeros(rows, dtype=torch.long, device=model.device)
        self._lengths = torch.zeros(rows, dtype=torch.long, device=model.device)
        self._captured: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._memory = torch.cuda.graph_pool_handle() if self.graphs else None

    @property
    def captured(self) -> int:
        return len(self._captured)

    def read_bucket(self, read_len: int) -> int:
        return min(math.ceil(read_len / self.bucket) * self.bucket, self.pool.max_len)

    def __call__(self, ids: torch.Tensor, lengths: torch.Tensor, read_len: int) -> torch.Tensor:
        """Same contract as VLAModel.decode over slots 0..B-1; returns a fresh tensor [B]."""
        b = ids.shape[0]
        span = self.read_bucket(read_len)
        self._ids[:b].copy_(ids)
        self._lengths[:b].copy_(lengths)
        if not self.graphs:
            return self.model.decode(self._ids[:b], self.pool, self._lengths[:b], span)
        entry = self._captured.get((b, span))
        if entry is None:
            entry = self._capture(b, span)
        graph, out = entry
        graph.replay()
        return out.clone()        # graphs share one memory pool: the next replay reuses `out`

    def _capture(self, b: int, span: int):
        def run():
            return self.model.decode(self._ids[:b], self.pool, self._lengths[:b], span)
        # Warm-up on a side stream, as capture requires. It repeats exactly the write of
        # the current token's K/V that the replay will make, so it changes nothing.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._memory):
            out = run()
        self._captured[(b, span)] = (graph, out)
        return graph, out
