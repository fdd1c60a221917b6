"""What every model the engine runs shares (VLAModel, Qwen3VLVLA): its device and dtype, the
packed weights, the action schedule, the greedy head. Subclasses have `cfg` (with an
`expert` config), `backbone` (model/decoder.Decoder) and `expert` (the first action head)."""
from __future__ import annotations

import torch
from torch import nn

from .blocks import packed_groups


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
        """Lay out every projection for fast inference, in place (no extra memory). Call
        after the final weights, dtype and device are set."""
        for group in packed_groups(self):
            group.pack()
        return self

    def set_action_schedule(self, horizon: int | None = None, denoise_steps: int | None = None) -> None:
        """Change the first expert's chunk horizon or its number of Euler steps (neither is
        a weight shape)."""
        kw = {k: v for k, v in (("horizon", horizon), ("denoise_steps", denoise_steps)) if v is not None}
        if any(v < 1 for v in kw.values()):
            raise ValueError(f"horizon and denoise_steps must be >= 1, got {kw}")
        self.cfg = self.cfg.with_expert(**kw)
        self.expert.cfg = self.cfg.expert

    def weight_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.parameters())

    def greedy_next(self, hidden_rows: torch.Tensor) -> torch.Tensor:
        return self.backbone.logits(hidden_rows).argmax(dim=-1)
