"""A SentencePiece model (PaliGemma's `paligemma_tokenizer.model`) behind the engine's
Tokenizer protocol.

token_bytes() gives each id's exact UTF-8 bytes so that TextStream can stream text:
the word-boundary mark U+2581 becomes a space, byte-fallback pieces `<0xXX>` become
that single byte, control tokens (<pad>, <bos>, <eos>) give b"", the unknown token
gives " \u2047 " (what SentencePiece's own decoder prints). Unlike
SentencePiece's whole-string decode, the leading space of a word-initial piece is
kept: generated text continues a prompt, so " Hello" is the right delta.
"""
from __future__ import annotations

import os

PALIGEMMA_TOKENIZER_HELP = (
    "pi0.5 needs PaliGemma's SentencePiece tokenizer, a file named "
    "`paligemma_tokenizer.model` (about 4 MB). openpi downloads it to "
    "~/.cache/openpi/big_vision/paligemma_tokenizer.model from "
    "gs://big_vision/paligemma_tokenizer.model (public bucket); LeRobot's pi05 uses "
    "the equivalent `tokenizer.model` of the Hugging Face repo "
    "google/paligemma-3b-pt-224 (gated: accept the Gemma licence first). Copy it to "
    "the robot and set the node parameter `tokenizer_path` to it (load_pi05(..., "
    "tokenizer_path=PATH)); this package never downloads it."
)

_UNK_TEXT = " \u2047 ".encode("utf-8")


class SentencePieceTokenizer:
    """Implements engine.text.tokenizer.Tokenizer over a sentencepiece.SentencePieceProcessor."""

    def __init__(self, model_path: str):
        try:
            import sentencepiece as spm
        except ImportError as exc:  # pragma: no cover - sentencepiece is a dependency
            raise ImportError("the `sentencepiece` package is needed for the pi0.5 tokenizer "
                              "(pip install sentencepiece)") from exc
        if not os.path.isfile(model_path):
            raise FileNotFoundError(f"tokenizer model {model_path!r} does not exist. "
                                    + PALIGEMMA_TOKENIZER_HELP)
        self.path = model_path
        self.sp = spm.SentencePieceProcessor()
        try:
            ok = self.sp.Load(model_path)
        except Exception as exc:   # sentencepiece raises OSError/RuntimeError on bad files
            raise ValueError(f"{model_path!r} is not a SentencePiece model: {exc}") from exc
        if ok is False:
            raise ValueError(f"{model_path!r} is not a SentencePiece model")
        self.vocab_size = int(self.sp.GetPieceSize())
        bos, eos = int(self.sp.bos_id()), int(self.sp.eos_id())
        self.bos_id: int | None = bos if bos >= 0 else None
        self.eos_ids: frozenset[int] = frozenset({eos} if eos >= 0 else ())
        self.pad_id: int | None = int(self.sp.pad_id()) if self.sp.pad_id() >= 0 else None
        self._bytes: dict[int, bytes] = {}

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        ids = [int(i) for i in self.sp.EncodeAsIds(text)]
        return [self.bos_id] + ids if add_bos and self.bos_id is not None else ids

    def token_bytes(self, token_id: int) -> bytes:
        cached = self._bytes.get(token_id)
        if cached is not None:
            return cached
        out = self._piece_bytes(int(token_id))
        self._bytes[token_id] = out
        return out

    def _piece_bytes(self, i: int) -> bytes:
        if not 0 <= i < self.vocab_size:
            return b""                         # ids past the tokenizer's vocabulary
        sp = self.sp
        if sp.IsControl(i):
            return b""
        if sp.IsUnknown(i):
            return _UNK_TEXT
        piece = sp.IdToPiece(i)
        if sp.IsByte(i):                       # "<0xXX>"
            return bytes([int(piece[3:5], 16)])
        return piece.replace("\u2581", " ").encode("utf-8")

    def decode(self, ids) -> str:
        return b"".join(self.token_bytes(int(i)) for i in ids).decode("utf-8", errors="replace")


def load_paligemma_tokenizer(path: str | None) -> SentencePieceTokenizer:
    if path is None or str(path).strip() == "":
        raise ValueError("no tokenizer given for the pi0.5 model. " + PALIGEMMA_TOKENIZER_HELP)
    return SentencePieceTokenizer(os.fspath(os.path.expanduser(str(path))))
