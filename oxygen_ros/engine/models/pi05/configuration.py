"""The pi0.5 family's profiles: `tiny` (random, seconds on a CPU: tests), `pi05` (the released
model's sizes; weights from an openpi or LeRobot checkpoint) and `pi05-quarter` (pi0.5's
structure at a quarter of its widths, random: side-by-side benchmarks)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ...config import DecoderConfig


@dataclass(frozen=True)
class VisionConfig:
    image_size: int
    patch_size: int
    width: int
    depth: int
    num_heads: int
    mlp_dim: int
    norm_eps: float = 1e-6

    @property
    def tokens_per_image(self) -> int:
        return (self.image_size // self.patch_size) ** 2


@dataclass(frozen=True)
class ExpertConfig:
    """The action expert: same depth/heads as the backbone, its own widths."""
    width: int
    mlp_dim: int
    horizon: int = 10
    action_dim: int = 32
    denoise_steps: int = 10

    # per-token flow time in its adaptive norms: both Real-Time Chunking modes (engine/rtc.py)
    rtc_modes = ("guided", "trained")
    head_name = "pi0.5"

    @property
    def tokens(self) -> int:
        """KV entries the expert writes past the prefix: its action tokens."""
        return self.horizon


@dataclass(frozen=True)
class ModelConfig:
    name: str
    vision: VisionConfig
    backbone: DecoderConfig
    expert: ExpertConfig
    camera_slots: tuple[str, ...] = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
    # "bidirectional" is pi0.5's rule for the observation prefix; a causal LM such as
    # SmolLM2 speaks better English when its prefix stays causal.
    prefix_attention: str = "bidirectional"
    max_prompt_tokens: int = 200
    seed: int = 0
    extra_experts: tuple = ()      # further action experts on the prefix (Qwen3-VL models have them)
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def with_expert(self, **kw) -> "ModelConfig":
        return replace(self, expert=replace(self.expert, **kw))

TINY = ModelConfig(
    name="tiny",
    vision=VisionConfig(image_size=32, patch_size=8, width=32, depth=2, num_heads=2, mlp_dim=64),
    backbone=DecoderConfig(width=64, depth=3, mlp_dim=128, num_heads=4, num_kv_heads=1,
                           head_dim=16, vocab_size=260),
    expert=ExpertConfig(width=32, mlp_dim=64, horizon=10, action_dim=8, denoise_steps=10),
    max_prompt_tokens=160,
)

PI05 = ModelConfig(
    name="pi05",
    vision=VisionConfig(image_size=224, patch_size=14, width=1152, depth=27, num_heads=16,
                        mlp_dim=4304),
    backbone=DecoderConfig(width=2048, depth=18, mlp_dim=16384, num_heads=8, num_kv_heads=1,
                           head_dim=256, vocab_size=257152),
    expert=ExpertConfig(width=1024, mlp_dim=4096, horizon=50, action_dim=32, denoise_steps=10),
)

# pi0.5's structure at a quarter of its widths, random weights: the reference config
# for side-by-side comparison with the public OxyGen implementation.
PI05_QUARTER = ModelConfig(
    name="pi05-quarter",
    vision=VisionConfig(image_size=224, patch_size=14, width=288, depth=27, num_heads=4,
                        mlp_dim=1076),
    backbone=DecoderConfig(width=512, depth=18, mlp_dim=4096, num_heads=8, num_kv_heads=1,
                           head_dim=64, vocab_size=257152),
    expert=ExpertConfig(width=256, mlp_dim=1024, horizon=10, action_dim=32, denoise_steps=10),
    max_prompt_tokens=100,
)

PROFILES = {c.name: c for c in (TINY, PI05, PI05_QUARTER)}

