"""`oxygen eval` (tools/evaluation.py): the scorer on bags written here from the scripted
expert's rollout (no node), and one real sim-time episode of the tiny model (its own node,
sim and recorder processes over DDS) scored from its bag."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from oxygen_ros.tools import eval_scoring as ev

ROOT = Path(__file__).resolve().parents[1]
START = 1.0          # sim time of the first frame, as the lock-step sim starts


def test_seeds_interval_and_place_words():
    """Seed ranges parse in order; training seeds are found; the Wilson interval matches its
    textbook values; only the three place words count."""
    assert ev.parse_seeds("900000-900002,5,900001") == [900000, 900001, 900002, 5]
    assert ev.training_seeds_in([999, 1000, 1999, 2000]) == [1000, 1999]
    lo, hi = ev.wilson(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-4) and hi == pytest.approx(0.9433, abs=1e-4)
    assert ev.wilson(0, 0) is None
    assert ev.named_places("The cube is in the Bowl.") == {"bowl"}
    assert ev.named_places("from the table to the gripper") == {"table", "gripper"}
    assert ev.named_places("tablecloth, bowling") == set()
    held = {"robot": "", "seed": 900023, "success": False, "final_place": "gripper", "length_s": 20.0,
            "frames": 40, "narrations": 0, "wall_s": 30.0}
    assert "failure (ends in the gripper)" in ev.episode_line(24, 50, held)


@pytest.fixture(scope="module")
def expert_rollout():
    """The scripted expert's episode on seed 3 and the ground truth at each frame."""
    from oxygen_ros.tools import scripted_expert as se
    from oxygen_ros.tools.panda_world import PandaWorld

    frames = []
    with PandaWorld() as world:
        def on_frame(step, t, chunk, phase):
            frames.append((step, START + t, {k: v[0].copy() for k, v in world.frames().items()}))

        episode = se.rollout(world, 3, on_frame=on_frame)
        frames.append((len(frames), START + episode.duration_s,
                       {k: v[0].copy() for k, v in world.frames().items()}))
    return episode, frames


def _expert_bag(path: Path, frames, wrong_every: int = 0, frames_limit: int | None = None):
    """Write what the node and the sim would publish over the expert's rollout: /tf (cube,
    bowl, gripper) at every frame, FrameTiming per frame (its observation stamp) and a finished
    narration every 10 frames naming the true place (every `wrong_every`-th: a wrong one)."""
    from rosbags.rosbag2 import StoragePlugin, Writer

    from oxygen_ros.tools.bag_types import typestore
    from oxygen_ros.tools.cube_place import place

    frames = frames[:frames_limit]
    store = typestore()
    M = store.types

    def stamp(t):
        sec = int(t)
        return M["builtin_interfaces/msg/Time"](sec=sec, nanosec=int(round((t - sec) * 1e9)))

    def header(t):
        return M["std_msgs/msg/Header"](stamp=stamp(t), frame_id="")

    said = []
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as w:
        tf = w.add_connection("/tf", "tf2_msgs/msg/TFMessage", typestore=store)
        timing = w.add_connection("/frame_timing", "oxygen_msgs/msg/FrameTiming", typestore=store)
        text = w.add_connection("/narration", "oxygen_msgs/msg/TextChunk", typestore=store)
        for i, t, poses in frames:
            ts = [M["geometry_msgs/msg/TransformStamped"](
                header=M["std_msgs/msg/Header"](stamp=stamp(t), frame_id="world"), child_frame_id=name,
                transform=M["geometry_msgs/msg/Transform"](
                    translation=M["geometry_msgs/msg/Vector3"](x=float(p[0]), y=float(p[1]), z=float(p[2])),
                    rotation=M["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0)))
                for name, p in poses.items()]
            w.write(tf, int(t * 1e9), store.serialize_cdr(M["tf2_msgs/msg/TFMessage"](transforms=ts), tf.msgtype))
            msg = M["oxygen_msgs/msg/FrameTiming"](
                header=header(t + 0.05), frame_index=i, observation_stamp=stamp(t), prefill_ms=0.0, action_ms=0.0,
                admit_ms=0.0, decode_ms=0.0, total_ms=50.0, decode_steps=0, live_requests=0, queued_requests=0,
                tokens_emitted=0, period_ms=100.0, deadline_missed=False, kv_bytes_in_use=0, chunk_ms=0.0,
                chunk_latency_ms=0.0, points_dropped=0, rtc_delay_steps=0, expert_names=[],
                expert_action_ms=np.zeros(0, np.float32))
            w.write(timing, int((t + 0.05) * 1e9), store.serialize_cdr(msg, timing.msgtype))
            if i % 10 == 0:
                truth = place(poses["cube"], poses["bowl"], poses["gripper"])
                wrong = wrong_every and (len(said) + 1) % wrong_every == 0
                word = {"table": "bowl", "gripper": "table", "bowl": "gripper"}[truth] if wrong else truth
                said.append(not wrong)
                chunk = M["oxygen_msgs/msg/TextChunk"](
                    header=header(t + 0.3), stream="narration", request_id=len(said), start_frame=i,
                    delta="", token_count=7, done=True, full_text=f"The cube is on the {word}.")
                w.write(text, int((t + 0.3) * 1e9), store.serialize_cdr(chunk, text.msgtype))
    return said


def test_scorer_on_the_scripted_experts_bag(tmp_path, expert_rollout):
    """The expert's rollout, published as node and sim would, scores as a success with its
    narrations judged at their frames' observation stamps; cut before the drop, or a bag
    that ends before it, scores as a failure."""
    episode, frames = expert_rollout
    said = _expert_bag(tmp_path / "ok", frames, wrong_every=4)
    assert episode.success
    s = ev.score_bag(tmp_path / "ok")
    assert s["success"] and s["final_place"] == "bowl"
    assert [p["place"] for p in s["places"]] == ["table", "gripper", "bowl"]
    assert 0 < s["time_to_success_s"] < s["length_s"]
    assert s["narrations"] == len(said) and s["narrations_right"] == sum(said) < len(said)
    assert {j["place"] for j in s["narration_samples"]} == {"table", "gripper", "bowl"}
    assert s["repeated_observation_frames"] == 0

    end = s["time_to_success_s"] - 0.5
    cut = ev.score_bag(tmp_path / "ok", end_s=end)
    assert not cut["success"] and cut["final_place"] != "bowl"
    # the episode's end cuts its frames and narrations too: in a fleet, a robot that reached
    # the duration keeps running until the others have; what it does then is not its episode
    kept = [i for i, t, _ in frames if t - START <= end + 1e-9]
    assert cut["frames"] == len(kept) < s["frames"]
    assert [j["start_frame"] for j in cut["narration_samples"]] == [i for i in kept if i % 10 == 0]
    assert cut["narrations"] == len(cut["narration_samples"]) < s["narrations"]

    _expert_bag(tmp_path / "short", frames, frames_limit=30)
    short = ev.score_bag(tmp_path / "short")
    assert not short["success"] and short["final_place"] in ("table", "gripper")

    result = {"per_robot": {"robot": ev.summarize([{**s, "wall_s": 1.0}, {**short, "wall_s": 1.0}])}}
    assert result["per_robot"]["robot"]["successes"] == 1
    assert "1/2 50.0%" in ev.format_table(result)


class _Answered:
    """An AskProgress call's future, done (or not yet)."""

    def __init__(self, answer=None):
        from types import SimpleNamespace

        self._r = None if answer is None else SimpleNamespace(success=True, answer=answer, error="", latency_s=0.4)

    def done(self):
        return self._r is not None

    def result(self):
        return self._r


def test_a_fleet_episode_is_scored_per_robot_from_its_own_bag(tmp_path, expert_rollout, monkeypatch):
    """`--robots 2` without processes: each robot's bag (written where the episode puts it)
    is scored on its own row; a robot whose episode the wall-time limit stopped before its
    duration is an episode that failed to run, not a policy's failure; the questions asked are
    in eval.json with their answers (or none), and the run's language says questions."""
    from oxygen_ros.tools import evaluation

    _, frames = expert_rollout
    opts = evaluation.Options(params=ROOT / "config" / "tiny.yaml", seeds=[900000, 900001], out=tmp_path / "e",
                              robots=2, duration_s=3.0, questions_every_s=1.0)
    run = evaluation.Evaluation(opts, say=lambda _: None)
    assert run.robot_names == ["robot1", "robot2"] and run.groups() == [[900000, 900001]]
    for name, seed in zip(run.robot_names, opts.seeds):
        _expert_bag(tmp_path / "e" / "episode-000" / f"{name}-seed{seed}" / "bag", frames)
    done = evaluation._Watch(start_stamp=START, last_stamp=START + 3.0)
    done.questions = [(1.0, _Answered("I moved.")), (2.0, _Answered())]
    stopped = evaluation._Watch(start_stamp=START, last_stamp=START + 1.1)   # the wall-time limit hit
    monkeypatch.setattr(run, "_run_children", lambda robots, children: {"robot1": done, "robot2": stopped})
    r1, r2 = run._episode(0, [900000, 900001])
    assert (r1["robot"], r1["seed"], r2["robot"], r2["seed"]) == ("robot1", 900000, "robot2", 900001)
    assert not r1.get("error") and r1["length_s"] == pytest.approx(3.0, abs=0.05) and r1["final_place"] == "table"
    assert r1["questions"] == 2 and r1["answers"] == 1
    assert [(q["asked_s"], q["answered"], q["answer"]) for q in r1["question_samples"]] == [
        (1.0, True, "I moved."), (2.0, False, "")]
    assert "1.1 of 3 s" in r2["error"] and r2["success"] is False
    run.episodes += [r1, r2]
    result = run.result()
    assert result["language"] == "questions" and result["questions_every_s"] == 1.0
    assert result["per_robot"]["robot1"]["failed_to_run"] == 0 and result["overall"]["failed_to_run"] == 1
    table = ev.format_table(result)
    assert [line.split()[0] for line in table.splitlines()] == ["robot", "robot1", "robot2", "all"]


def test_eval_refuses_training_seeds(tmp_path):
    out = subprocess.run([sys.executable, "-m", "oxygen_ros.cli", "eval", "--params", "config/tiny.yaml",
                          "--seeds", "1998-2001", "--out", str(tmp_path / "e")],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "training seeds" in out.stdout, out.stdout + out.stderr
    assert not (tmp_path / "e").exists()


@pytest.mark.ros
def test_a_node_that_refuses_to_configure_stops_the_run_at_its_first_episode(tmp_path):
    """The params file is the same for every episode: when the node refuses it, the other
    episodes would fail the same way, so the run stops with the node's reason."""
    import yaml

    from oxygen_ros.tools.params_files import config_file, params_from_file
    from ros_helpers import peer_env

    params = params_from_file(config_file("tiny.yaml"))
    params["dtype"] = "float99"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"/**": {"ros__parameters": params}}))
    out = tmp_path / "eval"
    proc = subprocess.run([sys.executable, "-m", "oxygen_ros.cli", "eval", "--params", str(bad),
                           "--seeds", "900000-900002", "--clock", "sim", "--duration", "1.0",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env=peer_env())
    assert proc.returncode == 1, proc.stdout + proc.stderr
    stopped = next(line for line in proc.stdout.splitlines() if line.startswith("stopped: "))
    assert stopped.startswith("stopped: oxygen_node refused to configure: [ERROR]") and "float99" in stopped, stopped
    assert "the other 2 seeds" in stopped, stopped
    r = json.loads((out / "eval.json").read_text())
    assert len(r["episodes"]) == 1 and r["overall"]["failed_to_run"] == 1, r["episodes"]
    assert not (out / "episode-001").exists()


@pytest.mark.ros
def test_one_sim_time_episode_of_the_tiny_model(tmp_path):
    """A real episode: node, lock-step sim and recorder over DDS; the bag is scored against
    /tf (random weights: the cube stays on the table), and the tiny model's narrations are
    judged from real TextChunk / FrameTiming messages. The node ticks at 10 Hz, faster than
    this machine answers, yet acts on each observation once (new_observations_only)."""
    from ros_helpers import peer_env

    out = tmp_path / "eval"
    proc = subprocess.run([sys.executable, "-m", "oxygen_ros.cli", "eval", "--params", "config/tiny.yaml",
                           "--seeds", "900000", "--clock", "sim", "--duration", "1.5",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env=peer_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[1/1] seed 900000: failure (ends on the table)" in proc.stdout, proc.stdout
    r = json.loads((out / "eval.json").read_text())
    e = r["episodes"][0]
    assert r["clock"] == "sim" and r["sim_period_s"] == pytest.approx(0.1)
    assert r["node_control_rate_hz"] == 10.0 and "measured frames" not in proc.stdout   # no rate measuring
    from oxygen_ros.tools.params_files import config_file, params_from_file

    tiny = params_from_file(config_file("tiny.yaml"))
    assert r["node_params"]["memory_every_n_frames"] == tiny["memory_every_n_frames"]     # what the node ran with
    assert r["node_params"]["control_rate_hz"] == 10.0
    assert not e.get("error") and e["success"] is False and e["final_place"] == "table"
    assert e["length_s"] == pytest.approx(1.5, abs=0.11)       # sim time, cut at the duration
    assert e["frames"] >= 15 and e["tf_messages"] > 0
    assert e["repeated_observation_frames"] == 0, e
    assert e["narrations"] >= 1 and e["narration_samples"][0]["place"] == "table"
    assert r["overall"]["success_wilson95"][0] == 0.0
    sim_log = (out / "episode-000" / "logs" / "sim.log").read_text()
    assert "sim: lockstep:" in sim_log
