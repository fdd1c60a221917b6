"""Plain text generation with the backbone alone (no images, no action expert), so it serves
language-only models too (a plain Qwen3-VL checkpoint, profile `qwen3vl`).

Runs the same code paths the engine uses for language: a KV pool from model.new_pool,
the prompt prefilled with causal attention (model.prefill on model.text_prefix(ids) when
the profile's prefix is causal, otherwise model.extend from position 0, which is causal
among the prompt tokens), the first token from model.greedy_next, then model.decode
one token at a time. Greedy; stops at EOS (not returned) or after max_new_tokens.
"""
from __future__ import annotations

import torch

from .layers.engine_model import EngineModel
from .text.tokenizer import Tokenizer


def prompt_ids(tok: Tokenizer, prompt: str, chat: bool = False, add_bos: bool | None = None) -> list[int]:
    """Token ids for `prompt`; chat=True wraps it as one user message (chat template,
    generation prompt appended). add_bos=None follows the tokenizer's default
    (SmolLM2's GGUF: no BOS; the byte tokenizers: BOS)."""
    if chat:
        # SmolLM2's tokenizer names it apply_chat_template, Qwen3-VL's render_chat
        apply = getattr(tok, "apply_chat_template", None) or getattr(tok, "render_chat", None)
        if apply is None:
            raise ValueError("this model's tokenizer has no chat template")
        text = apply([{"role": "user", "content": prompt}], add_generation_prompt=True)
        return tok.encode(text, add_bos=False)   # the template writes its own markers
    if add_bos is None:
        add_bos = getattr(tok, "add_bos_default", True)
    return tok.encode(prompt, add_bos=add_bos)


@torch.inference_mode()
def greedy_generate(model: EngineModel, tok: Tokenizer, ids: list[int], max_new_tokens: int,
                    stop_at_eos: bool = True) -> list[int]:
    """Greedy continuation of `ids`: the new token ids (EOS excluded)."""
    if not ids:
        raise ValueError("empty prompt: nothing to condition on")
    if max_new_tokens < 1:
        return []
    n = len(ids)
    pool = model.new_pool(1, n + max_new_tokens)
    if model.cfg.prefix_attention == "causal":
        hidden = model.prefill(model.text_prefix(ids), pool, 0)
    else:
        hidden = model.extend(torch.tensor([ids], dtype=torch.long, device=model.device), pool, 0, 0)
    token = int(model.greedy_next(hidden[:, -1])[0])
    out: list[int] = []
    length = n                       # KV entries written; the newest token goes at `length`
    while True:
        if stop_at_eos and token in tok.eos_ids:
            break
        out.append(token)
        if len(out) >= max_new_tokens:
            break
        nxt = model.decode(torch.tensor([token], device=model.device), pool,
                           torch.tensor([length], device=model.device))
        length += 1
        token = int(nxt[0])
    return out
