"""Xiaomi-Robotics-0 checkpoints: how they store the Qwen3-VL model beside the DiT head
(XR0_LAYOUT, for the Qwen3-VL reader in models/qwen3vl/checkpoint.py), and the whole model.

Xiaomi-Robotics-0, `architectures` ["MiBoTForActionGeneration"] (the class in
  the checkpoint's own modeling_mibot.py). That class holds the Qwen3-VL model as
  `self.vlm` (so `vlm.model.language_model.*`, `vlm.model.visual.*`, `vlm.lm_head.weight`),
  its Qwen3-VL config as `config.vlm_config` (text_config, vision_config, image_token_id,
  ...), and the action head at the top level: `dit.layers.N.*`, `sink.weight`,
  `t_embedder.mlp.{0,2}.weight`, and MLPProjector modules whose nn.Sequential is called
  `layers`: `state_projector.layers.{0,2}`, `action_projector.layers.{0,2}`,
  `action_output_layer.layers.{0,2}`, `t_projector.layers.0`. Our XR0Head keeps the
  Sequential without the `.layers` level, which is the one rename (HEAD_RENAME).
  The model_type string of MiBoTConfig was not readable; any config with `vlm_config`
  and `dit_config`, or a model_type starting with "mibot", counts as XR-0 as well.
"""
from __future__ import annotations

import re

from ..qwen3vl.checkpoint import (HeadLayout, checkpoint_kind as _kind, inspect_qwen3vl_checkpoint, load_qwen3vl,
                                  read_config, read_qwen3vl_checkpoint)
from ..qwen3vl.errors import Qwen3VLCheckpointError
from .configuration import XR0HeadConfig

ARCHITECTURE = "MiBoTForActionGeneration"
HEAD_MODULES = ("dit.", "sink.", "t_embedder.", "t_projector.", "state_projector.",
                "action_projector.", "action_output_layer.")
_PROJECTORS = "state_projector|action_projector|action_output_layer|t_projector"
HEAD_RENAME = re.compile(rf"^({_PROJECTORS})\.layers\.")


def is_xr0(config: dict) -> bool:
    arch = set(config.get("architectures") or ())
    return (ARCHITECTURE in arch or str(config.get("model_type") or "").lower().startswith("mibot")
            or ("vlm_config" in config and "dit_config" in config))


XR0_LAYOUT = HeadLayout(
    kind="xr0", detect=is_xr0, vlm_root="vlm.", vlm_config_key="vlm_config", modules=HEAD_MODULES,
    to_local=lambda name: HEAD_RENAME.sub(r"\1.", name),
    to_source=lambda local: re.sub(rf"^({_PROJECTORS})\.", r"\1.layers.", local),
    head_config=XR0HeadConfig.from_hf_dict)
LAYOUTS = (XR0_LAYOUT,)


def checkpoint_kind(config: dict) -> str | None:
    """"xr0", "qwen3_vl", or None (some other model) from a config.json dict."""
    return _kind(config, LAYOUTS)


def read_checkpoint(path, dtype=None, **kw):
    """read_qwen3vl_checkpoint that also knows XR-0's layout."""
    return read_qwen3vl_checkpoint(path, dtype, layouts=LAYOUTS, **kw)


def inspect_checkpoint(path) -> dict:
    """inspect_qwen3vl_checkpoint that also knows XR-0's layout (no tensor is read)."""
    return inspect_qwen3vl_checkpoint(path, LAYOUTS)


def load_xr0(path, tokenizer_path: str | None = None, dtype: str = "float32", device: str = "cpu",
             image_size: int = 224, resize_mode: str = "pil"):
    """(Qwen3VLVLA, Qwen3VLTokenizer) of an XR-0 checkpoint directory (load_qwen3vl with XR-0's
    layout; `resize_mode` pil = the slow processor the deploy code loads). A Qwen3-VL
    checkpoint without the head is refused: the xr0 profile drives a robot."""
    if read_config(path, LAYOUTS)[2] != "xr0":
        raise Qwen3VLCheckpointError(f"{path}: a Qwen3-VL checkpoint without an action head; the xr0 profile "
                                     "needs a Xiaomi-Robotics-0 checkpoint (MiBoTForActionGeneration); the "
                                     "qwen3vl profile loads a plain Qwen3-VL checkpoint for language")
    # the deploy prompt closes its turns: a request is a turn of its own
    return load_qwen3vl(path, tokenizer_path, dtype, device, image_size, resize_mode, layouts=LAYOUTS,
                        name="xr0", request_turn="new")
