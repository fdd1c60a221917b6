"""StarVLA checkpoints (QwenPI_v3 and the other Qwen-backbone frameworks) -> state dicts per part.

What StarVLA writes (starVLA/starVLA; read for facts only):
- starVLA/training/train_starvla.py: setup_directories saves <run_dir>/config.yaml
  (OmegaConf.save) and <run_dir>/config.json (the same yaml through yaml.safe_load);
  _save_checkpoint does torch.save(accelerator.get_state_dict(model),
  f"<run_dir>/checkpoints/steps_{N}_pytorch_model.pt"); _finalize_training saves
  <run_dir>/final_model/pytorch_model.pt. The dataloader writes
  <run_dir>/dataset_statistics.json (models/starvla/dataset_stats.py parses it).
- starVLA/model/framework/share_tools.py read_mode_config and base_framework.from_pretrained:
  config.yaml and dataset_statistics.json are looked up in the .pt's parents[1];
  torch.load(map_location="cpu") (or safetensors load_file for .safetensors), then
  load_state_dict(strict=True) into the framework. The released Qwen3VL-PI_v3-Bridge-RT_1
  is checkpoints/steps_50000_pytorch_model.pt beside config.yaml / dataset_statistics.json.
- The state dict is the framework module's own state_dict(), so its names are the
  attribute paths (QwenPI_v3.py, modules/vlm/QWen3.py, LayerwiseFM_ActionHeader.py):
    qwen_vl_interface.model.<Qwen3VLForConditionalGeneration names>, i.e.
      qwen_vl_interface.model.model.visual.*          (transformers' model.visual.*)
      qwen_vl_interface.model.model.language_model.*  (model.language_model.*)
      qwen_vl_interface.model.lm_head.weight          (lm_head.weight; present even when
                                                       tied: nn.Module.state_dict keeps both names)
    action_model.*  (LayerwiseFlowmatchingActionHead: model.timestep_encoder.*,
      model.transformer_blocks.N.*, action_encoder.layer{1,2,3}, action_decoder.layer{1,2},
      state_encoder.layer{1,2} (built when state_dim is set, unused by QwenPI_v3, whose
      state goes into the text), future_tokens.weight, position_embedding.weight, ...)
    project_layers.N.{0,1}.{weight,bias}  (QwenPI_v3: LayerNorm + Linear per DiT layer,
      absent where they are nn.Identity, i.e. DiT width == backbone width)
  Third-party converters of StarVLA checkpoints confirm the qwen_vl_interface prefixes.

Here: `qwen_vl_interface.model.` is stripped, giving exactly transformers' Qwen3-VL names
(`model.visual.*`, `model.language_model.*`, `lm_head.weight`), so models/qwen3vl/checkpoint.py's
mapping applies (StarVLACheckpoint.qwen3vl_parts does it, given the base model's
config.json: a StarVLA run does not carry the Qwen3-VL config). `action_model.` is
stripped for the head, `project_layers.` for the projectors; anything else is listed in
`unused`. A Qwen2.5-VL-era layout (transformers < 4.52: `qwen_vl_interface.model.visual.*`,
`qwen_vl_interface.model.model.{layers,embed_tokens,norm}...`) is renamed to the same names
[assumption: for older StarVLA runs; Qwen3-VL itself only exists in the new layout].
Reading uses torch.load(weights_only=True) (no pickled code runs), memory-mapped where the
file allows it.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ...policy_io.errors import PolicyIOError
from ...state_checks import short_list
from ..qwen3vl.checkpoint import (HEAD_NAME, TEXT_PREFIX, VISUAL_PREFIX, Qwen3VLCheckpoint, _plan, checkpoint_kind,
                                  text_state_dict)
from ..qwen3vl.errors import Qwen3VLCheckpointError
from .run_files import CHECKPOINT_SUBDIR, CONFIG_FILES, STATS_FILE, find_run_file, read_json, read_run_config, run_dirs

BACKBONE_PREFIX = "qwen_vl_interface.model."
HEAD_PREFIX = "action_model."
PROJECTOR_PREFIX = "project_layers."
STEP_FILE = re.compile(r"^steps_(\d+)_pytorch_model\.(pt|safetensors)$")
FINAL_FILE = Path("final_model") / "pytorch_model.pt"
WEIGHT_SUFFIXES = (".pt", ".safetensors")
_LEGACY_TEXT = ("qwen_vl_interface.model.model.layers.", "qwen_vl_interface.model.model.embed_tokens.",
                "qwen_vl_interface.model.model.norm.")


class StarVLACheckpointError(Qwen3VLCheckpointError):
    """A StarVLA checkpoint that cannot be split (names, contents, config)."""


@dataclass
class StarVLACheckpoint:
    """One StarVLA checkpoint as per-part state dicts.

    backbone: transformers' Qwen3-VL names (model.visual.*, model.language_model.*, lm_head.weight);
    head: action_model.* with the prefix stripped; projectors: project_layers.* stripped
    ("N.0.weight" = LayerNorm of DiT layer N, "N.1.weight" = its Linear); unused: other names."""
    path: Path
    run_dir: Path
    config: dict
    config_file: Path | None
    stats: dict
    stats_file: Path | None
    backbone: dict[str, torch.Tensor]
    head: dict[str, torch.Tensor]
    projectors: dict[str, torch.Tensor] = field(default_factory=dict)
    unused: list[str] = field(default_factory=list)

    @property
    def framework(self) -> str | None:
        fw = self.config.get("framework") if isinstance(self.config, dict) else None
        return fw.get("name") if isinstance(fw, dict) else None

    @property
    def base_vlm(self) -> str | None:
        fw = self.config.get("framework") if isinstance(self.config, dict) else None
        q = fw.get("qwenvl") if isinstance(fw, dict) else None
        return q.get("base_vlm") if isinstance(q, dict) else None

    def qwen3vl_parts(self, vlm_config: dict | str | os.PathLike | None = None) -> Qwen3VLCheckpoint:
        """The backbone through models/qwen3vl/checkpoint.py's mapping: visual / language state dicts
        for our Qwen3VLVisionEncoder / Decoder, checked against the Qwen3-VL config
        (a config.json dict, its path, or the base model directory; default: the config's
        framework.qwenvl.base_vlm when that directory exists here)."""
        config, where = self._vlm_config(vlm_config)
        if checkpoint_kind(config) != "qwen3_vl":
            raise StarVLACheckpointError(f"{where}: model_type {config.get('model_type')!r} / architectures "
                                         f"{config.get('architectures')} is not Qwen3-VL")
        shapes = {name: tuple(t.shape) for name, t in self.backbone.items()}
        plan = _plan(config, None, shapes)
        if plan.problems:
            raise StarVLACheckpointError(f"{self.path} backbone against {where}: " + "; ".join(plan.problems))
        visual = {local: self.backbone[src] for local, src in plan.parts["visual"].items()}
        hf_text = {(HEAD_NAME if local == "lm_head.weight" else TEXT_PREFIX + local): self.backbone[src]
                   for local, src in plan.parts["language"].items()}
        return Qwen3VLCheckpoint(path=self.path, config=config, kind="qwen3_vl", visual=visual,
                                 language=text_state_dict(hf_text, tie_embeddings=plan.tied), head=None,
                                 unused=plan.unused, tie_word_embeddings=plan.tied)

    def _vlm_config(self, vlm_config) -> tuple[dict, str]:
        if isinstance(vlm_config, dict):
            return vlm_config, "the given Qwen3-VL config"
        source = vlm_config if vlm_config is not None else self.base_vlm
        if source is None:
            raise StarVLACheckpointError(f"{self.path}: pass vlm_config= (the base Qwen3-VL config.json); the "
                                         "run's config names no framework.qwenvl.base_vlm")
        p = Path(os.path.expanduser(str(source)))
        if p.is_dir():
            p = p / "config.json"
        if not p.is_file():
            raise FileNotFoundError(f"Qwen3-VL config {p} not found (from "
                                    f"{'vlm_config=' if vlm_config is not None else 'framework.qwenvl.base_vlm'}); "
                                    "pass vlm_config= with the base model's config.json")
        return read_json(p), str(p)

    def summary(self) -> dict:
        def count(sd):
            return sum(t.numel() for t in sd.values())
        return {"path": str(self.path), "run_dir": str(self.run_dir), "framework": self.framework,
                "base_vlm": self.base_vlm, "config_file": str(self.config_file) if self.config_file else None,
                "stats_file": str(self.stats_file) if self.stats_file else None,
                "stats_keys": sorted(self.stats),
                "backbone": {"tensors": len(self.backbone), "params": count(self.backbone)},
                "head": {"tensors": len(self.head), "params": count(self.head)},
                "projectors": {"tensors": len(self.projectors), "params": count(self.projectors)},
                "unused": list(self.unused)}


def find_weights(path: str | os.PathLike) -> Path:
    """The weights file for a .pt / .safetensors path, a checkpoints/ directory or a run
    directory: the one steps_N_pytorch_model.pt there (several: an error naming them, pass
    the file), else final_model/pytorch_model.pt."""
    p = Path(os.path.expanduser(str(path)))
    if p.is_file():
        if p.suffix not in WEIGHT_SUFFIXES:
            raise StarVLACheckpointError(f"{p}: a StarVLA checkpoint is a .pt (or .safetensors) file")
        return p
    if not p.is_dir():
        raise FileNotFoundError(f"StarVLA checkpoint {p} does not exist")
    for d in (p / CHECKPOINT_SUBDIR, p):
        if d.is_dir():
            found = sorted((f for f in d.iterdir() if f.is_file() and STEP_FILE.match(f.name)),
                           key=lambda f: int(STEP_FILE.match(f.name).group(1)))
            if len(found) == 1:
                return found[0]
            if found:
                raise StarVLACheckpointError(f"{d} holds {len(found)} checkpoints ({', '.join(f.name for f in found)}): "
                                             "pass the .pt file to read")
    if (p / FINAL_FILE).is_file():
        return p / FINAL_FILE
    raise FileNotFoundError(f"no StarVLA weights under {p}: looked for {CHECKPOINT_SUBDIR}/steps_<N>_pytorch_model.pt, "
                            f"steps_<N>_pytorch_model.pt and {FINAL_FILE}")


def _load_state_dict(file: Path) -> dict[str, torch.Tensor]:
    if file.suffix == ".safetensors":
        from safetensors.torch import load_file
        sd = load_file(str(file))
    else:
        try:
            try:
                sd = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as exc:
                if "mmap" not in str(exc):
                    raise
                sd = torch.load(file, map_location="cpu", weights_only=True)    # legacy (non-zip) format
        except Exception as exc:      # pickle errors, truncated files, objects weights_only refuses
            raise StarVLACheckpointError(f"cannot read {file} with torch.load(weights_only=True): {exc}") from exc
    if not isinstance(sd, dict) or not sd:
        raise StarVLACheckpointError(f"{file} does not hold a state dict (got {type(sd).__name__})")
    bad = [k for k, v in sd.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if bad:
        raise StarVLACheckpointError(f"{file}: {len(bad)} entries are not named tensors: {short_list([str(b) for b in bad])}")
    return sd


def split_state_dict(sd: dict[str, torch.Tensor]) -> tuple[dict, dict, dict, list[str]]:
    """(backbone with transformers' Qwen3-VL names, head, projectors, unused names)."""
    backbone, head, projectors, unused = {}, {}, {}, []
    legacy = not any(k.startswith(BACKBONE_PREFIX + "model.visual.") or
                     k.startswith(BACKBONE_PREFIX + "model.language_model.") for k in sd)
    for name, t in sd.items():
        if legacy and name.startswith(BACKBONE_PREFIX + "visual."):
            backbone[VISUAL_PREFIX + name[len(BACKBONE_PREFIX + "visual."):]] = t
        elif legacy and name.startswith(_LEGACY_TEXT):
            backbone[TEXT_PREFIX + name[len(BACKBONE_PREFIX + "model."):]] = t
        elif name.startswith(BACKBONE_PREFIX):
            backbone[name[len(BACKBONE_PREFIX):]] = t
        elif name.startswith(HEAD_PREFIX):
            head[name[len(HEAD_PREFIX):]] = t
        elif name.startswith(PROJECTOR_PREFIX):
            projectors[name[len(PROJECTOR_PREFIX):]] = t
        else:
            unused.append(name)
    return backbone, head, projectors, sorted(unused)


def read_starvla_checkpoint(path: str | os.PathLike, dtype: torch.dtype | str | None = None,
                            require_stats: bool = True) -> StarVLACheckpoint:
    """Read a StarVLA checkpoint (.pt file, checkpoints/ directory or run directory) with its
    config.yaml / config.json and dataset_statistics.json, split into parts.

    Raises FileNotFoundError naming a missing weights / config / statistics file, and
    StarVLACheckpointError for a file that is not a StarVLA state dict."""
    from ...config import parse_dtype

    weights = find_weights(path)
    _, dirs = run_dirs(weights)
    config_file = find_run_file(dirs, CONFIG_FILES)
    if config_file is None:
        raise FileNotFoundError(f"no {' or '.join(CONFIG_FILES)} for {weights} in {' or '.join(map(str, dirs))} "
                                "(StarVLA writes them in the run directory, the .pt's parent's parent)")
    stats_file = find_run_file(dirs, (STATS_FILE,))
    if stats_file is None and require_stats:
        raise FileNotFoundError(f"no {STATS_FILE} for {weights} in {' or '.join(map(str, dirs))}: the actions "
                                "cannot be unnormalised without it (require_stats=False reads the weights anyway)")
    try:
        config = read_run_config(config_file)
        stats = read_json(stats_file) if stats_file is not None else {}
    except PolicyIOError as exc:
        raise StarVLACheckpointError(str(exc)) from exc

    sd = _load_state_dict(weights)
    if dtype is not None:
        cast = parse_dtype(dtype)
        sd = {k: (v.to(cast) if v.is_floating_point() else v) for k, v in sd.items()}
    backbone, head, projectors, unused = split_state_dict(sd)
    if not backbone:
        tops = sorted({k.split(".", 1)[0] for k in sd})
        raise StarVLACheckpointError(f"{weights}: no backbone tensors under {BACKBONE_PREFIX!r} "
                                     f"(top-level modules: {', '.join(tops)})")
    if not head:
        tops = sorted({k.split(".", 1)[0] for k in sd})
        raise StarVLACheckpointError(f"{weights}: no action head tensors under {HEAD_PREFIX!r} "
                                     f"(top-level modules: {', '.join(tops)})")
    return StarVLACheckpoint(path=weights, run_dir=config_file.parent, config=config, config_file=config_file,
                             stats=stats, stats_file=stats_file, backbone=backbone, head=head,
                             projectors=projectors, unused=unused)


# -- the whole model ------------------------------------------------------------------------
def load_starvla(path, base_vlm: str | None = None, dtype: str = "float32", device: str = "cpu",
                 image_size: int = 224):
    """(Qwen3VLVLA with StarVLA's QwenPI_v3 head as its action expert, Qwen3VLTokenizer) of a
    StarVLA checkpoint. `base_vlm`: the base Qwen3-VL directory the run was trained from
    (its config.json and tokenizer files; StarVLA's run directory holds neither; default:
    the config's framework.qwenvl.base_vlm when that directory exists here). The head's
    state goes into the prompt as text (models/starvla/processor.py), so the head reads no state.
    Every tensor is loaded strictly; the model is built on the host in float32 and moved."""
    import json

    from ...config import parse_dtype
    from .configuration import PIv3HeadConfig
    from ..qwen3vl.configuration import Qwen3VLModelConfig, Qwen3VLVision, SpecialIds
    from ..qwen3vl.modeling import Qwen3VLVLA
    from ..qwen3vl.image_processing import Qwen3VLImageSettings
    from ..qwen3vl.tokenizer import Qwen3VLTokenizer

    ck = read_starvla_checkpoint(path)
    base = Path(base_vlm) if base_vlm else None
    if base is None:
        named = (ck.config.get("framework", {}).get("qwenvl") or {}).get("base_vlm")
        base = Path(named) if named else None
    if base is None or not (base / "config.json").is_file():
        raise FileNotFoundError(f"StarVLA checkpoint {path}: the base Qwen3-VL directory (config.json, "
                                f"tokenizer.json) is needed: set tokenizer_path to it (got {base})")
    parts = ck.qwen3vl_parts(json.loads((base / "config.json").read_text()))
    head_cfg = PIv3HeadConfig.from_hf_dict(ck.config, backbone_hidden=parts.decoder_config().width)
    tok = Qwen3VLTokenizer.from_dir(base)
    ids = tok.special_ids
    vision = parts.vision_config()
    pre = base / "preprocessor_config.json"      # the base model's processor settings; B1 above: "torch"
    images = (Qwen3VLImageSettings.from_hf_dict(json.loads(pre.read_text()), "torch") if pre.is_file() else
              Qwen3VLImageSettings(patch_size=vision.patch_size, temporal_patch_size=vision.temporal_patch_size,
                                   merge_size=vision.spatial_merge_size, resize_mode="torch"))
    cfg = Qwen3VLModelConfig(
        name="starvla-pi", vision=Qwen3VLVision(vision, images, image_size), backbone=parts.decoder_config(),
        expert=head_cfg,
        special=SpecialIds(ids["im_start"], ids["im_end"], ids["vision_start"], ids["vision_end"], ids["image_pad"]))
    model = Qwen3VLVLA(cfg)
    model.visual.load_state_dict(parts.visual, strict=True)
    model.backbone.load_state_dict(parts.language, strict=True)
    head = {f"action_model.{k}": v for k, v in ck.head.items()}
    head.update({f"project_layers.{k}": v for k, v in ck.projectors.items()})
    model.expert.load_state_dict(head, strict=True)
    model = model.to(device=torch.device(device), dtype=parse_dtype(dtype))
    return model.eval().pack_weights(), tok
