"""Qwen3-VL checkpoints (and VLAs that store one beside a head) -> state dicts for our modules.

transformers' Qwen3VLForConditionalGeneration keeps the text model under
`model.language_model.` (embed_tokens, layers.N.{input_layernorm,
post_attention_layernorm}, layers.N.self_attn.{q,k,v,o}_proj and {q,k}_norm,
layers.N.mlp.{gate,up,down}_proj, norm) and the head as `lm_head.weight` (absent or
equal to the embedding where tied). Our Decoder uses the same names below the prefix.
text_state_dict / load_text_weights take an in-memory state dict (text model only).

Reading a checkpoint DIRECTORY (config.json + model.safetensors or a sharded
model.safetensors.index.json; the files and their headers: safetensors_files.py) into one
state dict per part, without building the model.

Two layouts, told apart by config.json (`checkpoint_kind`):

- "qwen3_vl": transformers' Qwen3VLForConditionalGeneration (`model_type` "qwen3_vl" or
  `architectures` ["Qwen3VLForConditionalGeneration"]): `model.language_model.*`,
  `model.visual.*`, `lm_head.weight` (left out of the file when tied);
- a VLA that stores the Qwen3-VL model under a prefix beside its action head: its family
  passes a HeadLayout (Xiaomi-Robotics-0: models/xr0/checkpoint.XR0_LAYOUT).

What happens to each tensor (Qwen3VLCheckpoint.unused lists the reported ones):
- under the text prefix: must be a Decoder parameter, else WeightMismatchError (a tensor
  our decoder has no place for would change the model's output);
- `lm_head.weight`: the Decoder's head when untied; when tied it is reported as unused
  (the embedding serves as the head);
- under the visual prefix: Qwen3VLVisionEncoder parameters go to `visual`; others are
  reported as unused, not fatal (towers we do not run);
- a layout's head tensors: must be the head's parameters after its rename, else an error;
- anything else is reported as unused.
Every part must also be complete and every shape must match the model the config
describes (built on the meta device to get the names and shapes), else
WeightMismatchError naming the tensors. Tying: config.json's `tie_word_embeddings`
(top level, then text_config; under a layout those of its VLM config, then the top level); where
no config says, a checkpoint without `lm_head.weight` is taken as tied.
"""
from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch

from ...config import parse_dtype
from ...layers.decoder import Decoder
from ...state_checks import WeightMismatchError, check_state, short_list
from .configuration import (Qwen3VLModelConfig, Qwen3VLVision, Qwen3VLVisionConfig, SpecialIds,
                            text_config_from_hf)
from .errors import Qwen3VLCheckpointError
from .image_processing import Qwen3VLImageSettings
from .modeling import Qwen3VLVLA
from .safetensors_files import element_count, tensor_table
from .tokenizer import Qwen3VLTokenizer
from .vision import Qwen3VLVisionEncoder

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
    text_config_from_hf) in place, names and shapes strictly checked;
    values are cast to the decoder's dtype. Pack the weights after (VLAModel.pack_weights
    or layers.packed_groups), the copies keep packed views current either way."""
    sd = text_state_dict(hf_sd, tie_embeddings=decoder.cfg.tie_embeddings)
    params = dict(decoder.named_parameters())
    check_state({k: p.shape for k, p in params.items()}, sd, "Qwen3-VL text model")
    for name, tensor in sd.items():
        params[name].copy_(tensor)
    return decoder


# -- whole checkpoints: Qwen3-VL and Xiaomi-Robotics-0 ----------------------------------
QWEN3VL_ARCHITECTURE = "Qwen3VLForConditionalGeneration"
VISUAL_PREFIX = "model.visual."


@dataclass(frozen=True)
class HeadLayout:
    """How a VLA built on Qwen3-VL stores itself in one checkpoint directory beside the VLM.
    The head's family supplies it (models/xr0/checkpoint.XR0_LAYOUT); this reader knows none.

    kind: its name in reports; detect(config.json) -> bool; vlm_root: the prefix of the
    Qwen3-VL model's tensors; vlm_config_key: where config.json nests the Qwen3-VL config;
    modules: the head's top-level tensor prefixes; to_local / to_source: checkpoint name <->
    our head's state-dict name; head_config(config.json, **overrides): the head's config
    (its build(backbone_config) makes the module)."""
    kind: str
    detect: Callable[[dict], bool]
    vlm_root: str
    vlm_config_key: str
    modules: tuple[str, ...]
    to_local: Callable[[str], str]
    to_source: Callable[[str], str]
    head_config: Callable[..., object]


@dataclass
class Qwen3VLCheckpoint:
    """One checkpoint directory, as state dicts for our modules.

    visual: for Qwen3VLVisionEncoder(Qwen3VLVisionConfig.from_hf_dict(vlm_config));
    language: for Decoder(text_config_from_hf(vlm_config, tie_embeddings=tied));
    head: for the head its layout describes (None for plain Qwen3-VL);
    unused: checkpoint names read by nobody (see the section docstring above)."""
    path: Path
    config: dict
    kind: str
    visual: dict[str, torch.Tensor]
    language: dict[str, torch.Tensor]
    head: dict[str, torch.Tensor] | None
    unused: list[str] = field(default_factory=list)
    tie_word_embeddings: bool = True
    layout: HeadLayout | None = None

    @property
    def vlm_config(self) -> dict:
        """The Qwen3-VL config dict (XR-0 nests it as `vlm_config`)."""
        return vlm_config(self.config, self.layout)

    def decoder_config(self):
        return text_config_from_hf(self.vlm_config, tie_embeddings=self.tie_word_embeddings)

    def vision_config(self):
        return Qwen3VLVisionConfig.from_hf_dict(self.vlm_config)

    def head_config(self, **overrides):
        return self.layout.head_config(self.config, **overrides) if self.layout is not None else None


def find_layout(config: dict, layouts: tuple[HeadLayout, ...] = ()) -> HeadLayout | None:
    return next((lay for lay in layouts if lay.detect(config)), None)


def checkpoint_kind(config: dict, layouts: tuple[HeadLayout, ...] = ()) -> str | None:
    """A layout's kind (e.g. "xr0"), "qwen3_vl", or None (some other model) from a config.json dict."""
    layout = find_layout(config, layouts)
    if layout is not None:
        return layout.kind
    arch = set(config.get("architectures") or ())
    if QWEN3VL_ARCHITECTURE in arch or config.get("model_type") == "qwen3_vl":
        return "qwen3_vl"
    return None


def vlm_config(config: dict, layout: HeadLayout | None) -> dict:
    if layout is None:
        return config
    if not isinstance(config.get(layout.vlm_config_key), dict):
        raise Qwen3VLCheckpointError(f"{layout.kind} config.json has no {layout.vlm_config_key} (the Qwen3-VL config)")
    return config[layout.vlm_config_key]


def read_config(path: str | os.PathLike, layouts: tuple[HeadLayout, ...] = ()
                ) -> tuple[Path, dict, str, HeadLayout | None]:
    """(directory, config.json dict, kind, layout); FileNotFoundError / Qwen3VLCheckpointError."""
    d = Path(path)
    if d.is_file():
        d = d.parent
    cfg_file = d / "config.json"
    if not cfg_file.is_file():
        raise FileNotFoundError(f"{cfg_file} not found: a Qwen3-VL / XR-0 checkpoint directory needs config.json")
    config = json.loads(cfg_file.read_text(encoding="utf-8"))
    kind = checkpoint_kind(config, layouts)
    if kind is None:
        known = " nor ".join(["Qwen3-VL", *(lay.kind for lay in layouts)])
        raise Qwen3VLCheckpointError(f"{cfg_file}: model_type {config.get('model_type')!r}, architectures "
                                     f"{config.get('architectures')} is neither {known}")
    return d, config, kind, find_layout(config, layouts)


# -- the plan: which checkpoint name goes where -------------------------------------------
@dataclass
class _Plan:
    tied: bool
    parts: dict[str, dict[str, str]]        # part -> {our name: checkpoint name}
    unused: list[str]
    problems: list[str]
    configs: dict


def _explicit_tie(config: dict, layout: HeadLayout | None):
    vlm = vlm_config(config, layout)
    for d in (vlm, vlm.get("text_config") or {}, config):
        if "tie_word_embeddings" in d and d["tie_word_embeddings"] is not None:
            return bool(d["tie_word_embeddings"])
    return None


def _meta_shapes(module_fn) -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):
        return {k: tuple(v.shape) for k, v in module_fn().state_dict().items()}


def _plan(config: dict, layout: HeadLayout | None, shapes: dict[str, tuple[int, ...]]) -> _Plan:
    vlm = vlm_config(config, layout)
    root = layout.vlm_root if layout is not None else ""
    text_p, vis_p, head_name = root + TEXT_PREFIX, root + VISUAL_PREFIX, root + HEAD_NAME
    tied = _explicit_tie(config, layout)
    if tied is None:
        tied = head_name not in shapes
    problems: list[str] = []
    configs: dict = {}
    expected: dict[str, dict[str, tuple[int, ...]]] = {}
    try:
        dcfg = text_config_from_hf(vlm, tie_embeddings=tied)
        configs["decoder"] = dcfg
        expected["language"] = _meta_shapes(lambda: Decoder(dcfg, max_positions=1))
    except (KeyError, ValueError, TypeError) as e:
        problems.append(f"text config: {e!r}" if isinstance(e, KeyError) else f"text config: {e}")
    try:
        vcfg = Qwen3VLVisionConfig.from_hf_dict(vlm)
        configs["vision"] = vcfg
        expected["visual"] = _meta_shapes(lambda: Qwen3VLVisionEncoder(vcfg))
    except (KeyError, ValueError, TypeError) as e:
        problems.append(f"vision config: {e}")
    if layout is not None:
        try:
            hcfg = layout.head_config(config)
            configs["head"] = hcfg
            if "decoder" in configs:     # else the text config's problem is reported already
                expected["head"] = _meta_shapes(lambda: hcfg.build(configs["decoder"]))
        except (KeyError, ValueError, TypeError) as e:
            problems.append(f"{layout.kind} head config: {e}")

    parts: dict[str, dict[str, str]] = {"visual": {}, "language": {}}
    if layout is not None:
        parts["head"] = {}
    unused, strange = [], {"language": [], "head": []}
    for name in sorted(shapes):
        if name.startswith(text_p):
            local = name[len(text_p):]
            (parts["language"].__setitem__(local, name) if local in expected.get("language", {local: 0})
             else strange["language"].append(name))
        elif name == head_name:
            if tied:
                unused.append(name)
            else:
                parts["language"]["lm_head.weight"] = name
        elif name.startswith(vis_p):
            local = name[len(vis_p):]
            (parts["visual"].__setitem__(local, name) if local in expected.get("visual", {local: 0})
             else unused.append(name))
        elif layout is not None and name.startswith(layout.modules):
            local = layout.to_local(name)
            (parts["head"].__setitem__(local, name) if local in expected.get("head", {local: 0})
             else strange["head"].append(name))
        else:
            unused.append(name)
    for part, names in strange.items():
        if names:
            problems.append(f"{part}: {len(names)} checkpoint tensor(s) with no place in our model: {short_list(names)}")
    for part, want in expected.items():
        got = parts[part]
        missing = sorted(set(want) - set(got))
        if missing:
            hint = f" (the checkpoint lacks {head_name}; config says tie_word_embeddings=false)" \
                if part == "language" and missing == ["lm_head.weight"] else ""
            problems.append(f"{part}: missing {len(missing)} tensor(s): "
                            f"{short_list([got.get(m, _source_name(part, m, root, layout)) for m in missing])}{hint}")
        bad = [f"{got[k]}: expected {want[k]}, got {shapes[got[k]]}"
               for k in sorted(set(want) & set(got)) if tuple(shapes[got[k]]) != tuple(want[k])]
        if bad:
            problems.append(f"{part}: {len(bad)} shape mismatch(es): {short_list(bad)}")
    return _Plan(tied, parts, unused, problems, configs)


def _source_name(part: str, local: str, root: str, layout: HeadLayout | None) -> str:
    if part == "language":
        return root + (HEAD_NAME if local == "lm_head.weight" else TEXT_PREFIX + local)
    if part == "visual":
        return root + VISUAL_PREFIX + local
    return layout.to_source(local) if layout is not None else local


# -- reading ------------------------------------------------------------------------------
def read_qwen3vl_checkpoint(path: str | os.PathLike, dtype: torch.dtype | str | None = None,
                            progress=sys.stderr, layouts: tuple[HeadLayout, ...] = ()) -> Qwen3VLCheckpoint:
    """Read a Qwen3-VL or XR-0 checkpoint directory into per-part state dicts (names of
    our modules; see the section docstring for what goes where and what is an error).

    dtype: cast floating tensors to it (None: keep the file's). progress: a stream that
    gets one line per shard when there is more than one (None: quiet).
    Raises FileNotFoundError naming a missing config/weights/shard file, and
    Qwen3VLCheckpointError (a WeightMismatchError) listing name/shape/config problems."""
    from safetensors import safe_open

    directory, config, kind, layout = read_config(path, layouts)
    cast = parse_dtype(dtype) if dtype is not None else None
    files, table = tensor_table(directory)
    plan = _plan(config, layout, {n: t[1] for n, t in table.items()})
    if plan.problems:
        raise Qwen3VLCheckpointError(f"{directory} ({kind}): " + "; ".join(plan.problems))

    wanted = {src: (part, local) for part, names in plan.parts.items() for local, src in names.items()}
    out: dict[str, dict[str, torch.Tensor]] = {part: {} for part in plan.parts}
    for i, file in enumerate(files):
        names = [n for n in wanted if table[n][0] == file]
        if progress is not None and len(files) > 1:
            print(f"reading {file.name} ({i + 1}/{len(files)}, {len(names)} tensors)", file=progress, flush=True)
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for name in names:
                t = f.get_tensor(name)
                if cast is not None and t.is_floating_point():
                    t = t.to(cast)
                part, local = wanted[name]
                out[part][local] = t
    # the text model through the same name mapping the single-module loader uses
    hf_text = {(HEAD_NAME if local == "lm_head.weight" else TEXT_PREFIX + local): t
               for local, t in out["language"].items()}
    language = text_state_dict(hf_text, tie_embeddings=plan.tied)
    visual = out["visual"]
    return Qwen3VLCheckpoint(path=directory, config=config, kind=kind, visual=visual, language=language,
                             head=out.get("head"), unused=plan.unused, tie_word_embeddings=plan.tied,
                             layout=layout)


# -- inspecting ---------------------------------------------------------------------------
def inspect_qwen3vl_checkpoint(path: str | os.PathLike, layouts: tuple[HeadLayout, ...] = ()) -> dict:
    """What a Qwen3-VL / XR-0 checkpoint directory holds, from config.json and the
    safetensors headers only (no tensor is read): files, bytes, dtypes, per part the
    tensor and parameter counts, the decoder / vision / head configs our code would
    build, the tokenizer's summary, and `problems` (empty: read_qwen3vl_checkpoint and
    the tokenizer load it). Missing files are problems, not exceptions."""
    report: dict = {"path": str(path), "kind": None, "problems": []}
    problems = report["problems"]
    try:
        directory, config, kind, layout = read_config(path, layouts)
    except (OSError, ValueError) as e:
        problems.append(str(e))
        return report
    report["path"], report["kind"] = str(directory), kind
    try:
        files, table = tensor_table(directory)
    except (OSError, ValueError) as e:
        problems.append(str(e))
        files, table = [], {}
    if files:
        report["files"] = [f.name for f in files]
        report["bytes"] = sum(f.stat().st_size for f in files)
        report["tensors"] = len(table)
        dtypes: dict[str, int] = {}
        for _, shape, dt in table.values():
            dtypes[dt] = dtypes.get(dt, 0) + element_count(shape)
        report["dtype"] = max(dtypes, key=dtypes.get) if dtypes else None
        report["dtypes"] = dtypes
    plan = _plan(config, layout, {n: t[1] for n, t in table.items()})
    if files:       # without weights only the configs are reported
        problems.extend(plan.problems)
        report["tie_word_embeddings"] = plan.tied
        report["parts"] = {part: {"tensors": len(names),
                                  "parameters": sum(element_count(table[s][1]) for s in names.values())}
                           for part, names in plan.parts.items()}
        report["parts"]["unused"] = {"tensors": len(plan.unused),
                                     "parameters": sum(element_count(table[s][1]) for s in plan.unused),
                                     "names": plan.unused[:8]}
    for key in ("decoder", "vision", "head"):
        if key in plan.configs:
            report[key + "_config"] = asdict(plan.configs[key])
    report["tokenizer"] = _tokenizer_summary(directory, config, kind, plan, problems)
    return report


def _tokenizer_summary(directory: Path, config: dict, kind: str, plan: _Plan, problems: list) -> dict | None:
    try:
        tok = Qwen3VLTokenizer.from_dir(directory)
    except (OSError, ValueError, KeyError) as e:
        problems.append(f"tokenizer: {e}")
        return None
    summary = {"vocab_size": tok.vocab_size, "eos_ids": sorted(tok.eos_ids), "special_ids": tok.special_ids,
               "chat_template": tok.chat_template is not None}
    dcfg = plan.configs.get("decoder")
    if dcfg is not None and tok.vocab_size > dcfg.vocab_size:
        problems.append(f"tokenizer has {tok.vocab_size} tokens but the model's vocabulary is {dcfg.vocab_size}")
    return summary


# -- the whole model ------------------------------------------------------------------------
def load_qwen3vl(path, tokenizer_path: str | None = None, dtype: str = "float32", device: str = "cpu",
                 image_size: int = 224, resize_mode: str = "pil", layouts: tuple[HeadLayout, ...] = (),
                 name: str = "qwen3vl", request_turn: str = "continue"):
    """(Qwen3VLVLA, Qwen3VLTokenizer) of a checkpoint directory: the structure from its
    config.json, the special ids from its tokenizer, the image processing from its
    preprocessor_config.json (if present; `resize_mode` pil = the slow processor), every
    tensor loaded strictly. A plain Qwen3-VL checkpoint gives a model without an action head
    (language only); one a layout detects gets its head. The model is built on the CPU in
    float32 and then moved (a 4B model needs ~17 GB of host memory while loading)."""
    ck = read_qwen3vl_checkpoint(path, layouts=layouts)
    tok = Qwen3VLTokenizer.from_dir(tokenizer_path or ck.path)
    ids = tok.special_ids
    missing = [k for k in ("im_start", "im_end", "vision_start", "vision_end", "image_pad") if ids.get(k) is None]
    if missing:
        raise Qwen3VLCheckpointError(f"{path}: the tokenizer lacks the special tokens {missing}")
    pre = ck.path / "preprocessor_config.json"
    vision = ck.vision_config()
    images = (Qwen3VLImageSettings.from_hf_dict(json.loads(pre.read_text()), resize_mode) if pre.is_file()
              else Qwen3VLImageSettings(patch_size=vision.patch_size, temporal_patch_size=vision.temporal_patch_size,
                                        merge_size=vision.spatial_merge_size, resize_mode=resize_mode))
    cfg = Qwen3VLModelConfig(
        name=name, vision=Qwen3VLVision(vision, images, image_size), backbone=ck.decoder_config(),
        expert=ck.head_config(),
        special=SpecialIds(ids["im_start"], ids["im_end"], ids["vision_start"], ids["vision_end"], ids["image_pad"]),
        request_turn=request_turn)
    model = Qwen3VLVLA(cfg)
    model.visual.load_state_dict(ck.visual, strict=True)
    model.backbone.load_state_dict(ck.language, strict=True)
    if model.expert is not None:
        model.expert.load_state_dict(ck.head, strict=True)
    model = model.to(device=torch.device(device), dtype=parse_dtype(dtype))
    return model.eval().pack_weights(), tok
