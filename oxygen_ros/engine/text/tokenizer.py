"""Tokenizer interface used by the engine, the byte-level tokenizer of the tiny profile,
and the incremental UTF-8 text stream that turns tokens into deltas."""
from __future__ import annotations

import codecs
from typing import Protocol


class Tokenizer(Protocol):
    bos_id: int | None
    eos_ids: frozenset[int]
    vocab_size: int

    def encode(self, text: str, add_bos: bool = False) -> list[int]: ...

    def token_bytes(self, token_id: int) -> bytes: ...


def decode(tok: Tokenizer, ids) -> str:
    return b"".join(tok.token_bytes(int(i)) for i in ids).decode("utf-8", errors="replace")


class ByteTokenizer:
    """Bytes 0..255 are tokens 0..255; then BOS, EOS, PAD. For the random `tiny` profile."""

    def __init__(self):
        self.bos_id, self.eos_id, self.pad_id = 256, 257, 258
        self.eos_ids = frozenset({self.eos_id})
        self.vocab_size = 260

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        ids = list(text.encode("utf-8"))
        return [self.bos_id] + ids if add_bos else ids

    def token_bytes(self, token_id: int) -> bytes:
        return bytes([token_id]) if token_id < 256 else b""


class TextStream:
    """Token ids in, valid UTF-8 text deltas out; the deltas concatenate to the full text.

    A multi-byte character split across tokens is held back until it completes; bytes
    that can never form valid UTF-8 become U+FFFD, exactly as a whole decode would.
    """

    def __init__(self, tok: Tokenizer):
        self.tok = tok
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""

    def push(self, token_id: int) -> str:
        delta = self._decoder.decode(self.tok.token_bytes(token_id))
        self.text += delta
        return delta

    def close(self) -> str:
        delta = self._decoder.decode(b"", final=True)
        self.text += delta
        return delta


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
