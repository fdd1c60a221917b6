"""Qwen3-VL VLAs (Xiaomi-Robotics-0's structure): the Qwen3-VL vision encoder and text
decoder (three-axis RoPE, DeepStack) with XR-0's action head, behind the engine's model
interface (VLAModel's: observation prefix, prefill, sample_actions, extend, decode).

What differs from pi0.5 and how it stays exact under OxyGen:
- the prefix is a `Prefix` (embeddings plus their (t, h, w) positions, rope_delta, the
  image rows and DeepStack features, and the state the action head reads), built from
  the camera frames at whatever size each camera sends (models/qwen3vl/image_processing.py);
- every request's position offset (rope_delta) lives in the KV pool (KVPool.offsets):
  prefill writes it to the prefix's slot, a fork or a move carries it with the K/V, and
  extend and decode add each row's own, so requests admitted in different frames with
  different image layouts decode in one batch (positions index + rope_delta on all
  three axes, which interleaved RoPE turns into plain 1-D RoPE);
- the prefix ends inside the user's turn (ChatML: `<|im_start|>user\\n`, each camera as
  vision_start, its image tokens, vision_end, then the instruction); a language request
  continues that turn and opens the assistant's (`request_ids`). A policy I/O may give the
  whole prompt instead (obs.extra["prompt_segments"]: text pieces, None where each camera
  goes, e.g. XR-0's deploy prompt, which closes its turns; then `request_turn` "new" makes
  every request a turn of its own);
- the action head reads the tail layers' prefix K/V in place (models/xr0/head.py), its
  positions from the prefix's max position + 1 = prefix length + rope_delta;
- further action experts (`extra_experts`) run on the same prefix, in order, after the
  first: XR-0-style heads read its K/V, hidden-state readers (StarVLA's PI_v3 head) the
  per-layer hidden states the prefill keeps in the pool (KVPool.hidden).
CUDA graphs and the native fused action path are pi0.5's (VLAModel) only: this model
runs eagerly (`supports_graphs` False).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ...config import DecoderConfig
from ...kv_pool import KVPool
from ...observation.observation import ObservationError
from .image_processing import image_token_count, qwen3vl_pixels
from ...transfer import to_device
from ...layers.decoder import Decoder
from ...layers.engine_model import EngineModel
from ...layers.mrope import rope_index, text_positions
from ...layers.random_init import init_random
from .configuration import Qwen3VLModelConfig
from .vision import Qwen3VLVisionEncoder


@dataclass
class Prefix:
    """One frame's observation prefix. `shape` is the embeddings' ([1, L, W]), so the
    engine reads its length as it reads a pi0.5 prefix tensor's."""
    embeds: torch.Tensor            # [1, L, W]
    positions: torch.Tensor         # [3, 1, L]
    rope_delta: int                 # max position + 1 - L
    visual_mask: torch.Tensor       # bool [1, L]: the image tokens
    deepstack: list                 # [n_image_tokens, W] per DeepStack layer
    state: torch.Tensor             # [1, state_dim] for the action head
    action_mask: torch.Tensor | None = None   # bool [action_dim]: the robot's active dims
    ids: list | None = None         # the prompt's token ids (image pads included)

    @property
    def shape(self) -> torch.Size:
        return self.embeds.shape


class Qwen3VLVLA(EngineModel):
    supports_graphs = False

    def __init__(self, cfg: Qwen3VLModelConfig):
        super().__init__()
        self.cfg = cfg
        if cfg.vision.encoder.out_hidden_size != cfg.backbone.width:
            raise ValueError(f"vision out_hidden_size {cfg.vision.encoder.out_hidden_size} != text width "
                             f"{cfg.backbone.width}")
        enc, img = cfg.vision.encoder, cfg.vision.images
        if (img.patch_size, img.temporal_patch_size, img.merge_size) != (
                enc.patch_size, enc.temporal_patch_size, enc.spatial_merge_size):
            raise ValueError(f"image processing (patch {img.patch_size}, temporal {img.temporal_patch_size}, merge "
                             f"{img.merge_size}) does not match the vision encoder (patch {enc.patch_size}, "
                             f"temporal {enc.temporal_patch_size}, merge {enc.spatial_merge_size})")
        self.visual = Qwen3VLVisionEncoder(cfg.vision.encoder)
        self.backbone = Decoder(cfg.backbone)
        bb = cfg.backbone
        # XR-0's head, StarVLA's (starvla-pi), or none (a plain Qwen3-VL checkpoint: language only)
        self.expert = None if cfg.expert is None else build_expert(cfg.expert, bb)
        self.extra_experts = nn.ModuleList(build_expert(e.cfg, bb) for e in cfg.extra_experts)
        names = [e.name for e in cfg.extra_experts]
        if len(set(names)) != len(names) or any(not n for n in names):
            raise ValueError(f"extra experts need distinct non-empty names, got {names}")

    # -- what the engine asks of every model (device, dtype, packing: EngineModel) -----
    def new_pool(self, capacity: int, max_len: int) -> KVPool:
        bb = self.cfg.backbone
        return KVPool(bb.depth, capacity, max_len, bb.num_kv_heads, bb.head_dim, dtype=self.dtype,
                      device=self.device, hidden_width=bb.width if self.cfg.reads_hidden_states else 0)

    # -- the observation prefix ------------------------------------------------------------
    def observation_prefix(self, obs, tok) -> Prefix:
        """The frame's Prefix from an engine.observation.observation.Observation: the present cameras
        in slot order (any sizes), the instruction (or obs.prompt_ids: the instruction's
        tokens as a policy I/O made them), and the state for the action head."""
        unknown = set(obs.images) - set(self.cfg.camera_slots)
        if unknown:
            raise ObservationError(f"unknown camera slot(s) {sorted(unknown)}; model slots: "
                                   f"{list(self.cfg.camera_slots)}")
        frames = [obs.images[s] for s in self.cfg.camera_slots if obs.images.get(s) is not None]
        text = list(obs.prompt_ids) if obs.prompt_ids is not None else tok.encode(obs.instruction.strip())
        if len(text) > self.cfg.max_prompt_tokens:
            raise ValueError(f"the instruction takes {len(text)} tokens, the limit is {self.cfg.max_prompt_tokens}")
        state = np.asarray(obs.state, dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(state)):
            raise ObservationError("state contains NaN or inf")
        return self.prefix(frames, text, state, tok, obs.extra.get("prompt_segments"), obs.extra.get("action_mask"))

    def prefix(self, frames: list, text_ids: list[int], state, tok, segments=None, action_mask=None) -> Prefix:
        """Prefix of camera frames (HxWx3 uint8, in slot order) and instruction tokens, or
        of `segments` (the whole prompt: text pieces, None where each frame goes; the
        tokenizer must know the special tokens written in them). The state goes to the
        action head as it is (zero-padded or cut to its state_dim)."""
        sp = self.cfg.special
        vision = self._encode_frames(frames)
        images = [[sp.vision_start, *[sp.image_pad] * n, sp.vision_end] for n in vision[3]]
        if segments is None:
            ids = [sp.im_start, *tok.encode("user\n"), *(t for image in images for t in image), *text_ids]
        else:
            if sum(s is None for s in segments) != len(images):
                raise ObservationError(f"the prompt has {sum(s is None for s in segments)} image places for "
                                       f"{len(images)} camera frames")
            pending, ids = iter(images), []
            for piece in segments:
                ids += next(pending) if piece is None else tok.encode(piece)
        return self._prefix_of(ids, vision, state, action_mask)

    def prefix_from_ids(self, frames: list, ids, state=None, action_mask=None) -> Prefix:
        """Prefix of a whole prompt given as token ids (e.g. a chat template's text encoded:
        `<|vision_start|><|image_pad|><|vision_end|>` per image) and the camera frames it
        shows, in order: each image_pad id (cfg.special.image_pad; one per frame) becomes
        that frame's image tokens, as transformers' Qwen3-VL processor expands it (only the
        pad: the vision_start before it, which every image needs, and the vision_end after
        it are the prompt's own). `state`: the action head's (None: zeros)."""
        sp = self.cfg.special
        ids = [int(t) for t in ids]
        pads = ids.count(sp.image_pad)
        if pads != len(frames):
            raise ObservationError(f"the prompt has {pads} image_pad token(s) for {len(frames)} camera frame(s): "
                                   "one per frame, before expansion")
        vision = self._encode_frames(frames)
        counts, expanded = iter(vision[3]), []
        for t in ids:
            expanded += [t] * next(counts) if t == sp.image_pad else [t]
        return self._prefix_of(expanded, vision, state, action_mask)

    def text_prefix(self, ids: list[int]) -> Prefix:
        """What `prefill` takes for a prompt of token ids alone (EngineModel.text_prefix)."""
        return self.prefix_from_ids([], ids)

    def _encode_frames(self, frames: list) -> tuple:
        """(image embeddings or None, DeepStack features, grids or None, tokens per frame)."""
        if not frames:
            return None, [], None, []
        try:
            pixels, grids = qwen3vl_pixels(frames, self.cfg.vision.images)
        except ValueError as e:
            raise ObservationError(f"camera image: {e}") from e
        counts = image_token_count(grids, self.cfg.vision.images.merge_size)
        embeds, deepstack = self.visual(to_device(pixels, self.device, self.dtype), grids)
        return embeds, deepstack, grids, counts

    def _prefix_of(self, ids: list[int], vision: tuple, state, action_mask) -> Prefix:
        """The Prefix of prompt ids (images expanded) and their frames' `_encode_frames`."""
        sp = self.cfg.special
        embeds, deepstack, grids, _ = vision
        positions, delta = rope_index(ids, grids, sp.image_pad, sp.vision_start,
                                      self.cfg.vision.encoder.spatial_merge_size)
        x = to_device([ids], self.device, torch.long)
        visual = x == sp.image_pad
        tokens = (self.backbone.embed_with_images(x, visual, embeds) if embeds is not None
                  else self.backbone.embed(x))
        state_dim = self.cfg.expert.state_dim if self.cfg.expert is not None else 0
        s = torch.zeros(1, state_dim, dtype=self.dtype, device=self.device)
        if state is not None:
            n = min(len(state), state_dim)
            s[0, :n] = torch.as_tensor(state[:n], dtype=self.dtype)
        mask = None if action_mask is None else torch.as_tensor(np.asarray(action_mask, dtype=bool), device=self.device)
        return Prefix(tokens, positions[:, None].to(self.device), int(delta), visual, list(deepstack), s, mask, ids)

    def request_ids(self, tok, prompt: str) -> list[int]:
        """A language request's tokens after the prefix: the prompt closes the user's
        turn (or, `request_turn` "new", is a user turn of its own) and the assistant's opens."""
        sp = self.cfg.special
        opening = [sp.im_start, *tok.encode("user\n" + prompt)] if self.cfg.request_turn == "new" \
            else tok.encode("\n" + prompt)
        return [*opening, sp.im_end, *tok.encode("\n"), sp.im_start, *tok.encode("assistant\n")]

    def prefill(self, prefix: Prefix, pool: KVPool, slot: int, layer_hidden: bool = False):
        """Run the prefix once into `slot` (causal) and record its rope_delta there; returns
        the hidden states [1, L, W] (before the final norm). The per-layer hidden states go
        to pool.hidden where the pool has it (a head reads them). layer_hidden=True: returns
        (hidden, per-layer hidden states [depth + 1, L, W], a tensor of the caller's own):
        the input embeddings, then each layer's output with DeepStack's addition
        (Decoder.forward; how they differ from transformers' output_hidden_states:
        docs/models.md)."""
        length = prefix.shape[1]
        if length > pool.max_len:
            raise ValueError(f"prefix of {length} tokens exceeds the KV slot length {pool.max_len}")
        mask = torch.ones(length, length, dtype=torch.bool, device=self.device).tril()[None, None]
        layers = pool.hidden if pool.hidden is not None or not layer_hidden else self._layer_buffer(length)
        hidden = self.backbone(prefix.embeds, prefix.positions, pool, slice(slot, slot + 1), 0, length, mask,
                               prefix.visual_mask, prefix.deepstack or None, layers)
        pool.lengths[slot] = length
        pool.offsets[slot] = prefix.rope_delta
        if not layer_hidden:
            return hidden
        return hidden, (layers[:, :length].clone() if layers is pool.hidden else layers)

    def expert_config(self, expert: int = 0):
        """Expert 0 is cfg.expert, then cfg.extra_experts in order."""
        return self.cfg.expert if expert == 0 else self.cfg.extra_experts[expert - 1].cfg

    def sample_actions(self, pool: KVPool, slot: int, prefix_len: int, noise: torch.Tensor,
                       fused: bool = False, rtc=None, prefix: Prefix | None = None,
                       expert: int = 0) -> torch.Tensor:
        """Expert `expert`'s action chunk [H, action_dim] from the frame's prefix in `slot`
        (the head reads its K/V or the pool's hidden states in place, and the prefix's
        state: its `chunk`). `fused` has no effect (pi0.5's native path)."""
        if self.expert is None:
            raise ValueError(f"{self.cfg.name} is a Qwen3-VL backbone without an action head: language only")
        if prefix is None:
            raise ValueError("the action heads read the frame's state: pass the frame's prefix")
        e = self.expert_config(expert)
        head = self.expert if expert == 0 else self.extra_experts[expert - 1]
        x = to_device(noise, self.device, self.dtype).reshape(1, e.horizon, e.action_dim)
        guide = rtc if rtc is not None and rtc.active(e.horizon) else None
        mask = prefix.action_mask if expert == 0 else None     # the robot type's, of the first expert
        return head.chunk(pool, slot, prefix_len, prefix, x, guide, mask)[0]

    # -- language ----------------------------------------------------------------------------
    def extend(self, ids: torch.Tensor, pool: KVPool, first_slot: int, start: int) -> torch.Tensor:
        """Request prompts [B, T] on top of prefixes of `start` tokens in slots first_slot..,
        each row at its own slot's rope_delta."""
        b, t = ids.shape
        if start + t > pool.max_len:
            raise ValueError(f"prefix {start} + prompt {t} tokens exceed the KV slot length {pool.max_len}")
        positions = text_positions(torch.full((b,), start, device=self.device), t,
                                   pool.offsets[first_slot:first_slot + b])
        mask = torch.ones(t, start + t, dtype=torch.bool, device=self.device)
        mask[:, start:] = torch.ones(t, t, dtype=torch.bool, device=self.device).tril()
        return self.backbone(self.backbone.embed(ids), positions, pool, slice(first_slot, first_slot + b),
                             start, start + t, mask[None, None])

    def decode(self, ids: torch.Tensor, pool: KVPool, lengths: torch.Tensor,
               read_len: int | None = None) -> torch.Tensor:
        """One batched greedy step for live slots 0..B-1 (VLAModel.decode), each row at its
        cache index + its own rope_delta. (`decode_logits`: the logits, for any slots.)"""
        hidden = self.decode_hidden(ids, pool, lengths, read_len, slice(0, ids.shape[0]))
        return self.backbone.logits(hidden[:, 0]).argmax(dim=-1)

    def decode_hidden(self, ids: torch.Tensor, pool: KVPool, lengths: torch.Tensor, read_len: int | None,
                      rows) -> torch.Tensor:
        """One decode step's hidden states [B, 1, W] in pool slots `rows` (a slice, or
        distinct slots as a LongTensor [B]), each row at its slot's rope_delta."""
        b = ids.shape[0]
        if read_len is None:
            read_len = int(lengths.max()) + 1
        hidden_pos = torch.arange(read_len, device=self.device)[None, :] > lengths[:, None]
        mask = torch.zeros(b, 1, 1, read_len, dtype=self.dtype, device=self.device)
        mask.masked_fill_(hidden_pos[:, None, None, :], float("-inf"))
        positions = text_positions(lengths, 1, pool.offsets[rows])
        return self.backbone(self.backbone.embed(ids[:, None]), positions, pool, rows, lengths, read_len, mask)


def build_expert(expert_cfg, bb: DecoderConfig) -> nn.Module:
    """An action head from its config (each head config builds its own module, checked
    against the backbone it reads: the backbone knows no head)."""
    if not hasattr(expert_cfg, "build"):
        raise ValueError(f"unknown action expert config {type(expert_cfg).__name__}: a head config "
                         "needs build(backbone_config)")
    return expert_cfg.build(bb)


def build_random_qwen3vl(cfg: Qwen3VLModelConfig, seed: int | None = None) -> Qwen3VLVLA:
    """Seeded random weights (tests and the CPU-size benchmark profile)."""
    model = Qwen3VLVLA(cfg)
    init_random(model, cfg.seed if seed is None else seed)
    return model.eval().pack_weights()
