"""oxygen_node with the `pi05` profile on a tiny pi0.5 checkpoint in LeRobot's layout, with
the processor statistics beside the weights (the policy I/O path, end to end over DDS).

- Every published chunk is what the checkpoint's own pipeline gives for the robot's
  observation: resize-with-pad, quantile-normalised state in the prompt, the model's
  chunk cut to the robot's 8 dims and unnormalised with the action quantiles, then
  clipped into the joint limits. Recomputed here in-process for the first noise draws
  of the node's seed, and each received chunk must equal one of them.
- Positions stay inside the joint limits; clipped points are counted in /diagnostics.
- Without the statistics, configure fails with a message naming the files looked for.

The node runs with toy widths (test/pi05_toy_node.py: the one test double, since the
3B model cannot run here). Run by pytest; this file is also the driver peer program.
"""
import time

import numpy as np
import pytest
import torch

from node_harness import ROOT, node_processes
from pi05_fixtures import lerobot_ckpt, model_checkpoint, toy_config, train_tokenizer
from ros_helpers import run_as_peer, run_peers

pytest.importorskip("sentencepiece")
pytestmark = pytest.mark.ros

LAUNCHER = ROOT / "test" / "pi05_toy_node.py"
ROBOT_DIMS = 8                    # the tiny profile's joints; the model's actions have 10
HORIZON = 5
LOWER = np.array([-2.9, -1.8, -2.9, -3.1, -2.9, -0.1, -2.9, 0.0])     # config/tiny.yaml
UPPER = np.array([2.9, 1.8, 2.9, 0.0, 2.9, 3.8, 2.9, 0.08])
# State quantiles of the robot's recorded data; action quantiles 1.5x wider than the
# limits, so a confident model output lands beyond them and the envelope has work.
STATE_Q = {"q01": (LOWER * 0.5).tolist(), "q99": (UPPER * 0.5 + 0.01).tolist()}
MID, HALF = (LOWER + UPPER) / 2, (UPPER - LOWER) / 2
ACTION_Q = {"q01": (MID - 1.5 * HALF).tolist(), "q99": (MID + 1.5 * HALF).tolist()}


# ----------------------------------------------------------------- driver peer

def collect_chunks(namespace, seconds, *, deadline):
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from node_driver import Driver

    d = Driver(namespace)
    clipped = []

    def on_diag(arr):
        for s in arr.status:
            if s.name == f"{d.fqn}: control loop":
                clipped.extend(int(kv.value) for kv in s.values if kv.key == "chunk_points_clipped")

    d.node.create_subscription(DiagnosticArray, "/diagnostics", on_diag,
                               QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE))
    try:
        d.wait_until(lambda: d.chunks, 60.0, "the first action chunk (autostart)")
        time.sleep(float(seconds))
        chunks = [[list(p.positions) for p in m.points] for _, m in list(d.chunks)]
        return {"chunks": chunks, "joint_names": list(d.chunks[0][1].joint_names),
                "clipped": max(clipped, default=0), "state": d.state()}
    finally:
        d.close()


def wait_for_state(namespace, *, deadline):
    from node_driver import Driver

    d = Driver(namespace)
    try:
        # a loaded machine: the node may still be importing or configuring (autostart)
        d.wait_until(lambda: d.state(timeout=60.0) is not None, 60.0, "the node's lifecycle services")
        time.sleep(3.0)                         # autostart has tried to configure by now
        return {"state": d.state(timeout=60.0)}
    finally:
        d.close()


# ----------------------------------------------------------------- pytest side

@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    from oxygen_ros.engine.models.pi05.modeling import build_random_model
    from oxygen_ros.engine.models.pi05.tokenizer import SentencePieceTokenizer
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("pi05")
    sp = train_tokenizer(root)
    cfg = toy_config(SentencePieceTokenizer(sp))
    cfg = cfg.with_expert(action_dim=10, horizon=HORIZON)
    model = build_random_model(cfg, seed=3)
    config = {"type": "pi05", "chunk_size": HORIZON, "n_action_steps": HORIZON, "num_inference_steps": 10,
              "output_features": {"action": {"type": "ACTION", "shape": [ROBOT_DIMS]}},
              "normalization_mapping": {"VISUAL": "IDENTITY", "STATE": "QUANTILES", "ACTION": "QUANTILES"}}

    def checkpoint(name, with_stats):
        d = lerobot_ckpt(root / name, state=STATE_Q if with_stats else None,
                         actions=ACTION_Q if with_stats else None, config=config)
        save_file(model_checkpoint(model, "lerobot"), str(d / "model.safetensors"))
        return d

    return {"sp": sp, "good": checkpoint("with_stats", True), "bare": checkpoint("no_stats", False)}


def _robot_observation():
    """What node_driver.Driver publishes, as the node decodes it: images by slot, raw state."""
    from sensor_msgs.msg import JointState

    from node_driver import JOINTS
    from oxygen_ros.node.convert import image_to_rgb, joint_positions, rgb_to_image

    rng = np.random.default_rng(0)
    slots = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
    images = {s: image_to_rgb(rgb_to_image(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8), enc))
              for s, enc in zip(slots, ("rgb8", "bgr8", "mono8"))}
    names = list(reversed(JOINTS))
    pos = [0.1 * i for i in range(len(names))]
    pos[-1] = 0.04
    return images, joint_positions(JointState(name=names, position=pos), JOINTS)


def _expected_chunks(toy, draws: int):
    """The clipped robot chunks for the node's first `draws` noise draws (seed 0)."""
    from oxygen_ros.engine.models.pi05.processor import load_policy_io
    from oxygen_ros.engine.scheduler import EngineConfig, OxygenEngine
    from oxygen_ros.engine.models.pi05.checkpoint import load_pi05

    model, tok = load_pi05(toy_config_for(toy), str(toy["good"]), toy["sp"])
    io = load_policy_io(toy["good"], image_size=model.cfg.vision.image_size)
    io.tokenizer = tok
    images, state = _robot_observation()
    obs = io.observation(images, state, "pick up the cube")        # config/tiny.yaml instruction
    engine = OxygenEngine(model, tok, EngineConfig(seed=0))
    gen = torch.Generator().manual_seed(0)
    out = []
    for _ in range(draws):
        noise = torch.randn(HORIZON, model.cfg.expert.action_dim, generator=gen)
        out.append(np.clip(io.actions(engine.step(obs, noise).actions, state), LOWER, UPPER))
    return out


def toy_config_for(toy):
    from oxygen_ros.engine.models.pi05.tokenizer import SentencePieceTokenizer

    return toy_config(SentencePieceTokenizer(toy["sp"]))


def test_pi05_node_publishes_the_checkpoints_own_robot_units_inside_the_limits(toy):
    with node_processes() as start:
        # 5 points at 5 Hz span 1 s: a slow frame on a loaded machine still leaves points ahead
        node = start(script=LAUNCHER, env={"OXYGEN_TEST_TOKENIZER": toy["sp"]}, model="pi05", action_rate_hz=5.0,
                     checkpoint=str(toy["good"]), tokenizer_path=toy["sp"], autostart=True)
        r = run_peers(__file__, {"driver": ["collect_chunks", node.namespace, "3.0"]}, timeout=120)["driver"]
        log = node.log()
    assert "policy I/O lerobot (8 action dims" in log
    assert r["state"] == "active" and len(r["chunks"]) >= 5
    from node_driver import JOINTS

    assert r["joint_names"] == JOINTS
    got = [np.array(c) for c in r["chunks"]]
    # the points already past at publication are dropped from the front (action 0 is due
    # at the observation's time, so at least it): each chunk is the tail of a full one
    assert all(1 <= len(c) < HORIZON and c.shape[1] == ROBOT_DIMS for c in got), [c.shape for c in got]
    assert all(np.all(c >= LOWER - 1e-9) and np.all(c <= UPPER + 1e-9) for c in got)
    expected = _expected_chunks(toy, draws=len(got) + 40)
    for i, c in enumerate(got):
        diffs = [float(np.abs(c - e[-len(c):]).max()) for e in expected]
        assert min(diffs) < 1e-4, f"chunk {i} matches no expected chunk (closest {min(diffs):.2e})"
    # the first chunk comes from the first noise draw: nothing was skipped or reordered
    assert float(np.abs(got[0] - expected[0][-len(got[0]):]).max()) < 1e-4
    beyond = sum(int(np.any(np.isclose(e, LOWER) | np.isclose(e, UPPER), axis=1).sum()) for e in expected[:3])
    assert beyond > 0, "the test statistics should push some points past the limits"
    assert r["clipped"] > 0


def test_pi05_node_without_statistics_fails_configure_naming_the_files(toy):
    with node_processes() as start:
        node = start(script=LAUNCHER, env={"OXYGEN_TEST_TOKENIZER": toy["sp"]}, model="pi05",
                     checkpoint=str(toy["bare"]), tokenizer_path=toy["sp"], autostart=True)
        r = run_peers(__file__, {"driver": ["wait_for_state", node.namespace]}, timeout=90)["driver"]
        log = node.log()
    assert r["state"] == "unconfigured"
    assert "configure failed" in log
    assert "quantile normalization needs state.q01" in log
    assert "policy_preprocessor.json" in log and "normalization='none'" in log


if __name__ == "__main__":
    run_as_peer({"collect_chunks": collect_chunks, "wait_for_state": wait_for_state})
