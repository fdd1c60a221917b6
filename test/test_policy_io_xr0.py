"""XR-0 policy I/O (oxygen_ros.engine.models.xr0.processor) against the deploy path's rules.

The checkpoints are written here in the format the module reads (processor_config.json
"action_config": {robot_type: {"mean": [1, H, 32], "std": [1, H, 32]}}, assumption A1 of
the module); expected numbers are worked out by hand in the comments.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from oxygen_ros.engine.policy_io.errors import PolicyIOError
from oxygen_ros.engine.models.xr0.policy_io_loader import load_xr0_policy_io

H_LIBERO, H_CALVIN = 10, 4


def _stats(h: int, active: int, mean0: float, std0: float):
    """mean[t, d] = mean0 + t + d / 10 and std[t, d] = std0 * (d + 1) on the active dims,
    mean 0 / std 0 on the rest (an inactive dim's std is 0, as in masked statistics)."""
    mean = np.zeros((h, 32))
    std = np.zeros((h, 32))
    for t in range(h):
        for d in range(active):
            mean[t, d] = mean0 + t + d / 10
            std[t, d] = std0 * (d + 1)
    return mean, std


def write_ckpt(tmp_path, *, file="processor_config.json", extra_types=None, preprocessor=None):
    lm, ls = _stats(H_LIBERO, 7, 0.0, 0.5)
    cm, cs = _stats(H_CALVIN, 7, 1.0, 0.25)
    cs[:, 3] = 1e-6                       # below the 1e-5 mask threshold: dim 3 inactive
    config = {"libero_all": {"mean": [lm.tolist()], "std": [ls.tolist()]},      # [1, H, 32]
              "calvin_abcd_orig": {"mean": cm.tolist(), "std": cs.tolist()}}    # [H, 32]
    # a bimanual type: dims 0-6 and 14-20 active (XR-0's left/right EE + gripper slots)
    bm, bs = np.zeros((2, 32)), np.zeros((2, 32))
    bs[:, 0:7] = 1.0
    bs[:, 14:21] = 2.0
    bm[:, 14:21] = 5.0
    config["agibot_pt_v3"] = {"mean": bm.tolist(), "std": bs.tolist()}
    config.update(extra_types or {})
    (tmp_path / "config.json").write_text(json.dumps({"state_dim": 32, "action_dim": 32, "action_length": 30}))
    (tmp_path / file).write_text(json.dumps({"processor_class": "MiBotProcessor", "action_config": config}))
    if preprocessor is not None:
        (tmp_path / "preprocessor_config.json").write_text(json.dumps(preprocessor))
    return tmp_path


# ---------------------------------------------------------------- robot types, masks

def test_robot_types_horizons_and_masks(tmp_path):
    io = load_xr0_policy_io(write_ckpt(tmp_path), "libero_all")
    assert io.robot_types == ["libero_all", "calvin_abcd_orig", "agibot_pt_v3"]
    assert io.horizon() == H_LIBERO and io.horizon("calvin_abcd_orig") == H_CALVIN
    lib = io.action_mask("libero_all")
    assert lib.dtype == bool and lib.shape == (32,)
    assert lib.tolist() == [True] * 7 + [False] * 25
    cal = io.action_mask("calvin_abcd_orig")
    assert np.flatnonzero(cal).tolist() == [0, 1, 2, 4, 5, 6]          # std 1e-6 <= 1e-5
    bi = io.action_mask("agibot_pt_v3")
    assert np.flatnonzero(bi).tolist() == list(range(7)) + list(range(14, 21))
    m = io.model_action_mask("calvin_abcd_orig")
    assert m.dtype == np.float32 and m.shape == (H_CALVIN, 32)
    assert m[:, 3].sum() == 0 and m[:, :3].sum() == 3 * H_CALVIN


def test_unknown_robot_type_lists_known(tmp_path):
    io = load_xr0_policy_io(write_ckpt(tmp_path), "libero_all")
    with pytest.raises(PolicyIOError, match=r"unknown robot_type 'franka'.*libero_all, calvin_abcd_orig, agibot_pt_v3"):
        io.action_mask("franka")
    with pytest.raises(PolicyIOError, match="unknown robot_type 'franka'"):
        load_xr0_policy_io(tmp_path, "franka")
    with pytest.raises(PolicyIOError, match="no robot_type given"):
        load_xr0_policy_io(tmp_path).state_vector([0.0])   # three types, no default


def test_single_robot_type_is_default(tmp_path):
    io = load_xr0_policy_io(write_ckpt(tmp_path), "calvin_abcd_orig")
    assert io.robot_type == "calvin_abcd_orig"
    only = tmp_path / "only"
    only.mkdir()
    m, s = _stats(3, 2, 0.0, 1.0)
    (only / "processor_config.json").write_text(json.dumps({"action_config": {"x": {"mean": m.tolist(), "std": s.tolist()}}}))
    assert load_xr0_policy_io(only).robot_type == "x"


# ---------------------------------------------------------------- state

def test_state_is_raw_and_zero_padded(tmp_path):
    io = load_xr0_policy_io(write_ckpt(tmp_path), "libero_all")
    # LIBERO client state: eef_pos 3 + axis-angle 3 + gripper_qpos 2, then 24 zeros
    raw = np.array([0.1, -0.2, 1.3, 3.0, 0.0, -0.5, 0.04, -0.04])
    v = io.state_vector(raw)
    assert v.dtype == np.float32 and v.shape == (32,)
    np.testing.assert_array_equal(v[:8], raw.astype(np.float32))     # no normalisation
    assert not v[8:].any()
    assert io.state_vector(np.arange(32.0)).tolist() == list(range(32))


def test_state_errors(tmp_path):
    io = load_xr0_policy_io(write_ckpt(tmp_path), "libero_all")
    with pytest.raises(PolicyIOError, match="NaN or inf"):
        io.state_vector([0.0, float("nan")])
    with pytest.raises(PolicyIOError, match="NaN or inf"):
        io.state_vector([np.inf])
    with pytest.raises(PolicyIOError, match="33 dims, more than the model's state_dim 32"):
        io.state_vector(np.zeros(33))
    with pytest.raises(PolicyIOError, match="1-D numeric"):
        io.state_vector(np.zeros((2, 2)))
    with pytest.raises(PolicyIOError, match="1-D numeric"):
        io.state_vector([])


# ---------------------------------------------------------------- actions

def test_unnormalise_by_hand(tmp_path):
    io = load_xr0_policy_io(write_ckpt(tmp_path), "libero_all")
    y = np.zeros((H_LIBERO, 32), np.float32)
    y[0, 0] = 1.0      # t 0, dim 0: 1 * std(0.5 * 1) + mean(0 + 0 + 0)   = 0.5
    y[2, 3] = -2.0     # t 2, dim 3: -2 * (0.5 * 4) + (0 + 2 + 0.3)        = -4 + 2.3 = -1.7
    y[9, 6] = 0.5      # t 9, dim 6: 0.5 * (0.5 * 7) + (9 + 0.6)           = 1.75 + 9.6 = 11.35
    y[0, 10] = 99.0    # an inactive dim: dropped from the robot actions
    a = io.actions(y)
    assert a.shape == (H_LIBERO, 7) and a.dtype == np.float64
    assert a[0, 0] == pytest.approx(0.5)
    assert a[2, 3] == pytest.approx(-1.7)
    assert a[9, 6] == pytest.approx(11.35)
    assert a[5, 1] == pytest.approx(5.1)    # y = 0 gives the mean: 0 + 5 + 0.1
    full = io.decode(y)                      # decode_action on all 32 dims: x * std + mean
    assert full.shape == (H_LIBERO, 32) and full[0, 10] == pytest.approx(0.0)   # std 0, mean 0
    # torch input and a leading batch axis of 1, as the model returns [1, H, 32]
    np.testing.assert_allclose(io.actions(torch.from_numpy(y)[None]), a)


def test_unnormalise_eps_and_calvin_dims(tmp_path):
    io = load_xr0_policy_io(write_ckpt(tmp_path), "calvin_abcd_orig", unnormalize_eps=1e-6)
    y = np.full((H_CALVIN, 32), 2.0)
    a = io.actions(y)
    assert a.shape == (H_CALVIN, 6)          # dims 0, 1, 2, 4, 5, 6
    # t 1, dim 4 -> column 3: 2 * (0.25 * 5 + 1e-6) + (1 + 1 + 0.4) = 2.500002 + 2.4 = 4.900002
    # (eps scales with x: x * std + mean + eps would give 4.900001)
    assert a[1, 3] == pytest.approx(4.900002, abs=1e-12)


def test_bimanual_active_dims_and_override(tmp_path):
    io = load_xr0_policy_io(write_ckpt(tmp_path), "agibot_pt_v3")
    y = np.full((2, 32), 0.5)
    a = io.actions(y)
    assert a.shape == (2, 14)
    assert a[0, :7].tolist() == [0.5] * 7              # 0.5 * 1 + 0
    assert a[0, 7:].tolist() == [6.0] * 7              # 0.5 * 2 + 5
    io2 = load_xr0_policy_io(tmp_path, "agibot_pt_v3", active_dims={"agibot_pt_v3": [14, 0]})
    assert io2.actions(y).tolist() == [[0.5, 6.0]] * 2   # dim order, not the order given
    with pytest.raises(PolicyIOError, match="distinct dims"):
        load_xr0_policy_io(tmp_path, active_dims={"agibot_pt_v3": [40]})


def test_no_delta_by_default_and_delta_dims(tmp_path):
    io = load_xr0_policy_io(write_ckpt(tmp_path), "libero_all")
    y = np.zeros((H_LIBERO, 32))
    state = np.arange(1.0, 9.0)                         # 1..8
    np.testing.assert_array_equal(io.actions(y, state), io.actions(y))   # the deploy path adds none
    io_d = load_xr0_policy_io(tmp_path, "libero_all", delta_dims={"libero_all": [0, 2]})
    a = io_d.actions(y, state)
    # dim 0, t 3: mean 3 + state[0] 1 = 4; dim 2, t 3: mean 3.2 + state[2] 3 = 6.2; dim 1 untouched 3.1
    assert a[3, 0] == pytest.approx(4.0) and a[3, 2] == pytest.approx(6.2) and a[3, 1] == pytest.approx(3.1)
    with pytest.raises(PolicyIOError, match="pass the raw state"):
        io_d.actions(y)
    back = io_d.model_actions(a, state)
    np.testing.assert_allclose(back, y, atol=1e-12)
    with pytest.raises(PolicyIOError, match="not active action dims"):
        load_xr0_policy_io(tmp_path, delta_dims={"libero_all": [9]})


def test_model_actions_round_trip(tmp_path):
    io = load_xr0_policy_io(write_ckpt(tmp_path), "calvin_abcd_orig")
    rng = np.random.default_rng(0)
    y = rng.normal(size=(H_CALVIN, 32))
    y[:, ~io.action_mask()] = 0.0
    back = io.model_actions(io.actions(y))
    np.testing.assert_allclose(back, y, atol=1e-12)
    assert not back[:, 3].any() and not back[:, 7:].any()
    part = io.model_actions(io.actions(y)[:2])          # a remainder shorter than H
    np.testing.assert_allclose(part, y[:2], atol=1e-12)
    with pytest.raises(PolicyIOError, match=r"finite \[n <= 4, 6\]"):
        io.model_actions(np.zeros((2, 7)))


def test_chunk_shape_and_nan_errors(tmp_path):
    io = load_xr0_policy_io(write_ckpt(tmp_path), "libero_all")
    with pytest.raises(PolicyIOError, match=r"float \[10, 32\]"):
        io.actions(np.zeros((30, 32)))                  # the head's 30, not this type's 10
    with pytest.raises(PolicyIOError, match=r"float \[10, 32\]"):
        io.actions(np.zeros((10, 7)))
    bad = np.zeros((10, 32))
    bad[1, 1] = np.nan
    with pytest.raises(PolicyIOError, match="NaN or inf"):
        io.actions(bad)


# ---------------------------------------------------------------- prompt

EXPECTED_PROMPT = (
    "<|im_start|>user\nThe following observations are captured from multiple views.\n"
    "# Base View\n<|vision_start|><|image_pad|><|vision_end|>\n"
    "# Left-Wrist View\n<|vision_start|><|image_pad|><|vision_end|>\n"
    "Generate robot actions for the task:\nPick up the red block. /no_cot<|im_end|>\n"
    "<|im_start|>assistant\n<cot></cot><|im_end|>\n"
)


def test_prompt_text_exact(tmp_path):
    io = load_xr0_policy_io(write_ckpt(tmp_path), "libero_all")
    assert io.prompt_text("Pick up the red block.") == EXPECTED_PROMPT
    assert io.client_instruction("pick up the red block") == "Pick up the red block."
    # capitalize() lowercases the rest, as the eval clients' str.capitalize() does
    assert io.client_instruction("put the BBQ sauce") == "Put the bbq sauce."
    msgs = io.prompt_messages("Pick up the red block.")
    assert [m["role"] for m in msgs] == ["user", "assistant"]
    assert msgs[1]["content"] == [{"type": "text", "text": "<cot></cot>"}]
    assert sum(p["type"] == "image" for p in msgs[0]["content"]) == 2
    assert io.render_chatml(msgs) == EXPECTED_PROMPT
    with pytest.raises(PolicyIOError, match="must be a string"):
        io.prompt_text(None)


def test_bridge_prompt_is_verbatim_single_image(tmp_path):
    m, s = _stats(4, 7, 0.0, 1.0)
    io = load_xr0_policy_io(write_ckpt(tmp_path, extra_types={"bridge_delta": {"mean": m.tolist(), "std": s.tolist()}}),
                            "bridge_delta")
    text = "<|im_start|>user\nmy own prompt<|im_end|>\n"
    assert io.prompt_text(text) == text
    assert io.expected_images() == 1 and io.expected_images("libero_all") == 2
    with pytest.raises(PolicyIOError, match="verbatim"):
        io.prompt_messages("x")


# ---------------------------------------------------------------- images

def test_images_use_preprocessor_settings(tmp_path):
    pre = {"size": {"shortest_edge": 32 * 32 * 4, "longest_edge": 64 * 64}, "patch_size": 16,
           "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5] * 3, "image_std": [0.5] * 3,
           "image_processor_type": "Qwen2VLImageProcessor"}
    io = load_xr0_policy_io(write_ckpt(tmp_path, preprocessor=pre), "libero_all")
    assert io.image_settings.min_pixels == 4096 and io.image_settings.resize_mode == "pil"
    rng = np.random.default_rng(1)
    frames = [rng.integers(0, 256, (64, 64, 3), dtype=np.uint8), rng.integers(0, 256, (40, 70, 3), dtype=np.uint8)]
    pixels, grid = io.images(frames)
    # 64x64 stays 64x64 (4096 pixels): 4x4 patches; 40x70 -> round to 32s: 32x64 = 2048 < 4096
    # -> beta = sqrt(4096 / 2800) = 1.2095, ceil(40 * 1.2095 / 32) * 32 = 64, ceil(70 * 1.2095 / 32) * 32 = 96
    assert grid.tolist() == [[1, 4, 4], [1, 4, 6]]
    assert pixels.shape == (16 + 24, 3 * 2 * 16 * 16)
    with pytest.raises(PolicyIOError, match=r"2 image slot\(s\)"):
        io.images(frames[:1])
    with pytest.raises(PolicyIOError, match="list of HxWx3"):
        io.images(frames[0])
    assert load_xr0_policy_io(tmp_path, "libero_all", resize_mode="torch").image_settings.resize_mode == "torch"


# ---------------------------------------------------------------- files

def test_missing_stats_names_files_and_format(tmp_path):
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"patch_size": 16}))
    with pytest.raises(PolicyIOError) as err:
        load_xr0_policy_io(tmp_path)
    msg = str(err.value)
    assert "'action_config'" in msg and "processor_config.json" in msg
    assert "present without it: preprocessor_config.json" in msg
    assert '"mean"' in msg and '"std"' in msg and "stats_path=" in msg
    with pytest.raises(PolicyIOError, match="does not exist"):
        load_xr0_policy_io(tmp_path / "nope")


def test_stats_in_preprocessor_and_stats_path(tmp_path):
    io = load_xr0_policy_io(write_ckpt(tmp_path, file="preprocessor_config.json"), "libero_all")
    assert io.stats_file.name == "preprocessor_config.json"
    other = tmp_path / "stats.json"
    m, s = _stats(5, 3, 2.0, 1.0)
    other.write_text(json.dumps({"mine": {"mean": m.tolist(), "std": s.tolist()}}))   # bare table
    io2 = load_xr0_policy_io(tmp_path, stats_path=other)
    assert io2.robot_types == ["mine"] and io2.horizon() == 5
    with pytest.raises(PolicyIOError, match="statistics file .* does not exist"):
        load_xr0_policy_io(tmp_path, stats_path=tmp_path / "missing.json")


@pytest.mark.parametrize("entry, match", [
    ({"mean": [[0.0] * 32]}, "needs 'mean' and 'std'"),
    ({"mean": [[0.0] * 31], "std": [[1.0] * 31]}, r"expected \[H, 32\]"),
    ({"mean": [[0.0] * 32] * 3, "std": [[1.0] * 32] * 2}, "differ"),
    ({"mean": [[0.0] * 32], "std": [[-1.0] * 32]}, "negative"),
    ({"mean": [[0.0] * 32], "std": [[0.0] * 32]}, "no active dim"),
    ({"mean": [["a"] * 32], "std": [[1.0] * 32]}, "not a numeric array"),
    ({"mean": [[float("nan")] * 32], "std": [[1.0] * 32]}, "NaN or inf"),
])
def test_invalid_stats(tmp_path, entry, match):
    (tmp_path / "processor_config.json").write_text(json.dumps({"action_config": {"r": entry}}))
    with pytest.raises(PolicyIOError, match=match):
        load_xr0_policy_io(tmp_path)


def test_unreadable_json(tmp_path):
    (tmp_path / "processor_config.json").write_text("{not json")
    with pytest.raises(PolicyIOError, match="cannot read"):
        load_xr0_policy_io(tmp_path)


def test_summary(tmp_path):
    io = load_xr0_policy_io(write_ckpt(tmp_path), "libero_all")
    s = io.summary()
    assert s["convention"] == "xr0" and s["robot_type"] == "libero_all"
    assert s["robot_types"]["calvin_abcd_orig"] == {"horizon": 4, "active_dims": [0, 1, 2, 4, 5, 6],
                                                    "delta_dims": [], "images": 2}
    assert s["state_normalization"].startswith("none") and s["resize_mode"] == "pil"
    assert "libero_all" in io.describe()
