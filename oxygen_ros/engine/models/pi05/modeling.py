"""The pi0.5-style Mixture-of-Transformers VLA: vision encoder, backbone LM, action expert."""
from __future__ import annotations

import torch
from torch import nn

from .configuration import ModelConfig
from ...layers.decoder import Decoder
from ...layers.engine_model import EngineModel
from ...layers.random_init import init_random
from .expert import ActionExpert
from ...kv_pool import KVPool
from ...observation.observation import ObservationError, camera_batch, prefix_text
from ...transfer import to_device
from .vision import VisionEncoder


class VLAModel(EngineModel):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.vision = VisionEncoder(cfg.vision, cfg.backbone.width)
        self.backbone = Decoder(cfg.backbone)
        self.expert = ActionExpert(cfg.expert, cfg.backbone)

    def new_pool(self, capacity: int, max_len: int) -> KVPool:
        bb = self.cfg.backbone
        return KVPool(bb.depth, capacity, max_len, bb.num_kv_heads, bb.head_dim,
                      dtype=self.dtype, device=self.device)

    # -- the observation prefix ------------------------------------------------------
    def observation_prefix(self, obs, tok) -> torch.Tensor:
        """The frame's prefix embeddings [1, L, W] from an engine.observation.observation.Observation:
        obs.pixels / obs.prompt_ids where a policy I/O made them, else the present cameras
        resized and pi0.5's "Task: ..., State: ...;" text with the state as 256 bins."""
        cfg = self.cfg
        size = cfg.vision.image_size
        if obs.pixels is not None:
            images = obs.pixels
            if images.ndim != 4 or tuple(images.shape[1:]) != (3, size, size):
                raise ObservationError(f"pixels must be [N, 3, {size}, {size}], got {list(images.shape)}")
        else:
            images = camera_batch(obs, cfg.camera_slots, size)
        ids = (obs.prompt_ids if obs.prompt_ids is not None
               else tok.encode(prefix_text(obs.instruction, obs.state), add_bos=True))
        if len(ids) > cfg.max_prompt_tokens:
            raise ValueError(f"instruction + state take {len(ids)} tokens, the limit is {cfg.max_prompt_tokens}")
        return self.embed_prefix(images, ids)

    def request_ids(self, tok, prompt: str) -> list[int]:
        """A language request's tokens after the prefix: the prompt as it is."""
        return tok.encode(prompt)

    def embed_request(self, ids: torch.Tensor) -> torch.Tensor:
        """Embeddings [B, T, W] of request prompt ids [B, T] (a profile may add learned ones)."""
        return self.backbone.embed(ids)

    def embed_prefix(self, images: torch.Tensor, prompt_ids: list[int]) -> torch.Tensor:
        """Valid camera images [N, 3, S, S] + prompt token ids -> prefix embeddings [1, L, W].

        Masked cameras are simply absent: they are never encoded and never enter the KV,
        which is equivalent to pi0.5's masking because masked tokens neither attend nor
        advance positions.
        """
        parts = []
        if images.shape[0]:
            parts.append(self.vision(to_device(images, self.device, self.dtype)).reshape(1, -1, self.cfg.backbone.width))
        ids = to_device([prompt_ids], self.device, torch.long)
        parts.append(self.backbone.embed(ids))
        return torch.cat(parts, dim=1)

    def prefill(self, prefix: torch.Tensor, pool: KVPool, slot: int, layer_hidden: bool = False):
        """Run the prefix once, writing its K/V into `slot`; returns hidden states [1, L, W]
        (before the final norm). layer_hidden=True: returns (hidden, per-layer hidden states
        [depth + 1, L, W]: the input embeddings, then each layer's output; Decoder.forward)."""
        length = prefix.shape[1]
        if length > pool.max_len:
            raise ValueError(f"prefix of {length} tokens exceeds the KV slot length {pool.max_len}")
        positions = torch.arange(length, device=self.device)[None]
        mask = None
        if self.cfg.prefix_attention == "causal":
            mask = torch.ones(length, length, dtype=torch.bool, device=self.device).tril()[None, None]
        layers = self._layer_buffer(length) if layer_hidden else None
        hidden = self.backbone(prefix, positions, pool, slice(slot, slot + 1), 0, length, mask, hidden_out=layers)
        pool.lengths[slot] = length
        return (hidden, layers) if layer_hidden else hidden

    def sample_actions(self, pool: KVPool, slot: int, prefix_len: int,
                       noise: torch.Tensor, fused: bool = False, rtc=None, prefix=None) -> torch.Tensor:
        """Flow-matching action chunk [H, D] from the prefix K/V in `slot` (read-only;
        `prefix` unused: pi0.5's expert reads only the K/V).
        `fused`: one native call for the whole sampling where available (same outputs).
        `rtc`: an engine.rtc.RTCGuide (Real-Time Chunking); None, mode "off" or nothing to
        guide samples exactly as without it."""
        e = self.cfg.expert
        if prefix_len + e.horizon > pool.max_len:
            raise ValueError("KV slot too short for prefix + action horizon")
        x = to_device(noise, self.device, self.dtype).reshape(1, e.horizon, e.action_dim)
        return self.expert.sample(x, pool, slot, prefix_len, self.backbone.rope, e.denoise_steps,
                                  fused, rtc)[0]

    # -- language ----------------------------------------------------------------------
    def extend(self, ids: torch.Tensor, pool: KVPool, first_slot: int, start: int) -> torch.Tensor:
        """Prefill request prompts [B, T] (right-padded) on top of a prefix of `start` tokens
        held in slots first_slot.. (one per row). Prompt tokens are causal among themselves
        and see the whole prefix. Returns hidden states [B, T, W]."""
        b, t = ids.shape
        if start + t > pool.max_len:
            raise ValueError(f"prefix {start} + prompt {t} tokens exceed the KV slot length {pool.max_len}")
        x = self.embed_request(ids)
        positions = torch.arange(start, start + t, device=self.device)[None].expand(b, t)
        mask = torch.ones(t, start + t, dtype=torch.bool, device=self.device)
        mask[:, start:] = torch.ones(t, t, dtype=torch.bool, device=self.device).tril()
        return self.backbone(x, positions, pool, slice(first_slot, first_slot + b), start,
                             start + t, mask[None, None])

    def decode(self, ids: torch.Tensor, pool: KVPool, lengths: torch.Tensor,
               read_len: int | None = None) -> torch.Tensor:
        """One batched decode step for the live slots 0..B-1.

        ids [B]: each row's newest token, written at position lengths[i]; rows attend
        over their own [0, lengths[i]] only. `read_len` (> every lengths[i]) lets the
        caller pass the bound from host-side bookkeeping, so no device sync is needed.
        Returns the next greedy token per row [B], on the device.
        (`decode_logits`: the logits, for any slots.)
        """
        hidden = self.decode_hidden(ids, pool, lengths, read_len, slice(0, ids.shape[0]))
        return self.backbone.logits(hidden[:, 0]).argmax(dim=-1)

    def decode_hidden(self, ids: torch.Tensor, pool: KVPool, lengths: torch.Tensor, read_len: int | None,
                      rows) -> torch.Tensor:
        """One decode step's hidden states [B, 1, W] in pool slots `rows` (a slice, or
        distinct slots as a LongTensor [B]); decode's contract otherwise."""
        b = ids.shape[0]
        if read_len is None:
            read_len = int(lengths.max()) + 1
        x = self.backbone.embed(ids[:, None])
        hidden_pos = torch.arange(read_len, device=self.device)[None, :] > lengths[:, None]
        mask = torch.zeros(b, 1, 1, read_len, dtype=self.dtype, device=self.device)
        mask.masked_fill_(hidden_pos[:, None, None, :], float("-inf"))     # additive, built once
        return self.backbone(x, lengths[:, None], pool, rows, lengths, read_len, mask)


def build_random_model(cfg: ModelConfig, seed: int | None = None) -> VLAModel:
    model = VLAModel(cfg)
    init_random(model, cfg.seed if seed is None else seed)
    return model.eval().pack_weights()
