"""Load a real pi0.5 checkpoint (LeRobot or openpi PyTorch) into the engine's VLAModel.

Both public PyTorch forms of pi0.5 load: LeRobot's `pi05` policy (names start with
`model.paligemma_with_expert...`) and openpi's PyTorch conversion (the same names without
the leading `model.`), each a directory with one `model.safetensors`, plus PaliGemma's
SentencePiece tokenizer. How a user points the node at one: docs/pi05.md.

What load_pi05 does
-------------------
* The layout is detected from the names (`model.` prefix = LeRobot, none = openpi).
* Every checkpoint tensor maps to exactly one engine parameter (table below); missing,
  unexpected and wrongly shaped tensors are all reported together in one
  CheckpointError that names each of them.
* action_dim is taken from `action_in_proj` (32 for the released models: actions are
  zero-padded to 32). The horizon is not in the weights: it comes from a `config.json`
  next to the weights when there is one (openpi: `action_horizon`; LeRobot:
  `chunk_size`, and `num_inference_steps` for the denoise steps), else from cfg.
  Everything else (widths, depths, vocabulary, image size) must match cfg.
* The model is built on the meta device and filled tensor by tensor straight from
  the memory-mapped file in the requested dtype/device, so only one copy of the
  weights is ever held (plus one tensor in transit).
* Tied embeddings: `paligemma.lm_head.weight` is the same matrix as `embed_tokens`.
  safetensors' save_model keeps only one of the two names, which may be the lm_head;
  either name alone is accepted, and when both are present they must be equal.
* `gemma_expert.lm_head.weight` (the expert's unused 257152-row LM head) is accepted
  and ignored without being read.

Name mapping (checkpoint name, after the optional `model.` -> engine parameter)
    P = paligemma_with_expert.
    P paligemma.model.vision_tower.vision_model.embeddings.patch_embedding.*    -> vision.patch_embedding.*
    P paligemma.model.vision_tower.vision_model.embeddings.position_embedding.* -> vision.position_embedding.*
    P paligemma.model.vision_tower.vision_model.encoder.layers.N.{layer_norm1,layer_norm2,
        self_attn.{q,k,v,out}_proj, mlp.fc1, mlp.fc2}.*                          -> vision.layers.N.(same).*
    P paligemma.model.vision_tower.vision_model.post_layernorm.*                -> vision.post_layernorm.*
    P paligemma.model.multi_modal_projector.linear.*                            -> vision.projector.*
    P paligemma.model.language_model.embed_tokens.weight                        -> backbone.embed_tokens.weight
    P paligemma.lm_head.weight                       (tied: same tensor as)     -> backbone.embed_tokens.weight
    P paligemma.model.language_model.layers.N.{input_layernorm, post_attention_layernorm,
        self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj}.weight               -> backbone.layers.N.(same).weight
    P paligemma.model.language_model.norm.weight                                -> backbone.norm.weight
    P gemma_expert.model.layers.N.{input_layernorm.dense, post_attention_layernorm.dense}.*
                                                                                -> expert.layers.N.(same).*
    P gemma_expert.model.layers.N.{self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj}.weight
                                                                                -> expert.layers.N.(same).weight
    P gemma_expert.model.norm.dense.*                                           -> expert.norm.dense.*
    P gemma_expert.lm_head.weight                                               -> (ignored)
    {action_in_proj, action_out_proj, time_mlp_in, time_mlp_out}.*              -> expert.(same).*

Precision: the engine runs one dtype throughout. openpi's bfloat16 mode keeps the
norms and the vision patch/position embeddings in float32; here they are bfloat16
too (the norms and the adaptive modulation still compute in float32 internally),
so bfloat16 results differ from openpi's at bfloat16 rounding level.
"""
from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import torch
from torch import nn

from ...config import parse_dtype
from .configuration import ModelConfig
from ...layers.blocks import Rope
from .modeling import VLAModel
from .tokenizer import SentencePieceTokenizer, load_paligemma_tokenizer

log = logging.getLogger(__name__)

WEIGHTS_FILE = "model.safetensors"
LAYOUT_PREFIX = {"lerobot": "model.", "openpi": ""}

ROOT = "paligemma_with_expert."
VISION = ROOT + "paligemma.model.vision_tower.vision_model."
LANGUAGE = ROOT + "paligemma.model.language_model."
EXPERT = ROOT + "gemma_expert.model."
EMBED_TOKENS = LANGUAGE + "embed_tokens.weight"
LM_HEAD = ROOT + "paligemma.lm_head.weight"
# Present in real checkpoints, unused by pi0.5: accepted and never read.
IGNORED = frozenset({ROOT + "gemma_expert.lm_head.weight"})

# engine-name prefix -> checkpoint-name prefix (layout prefix excluded); first match wins.
NAME_MAP: tuple[tuple[str, str], ...] = (
    ("vision.patch_embedding.", VISION + "embeddings.patch_embedding."),
    ("vision.position_embedding.", VISION + "embeddings.position_embedding."),
    ("vision.layers.", VISION + "encoder.layers."),
    ("vision.post_layernorm.", VISION + "post_layernorm."),
    ("vision.projector.", ROOT + "paligemma.model.multi_modal_projector.linear."),
    ("backbone.lm_head.", ROOT + "paligemma.lm_head."),     # only for untied configs
    ("backbone.", LANGUAGE),
    ("expert.layers.", EXPERT + "layers."),
    ("expert.norm.", EXPERT + "norm."),
    ("expert.", ""),     # action_in_proj, action_out_proj, time_mlp_in, time_mlp_out
)

class CheckpointError(ValueError):
    """The checkpoint does not fit the model: names every problem found."""


def parse_device(device: str | torch.device) -> torch.device:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"invalid device {device!r} (use cpu, cuda or cuda:N)") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} requested but CUDA is not available "
                             "(this torch build or machine has no GPU); use device: cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type not in ("cpu", "mps", "xpu"):
        raise ValueError(f"unsupported device {device!r}")
    return dev


def checkpoint_name(ours: str, layout: str = "lerobot") -> str:
    """Engine parameter name -> checkpoint tensor name in the given layout."""
    for mine, theirs in NAME_MAP:
        if ours.startswith(mine):
            return LAYOUT_PREFIX[layout] + theirs + ours[len(mine):]
    raise KeyError(f"no checkpoint name for engine parameter {ours!r}")


def resolve_weights(checkpoint: str | os.PathLike) -> Path:
    """A `.safetensors` file, or a directory that contains `model.safetensors`."""
    if checkpoint is None or str(checkpoint).strip() == "":
        raise ValueError("no checkpoint given for the pi0.5 model: set `checkpoint` to a "
                         "directory holding model.safetensors (lerobot/pi05_base or an "
                         "openpi PyTorch conversion)")
    path = Path(os.path.expanduser(str(checkpoint)))
    if path.is_dir():
        file = path / WEIGHTS_FILE
        if file.is_file():
            return file
        shards = sorted(p.name for p in path.glob("*.safetensors"))
        hint = f" (found {', '.join(shards)}; sharded checkpoints are not supported)" if shards else ""
        raise FileNotFoundError(f"checkpoint directory {str(path)!r} has no {WEIGHTS_FILE}{hint}")
    if path.is_file():
        return path
    raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")


def detect_layout(names) -> str:
    lerobot = any(n.startswith("model." + ROOT) for n in names)
    openpi = any(n.startswith(ROOT) for n in names)
    if lerobot and openpi:
        raise CheckpointError("checkpoint mixes LeRobot (`model.paligemma_with_expert.`) and "
                              "openpi (`paligemma_with_expert.`) tensor names")
    if lerobot:
        return "lerobot"
    if openpi:
        return "openpi"
    sample = ", ".join(sorted(names)[:5]) or "(no tensors)"
    raise CheckpointError("not a pi0/pi0.5 checkpoint: no tensor name starts with "
                          f"`model.{ROOT}` (LeRobot) or `{ROOT}` (openpi); first names: {sample}")


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable %s: %s", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def adapt_config(cfg: ModelConfig, shapes: dict[str, tuple[int, ...]], layout: str,
                 config_json: Path | None = None) -> ModelConfig:
    """cfg with action_dim from action_in_proj and horizon/denoise steps from config.json."""
    meta = _read_json(config_json) if config_json is not None else {}
    kind = meta.get("type")
    if isinstance(kind, str) and kind not in ("pi05", "pi0.5"):
        raise CheckpointError(f"{config_json} says this is a {kind!r} policy; load_pi05 reads pi0.5 "
                              "(LeRobot type 'pi05') checkpoints")
    changes: dict[str, int] = {}
    in_proj = shapes.get(LAYOUT_PREFIX[layout] + "action_in_proj.weight")
    if in_proj is not None and len(in_proj) == 2:
        changes["action_dim"] = int(in_proj[1])
        for key in ("action_dim", "max_action_dim"):
            if isinstance(meta.get(key), int) and meta[key] != in_proj[1]:
                raise CheckpointError(f"{config_json}: {key}={meta[key]} but action_in_proj.weight "
                                      f"has shape {list(in_proj)} (action_dim {in_proj[1]})")
    for key in ("action_horizon", "chunk_size"):
        if isinstance(meta.get(key), int) and meta[key] > 0:
            changes["horizon"] = meta[key]
            break
    if isinstance(meta.get("num_inference_steps"), int) and meta["num_inference_steps"] > 0:
        changes["denoise_steps"] = meta["num_inference_steps"]
    changes = {k: v for k, v in changes.items() if getattr(cfg.expert, k) != v}
    if changes:
        log.info("pi0.5 checkpoint sets %s (profile %s had %s)", changes, cfg.name,
                 {k: getattr(cfg.expert, k) for k in changes})
        cfg = cfg.with_expert(**changes)
    return cfg


def _layer_count(names, pattern: str) -> int:
    rx = re.compile(re.escape(pattern) + r"(\d+)\.")
    found = {int(m.group(1)) for n in names if (m := rx.match(n))}
    return max(found) + 1 if found else 0


def _hints(cfg: ModelConfig, names: set[str], prefix: str) -> list[str]:
    hints = []
    depths = {
        "vision": (_layer_count(names, prefix + VISION + "encoder.layers."), cfg.vision.depth),
        "backbone": (_layer_count(names, prefix + LANGUAGE + "layers."), cfg.backbone.depth),
        "expert": (_layer_count(names, prefix + EXPERT + "layers."), cfg.backbone.depth),
    }
    wrong = {k: v for k, v in depths.items() if v[0] != v[1]}
    if wrong:
        hints.append("layer counts differ: " + ", ".join(
            f"{k} has {got} in the checkpoint, profile {cfg.name!r} expects {want}"
            for k, (got, want) in wrong.items()))
    pi0 = [n for n in names if n.removeprefix(prefix).startswith(("state_proj.", "action_time_mlp_"))
           or re.fullmatch(re.escape(prefix + EXPERT) + r"(layers\.\d+\.(input|post_attention)_layernorm|norm)\.weight", n)]
    if pi0:
        hints.append("this looks like a pi0 (not pi0.5) checkpoint: it has state_proj / "
                     "action_time_mlp / non-adaptive expert norms")
    return hints


def plan_load(cfg: ModelConfig, shapes: dict[str, tuple[int, ...]], layout: str,
              expected: dict[str, tuple[int, ...]]) -> dict[str, str]:
    """Map every engine parameter to its checkpoint tensor; raise one CheckpointError
    naming all missing, unexpected and wrongly shaped tensors."""
    prefix = LAYOUT_PREFIX[layout]
    names = set(shapes)
    plan: dict[str, str] = {}
    missing, mismatched = [], []
    for ours, shape in expected.items():
        theirs = checkpoint_name(ours, layout)
        if ours == "backbone.embed_tokens.weight" and theirs not in names and prefix + LM_HEAD in names \
                and "backbone.lm_head.weight" not in expected:
            theirs = prefix + LM_HEAD        # tied weights saved under the lm_head name only
        if theirs not in names:
            missing.append(theirs)
            continue
        if tuple(shapes[theirs]) != tuple(shape):
            mismatched.append(f"{theirs}: checkpoint {list(shapes[theirs])}, model expects "
                              f"{list(shape)} (engine {ours})")
        plan[ours] = theirs
    consumed = set(plan.values()) | {prefix + n for n in IGNORED}
    if "backbone.lm_head.weight" not in expected and prefix + LM_HEAD in names:
        consumed.add(prefix + LM_HEAD)       # tied: checked for equality while loading
        embed = plan.get("backbone.embed_tokens.weight")
        if embed and embed != prefix + LM_HEAD and tuple(shapes[prefix + LM_HEAD]) != tuple(shapes[embed]):
            mismatched.append(f"{prefix + LM_HEAD}: checkpoint {list(shapes[prefix + LM_HEAD])}, "
                              f"tied to embed_tokens {list(shapes[embed])}")
    unexpected = sorted(names - consumed)
    if missing or unexpected or mismatched:
        lines = [f"pi0.5 checkpoint ({layout} layout) does not fit profile {cfg.name!r}:"]
        lines += [f"  hint: {h}" for h in _hints(cfg, names, prefix)]
        if mismatched:
            lines.append(f"  {len(mismatched)} tensor(s) with the wrong shape:")
            lines += [f"    {m}" for m in mismatched]
        if missing:
            lines.append(f"  {len(missing)} missing tensor(s):")
            lines += [f"    {m}" for m in sorted(missing)]
        if unexpected:
            lines.append(f"  {len(unexpected)} unexpected tensor(s):")
            lines += [f"    {u} {list(shapes[u])}" for u in unexpected]
        raise CheckpointError("\n".join(lines))
    return plan


def _check_tied(f, embed: str, head: str, chunk_bytes: int = 64 << 20) -> None:
    """embed_tokens and lm_head must hold the same values; compared in chunks of rows."""
    a, b = f.get_slice(embed), f.get_slice(head)
    rows, width = a.get_shape()[0], max(1, a.get_shape()[1])
    step = max(1, chunk_bytes // (4 * width))
    for start in range(0, rows, step):
        if not torch.equal(a[start:start + step], b[start:start + step]):
            raise CheckpointError(f"{head} differs from {embed} (rows from {start}); the pi0.5 "
                                  "backbone ties its LM head to the token embeddings")


def inspect_checkpoint(cfg: ModelConfig, checkpoint: str | os.PathLike) -> dict:
    """What a pi0.5 checkpoint holds, from the safetensors header only (no weights read):
    layout, tensor count, layer counts, widths, action dims, horizon and denoise steps,
    and `problems`: why load_pi05 would refuse it with profile `cfg` (empty: it loads)."""
    from safetensors import safe_open

    file = resolve_weights(checkpoint)
    with safe_open(str(file), framework="pt", device="cpu") as f:
        shapes = {n: tuple(f.get_slice(n).get_shape()) for n in f.keys()}
    layout = detect_layout(shapes)
    prefix = LAYOUT_PREFIX[layout]
    problems = []
    try:
        cfg = adapt_config(cfg, shapes, layout, file.parent / "config.json")
        with torch.device("meta"):
            expected = {k: tuple(v.shape) for k, v in VLAModel(cfg).state_dict().items()}
        plan_load(cfg, shapes, layout, expected)
    except CheckpointError as e:
        problems.append(str(e))
    embed = shapes.get(prefix + EMBED_TOKENS) or shapes.get(prefix + LM_HEAD) or (None, None)
    names = set(shapes)
    return {
        "weights": str(file), "layout": layout, "tensors": len(shapes),
        "bytes": file.stat().st_size,
        "layers": {"vision": _layer_count(names, prefix + VISION + "encoder.layers."),
                   "backbone": _layer_count(names, prefix + LANGUAGE + "layers."),
                   "expert": _layer_count(names, prefix + EXPERT + "layers.")},
        "vocab_size": embed[0], "backbone_width": embed[1],
        "expert_width": (shapes.get(prefix + "action_in_proj.weight") or (None,))[0],
        "model_action_dim": cfg.expert.action_dim, "horizon": cfg.expert.horizon,
        "denoise_steps": cfg.expert.denoise_steps, "problems": problems,
    }


def empty_model(cfg: ModelConfig, dtype: torch.dtype, device: torch.device) -> VLAModel:
    """A VLAModel with uninitialised parameters of the given dtype on the given device
    (no random init, no float32 copy); every parameter must then be filled."""
    with torch.device("meta"):
        model = VLAModel(cfg)
    nn.Module.to(model, dtype=dtype)          # meta -> meta: just the dtype
    model.to_empty(device=device)
    old = model.backbone.rope                 # plain tensors, not buffers: rebuild
    model.backbone.rope = Rope(cfg.backbone.head_dim, cfg.backbone.rope_theta,
                               old.cos.shape[0]).to(device)
    for mod_name, mod in model.named_modules():
        for attr, val in vars(mod).items():
            tensors = [val] if isinstance(val, torch.Tensor) else \
                [t for t in vars(val).values() if isinstance(t, torch.Tensor)] if isinstance(val, Rope) else []
            if any(t.is_meta for t in tensors):
                raise RuntimeError(f"empty_model: {mod_name}.{attr} is still on the meta device; "
                                   "teach models/pi05/checkpoint.empty_model to rebuild it")
    return model


def load_pi05(cfg: ModelConfig, checkpoint: str, tokenizer_path: str | None,
              dtype: str = "float32", device: str = "cpu") -> tuple[VLAModel, SentencePieceTokenizer]:
    """Load a LeRobot or openpi pi0.5 `model.safetensors` and PaliGemma's tokenizer.

    cfg: the pi0.5 profile (config.PI05 for the released models); action_dim and the
    horizon may be adjusted from the checkpoint (see the module docstring).
    Raises CheckpointError naming every mismatch, ValueError/FileNotFoundError for
    bad arguments or paths.
    """
    from safetensors import safe_open

    tok = load_paligemma_tokenizer(tokenizer_path)      # cheap: fail before the big read
    dt, dev = parse_dtype(dtype), parse_device(device)
    file = resolve_weights(checkpoint)
    with safe_open(str(file), framework="pt", device="cpu") as f:
        shapes = {n: tuple(f.get_slice(n).get_shape()) for n in f.keys()}
        layout = detect_layout(shapes)
        cfg = adapt_config(cfg, shapes, layout, file.parent / "config.json")
        if tok.vocab_size > cfg.backbone.vocab_size:
            raise CheckpointError(f"tokenizer {tok.path!r} has {tok.vocab_size} tokens but the "
                                  f"model's vocabulary is {cfg.backbone.vocab_size}: wrong tokenizer?")
        with torch.device("meta"):
            expected = {k: tuple(v.shape) for k, v in VLAModel(cfg).state_dict().items()}
        plan = plan_load(cfg, shapes, layout, expected)
        prefix = LAYOUT_PREFIX[layout]
        embed = plan.get("backbone.embed_tokens.weight")
        if "backbone.lm_head.weight" not in plan and prefix + LM_HEAD in shapes and embed != prefix + LM_HEAD:
            _check_tied(f, embed, prefix + LM_HEAD)
        log.info("loading pi0.5 %s checkpoint %s: %d tensors -> %s on %s", layout, file,
                 len(plan), dt, dev)
        model = empty_model(cfg, dt, dev)
        params = dict(model.named_parameters())
        with torch.no_grad():
            for ours, theirs in plan.items():
                t = f.get_tensor(theirs)
                if not t.is_floating_point():
                    raise CheckpointError(f"{theirs} has non-float dtype {t.dtype}")
                params[ours].copy_(t)
                del t
    model.requires_grad_(False)
    return model.eval().pack_weights(), tok


def export_state_dict(model: VLAModel, layout: str = "lerobot",
                      include_lm_head: bool = False) -> dict[str, torch.Tensor]:
    """The model's weights under the real checkpoint names (for tests and conversions).
    include_lm_head adds the tied `paligemma.lm_head.weight` as a separate copy."""
    out = {checkpoint_name(k, layout): v.detach().contiguous().clone()
           for k, v in model.state_dict().items()}
    if include_lm_head and model.backbone.lm_head is None:
        out[LAYOUT_PREFIX[layout] + LM_HEAD] = model.backbone.embed_tokens.weight.detach().clone()
    return out
