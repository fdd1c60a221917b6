"""The tokenizer of a Qwen3-VL / Xiaomi-Robotics-0 checkpoint directory (tokenizer.json).

Encoding is the `tokenizers` library's, straight from the checkpoint's tokenizer.json
(Qwen's byte-level BPE, its pre-tokenizer and NFC normaliser, its added tokens), with no
special tokens added: `encode(text)` is `Tokenizer.encode(text, add_special_tokens=False)`.
Added tokens written in the text (`<|im_start|>`, `<|image_pad|>`, ...) are still
recognised whole, which is how a rendered chat prompt becomes ids.

Decoding, `token_bytes(id)`, follows `decode(ids, skip_special_tokens=True)` so that the
engine's TextStream, which concatenates token_bytes, yields exactly the library's text:
- vocabulary tokens: the GPT-2 byte alphabet mapped back to the raw bytes (a token may
  hold part of a UTF-8 character; TextStream holds it back until it completes);
- added tokens marked special (control tokens: `<|im_end|>`, `<|endoftext|>`,
  `<|vision_start|>`, `<|image_pad|>`, ...): b"" (generated text never shows them);
- added tokens not marked special (Qwen3's `<think>`, `<tool_call>`, ...): their
  content's UTF-8 bytes, as the library prints them;
- ids without a token (the model's vocabulary is padded past the tokenizer's): b"".

Ids. `eos_ids` is the union of what the checkpoint declares: generation_config.json
`eos_token_id`, config.json `eos_token_id` (top level, text_config, XR-0's vlm_config),
tokenizer_config.json `eos_token`; generation stops at any of them. `bos_id` is the id of
tokenizer_config.json's `bos_token` (None for Qwen, which has no BOS). `special_ids`:
image_pad / video_pad / vision_start / vision_end from config.json's `image_token_id`,
`video_token_id`, `vision_start_token_id`, `vision_end_token_id` (checked against the
tokenizer's own tokens of those names where present), im_start / im_end / endoftext by
token name.

The chat template comes from tokenizer_config.json `chat_template` (a string, or a list
of {name, template} where "default" is taken), else chat_template.jinja, else
chat_template.json; `render_chat` renders it with the sandboxed renderer shared with
the SmolLM2 tokenizer (engine/text/chat_template.py).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ...text.byte_level_bpe import unicode_to_bytes
from ...text.chat_template import render_chat_template

TOKEN_NAMES = {"im_start": "<|im_start|>", "im_end": "<|im_end|>", "endoftext": "<|endoftext|>",
               "vision_start": "<|vision_start|>", "vision_end": "<|vision_end|>",
               "image_pad": "<|image_pad|>", "video_pad": "<|video_pad|>"}
CONFIG_IDS = {"image_pad": "image_token_id", "video_pad": "video_token_id",
              "vision_start": "vision_start_token_id", "vision_end": "vision_end_token_id"}


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _ids(value) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def _token_text(value) -> str | None:
    """tokenizer_config.json writes a token as a string or as {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


class Qwen3VLTokenizer:
    """Implements oxygen_ros.engine.text.tokenizer.Tokenizer, plus decode, special_ids and
    render_chat. Build it with `from_dir(checkpoint_dir)`."""

    def __init__(self, tokenizer, config: dict | None = None, tokenizer_config: dict | None = None,
                 generation_config: dict | None = None, chat_template: str | None = None, source: str = ""):
        config, tcfg, gen = config or {}, tokenizer_config or {}, generation_config or {}
        self._tk = tokenizer
        self.source = source
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        added = tokenizer.get_added_tokens_decoder()          # {id: AddedToken}
        self.vocab_size = max([self.vocab_size] + [i + 1 for i in added])
        self._check_byte_level()
        self._bytes = self._byte_table(added)

        vlm = config.get("vlm_config") if isinstance(config.get("vlm_config"), dict) else config
        text = vlm.get("text_config") or {}
        eos = set(_ids(gen.get("eos_token_id")))
        for d in (config, vlm, text):
            eos.update(_ids(d.get("eos_token_id")))
        eos_text = _token_text(tcfg.get("eos_token"))
        if eos_text is not None:
            eos.add(self._require(eos_text, "tokenizer_config.json eos_token"))
        if not eos:
            raise ValueError(f"{source}: no eos token in generation_config.json, config.json or "
                             "tokenizer_config.json")
        self.eos_ids = frozenset(eos)
        bos_text = _token_text(tcfg.get("bos_token"))
        self.bos_id = self._require(bos_text, "tokenizer_config.json bos_token") if bos_text else None

        special: dict[str, int] = {}
        for key, token in TOKEN_NAMES.items():
            tid = tokenizer.token_to_id(token)
            if tid is not None:
                special[key] = tid
        for key, cfg_key in CONFIG_IDS.items():
            value = vlm.get(cfg_key, config.get(cfg_key))
            if value is None:
                continue
            if key in special and special[key] != int(value):
                raise ValueError(f"{source}: config.json {cfg_key} = {value} but the tokenizer's "
                                 f"{TOKEN_NAMES[key]} is id {special[key]}: mismatched tokenizer?")
            special[key] = int(value)
        self.special_ids = special
        self.pad_id = gen.get("pad_token_id") if isinstance(gen.get("pad_token_id"), int) else None
        self.chat_template = chat_template
        self._bos_text, self._eos_text = bos_text or "", eos_text or ""

    # -- construction --------------------------------------------------------------------
    @classmethod
    def from_dir(cls, path: str | os.PathLike) -> "Qwen3VLTokenizer":
        """From a checkpoint directory holding tokenizer.json (and the config files above)."""
        from tokenizers import Tokenizer

        d = Path(path)
        if d.is_file():
            d = d.parent
        file = d / "tokenizer.json"
        if not file.is_file():
            raise FileNotFoundError(f"{file} not found: the checkpoint's tokenizer is needed for prompts and text")
        tcfg = _read_json(d / "tokenizer_config.json")
        return cls(Tokenizer.from_file(str(file)), config=_read_json(d / "config.json"), tokenizer_config=tcfg,
                   generation_config=_read_json(d / "generation_config.json"),
                   chat_template=find_chat_template(d, tcfg), source=str(d))

    def _check_byte_level(self) -> None:
        spec = json.loads(self._tk.to_str())
        decoder = spec.get("decoder") or {}
        kinds = [decoder.get("type")] + [x.get("type") for x in decoder.get("decoders") or ()]
        if "ByteLevel" not in kinds:
            raise ValueError(f"{self.source}: tokenizer.json has decoder {decoder.get('type')!r}; "
                             "Qwen3VLTokenizer reads byte-level BPE tokenizers only")

    def _byte_table(self, added) -> list[bytes]:
        dec = unicode_to_bytes()
        table = [b""] * self.vocab_size
        for token, tid in self._tk.get_vocab(with_added_tokens=False).items():
            if not all(c in dec for c in token):
                raise ValueError(f"{self.source}: token {tid} {token!r} is outside the byte-level alphabet")
            table[tid] = bytes(dec[c] for c in token)
        for tid, tok in added.items():
            table[tid] = b"" if tok.special else tok.content.encode("utf-8")
        return table

    def _require(self, token: str, what: str) -> int:
        tid = self._tk.token_to_id(token)
        if tid is None:
            raise ValueError(f"{self.source}: {what} {token!r} is not in tokenizer.json")
        return tid

    # -- the Tokenizer protocol ----------------------------------------------------------
    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        ids = self._tk.encode(text, add_special_tokens=False).ids
        if add_bos and self.bos_id is not None:
            ids = [self.bos_id] + ids
        return ids

    def token_bytes(self, token_id: int) -> bytes:
        return self._bytes[token_id] if 0 <= token_id < self.vocab_size else b""

    # -- extras ----------------------------------------------------------------------------
    def decode(self, ids) -> str:
        return b"".join(self.token_bytes(int(i)) for i in ids).decode("utf-8", errors="replace")

    def token_to_id(self, token: str) -> int | None:
        return self._tk.token_to_id(token)

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True, **context) -> str:
        """The prompt text of `messages` ([{"role", "content"}], content a string or a list
        of {"type": "text", "text"} / {"type": "image"} items) under the checkpoint's chat
        template. An image renders as ONE <|image_pad|>; the caller expands it to the
        image's token count. Extra keyword arguments reach the template (tools, ...)."""
        if not self.chat_template:
            raise ValueError(f"{self.source}: no chat template (tokenizer_config.json chat_template, "
                             "chat_template.jinja or chat_template.json)")
        return render_chat_template(self.chat_template, messages=messages,
                                    add_generation_prompt=add_generation_prompt,
                                    bos_token=self._bos_text, eos_token=self._eos_text, **context)


def find_chat_template(directory: Path, tokenizer_config: dict) -> str | None:
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):      # [{"name": ..., "template": ...}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    if isinstance(template, str) and template:
        return template
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    template = _read_json(directory / "chat_template.json").get("chat_template")
    return template if isinstance(template, str) and template else None
