"""Policy I/O (oxygen_ros.engine.policy_io) against the public openpi / LeRobot formulas.

Expected numbers are worked out by hand in the comments, or computed independently with
PIL / F.interpolate for the image resizes; the checkpoints are written here in each
convention's real on-disk layout.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from oxygen_ros.engine.models.pi05.image_processing import SLOTS
from oxygen_ros.engine.policy_io import PolicyIOError
from oxygen_ros.engine.models.pi05.processor import load_policy_io
from oxygen_ros.engine.policy_io.deltas import to_absolute, to_delta
from pi05_fixtures import NORMALIZER_FILE, UNNORMALIZER_FILE, lerobot_ckpt, openpi_ckpt, write_json

RNG = np.random.default_rng(0)


QUANT = {"q01": [-2.0, 3.0], "q99": [2.0, 3.0]}          # second dim has zero range
ACT_QUANT = {"q01": [-2.0, -2.0, 3.0], "q99": [2.0, 2.0, 3.0]}


# ---------------------------------------------------------------- normalization, state side

def test_openpi_quantile_state_uses_plus_1e6(tmp_path):
    io = load_policy_io(openpi_ckpt(tmp_path, QUANT, ACT_QUANT))
    assert (io.convention, io.normalization) == ("openpi", "quantile")
    x = io.normalized_state(np.array([1.0, 3.5]))
    # (1 + 2) / (4 + 1e-6) * 2 - 1 = 6 / 4.000001 - 1 = 0.499999625000094 (not 0.5)
    assert x[0] == pytest.approx(0.499999625000094, abs=1e-12)
    assert x[0] != 0.5
    # zero range: (3.5 - 3) / (0 + 1e-6) * 2 - 1 = 999999
    assert x[1] == pytest.approx(999999.0, rel=1e-9)


def test_lerobot_quantile_state_eps_only_where_range_is_zero(tmp_path):
    io = load_policy_io(lerobot_ckpt(tmp_path, QUANT, ACT_QUANT, norm_map={
        "VISUAL": "IDENTITY", "STATE": "QUANTILES", "ACTION": "QUANTILES"}))
    assert (io.convention, io.normalization) == ("lerobot", "quantile")
    x = io.normalized_state(np.array([1.0, 3.5]))
    # 2 * (1 + 2) / 4 - 1 = 0.5 exactly (no epsilon on a non-zero range)
    assert x[0] == 0.5
    # zero range -> denominator eps = 1e-8: 2 * 0.5 / 1e-8 - 1 = 1e8 - 1
    assert x[1] == pytest.approx(1e8 - 1, rel=1e-12)


def test_lerobot_uses_the_steps_configured_eps(tmp_path):
    io = load_policy_io(lerobot_ckpt(tmp_path, QUANT, ACT_QUANT, eps=1e-3))
    # 2 * (3.5 - 3) / 1e-3 - 1 = 999
    assert io.normalized_state(np.array([1.0, 3.5]))[1] == pytest.approx(999.0, rel=1e-9)


def test_mean_std_both_conventions(tmp_path):
    ms = {"mean": [1.0], "std": [2.0]}
    openpi = load_policy_io(openpi_ckpt(tmp_path / "op", ms, ms), normalization="mean_std")
    # (5 - 1) / (2 + 1e-6) = 1.9999990000005
    assert openpi.normalized_state(np.array([5.0]))[0] == pytest.approx(1.9999990000005, abs=1e-12)
    lerobot = lerobot_ckpt(tmp_path / "lr", ms, ms, norm_map={"STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
                           config={"output_features": {"action": {"type": "ACTION", "shape": [1]}}})
    lr = load_policy_io(lerobot)
    assert lr.normalization == "mean_std"
    # float64 state: (5 - 1) / (2 + 1e-8) = 1.99999999000000005
    assert lr.normalized_state(np.array([5.0]))[0] == pytest.approx(1.99999999, abs=1e-14)
    # float32 state (LeRobot computes in the input's dtype): 2 + 1e-8 rounds to 2 in float32
    # (spacing there is 2.4e-7), so the result is exactly 4 / 2 = 2
    assert lr.normalized_state(np.array([5.0], dtype=np.float32))[0] == 2.0


def test_stats_longer_than_state_are_cut_shorter_is_an_error(tmp_path):
    io = load_policy_io(openpi_ckpt(tmp_path, QUANT, ACT_QUANT))
    # only the first dim's statistics apply to a 1-dim state
    assert io.normalized_state(np.array([1.0]))[0] == pytest.approx(0.499999625000094, abs=1e-12)
    with pytest.raises(PolicyIOError, match="3 dims"):
        io.normalized_state(np.array([1.0, 2.0, 3.0]))


@pytest.mark.parametrize("bad", [np.array([0.1, np.nan]), np.array([np.inf, 0.0]),
                                 np.zeros((2, 2)), np.array([])])
def test_bad_state_is_rejected(tmp_path, bad):
    io = load_policy_io(openpi_ckpt(tmp_path, QUANT, ACT_QUANT))
    with pytest.raises(PolicyIOError):
        io.prompt("task", bad)


# ---------------------------------------------------------------- discretization and prompts

def test_digitize_edges_and_no_clipping(tmp_path):
    io = load_policy_io(openpi_ckpt(tmp_path, QUANT, ACT_QUANT), normalization="none")
    state = np.array([-1.5, -1.0, -0.5, 0.0, 0.99, 1 - 2 / 256, 1.0, 1.5])
    # bins = floor((x + 1) * 128) inside [-1, 1): -1 -> 0, -0.5 -> 64, 0 -> 128,
    # 0.99 -> floor(254.72) = 254, 1 - 2/256 -> 255; no clipping: -1.5 -> -1, 1 and 1.5 -> 255
    assert io.prompt("t", state) == "Task: t, State: -1 0 64 128 254 255 255 255;\nAction: "


def test_prompt_cleans_task_text(tmp_path):
    io = load_policy_io(openpi_ckpt(tmp_path, QUANT, ACT_QUANT), normalization="none")
    # 0.5 -> floor(1.5 * 128) = 192; case is kept, only strip / "_" / "\n" change
    assert io.prompt("  Pick_up the\nbowl \n", np.array([0.0, 0.5])) == \
        "Task: Pick up the bowl, State: 128 192;\nAction: "
    assert io.prompt("", np.array([0.0])) == "Task: , State: 128;\nAction: "   # empty task allowed


def test_state_free_prompt_for_openpi_discrete_state_input_false(tmp_path):
    root = openpi_ckpt(tmp_path, QUANT, ACT_QUANT,
                       config={"action_horizon": 10, "discrete_state_input": False})
    io = load_policy_io(root)
    assert io.state_in_prompt is False and io.horizon == 10
    assert io.prompt(" open_the drawer ", None) == "open the drawer\n"
    assert load_policy_io(root, state_in_prompt=True).prompt("a", np.array([0.0, 3.0])).startswith("Task: a")
    assert load_policy_io(openpi_ckpt(tmp_path / "b", QUANT, ACT_QUANT)).state_in_prompt is True


class SentencePieceLike:
    """Bytes as ids, BOS = 1000 when asked (the project's tokenizer interface)."""

    def encode(self, text, add_bos=False):
        return ([1000] if add_bos else []) + list(text.encode())


class HuggingFaceLike:
    def encode(self, text, add_special_tokens=True):
        return ([2000] if add_special_tokens else []) + list(text.encode())


def test_prompt_tokens_bos_and_state_free_pieces(tmp_path):
    root = openpi_ckpt(tmp_path, QUANT, ACT_QUANT, config={"discrete_state_input": False})
    io = load_policy_io(root, normalization="none")
    # openpi: encode(cleaned, add_bos=True) + encode("\n")
    assert io.prompt_tokens("a_b", None, SentencePieceLike()) == [1000, ord("a"), ord(" "), ord("b"), 10]
    assert io.prompt_tokens("ab", None, HuggingFaceLike()) == [2000, ord("a"), ord("b"), 10]
    with pytest.raises(PolicyIOError, match="tokenizer"):
        io.prompt_tokens("ab", None)
    io.tokenizer = SentencePieceLike()
    assert io.prompt_tokens("ab")[0] == 1000


def test_long_prompt_keeps_first_200_tokens_with_warning(tmp_path, caplog):
    io = load_policy_io(openpi_ckpt(tmp_path, QUANT, ACT_QUANT), normalization="none")
    task = "x" * 300
    full = [1000] + list(f"Task: {task}, State: 128;\nAction: ".encode())
    with caplog.at_level(logging.WARNING):
        ids = io.prompt_tokens(task, np.array([0.0]), SentencePieceLike())
    assert ids == full[:200] and len(full) > 200
    assert any("200" in r.getMessage() for r in caplog.records)
    # a control loop cuts the same prompt every frame: warned again only every 1000th time
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        for _ in range(998):
            assert io.prompt_tokens(task, np.array([0.0]), SentencePieceLike()) == full[:200]
    assert not caplog.records
    with caplog.at_level(logging.WARNING):
        io.prompt_tokens(task, np.array([0.0]), SentencePieceLike())
    assert io.prompt_cuts == 1000 and "1000 prompts cut" in caplog.records[-1].getMessage()
    short = io.prompt_tokens("hi", np.array([0.0]), SentencePieceLike())
    assert short == [1000] + list(b"Task: hi, State: 128;\nAction: ")


# ---------------------------------------------------------------- actions

def test_openpi_unnormalize_then_cut_and_passthrough(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        io = load_policy_io(openpi_ckpt(tmp_path, QUANT, ACT_QUANT), action_dims=4)
    assert any("3..3" in r.getMessage() for r in caplog.records)   # dim 3 has no statistics
    chunk = np.full((2, 32), 0.5, dtype=np.float32)
    out = io.actions(chunk)
    assert out.shape == (2, 4) and out.dtype == np.float64
    # (0.5 + 1) / 2 * (4 + 1e-6) - 2 = 1.00000075
    assert out[0, 0] == pytest.approx(1.00000075, abs=1e-12)
    # zero range: 0.75 * 1e-6 + 3 = 3.00000075
    assert out[0, 2] == pytest.approx(3.00000075, abs=1e-12)
    # dim 3 is beyond the 3-dim statistics: passes through unchanged
    assert out[0, 3] == 0.5


def test_openpi_mean_std_pads_std_one(tmp_path):
    ms = {"mean": [1.0], "std": [2.0]}
    io = load_policy_io(openpi_ckpt(tmp_path, ms, ms), normalization="mean_std", action_dims=2)
    out = io.actions(np.full((1, 32), 2.0))
    # 2 * (2 + 1e-6) + 1 = 5.000002; beyond the stats openpi pads mean 0, std 1: 2 * (1 + 1e-6)
    assert out[0, 0] == pytest.approx(5.000002, abs=1e-12)
    assert out[0, 1] == pytest.approx(2.000002, abs=1e-12)


def test_lerobot_cut_then_unnormalize(tmp_path):
    io = load_policy_io(lerobot_ckpt(tmp_path, QUANT, ACT_QUANT, eps=1e-3))
    assert io.action_dims == 3           # from config.json output_features
    chunk = torch.full((50, 32), 0.5)
    chunk[:, 3:] = 99.0                  # cut away before anything else
    out = io.actions(chunk)
    assert out.shape == (50, 3)
    # (0.5 + 1) * 4 / 2 - 2 = 1 exactly; zero range: 1.5 * 1e-3 / 2 + 3 = 3.00075
    assert out[0, 0] == 1.0 and out[0, 1] == 1.0
    assert out[0, 2] == pytest.approx(3.00075, rel=1e-6)


def test_lerobot_mean_std_eps_only_on_the_way_in(tmp_path):
    ms = {"mean": [1.0], "std": [2.0]}
    root = lerobot_ckpt(tmp_path, ms, ms, norm_map={"STATE": "MEAN_STD", "ACTION": "MEAN_STD"}, eps=1e-3,
                        config={"output_features": {"action": {"type": "ACTION", "shape": [1]}}})
    io = load_policy_io(root)
    # in: (5 - 1) / (2 + 1e-3) = 1.999000499750...; out: 2 * 2 + 1 = 5 (no eps in the inverse)
    assert io.normalized_state(np.array([5.0]))[0] == pytest.approx(1.9990004997501, abs=1e-12)
    assert io.actions(np.array([[2.0]], dtype=np.float32))[0, 0] == 5.0


def test_none_normalization_is_identity(tmp_path):
    io = load_policy_io(openpi_ckpt(tmp_path, QUANT, ACT_QUANT), normalization="none", action_dims=2)
    chunk = RNG.normal(size=(4, 32)).astype(np.float32)
    np.testing.assert_array_equal(io.actions(chunk), chunk[:, :2])


def test_delta_actions_use_the_raw_state(tmp_path):
    io = load_policy_io(lerobot_ckpt(tmp_path, QUANT, ACT_QUANT), delta_action_mask=[True, False, True])
    out = io.actions(np.full((2, 32), 0.5, dtype=np.float32), np.array([10.0, 20.0, 30.0]))
    # unnormalized: [1, 1, 3 + 1.5 * 1e-8 / 2]; + raw state on dims 0 and 2 only
    np.testing.assert_allclose(out, [[11.0, 1.0, 33.0]] * 2, rtol=1e-7)
    with pytest.raises(PolicyIOError):
        io.actions(np.zeros((2, 32), dtype=np.float32), np.array([1.0]))     # state too short


def test_delta_absolute_round_trip():
    mask = [True, False, True, True]
    absolute = RNG.normal(size=(5, 6))
    state = RNG.normal(size=7)
    delta = to_delta(absolute, state, mask)
    np.testing.assert_array_equal(delta[:, 1], absolute[:, 1])          # unmasked dim untouched
    np.testing.assert_array_equal(delta[:, 4:], absolute[:, 4:])        # beyond the mask untouched
    np.testing.assert_allclose(delta[:, 0], absolute[:, 0] - state[0])
    np.testing.assert_allclose(to_absolute(delta, state, mask), absolute, rtol=0, atol=1e-12)


def test_actions_round_trip_through_normalized_delta(tmp_path):
    # absolute robot actions -> delta -> LeRobot quantile normalize by hand -> io.actions -> same
    io = load_policy_io(lerobot_ckpt(tmp_path, QUANT, {"q01": [-2.0, -1.0, 0.0], "q99": [2.0, 1.0, 4.0]}),
                        delta_action_mask=[True, True, False])
    state = np.array([0.25, -0.5, 9.0])
    absolute = np.array([[1.0, 0.0, 2.0], [0.5, -0.25, 3.0]])
    delta = to_delta(absolute, state, [True, True, False])
    q01, q99 = np.array([-2.0, -1.0, 0.0]), np.array([2.0, 1.0, 4.0])
    normalized = 2 * (delta - q01) / (q99 - q01) - 1
    chunk = np.zeros((2, 32), dtype=np.float32)
    chunk[:, :3] = normalized
    np.testing.assert_allclose(io.actions(chunk, state), absolute, atol=1e-6)


def test_bad_chunks_are_rejected(tmp_path):
    io = load_policy_io(openpi_ckpt(tmp_path, QUANT, ACT_QUANT))
    for bad in (np.zeros(32), np.zeros((4, 2)), np.zeros((4, 32), dtype=np.int64)):
        with pytest.raises(PolicyIOError):
            io.actions(bad)


# ---------------------------------------------------------------- images

def test_openpi_resize_with_pad_matches_pil(tmp_path):
    io = load_policy_io(openpi_ckpt(tmp_path, QUANT, ACT_QUANT))
    for h, w in ((480, 640), (240, 320)):
        img = RNG.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        pixels, mask = io.images({"base_0_rgb": img})
        assert pixels.shape == (1, 3, 224, 224) and pixels.dtype == torch.float32
        assert mask == [True, False, False]
        # ratio = w / 224 -> 168 x 224 resized, pasted at row int(56 / 2) = 28
        assert torch.all(pixels[0, :, :28] == -1) and torch.all(pixels[0, :, 196:] == -1)
        expected = np.asarray(Image.fromarray(img).resize((224, 168), Image.BILINEAR))
        expected = torch.from_numpy(expected.astype(np.float32) / 255 * 2 - 1).permute(2, 0, 1)
        torch.testing.assert_close(pixels[0, :, 28:196], expected, rtol=0, atol=1e-6)


def test_lerobot_resize_with_pad_matches_interpolate(tmp_path):
    io = load_policy_io(lerobot_ckpt(tmp_path, QUANT, ACT_QUANT))
    for h, w in ((480, 640), (240, 320)):
        img = RNG.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        pixels, _ = io.images({"left_wrist_0_rgb": img})
        assert pixels.shape == (1, 3, 224, 224)
        assert torch.all(pixels[0, :, :28] == -1) and torch.all(pixels[0, :, 196:] == -1)
        x = torch.from_numpy(img).permute(2, 0, 1)[None].float() / 255
        resized = F.interpolate(x, size=(168, 224), mode="bilinear", align_corners=False)
        torch.testing.assert_close(pixels[0, :, 28:196], resized[0].clamp(0, 1) * 2 - 1, rtol=0, atol=1e-6)
        # no antialias: downscaling with antialias would give a different picture
        smooth = F.interpolate(x, size=(168, 224), mode="bilinear", align_corners=False, antialias=True)
        assert (pixels[0, :, 28:196] - (smooth[0] * 2 - 1)).abs().max() > 0.05


def test_odd_padding_goes_bottom_right_in_both(tmp_path):
    # 200 x 300: ratio 300/224, resized int(200 / 1.339...) = 149 rows; 75 rows of padding:
    # 37 on top, 38 at the bottom
    img = np.full((200, 300, 3), 255, dtype=np.uint8)
    for root in (openpi_ckpt(tmp_path / "op", QUANT, ACT_QUANT), lerobot_ckpt(tmp_path / "lr", QUANT, ACT_QUANT)):
        pixels, _ = load_policy_io(root).images({"base_0_rgb": img})
        column = pixels[0, 0, :, 112]
        assert torch.all(column[:37] == -1) and torch.all(column[186:] == -1)
        assert column[37] > 0.9 and column[185] > 0.9


def test_square_images_are_not_resized(tmp_path):
    img = RNG.integers(0, 256, size=(224, 224, 3), dtype=np.uint8)
    expected = torch.from_numpy(img.astype(np.float32) / np.float32(255) * 2 - 1).permute(2, 0, 1)
    for root in (openpi_ckpt(tmp_path / "op", QUANT, ACT_QUANT), lerobot_ckpt(tmp_path / "lr", QUANT, ACT_QUANT)):
        pixels, _ = load_policy_io(root).images({"base_0_rgb": img})
        assert torch.equal(pixels[0], expected)


def test_camera_slots_order_mask_and_errors(tmp_path):
    io = load_policy_io(openpi_ckpt(tmp_path, QUANT, ACT_QUANT), image_size=16)
    base = np.zeros((16, 16, 3), dtype=np.uint8)
    right = np.full((16, 16, 3), 255, dtype=np.uint8)
    pixels, mask = io.images({"right_wrist_0_rgb": right, "left_wrist_0_rgb": None, "base_0_rgb": base})
    assert SLOTS == ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
    assert list(mask) == [True, False, True]
    assert pixels.shape == (2, 3, 16, 16)
    assert torch.all(pixels[0] == -1) and torch.all(pixels[1] == 1)       # slot order, not dict order
    for bad in ({"front": base}, {"base_0_rgb": base.astype(np.float32)}, {"base_0_rgb": base[..., 0]},
                {"base_0_rgb": None}, {}):
        with pytest.raises(PolicyIOError):
            io.images(bad)


# ---------------------------------------------------------------- reading checkpoints

def test_openpi_asset_id_selection(tmp_path):
    nested = "physical-intelligence/libero"
    root = openpi_ckpt(tmp_path, QUANT, ACT_QUANT, asset_id=nested)
    io = load_policy_io(root)                                  # the only folder (a nested id)
    assert io.asset_id == nested
    assert io.stats_files == [root / "assets" / nested / "norm_stats.json"]
    openpi_ckpt(tmp_path, {"q01": [0.0], "q99": [1.0]}, ACT_QUANT, asset_id="droid")
    with pytest.raises(PolicyIOError) as err:                  # two folders, none chosen
        load_policy_io(root)
    assert "droid" in str(err.value) and nested in str(err.value) and "asset_id" in str(err.value)
    assert load_policy_io(root, asset_id="droid").asset_id == "droid"
    write_json(root / "config.json", {"action_horizon": 15, "data": {"assets": {"asset_id": "droid"}}})
    assert load_policy_io(root).asset_id == "droid"            # the config names it
    assert load_policy_io(root, asset_id=nested).asset_id == nested   # the argument overrides
    with pytest.raises(PolicyIOError, match="trossen"):
        load_policy_io(root, asset_id="trossen")


def test_horizon_steps_and_action_dims_from_config(tmp_path):
    op = load_policy_io(openpi_ckpt(tmp_path / "op", QUANT, {"q01": [0.0] * 7, "q99": [1.0] * 7},
                                    config={"action_dim": 32, "action_horizon": 10}))
    assert (op.horizon, op.denoise_steps, op.action_dims) == (10, 10, 7)   # dims = len(actions stats)
    lr = load_policy_io(lerobot_ckpt(tmp_path / "lr", QUANT, ACT_QUANT, config={
        "chunk_size": 50, "n_action_steps": 10, "num_inference_steps": 5,
        "output_features": {"action": {"type": "ACTION", "shape": [3]}}}))
    assert (lr.horizon, lr.denoise_steps, lr.n_action_steps, lr.action_dims) == (50, 5, 10, 3)
    base = load_policy_io(lerobot_ckpt(tmp_path / "base", config={}), normalization="none")
    assert (base.horizon, base.denoise_steps, base.action_dims) == (50, 10, 32)   # defaults


def test_convention_detection(tmp_path):
    assert load_policy_io(lerobot_ckpt(tmp_path / "lr", QUANT, ACT_QUANT)).convention == "lerobot"
    assert load_policy_io(openpi_ckpt(tmp_path / "op", QUANT, ACT_QUANT)).convention == "openpi"
    (tmp_path / "bare").mkdir()
    with pytest.raises(PolicyIOError, match="policy_preprocessor.json.*assets"):
        load_policy_io(tmp_path / "bare")
    with pytest.raises(PolicyIOError):
        load_policy_io(tmp_path / "op", convention="limits")
    with pytest.raises(PolicyIOError):
        load_policy_io(tmp_path / "op", normalization="min_max")


def test_lerobot_reads_the_files_named_by_state_file(tmp_path):
    root = lerobot_ckpt(tmp_path, QUANT, ACT_QUANT)
    io = load_policy_io(root)
    assert io.stats_files == [root / NORMALIZER_FILE, root / UNNORMALIZER_FILE]
    assert "lerobot" in io.describe() and NORMALIZER_FILE in io.describe()


def test_lerobot_mode_falls_back_to_normalization_mapping(tmp_path):
    ms = {"mean": [0.0, 0.0], "std": [1.0, 1.0], "q01": [-1.0, -1.0], "q99": [1.0, 1.0]}
    ams = {k: v + [v[0]] for k, v in ms.items()}
    root = lerobot_ckpt(tmp_path, ms, ams, config={
        "normalization_mapping": {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
        "output_features": {"action": {"type": "ACTION", "shape": [3]}}})
    assert load_policy_io(root).normalization == "mean_std"


def test_lerobot_mixed_modes_need_an_explicit_choice(tmp_path):
    root = lerobot_ckpt(tmp_path, QUANT, ACT_QUANT, norm_map={"STATE": "QUANTILES", "ACTION": "MIN_MAX"})
    with pytest.raises(PolicyIOError, match="MIN_MAX"):
        load_policy_io(root)
    assert load_policy_io(root, normalization="quantile").normalization == "quantile"


def test_lerobot_base_checkpoint_without_stats_is_a_clear_error(tmp_path):
    # lerobot/pi05_base: normalizer steps with features {} and no state_file
    root = lerobot_ckpt(tmp_path, norm_map={"VISUAL": "IDENTITY", "STATE": "QUANTILES", "ACTION": "QUANTILES"})
    with pytest.raises(PolicyIOError) as err:
        load_policy_io(root)
    message = str(err.value)
    assert "policy_preprocessor.json" in message and "policy_postprocessor.json" in message
    assert "normalization='none'" in message and "state.q01" in message
    io = load_policy_io(root, normalization="none")
    assert io.stats_files == []
    chunk = np.full((50, 32), 0.25, dtype=np.float32)
    np.testing.assert_array_equal(io.actions(chunk), chunk[:, :3])


def test_openpi_missing_and_partial_statistics(tmp_path):
    (tmp_path / "empty" / "assets").mkdir(parents=True)
    with pytest.raises(PolicyIOError, match="norm_stats.json"):
        load_policy_io(tmp_path / "empty")
    partial = openpi_ckpt(tmp_path / "partial", {"q01": [0.0, 0.0]}, ACT_QUANT)     # no q99
    with pytest.raises(PolicyIOError) as err:
        load_policy_io(partial)
    assert "state.q99" in str(err.value) and "norm_stats.json" in str(err.value)
    no_actions = openpi_ckpt(tmp_path / "no_actions", QUANT)
    with pytest.raises(PolicyIOError, match="actions.q01"):
        load_policy_io(no_actions)
    assert load_policy_io(partial, normalization="none").normalization == "none"
    mean_std_only = openpi_ckpt(tmp_path / "ms", {"mean": [0.0], "std": [1.0]}, {"mean": [0.0], "std": [1.0]})
    with pytest.raises(PolicyIOError, match="normalization='mean_std'"):      # pi0.5 default: quantile
        load_policy_io(mean_std_only)
    assert load_policy_io(mean_std_only, normalization="mean_std").action_dims == 1


def test_openpi_disagreeing_stat_widths(tmp_path):
    with pytest.raises(PolicyIOError, match="width"):
        load_policy_io(openpi_ckpt(tmp_path, {"q01": [0.0, 0.0], "q99": [1.0]}, ACT_QUANT))


def test_lerobot_state_file_named_but_absent(tmp_path):
    root = lerobot_ckpt(tmp_path, QUANT, ACT_QUANT, write_unnormalizer_file=False)
    with pytest.raises(PolicyIOError) as err:
        load_policy_io(root)
    assert UNNORMALIZER_FILE in str(err.value) and "actions.q01" in str(err.value)
