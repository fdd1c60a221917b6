"""Qwen3-VL checkpoint tensors -> our Decoder's parameter names (the text model).

transformers' Qwen3VLForConditionalGeneration keeps the text model under
`model.language_model.` (embed_tokens, layers.N.{input_layernorm,
post_attention_layernorm}, layers.N.self_attn.{q,k,v,o}_proj and {q,k}_norm,
layers.N.mlp.{gate,up,down}_proj, norm) and the head as `lm_head.weight` (absent or
equal to the embedding where tied). Our Decoder uses the same names below the prefix.
The vision tower (`model.visual.`) is not read here.
"""
from __future__ import annotations

import re

import torch

from .loading import WeightMismatchError, check_state

TEXT_PREFIX = "model.language_model."
HEAD_NAME = "lm_head.weight"

_LAYER = re.compile(r"layers\.\d+\.(input_layernorm|post_attention_layernorm|self_attn\.[qkvo]_proj"
                    r"|self_attn\.[qk]_norm|mlp\.(gate|up|down)_proj)\.weight")
_TOP = {"embed_tokens.weight", "norm.weight"}


def text_state_dict(hf_sd: dict[str, torch.Tensor], tie_embeddings: bool = True) -> dict[str, torch.Tensor]:
    """Our Decoder's state dict from a Qwen3-VL checkpoint's (transformers names).

    Tensors outside the text model (vision, other heads) are skipped; a tensor under the
    text prefix that our decoder has no place for (a bias, say) is a WeightMismatchError
    rather than silently dropped. With `tie_embeddings` the head is the embedding and
    `lm_head.weight` is left out; without it, it is required.
    """
    out: dict[str, torch.Tensor] = {}
    strange = []
    for name, tensor in hf_sd.items():
        if name.startswith(TEXT_PREFIX):
            local = name[len(TEXT_PREFIX):]
            if local in _TOP or _LAYER.fullmatch(local):
                out[local] = tensor
            else:
                strange.append(name)
        elif name == HEAD_NAME and not tie_embeddings:
            out["lm_head.weight"] = tensor
    if strange:
        raise WeightMismatchError(f"Qwen3-VL text tensors with no place in our decoder: "
                                  f"{', '.join(sorted(strange)[:8])}")
    if not tie_embeddings and "lm_head.weight" not in out:
        raise WeightMismatchError("untied Qwen3-VL checkpoint without lm_head.weight")
    return out


@torch.no_grad()
def load_text_weights(decoder: torch.nn.Module, hf_sd: dict[str, torch.Tensor]) -> torch.nn.Module:
    """Copy a Qwen3-VL checkpoint's text model into `decoder` (a Decoder built from
    DecoderConfig.from_hf_text_config) in place, names and shapes strictly checked;
    values are cast to the decoder's dtype. Pack the weights after (VLAModel.pack_weights
    or layers.packed_groups), the copies keep packed views current either way."""
    sd = text_state_dict(hf_sd, tie_embeddings=decoder.cfg.tie_embeddings)
    params = dict(decoder.named_parameters())
    check_state({k: p.shape for k, p in params.items()}, sd, "Qwen3-VL text model")
    for name, tensor in sd.items():
        params[name].copy_(tensor)
    return decoder
