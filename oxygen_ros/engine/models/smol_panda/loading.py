"""The smol-panda model from a checkpoint: SmolLM2-135M-Instruct's real weights and tokenizer
(the smollm2 family's GGUF cache), then the trained image encoder, projector and action
expert read over them (checkpoint.py), and the learned prompts (answer, narration) the
checkpoint has (learned_prompt.py)."""
from __future__ import annotations

import sys

from ...state_checks import check_state
from ..pi05.configuration import ModelConfig
from ..smollm2.gguf import ensure_cached, load_backbone_state
from ..smollm2.loading import _check_hparams
from ..smollm2.tokenizer import GGUFTokenizer
from . import learned_prompt
from .checkpoint import read_trained, weights_path
from .modeling import SmolPandaModel


def load_smol_panda(cfg: ModelConfig, checkpoint=None, gguf_path=None, progress=sys.stderr,
                    trained: bool = True):
    """(SmolPandaModel in eval mode, unpacked, fp32; GGUFTokenizer). trained=False leaves the
    vision encoder and expert at their PyTorch initialisation (training starts there)."""
    cached = ensure_cached(gguf_path, progress=progress)
    _check_hparams(cfg, cached.hparams(), cached.gguf)
    state = load_backbone_state(cached)
    model = SmolPandaModel(cfg)
    expected = {f"backbone.{k}": v.shape for k, v in model.backbone.state_dict().items()}
    check_state(expected, state, f"converted SmolLM2 weights {cached.weights}")
    model.backbone.load_state_dict({k[len("backbone."):]: v for k, v in state.items()}, strict=True,
                                   assign=True)
    if trained:
        path = weights_path(checkpoint)
        parts = read_trained(path, {k: v.shape for k, v in model.trained_state().items()})
        # copies into the fp32 parameters (a shipped fp16 file is upcast here)
        model.load_state_dict(parts, strict=False)
        for name, rows in learned_prompt.read(path.parent, cfg.backbone.width).items():
            model.set_learned_prompt(rows, name)
    return model.eval(), GGUFTokenizer.from_json(cached.tokenizer)
