"""The batched decode step replayed from CUDA graphs.

One decode step of a small batch is hundreds of tiny kernels, so on a GPU its launch
cost rivals its work. `DecodeStep` runs `EngineModel.decode` on static input buffers and,
on CUDA, replays one captured graph per (row bucket, read-length bucket):
- the live requests are padded up to a power of two (at most every pool slot); a
  padding row decodes a stale token in a free slot, which the next prefill overwrites;
- the read length is rounded up to a multiple of `bucket`; the decode mask already
  hides every entry past a row's own length.
The KV pool is allocated once, so its views are stable addresses for the graphs.
`capture_all()` records every graph up front (the engine does so when it is built), so
no capture ever stalls a control frame.

Without CUDA (or with graphs=False) the same static-buffer path runs eagerly with no
padding and no rounding unless asked for, which is how the CPU tests exercise both.
"""
from __future__ import annotations

import math

import torch

from .kv_pool import KVPool
from .layers.engine_model import EngineModel


class DecodeStep:
    def __init__(self, model: EngineModel, pool: KVPool, graphs: bool = True, bucket: int | None = None,
                 pad_rows: bool | None = None):
        self.model, self.pool = model, pool
        self.graphs = graphs and model.device.type == "cuda" and model.supports_graphs
        # eagerly, exact shapes are cheapest; graphs want few distinct shapes
        self.bucket = bucket or (128 if self.graphs else 1)
        self.pad_rows = self.graphs if pad_rows is None else pad_rows
        self.max_rows = pool.capacity + 1
        self._ids = torch.zeros(self.max_rows, dtype=torch.long, device=model.device)
        self._lengths = torch.zeros(self.max_rows, dtype=torch.long, device=model.device)
        self._captured: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._memory = torch.cuda.graph_pool_handle() if self.graphs else None

    @property
    def captured(self) -> int:
        return len(self._captured)

    def row_bucket(self, rows: int) -> int:
        return min(1 << (rows - 1).bit_length(), self.max_rows) if self.pad_rows else rows

    def read_bucket(self, read_len: int) -> int:
        return min(math.ceil(read_len / self.bucket) * self.bucket, self.pool.max_len)

    def shapes(self) -> list[tuple[int, int]]:
        """Every (rows, read length) a decode step can run with."""
        rows = sorted({self.row_bucket(b) for b in range(1, self.max_rows + 1)})
        spans = sorted({self.read_bucket(r) for r in range(1, self.pool.max_len + 1, self.bucket)}
                       | {self.pool.max_len})
        return [(r, s) for r in rows for s in spans]

    def capture_all(self) -> None:
        """Capture every graph now. Only while no request is live: the captures' warm-up
        runs write K/V at position 0 of the first slots."""
        self._ids.zero_()
        self._lengths.zero_()
        for rows, span in self.shapes():
            if (rows, span) not in self._captured:
                self._capture(rows, span)

    def __call__(self, ids: torch.Tensor, lengths: torch.Tensor, read_len: int) -> torch.Tensor:
        """Same contract as EngineModel.decode over slots 0..B-1; returns a fresh tensor [B]."""
        b = ids.shape[0]
        rows, span = self.row_bucket(b), self.read_bucket(read_len)
        self._ids[:b].copy_(ids)
        self._lengths[:b].copy_(lengths)
        if not self.graphs:
            return self.model.decode(self._ids[:rows], self.pool, self._lengths[:rows], span)[:b]
        entry = self._captured.get((rows, span))
        if entry is None:
            entry = self._capture(rows, span)
        graph, out = entry
        graph.replay()
        return out[:b].clone()    # graphs share one memory pool: the next replay reuses `out`

    def _capture(self, rows: int, span: int):
        def run():
            return self.model.decode(self._ids[:rows], self.pool, self._lengths[:rows], span)
        # Warm-up on a side stream, as capture requires. It repeats exactly the K/V writes
        # the replay will make, so it changes nothing.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # thread_local: the node's other threads may use CUDA while this one captures
        with torch.cuda.graph(graph, pool=self._memory, capture_error_mode="thread_local"):
            out = run()
        self._captured[(rows, span)] = (graph, out)
        return graph, out
