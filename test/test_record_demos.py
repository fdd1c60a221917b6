"""scripts/record_demos.py writes one shard per episode in the documented format
(docs/training.md), resumes, and refuses the held-out seeds. One small episode, real
MuJoCo and rendering."""
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = [sys.executable, str(ROOT / "scripts" / "record_demos.py")]


def test_record_demos_writes_a_shard_as_documented_and_resumes(tmp_path):
    out = tmp_path / "demos"
    run = subprocess.run([*SCRIPT, "--seeds", "7-7", "--out", str(out), "--image-size", "32"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    from oxygen_ros.tools import scripted_expert as se
    frames = 1 + round((sum(s for _, s in se.PHASES) + se.SETTLE_S) * se.ACTION_RATE_HZ)   # the plan, then settling
    assert f"seed 7: {frames} frames, success True" in run.stdout and "episodes/min" in run.stdout, run.stdout
    d = np.load(out / "episode_7.npz")
    T = len(d["time_s"])
    for view in ("base", "left_wrist", "right_wrist"):
        img = d[f"image_{view}"]
        assert img.shape == (T, 32, 32, 3) and img.dtype == np.uint8 and img.std() > 5
    assert d["joint_position"].shape == d["joint_velocity"].shape == (T, 8)
    assert d["action_chunk"].shape == (T, 10, 8) and d["action_chunk"].dtype == np.float32
    for k in ("cube_pose", "bowl_pose", "gripper_pose"):
        assert d[k].shape == (T, 7)
    assert np.allclose(np.diff(d["time_s"]), 1.0 / float(d["action_rate_hz"]))
    # the chunk of a frame starts at the target of that frame; the arm follows the targets
    assert np.allclose(d["action_chunk"][1:, 0], d["action_chunk"][:-1, 1])
    assert np.abs(d["joint_position"][40, :7] - d["action_chunk"][40, 0, :7]).max() < 0.1
    places = [str(d["place_names"][i]) for i in d["place"]]
    assert places[0] == "table" and places[-1] == "bowl" and "gripper" in places
    assert d["grasp_contact"].any() and not d["grasp_contact"][0]
    phases = [str(d["phase_names"][i]) for i in d["phase"]]
    assert phases[0] == "pre_grasp" and phases[-1] == "done"
    assert float(d["start_offset_m"]) == 0.0 and float(d["perturb_rad"]) == 0.0
    assert len(d["perturb_phases"]) == 0       # not confined: the free-space phases
    assert int(d["seed"]) == 7 and bool(d["success"]) and list(d["joint_names"])[-1] == "panda_finger_width"
    # a second run skips what is there
    again = subprocess.run([*SCRIPT, "--seeds", "7-7", "--out", str(out), "--image-size", "32"],
                           capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert again.returncode == 0 and "0 of 1 seeds to record" in again.stdout, again.stdout


def test_record_demos_refuses_held_out_seeds(tmp_path):
    run = subprocess.run([*SCRIPT, "--seeds", "899999-900000", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode == 2 and "held out" in run.stderr
    assert not list(tmp_path.iterdir())


def test_record_demos_names_the_phases_when_perturb_phases_has_a_wrong_one(tmp_path):
    run = subprocess.run([*SCRIPT, "--seeds", "7-7", "--out", str(tmp_path), "--perturb", "0.04",
                          "--perturb-phases", "align,grasp"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode == 2 and "no phase grasp" in run.stderr and "descend" in run.stderr, run.stderr
    assert not list(tmp_path.iterdir())
