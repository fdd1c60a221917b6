"""The smol-panda weights that ship with the package (issue 41, docs/training.md): they load
through the checkpoint code a user's checkpoint goes through (config/smol_panda.yaml's
`checkpoint: ""`), and on one held-out seed the real node, lock-step sim and recorder put the
cube in the bowl while every narration names the cube's place at its frame; asked what it has
done, the model says what its notes show."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from oxygen_ros.engine.models.smol_panda.checkpoint import SHIPPED_DIR, weights_path

ROOT = Path(__file__).resolve().parents[1]
SEED = 900005       # held out: never in the training data (docs/training.md, Seeds); in the bowl at 7.5-8.55 s


def test_the_shipped_weights_are_fp16_and_under_64_mb():
    from safetensors import safe_open

    path = weights_path(None)
    assert path.parent == SHIPPED_DIR and path.stat().st_size <= 64 * 2**20
    with safe_open(str(path), "pt") as f:
        names = list(f.keys())
        assert {n.split(".")[0] for n in names} == {"vision", "expert"}
        assert all(f.get_slice(n).get_dtype() == "F16" for n in names)
    with safe_open(str(SHIPPED_DIR / "learned_prompt.safetensors"), "pt") as f:     # answer, narration
        assert sorted(f.keys()) == ["learned_narration", "learned_prompt"]
        for name in f.keys():
            rows = f.get_slice(name)
            assert rows.get_shape() == [16, 576] and rows.get_dtype() == "F16"


@pytest.mark.ros
def test_the_shipped_policy_puts_the_cube_in_the_bowl_and_says_where_it_is(tmp_path):
    from ros_helpers import peer_env

    out = tmp_path / "eval"
    proc = subprocess.run([sys.executable, "-m", "oxygen_ros.cli", "eval", "--seeds", str(SEED),
                           "--clock", "sim", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=peer_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    e = json.loads((out / "eval.json").read_text())["episodes"][0]
    assert not e.get("error"), e
    assert e["success"] and e["final_place"] == "bowl", e
    samples = e["narration_samples"]
    # the frames' narrations finish while the episode runs (the one begun at the cube's
    # arrival in the bowl may be cut by the episode's end: 4 or 5 here); each names the place at
    # its frame, or the place before where the cube changed place less than a frame (0.5 s of
    # sim time) before that frame's images: a cube lifted a few mm is in the gripper by the
    # contract's 1 cm rule but looks as on the table (the episode's timing moves between CPUs:
    # in the bowl at 8.55 s where this test was written, at 7.5 s with the grasp at 3.65 s and
    # the third narration's images at 4.0 s on a Xeon with AMX)
    assert e["narrations"] >= 4, samples
    for s in samples:
        before = [seg["place"] for seg in e["places"] if seg["end_s"] <= s["stamp_s"]]
        just_changed = bool(before) and any(0 <= s["stamp_s"] - seg["start_s"] < 0.5 for seg in e["places"][1:])
        assert s["right"] or (just_changed and s["named"] == [before[-1]]), samples
    # the words follow the cube: it was narrated on the table, then in the gripper
    assert [s["place"] for s in samples][:4] == ["table", "table", "gripper", "gripper"], samples


def test_the_shipped_policy_answers_what_it_has_done_from_its_notes():
    """"What have you done?" through the engine's isolated path with the shipped weights and
    their learned answer prompt (config/smol_panda.yaml's template): a rendered held-out scene,
    the memory log the node would hold, and the answer says the progress the notes show."""
    import numpy as np

    from oxygen_ros.engine.bench.baselines import IsolatedRunner
    from oxygen_ros.engine.models.smol_panda.training import hparams as H
    from oxygen_ros.engine.models.smol_panda.training.data import policy_io
    from oxygen_ros.engine.models.smol_panda.training.progress import answer_right, progress
    from oxygen_ros.engine.registry import load_model
    from oxygen_ros.engine.requests import LanguageRequest
    from oxygen_ros.engine.text.prompts import fill_answer
    from oxygen_ros.tools import panda_scene as ps
    from oxygen_ros.tools.panda_world import PandaWorld
    from oxygen_ros.tools.params_files import config_file, params_from_file

    model, tok = load_model("smol-panda")
    assert {k: tuple(v.shape) for k, v in model.learned_blocks.items()} == {
        "learned_prompt": (16, model.cfg.backbone.width), "learned_narration": (16, model.cfg.backbone.width)}
    template = params_from_file(config_file("smol_panda.yaml"))["answer_prompt"]
    with PandaWorld() as world:
        world.set_layout(ps.layout(SEED))
        views = {"base_0_rgb": "base", "left_wrist_0_rgb": "left_wrist"}
        images = {slot: world.render(v, model.cfg.vision.image_size, world.snapshot()) for slot, v in views.items()}
        obs = policy_io(SHIPPED_DIR, tok, model.cfg).observation(images, np.asarray(world.q, np.float64),
                                                                 H.INSTRUCTION, stamp=0.0)
    runner = IsolatedRunner(model, tok)
    # not a drop seen in one gripper note only: the shipped rows answer most of those "not yet"
    # (docs/training.md, "Answers"; scripts/answer_prompts.py measures it)
    logs = [[], ["table", "table", "gripper"], ["table", "gripper", "bowl"], ["table", "gripper", "gripper", "bowl"],
            ["table", "gripper", "gripper", "table"]]
    for places in logs:
        deltas = []
        memory = [H.CAPTIONS[p] for p in places]
        runner.language(obs, LanguageRequest(fill_answer(template, memory, "What have you done?"), max_new_tokens=24),
                        deltas=deltas)
        assert answer_right(progress(places), deltas[-1].full_text), (places, deltas[-1].full_text)
