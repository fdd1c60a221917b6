"""Qwen3-VL's vision encoder and image preprocessing against transformers (test-only import).

The encoder reference is `model.visual` of a tiny random transformers
Qwen3VLForConditionalGeneration; our encoder loads its weights through the checkpoint
name mapping (prefix strip) and must give the same image embeddings and DeepStack
features in fp32. The preprocessing reference is transformers' slow (PIL) Qwen2-VL image
processor built with Qwen3-VL's settings. torchvision is not installed here, so the
"torch" resize mode is checked against F.interpolate's semantics as torchvision calls it
(bicubic, align_corners=False, antialias=True, uint8 on CPU; float32 + clamp + round
elsewhere), not against the fast processor itself.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from oxygen_ros.engine.layers.blocks import packed_groups
from oxygen_ros.engine.models.qwen3vl.configuration import Qwen3VLVisionConfig
from oxygen_ros.engine.models.qwen3vl.vision import Qwen3VLVisionEncoder, hf_vision_state_dict_to_ours
from oxygen_ros.engine.policy_io.errors import PolicyIOError
from oxygen_ros.engine.models.qwen3vl.image_processing import (Qwen3VLImageSettings, image_token_count,
                                                         qwen3vl_pixels, smart_resize,
                                                         torch_bicubic_resize)

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "Qwen3VLForConditionalGeneration"):
    pytest.skip("this transformers has no Qwen3-VL", allow_module_level=True)
from transformers.models.qwen2_vl import image_processing_pil_qwen2_vl as hf_pil  # noqa: E402

ATOL = 1e-4
MIN_PIXELS, MAX_PIXELS = 65536, 16384 * 32 * 32     # Qwen3-VL's published preprocessor sizes

VISION_CONFIGS = {
    # npos 64: an 8 x 8 learned grid, resampled up (16 x 16) and down (2 x 2)
    "tanh": dict(depth=3, hidden_size=64, num_heads=4, intermediate_size=128, out_hidden_size=64,
                 num_position_embeddings=64, deepstack_visual_indexes=[0, 1], hidden_act="gelu_pytorch_tanh"),
    # deepstack indexes out of layer order, exact GELU, a 4 x 4 grid
    "erf": dict(depth=2, hidden_size=32, num_heads=2, intermediate_size=64, out_hidden_size=64,
                num_position_embeddings=16, deepstack_visual_indexes=[1, 0], hidden_act="gelu"),
}


def hf_model(vision: dict):
    torch.manual_seed(0)
    cfg = transformers.Qwen3VLConfig(
        vision_config=vision,
        text_config=dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16))
    model = transformers.Qwen3VLForConditionalGeneration._from_config(cfg, attn_implementation="eager").eval()
    with torch.no_grad():   # well away from the init's near-identity layers, so errors show
        for p in model.model.visual.parameters():
            p.normal_(0.0, 0.25)
    return model


@pytest.fixture(scope="module", params=sorted(VISION_CONFIGS))
def pair(request):
    hf = hf_model(VISION_CONFIGS[request.param])
    ours = Qwen3VLVisionEncoder(Qwen3VLVisionConfig.from_hf_dict(hf.config.to_dict())).eval()
    ours.load_state_dict(hf_vision_state_dict_to_ours(hf.state_dict()), strict=True)
    return hf, ours


def random_pixels(grid, seed=1):
    g = torch.Generator().manual_seed(seed)
    n = sum(t * h * w for t, h, w in grid)
    return torch.randn(n, 3 * 2 * 16 * 16, generator=g), torch.tensor(grid)


def compare(hf, ours, pixel_values, grid_thw):
    with torch.no_grad():
        ref = hf.model.visual(pixel_values, grid_thw=grid_thw)
        embeds, deepstack = ours(pixel_values, grid_thw)
    assert embeds.shape == ref.pooler_output.shape == (pixel_values.shape[0] // 4, 64)
    assert len(deepstack) == len(ref.deepstack_features) == 2
    diffs = [(embeds - ref.pooler_output).abs().max().item()]
    for a, b in zip(deepstack, ref.deepstack_features):
        assert a.shape == b.shape
        diffs.append((a - b).abs().max().item())
    assert ref.pooler_output.abs().mean() > 0.5      # a non-trivial signal to compare
    assert max(diffs) <= ATOL, diffs
    return embeds, deepstack


def test_config_from_hf_dict(pair):
    hf, ours = pair
    cfg = ours.cfg
    v = hf.config.vision_config
    assert (cfg.depth, cfg.hidden_size, cfg.num_heads, cfg.out_hidden_size) == \
        (v.depth, v.hidden_size, v.num_heads, v.out_hidden_size)
    assert cfg.deepstack_visual_indexes == tuple(v.deepstack_visual_indexes)
    assert cfg.rope_theta == 10000.0 and cfg.patch_dim == 1536
    assert Qwen3VLVisionConfig.from_hf_dict(v.to_dict()) == cfg     # the bare vision_config dict too


def test_one_image_from_the_processor(pair):
    hf, ours = pair
    image = np.random.default_rng(3).integers(0, 256, (224, 224, 3), dtype=np.uint8)
    pixel_values, grid = qwen3vl_pixels(image)
    assert grid.tolist() == [[1, 16, 16]]
    compare(hf, ours, pixel_values, grid)


def test_two_images_of_different_sizes_in_one_call(pair):
    hf, ours = pair
    rng = np.random.default_rng(4)
    images = [rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
              rng.integers(0, 256, (120, 160, 3), dtype=np.uint8)]
    pixel_values, grid = qwen3vl_pixels(images)
    assert grid.tolist() == [[1, 16, 16], [1, 14, 20]]
    embeds, deepstack = compare(hf, ours, pixel_values, grid)
    # attention stays within each image: the second image alone gives its rows of the pair
    with torch.no_grad():
        alone, alone_ds = ours(pixel_values[256:], grid[1:])
    assert (alone - embeds[64:]).abs().max() <= 1e-5
    assert (alone_ds[0] - deepstack[0][64:]).abs().max() <= 1e-5


def test_small_odd_and_temporal_grids(pair):
    hf, ours = pair
    # 2 x 2 (downsampled positions), non-square, and t = 2 (per-frame attention, as transformers)
    compare(hf, ours, *random_pixels([[1, 2, 2], [1, 4, 6], [2, 4, 4], [1, 6, 4]]))


def test_packed_weights_give_the_same_features(pair):
    hf, _ = pair
    ours = Qwen3VLVisionEncoder(Qwen3VLVisionConfig.from_hf_dict(hf.config.to_dict())).eval()
    ours.load_state_dict(hf_vision_state_dict_to_ours(hf.state_dict()), strict=True)
    groups = packed_groups(ours)
    assert len(groups) == 4 * ours.cfg.depth + 2 * (1 + len(ours.cfg.deepstack_visual_indexes))
    for group in groups:
        group.pack()
    compare(hf, ours, *random_pixels([[1, 8, 8], [1, 4, 6]]))


def test_the_comparison_can_fail(pair):
    """Swapping a grid's h and w keeps every shape but moves the positions: must be caught."""
    hf, ours = pair
    pixel_values, grid = random_pixels([[1, 4, 6]])
    with torch.no_grad():
        ref = hf.model.visual(pixel_values, grid_thw=grid).pooler_output
        wrong, _ = ours(pixel_values, torch.tensor([[1, 6, 4]]))
    assert (wrong - ref).abs().max() > 100 * ATOL


def test_state_dict_mapping_is_a_prefix_strip(pair):
    hf, ours = pair
    visual = {k for k in hf.state_dict() if k.startswith("model.visual.")}
    assert {"model.visual." + k for k in ours.state_dict()} == visual
    assert set(hf.model.visual.state_dict()) == set(ours.state_dict())
    with pytest.raises(ValueError, match="model.visual"):
        hf_vision_state_dict_to_ours({"lm_head.weight": torch.zeros(1)})


def test_encoder_input_errors(pair):
    _, ours = pair
    pixel_values, grid = random_pixels([[1, 4, 4]])
    with pytest.raises(ValueError, match="pixel_values"):
        ours(pixel_values[:, :-1], grid)
    with pytest.raises(ValueError, match="pixel_values"):
        ours(pixel_values.to(torch.int64), grid)
    with pytest.raises(ValueError, match="describes 32 patches"):
        ours(pixel_values, torch.tensor([[2, 4, 4]]))
    with pytest.raises(ValueError, match="multiples"):
        ours(random_pixels([[1, 3, 4]])[0], torch.tensor([[1, 3, 4]]))
    with pytest.raises(ValueError, match="grid_thw"):
        ours(pixel_values, grid.float())
    with pytest.raises(ValueError, match="grid_thw"):
        ours(pixel_values, torch.tensor([1, 4, 4]))


@pytest.mark.parametrize("change, match", [
    (dict(num_position_embeddings=60), "square"),
    (dict(deepstack_visual_indexes=[3]), "deepstack"),
    (dict(hidden_act="relu6"), "hidden_act"),
    (dict(hidden_size=62), "num_heads"),
])
def test_config_errors(change, match):
    with pytest.raises(ValueError, match=match):
        Qwen3VLVisionConfig.from_hf_dict({**VISION_CONFIGS["tanh"], **change})


# ---------------------------------------------------------------- preprocessing

def hf_processor(**overrides):
    kwargs = dict(patch_size=16, merge_size=2, temporal_patch_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3,
                  size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS})
    kwargs.update(overrides)
    return hf_pil.Qwen2VLImageProcessorPil(**kwargs)


def frame(h, w, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_default_settings_are_qwen3vl():
    s = Qwen3VLImageSettings()
    assert (s.patch_size, s.merge_size, s.temporal_patch_size, s.factor) == (16, 2, 2, 32)
    assert (s.min_pixels, s.max_pixels) == (MIN_PIXELS, MAX_PIXELS)
    assert s.image_mean == s.image_std == (0.5, 0.5, 0.5) and s.resize_mode == "pil"
    hf = Qwen3VLImageSettings.from_hf_dict(hf_processor().to_dict(), resize_mode="torch")
    assert hf == Qwen3VLImageSettings(resize_mode="torch")


@pytest.mark.parametrize("h, w", [(224, 224), (120, 160), (160, 120), (256, 256)])
def test_pil_mode_matches_the_slow_processor(h, w):
    image = frame(h, w, seed=h + w)
    ref = hf_processor()(images=[image], return_tensors="pt")
    pixel_values, grid = qwen3vl_pixels(image)
    assert torch.equal(grid, ref["image_grid_thw"])
    assert pixel_values.dtype == torch.float32 and pixel_values.shape == ref["pixel_values"].shape
    assert torch.equal(pixel_values, ref["pixel_values"])     # bit-exact


def test_224_gives_a_16x16_grid_and_64_tokens():
    pixel_values, grid = qwen3vl_pixels(frame(224, 224))
    assert grid.tolist() == [[1, 16, 16]] and pixel_values.shape == (256, 1536)
    assert image_token_count(grid) == [64]
    assert image_token_count(torch.tensor([1, 14, 20])) == [70]
    assert image_token_count([[1, 16, 16], [2, 4, 6]]) == [64, 12]
    with pytest.raises(ValueError, match="grid_thw"):
        image_token_count([[1, 3, 4]])


def test_several_images_and_the_downscale_branch():
    images = [frame(224, 224, 1), frame(120, 160, 2), frame(480, 640, 3), frame(33, 517, 4)]
    for settings, proc in ((Qwen3VLImageSettings(), hf_processor()),
                           (Qwen3VLImageSettings(min_pixels=4096, max_pixels=128 * 128),
                            hf_processor(size={"shortest_edge": 4096, "longest_edge": 128 * 128}))):
        ref = proc(images=images, return_tensors="pt")
        pixel_values, grid = qwen3vl_pixels(images, settings)
        assert torch.equal(grid, ref["image_grid_thw"])
        assert torch.equal(pixel_values, ref["pixel_values"])


def test_smart_resize_matches_transformers():
    for h, w in [(1, 1), (31, 33), (120, 160), (224, 224), (480, 640), (720, 1280), (5000, 4000), (10, 1999)]:
        for lo, hi in ((MIN_PIXELS, MAX_PIXELS), (1024, 64 * 64)):
            assert smart_resize(h, w, 32, lo, hi) == hf_pil.smart_resize(h, w, 32, lo, hi)
    with pytest.raises(PolicyIOError, match="aspect ratio"):
        smart_resize(1, 300, 32, MIN_PIXELS, MAX_PIXELS)


def test_patch_order_is_the_processors():
    """Patch layout against transformers' own patchify on a pre-normalised image."""
    proc = hf_processor()
    chw = np.random.default_rng(5).standard_normal((3, 64, 96)).astype(np.float32)
    ref, gh, gw = proc.patchify(chw, patch_size=16, merge_size=2, temporal_patch_size=2)
    from oxygen_ros.engine.models.qwen3vl.image_processing import patchify
    ours, grid = patchify(torch.from_numpy(chw), Qwen3VLImageSettings())
    assert grid == (1, gh, gw) == (1, 4, 6)
    assert torch.equal(ours, torch.from_numpy(ref))


def test_torch_mode_is_torchvision_resize_semantics():
    s = Qwen3VLImageSettings(resize_mode="torch")
    for h, w in [(120, 160), (480, 640), (256, 256)]:
        image = frame(h, w, seed=h)
        pixel_values, grid = qwen3vl_pixels(image, s)
        size = smart_resize(h, w, 32, MIN_PIXELS, MAX_PIXELS)
        x = torch.from_numpy(image).permute(2, 0, 1).contiguous()[None]
        if size != (h, w):     # torchvision skips an unchanged size
            x = F.interpolate(x, size=size, mode="bicubic", align_corners=False, antialias=True)
        assert x.dtype == torch.uint8
        expected = ((x[0].float() - 127.5) / 127.5).numpy()
        ref, gh, gw = hf_processor().patchify(expected, patch_size=16, merge_size=2, temporal_patch_size=2)
        assert grid.tolist() == [[1, gh, gw]]
        assert torch.equal(pixel_values, torch.from_numpy(ref))
        # the uint8 kernel is PIL-like: within one level of the slow processor
        assert (pixel_values - qwen3vl_pixels(image)[0]).abs().max() <= 1 / 127.5 + 1e-6
    # the off-CPU path: float32 resize, clamp, round, uint8
    x = torch.from_numpy(frame(120, 160, 9)).permute(2, 0, 1).contiguous()[None]
    y = F.interpolate(x.float(), size=(224, 320), mode="bicubic", align_corners=False, antialias=True)
    assert torch.equal(torch_bicubic_resize(x, (224, 320), native_uint8=False),
                       y.clamp(0, 255).round().to(torch.uint8))
    assert torch_bicubic_resize(x, (120, 160)) is x


@pytest.mark.parametrize("bad, match", [
    (np.zeros((32, 32, 3), np.float32), "uint8"),
    (np.zeros((32, 32, 4), np.uint8), "HxWx3"),
    (np.zeros((32, 32), np.uint8), "HxWx3"),
    (np.zeros((3, 32, 32), np.uint8), "HxWx3"),
    (np.zeros((0, 32, 3), np.uint8), "empty"),
    (np.zeros((1, 300, 3), np.uint8), "aspect ratio"),
    ([], "non-empty"),
    ("image.png", "non-empty"),
    ([np.zeros((32, 32, 3), np.uint8), [1, 2, 3]], "image 1"),
])
def test_image_errors(bad, match):
    with pytest.raises(ValueError, match=match):
        qwen3vl_pixels(bad)


@pytest.mark.parametrize("kwargs, match", [
    (dict(resize_mode="cv2"), "resize_mode"),
    (dict(min_pixels=4096, max_pixels=1024), "min_pixels"),
    (dict(image_std=(0.5, 0.0, 0.5)), "std"),
    (dict(patch_size=0), "patch_size"),
])
def test_settings_errors(kwargs, match):
    with pytest.raises(PolicyIOError, match=match):
        Qwen3VLImageSettings(**kwargs)
