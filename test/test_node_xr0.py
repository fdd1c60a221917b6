"""The node's XR-0 path without ROS: engine/factory.build_engine + build_policy_io on a fake
Xiaomi-Robotics-0 checkpoint directory (a tiny Qwen3-VL written by transformers under
`vlm.`, a random XR-0 head, the checkpoint's tokenizer, and the processor's per-robot-type
action statistics of test_policy_io_xr0.write_ckpt), the configure-time dry run and its
errors, and one frame through the engine with the XR-0 policy I/O.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from test_policy_io_xr0 import H_CALVIN, H_LIBERO, write_ckpt
from test_weights_qwen3vl import XR0_DIT, checkpoint_head_name, hf_model, train_tokenizer, write_tokenizer

from oxygen_ros.engine.policy_io import PolicyIOError
from oxygen_ros.node.joint_space import JointSpace

ACTION_LENGTH = 10          # the head's config.action_length (libero_all's horizon; calvin's is 4)
STATE = ["x", "y", "z", "ax", "ay", "az", "finger_l", "finger_r"]     # LIBERO's 8 state values
ACTIONS = [f"a{i}" for i in range(7)]                               # libero_all's 7 active dims
TASK = "Pick up the cube."


@pytest.fixture(scope="module")
def xr0_dir(tmp_path_factory):
    """An XR-0 checkpoint directory: config.json (MiBoTForActionGeneration, state/action
    dim 32 as released), model.safetensors, tokenizer, preprocessor_config.json (4-pixel
    patches: 64 x 64 frames stay small) and processor_config.json's action_config."""
    from safetensors.torch import load_file, save_file

    from oxygen_ros.engine.models.xr0.configuration import XR0HeadConfig
    from oxygen_ros.engine.models.xr0.head import build_random

    root = tmp_path_factory.mktemp("xr0_node")
    d = root / "ckpt"
    d.mkdir()
    write_ckpt(d)                 # the statistics first: it writes a config.json, replaced below
    tk = train_tokenizer()
    hf_model(tk).save_pretrained(str(root / "vlm"))
    vlm = json.loads((root / "vlm" / "config.json").read_text())
    config = {"architectures": ["MiBoTForActionGeneration"], "vlm_config": vlm, "dit_config": XR0_DIT,
              "action_dim": 32, "action_length": ACTION_LENGTH, "state_dim": 32}
    (d / "config.json").write_text(json.dumps(config))
    head = build_random(XR0HeadConfig.from_hf_dict(config), 2, 16, 2, seed=3)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    tensors = {"vlm." + k: v for k, v in load_file(str(root / "vlm" / "model.safetensors")).items()}
    tensors.update({checkpoint_head_name(k): v.clone() for k, v in head.state_dict().items()})
    save_file(tensors, str(d / "model.safetensors"))
    write_tokenizer(d, tk)
    (d / "preprocessor_config.json").write_text(json.dumps(
        {"patch_size": 4, "temporal_patch_size": 2, "merge_size": 2,
         "size": {"shortest_edge": 32 * 32, "longest_edge": 64 * 64}}))
    return d


def params(ckpt, **overrides) -> dict:
    """The node's parameter values (every SPEC's default) for the XR-0 checkpoint."""
    from rclpy.parameter import Parameter

    from oxygen_ros.node.params import SPECS

    p = {s.name: ([] if isinstance(s.default, Parameter.Type) else s.default) for s in SPECS}
    p.update(model="xr0", checkpoint=str(ckpt), robot_type="libero_all", torch_threads=1,
             camera_topics=["camera/base/image_raw", "camera/left_wrist/image_raw"],
             joint_names=STATE, joint_lower_limits=[-4.0] * 8, joint_upper_limits=[4.0] * 8,
             action_joint_names=ACTIONS, action_lower_limits=[-20.0] * 7, action_upper_limits=[20.0] * 7,
             instruction=TASK, max_new_tokens=8, action_rate_hz=20.0)
    p.update(overrides)
    return p


def spaces(p):
    state = JointSpace.from_lists(p["joint_names"], p["joint_lower_limits"], p["joint_upper_limits"])
    actions = JointSpace.from_lists(p["action_joint_names"], p["action_lower_limits"], p["action_upper_limits"],
                                    "action")
    return state, actions


@pytest.fixture(scope="module")
def built(xr0_dir):
    from oxygen_ros.engine.factory import build_engine, build_policy_io

    p = params(xr0_dir)
    model, tok, engine = build_engine(p)
    io = build_policy_io(p, model, tok, *spaces(p))
    return p, model, tok, engine, io


def frames(seed=0):
    rng = np.random.default_rng(seed)
    return {"base_0_rgb": rng.integers(0, 256, (64, 64, 3), dtype=np.uint8),
            "left_wrist_0_rgb": rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)}


# ---------------------------------------------------------------- choosing and the dry run

def test_auto_picks_xr0_for_an_xr0_checkpoint_only(xr0_dir):
    from oxygen_ros.engine.factory import choose_policy_io
    from oxygen_ros.node.params import SPEC

    assert choose_policy_io(params(xr0_dir)) == "xr0"
    assert choose_policy_io(params(xr0_dir, policy_io="xr0")) == "xr0"
    assert choose_policy_io(params(xr0_dir, checkpoint="")) == "limits"           # as before
    assert choose_policy_io(params(xr0_dir, model="xr0-cpu", checkpoint="")) == "limits"
    assert choose_policy_io(params(xr0_dir, model="pi05")) == "checkpoint"           # unchanged
    assert choose_policy_io(params(xr0_dir, policy_io="limits")) == "limits"
    with pytest.raises(ValueError, match="policy_io must be one of auto, limits, openpi, lerobot, xr0, starvla"):
        choose_policy_io(params(xr0_dir, policy_io="xr1"))
    spec = SPEC["robot_type"]
    assert spec.default == "" and spec.when == "configure" and "only type" in spec.description


def test_build_engine_and_policy_io_dry_run(built):
    p, model, tok, engine, io = built
    assert io.convention == "xr0" and io.robot_type == "libero_all"
    assert io.action_dims == 7 == len(ACTIONS)
    assert model.cfg.expert.horizon == H_LIBERO == io.horizon()
    assert io.tokenizer is tok and io.max_prompt_tokens == model.cfg.max_prompt_tokens
    s = io.summary()
    assert s["convention"] == "xr0" and s["horizon"] == H_LIBERO and s["action_dims"] == 7
    assert s["camera_slots"] == ["base_0_rgb", "left_wrist_0_rgb"]
    assert s["action_rate_hz"].startswith("not in the checkpoint")


def test_a_shorter_robot_type_horizon_becomes_the_models(xr0_dir):
    """calvin_abcd_orig's statistics are 4 steps: build_engine sets the head to 4 before the
    engine exists (the node reads model.cfg after it), build_policy_io agrees."""
    from oxygen_ros.engine.factory import build_engine, build_policy_io

    p = params(xr0_dir, robot_type="calvin_abcd_orig", action_joint_names=ACTIONS[:6],
               action_lower_limits=[-20.0] * 6, action_upper_limits=[20.0] * 6)
    model, tok, engine = build_engine(p)
    assert model.cfg.expert.horizon == H_CALVIN
    io = build_policy_io(p, model, tok, *spaces(p))
    assert io.action_dims == 6 and list(io.active_dims()) == [0, 1, 2, 4, 5, 6]
    obs = io.observation(frames(), np.linspace(-2, 2, 8), TASK)
    chunk = engine.act(obs)
    engine.talk()
    assert chunk.actions.shape == (H_CALVIN, 32)
    assert io.actions(chunk.actions, obs.state).shape == (H_CALVIN, 6)


def test_unknown_or_missing_robot_type_fails_with_the_checkpoints_types(xr0_dir, built):
    from oxygen_ros.engine.factory import build_engine, build_policy_io

    _, model, tok, _, _ = built
    bad = params(xr0_dir, robot_type="franka")
    listing = r"libero_all, calvin_abcd_orig, agibot_pt_v3"
    with pytest.raises(PolicyIOError, match=rf"unknown robot_type 'franka': .*processor_config.json defines {listing}"):
        build_engine(bad)                     # before the model is even built into an engine
    with pytest.raises(ValueError, match=rf"unknown robot_type 'franka'.*{listing}"):
        build_policy_io(bad, model, tok, *spaces(bad))
    empty = params(xr0_dir, robot_type="")
    with pytest.raises(ValueError, match=rf"define 3 robot types: set robot_type to one of {listing}"):
        build_policy_io(empty, model, tok, *spaces(empty))


@pytest.mark.parametrize("overrides, match", [
    ({"camera_topics": ["camera/base/image_raw"]}, r"2 views \(\[base, wrist_left\]\): set camera_topics to 2"),
    ({"normalization": "quantile"}, "normalization do.* not apply to policy_io xr0"),
    ({"action_dims": 5}, r"action_dims is 5 but robot_type 'libero_all' has 7 active action dims \[0, 1, 2, 3"),
    ({"action_joint_names": ACTIONS[:6], "action_lower_limits": [-1.0] * 6, "action_upper_limits": [1.0] * 6},
     "gives 7 action dimensions but 6 action joints are named"),
    ({"joint_names": [f"j{i}" for i in range(33)], "joint_lower_limits": [-1.0] * 33,
      "joint_upper_limits": [1.0] * 33}, "33 state joints but XR-0's state has 32"),
    ({"instruction": "pick " * 400}, "prompt tail takes .* tokens, more than 200"),
    ({"delta_action_mask": [True] * 8}, "delta_action_mask has 8 entries but robot_type 'libero_all' has 7"),
])
def test_configure_errors_are_clear(xr0_dir, built, overrides, match):
    from oxygen_ros.engine.factory import build_policy_io

    _, model, tok, _, _ = built
    p = params(xr0_dir, **overrides)
    with pytest.raises(ValueError, match=match):
        build_policy_io(p, model, tok, *spaces(p))


def test_delta_action_mask_maps_to_the_robot_types_dims(xr0_dir, built):
    from oxygen_ros.engine.factory import build_policy_io

    _, model, tok, _, plain = built
    p = params(xr0_dir, delta_action_mask=[True, False, True])
    io = build_policy_io(p, model, tok, *spaces(p))
    assert io.delta_dims == {"libero_all": (0, 2)}
    y = np.zeros((H_LIBERO, 32), np.float32)
    state = np.arange(1.0, 9.0)
    diff = io.actions(y, state) - plain.actions(y, state)
    want = np.zeros((H_LIBERO, 7))
    want[:, 0], want[:, 2] = 1.0, 3.0                 # state[0], state[2] added on dims 0 and 2
    np.testing.assert_allclose(diff, want, atol=1e-12)


# ---------------------------------------------------------------- one frame

def test_one_frame_through_the_engine(built):
    """The node's frame: policy.observation -> engine.act -> policy.actions -> engine.talk."""
    _, model, tok, engine, io = built
    state = np.array([0.1, -0.2, 1.3, 3.0, 0.0, -0.5, 0.04, -0.04])
    obs = io.observation(frames(), state, TASK, stamp=12.5)
    assert sorted(obs.images) == ["base_0_rgb", "left_wrist_0_rgb"] and obs.stamp == 12.5
    assert obs.state.shape == (32,) and obs.state[:8].tolist() == state.astype(np.float32).tolist()
    assert not obs.state[8:].any()
    assert obs.prompt_ids == tok.encode(f"\nGenerate robot actions for the task:\n{TASK} /no_cot")
    assert obs.extra["robot_type"] == "libero_all" and obs.extra["action_mask"].sum() == 7
    chunk = engine.act(obs)
    result = engine.talk()
    assert chunk.actions.shape == (H_LIBERO, 32) and np.isfinite(chunk.actions).all()
    actions = io.actions(chunk.actions, state)
    assert actions.shape == (H_LIBERO, 7) and actions.dtype == np.float64
    # the robot actions are the statistics' unnormalisation of the chunk's first 7 dims
    stats = io.robots["libero_all"]
    np.testing.assert_allclose(actions, chunk.actions[:, :7] * stats.std[:, :7] + stats.mean[:, :7], rtol=1e-6)
    assert result.frame_index == chunk.frame_index
    # another image gives another chunk from the same noise: the views reach the head
    again = engine.act(io.observation(frames(seed=1), state, TASK), noise=torch.zeros(H_LIBERO, 32))
    engine.talk()
    same = engine.act(obs, noise=torch.zeros(H_LIBERO, 32))
    engine.talk()
    assert np.abs(again.actions - same.actions).max() > 1e-4


def test_observation_errors(built):
    _, _, _, _, io = built
    state = np.zeros(8)
    with pytest.raises(PolicyIOError, match=r"missing \['left_wrist_0_rgb'\]"):
        io.observation({"base_0_rgb": frames()["base_0_rgb"]}, state, TASK)
    with pytest.raises(PolicyIOError, match=r"got extra \['right_wrist_0_rgb'\]"):
        io.observation({**frames(), "right_wrist_0_rgb": frames()["base_0_rgb"]}, state, TASK)
    with pytest.raises(PolicyIOError, match="HxWx3 uint8"):
        io.observation({**frames(), "base_0_rgb": np.zeros((8, 8), np.uint8)}, state, TASK)
    with pytest.raises(PolicyIOError, match="NaN or inf"):
        io.observation(frames(), np.array([np.nan] * 8), TASK)


def test_our_prefix_is_the_deploy_prompt_token_for_token(built):
    """The prefix the node's observation makes is the deploy path's whole token sequence
    (headings before each view, the image pads, the task with /no_cot, the closed turns and
    the empty <cot></cot>), with images of different sizes; requests open turns of their own."""
    from oxygen_ros.engine.models.qwen3vl.image_processing import image_token_count, qwen3vl_pixels

    _, model, tok, _, io = built
    obs = io.observation(frames(), np.zeros(8), TASK)
    imgs = [obs.images[s] for s in io.camera_slots]
    _, grids = qwen3vl_pixels(imgs, model.cfg.vision.images)
    counts = image_token_count(grids, model.cfg.vision.images.merge_size)
    assert counts[0] != counts[1]                 # 64 x 64 and 48 x 64 frames
    deploy = io.deploy_prompt_ids(TASK, counts)
    first, second, rest = io.prompt_text(TASK).split("<|image_pad|>")
    assert deploy == tok.encode(first + "<|image_pad|>" * counts[0] + second + "<|image_pad|>" * counts[1] + rest)
    prefix = model.observation_prefix(obs, tok)
    assert prefix.ids == deploy and prefix.shape[1] == len(deploy)
    sp = model.cfg.special
    assert model.request_ids(tok, "what now?")[0] == sp.im_start


def test_the_head_reads_the_raw_state(built):
    _, model, tok, _, io = built
    state = np.array([0.1, -0.2, 1.3, 3.0, 0.0, -0.5, 0.04, -0.04])
    prefix = model.observation_prefix(io.observation(frames(), state, TASK), tok)
    np.testing.assert_allclose(prefix.state[0, :8].float().numpy(), state, rtol=1e-6)
