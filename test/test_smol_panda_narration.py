"""smol-panda's learned narration prompt (training/narration.py): its samples are stored
frames captioned by their episodes' ground truth, the places in turn; the policy's own
episodes (panda_policy_rollout.py --record) feed it and never the expert."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from oxygen_ros.engine.models.smol_panda.training import hparams as H

ROOT = Path(__file__).resolve().parents[1]


def _shard(path: Path, places, source: str | None = None, success: bool = True):
    t = len(places)
    pose = np.tile([0, 0, 0, 1, 0, 0, 0.0], (t, 1))
    extra = {"source": np.array(source)} if source else {}
    np.savez(path, success=success, place_names=np.array(H.PLACES), place=np.array(places, np.int8),
             image_base=np.zeros((t, 4, 4, 3), np.uint8), image_left_wrist=np.zeros((t, 4, 4, 3), np.uint8),
             joint_position=np.zeros((t, 8)), action_chunk=np.zeros((t, 10, 8)), grasp_contact=np.zeros(t, bool),
             cube_pose=pose, gripper_pose=pose, bowl_pose=pose, phase=np.zeros(t, np.int8),
             phase_names=np.array(["policy"]), perturb_rad=0.0, **extra)


def _store(directory: Path, frame_index, policy_frames: int = 0, shape=(2, 1, 1, 4, 2), seed: int = 0):
    """A K/V store in kvcache's layout: random values of `shape` per frame, every position valid."""
    from oxygen_ros.engine.models.smol_panda.training.kv_cache import KVStore

    n = len(frame_index)
    directory.mkdir(parents=True)
    (np.random.default_rng(seed).standard_normal((n, *shape)) * 0.5).astype(np.float16).tofile(directory / "kv.f16")
    np.save(directory / "lengths.npy", np.full(n, shape[3], np.int16))
    np.save(directory / "actions.npy", np.zeros((n, 10, 8), np.float32))
    (directory / "meta.json").write_text(json.dumps({"frames": n, "shape": list(shape), "done": n,
                                                     "frame_index": frame_index, "policy_frames": policy_frames}))
    return KVStore(directory)


def test_narration_samples_caption_each_stored_frame_by_its_place_the_places_in_turn(tmp_path):
    from oxygen_ros.engine.models.smol_panda.training.narration import Samples

    demos = tmp_path / "demos"
    demos.mkdir()
    _shard(demos / "episode_1001.npz", [0, 0, 0, 1, 1, 2])
    _shard(demos / "episode_1002.npz", [0, 1, 1, 1])
    index = [[1001, 0], [1001, 3], [1001, 5], [1002, 0], [1002, 2], [1001, 1]]
    samples = Samples(_store(tmp_path / "kv" / "train_0", index), demos)
    assert samples.places.tolist() == [0, 1, 2, 0, 1, 0]
    batch = samples.draw(9, np.random.default_rng(0))
    assert batch.keys == ["table", "gripper", "bowl"] * 3
    assert [H.PLACES[samples.places[i]] for i in batch.idx] == batch.keys
    assert set(batch.prompts) == {H.NARRATION_PROMPT_LEARNED}
    assert H.NARRATION_PROMPT_LEARNED.count("<|learned_narration|>") == 1
    (demos / "episode_1002.npz").unlink()
    with pytest.raises(FileNotFoundError, match="frames of seed 1002, whose shard is not in"):
        Samples(_store(tmp_path / "kv" / "train_1", index), demos)


def test_the_policys_own_episodes_load_even_failed_and_stage2_refuses_them(tmp_path):
    """A failed demonstration is left out; a failed policy episode still shows the states the
    policy visits (what its narration must read). A K/V part holding policy frames is refused
    by stage 2: their chunks are what the policy did, not what to do."""
    from oxygen_ros.engine.models.smol_panda.training.data import load_episode
    from oxygen_ros.engine.models.smol_panda.training.stage2 import load_parts

    _shard(tmp_path / "expert.npz", [0, 0], success=False)
    _shard(tmp_path / "policy.npz", [0, 1], source="policy", success=False)
    assert load_episode(tmp_path / "expert.npz", 1) is None
    assert load_episode(tmp_path / "policy.npz", 2).source == "policy"
    _store(tmp_path / "root" / "kv" / "train_0", [[1001, 0]])
    assert len(load_parts(tmp_path / "root")[0]) == 1
    _store(tmp_path / "root" / "kv" / "train_1", [[1002, 0]], policy_frames=1)
    with pytest.raises(ValueError, match="train_1 hold frames of the policy's own episodes"):
        load_parts(tmp_path / "root")


def test_a_recorded_policy_rollout_is_a_shard_the_training_reads(tmp_path):
    """panda_policy_rollout.py --record: one second of a (random-weight) policy in the Panda
    scene, written in record_demos.py's format with source "policy"; refused for held-out seeds."""
    from test_smol_panda import _gguf_or_skip, _random_checkpoint

    from oxygen_ros.engine.models.smol_panda.training.data import Demos

    _gguf_or_skip()
    _random_checkpoint(tmp_path / "ckpt")
    cmd = [sys.executable, "scripts/panda_policy_rollout.py", "--checkpoint", str(tmp_path / "ckpt"),
           "--seconds", "1", "--narrate-every", "0", "--record", str(tmp_path / "rollouts")]
    done = subprocess.run(cmd + ["--seeds", "1003"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    demos = Demos(tmp_path / "rollouts")
    (episode,) = demos.episodes
    assert episode.seed == 1003 and episode.source == "policy" and episode.length == 5   # every 2nd of 10 frames
    assert episode.images["base_0_rgb"].shape == (5, 128, 128, 3) and episode.actions.shape == (5, 10, 8)
    assert (episode.place == 0).all()            # a random arm does not lift the cube in a second
    held = subprocess.run(cmd + ["--seeds", "900001"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert held.returncode == 2 and "training seeds only" in held.stderr


def test_the_prompt_tuning_pass_predicts_what_the_engine_decodes(tmp_path):
    """prompt_tuning.request_loss on a stored prefix (here: the engine's own prefill of two
    observations, padded as the store pads them) counts a row right exactly when the engine's
    isolated path decodes its target greedily, learned narration rows included: the rows learn
    on the computation the node runs."""
    import torch
    from test_smol_panda import _gguf_or_skip, _random_checkpoint

    from oxygen_ros.engine.bench.baselines import IsolatedRunner
    from oxygen_ros.engine.models.smol_panda import learned_prompt
    from oxygen_ros.engine.models.smol_panda.training.prompt_tuning import Batch, request_loss
    from oxygen_ros.engine.observation.observation import Observation
    from oxygen_ros.engine.registry import load_model
    from oxygen_ros.engine.requests import LanguageRequest

    _gguf_or_skip()
    _random_checkpoint(tmp_path)
    model, tok = load_model("smol-panda", checkpoint=str(tmp_path))
    rows = torch.randn(16, model.cfg.backbone.width, generator=torch.Generator().manual_seed(7)) * 0.05
    model.set_learned_prompt(rows, learned_prompt.NARRATION)
    rng = np.random.default_rng(2)
    obs = [Observation(images={s: rng.integers(0, 256, (128, 128, 3), dtype=np.uint8) for s in H.CAMERAS},
                       state=rng.uniform(-1, 1, 8), instruction=H.INSTRUCTION) for _ in range(2)]
    runner = IsolatedRunner(model, tok)
    said = []
    for o in obs:
        deltas = []
        runner.language(o, LanguageRequest(H.NARRATION_PROMPT_LEARNED, max_new_tokens=6, ignore_eos=True),
                        deltas=deltas)
        said.append(tok.encode(deltas[-1].full_text)[:6])
    # the store: each frame's prefix K/V, right-padded to a common span
    prefixes = [model.observation_prefix(o, tok) for o in obs]
    lengths = [p.shape[1] for p in prefixes]
    span, depth = max(lengths) + 3, model.cfg.backbone.depth
    pools = []
    with torch.inference_mode():
        for p in prefixes:
            pool = model.new_pool(1, 256)
            model.prefill(p, pool, 0)
            pools.append(pool)

    class Store:
        def batch(self, idx, extra=0):
            ks = [torch.stack([pools[i].k[layer, 0, :, :span + extra] for i in idx]).clone() for layer in range(depth)]
            vs = [torch.stack([pools[i].v[layer, 0, :, :span + extra] for i in idx]).clone() for layer in range(depth)]
            for t in ks + vs:
                t[:, :, span:] = 0
            return ks, vs, torch.tensor([lengths[i] for i in idx]), None

    targets = {"own_0": said[0], "own_1": said[1], "other": [(t + 1) % 1000 for t in said[0]]}
    batch = Batch(np.array([0, 1, 1, 0]), [H.NARRATION_PROMPT_LEARNED] * 4, ["own_0", "own_1", "own_0", "other"])
    with torch.no_grad():
        _, right = request_loss(model, tok, Store(), batch, targets)
    assert right[:2] == [True, True] and not right[3]
    assert right[2] == (said[0] == said[1])
    # and its loss is the engine's: the cross-entropy of the target after the engine's prefill
    # and extend of the same prompt (a shifted position or mask moves it, if not the greedy tokens)
    import torch.nn.functional as F
    for frame, key in ((0, "other"), (1, "own_1")):
        with torch.no_grad():
            loss, _ = request_loss(model, tok, Store(), Batch(np.array([frame]), [H.NARRATION_PROMPT_LEARNED], [key]),
                                   targets)
        prompt = model.request_ids(tok, H.NARRATION_PROMPT_LEARNED)
        with torch.inference_mode():
            pool = model.new_pool(1, 256)
            model.prefill(prefixes[frame], pool, 0)
            hidden = model.extend(torch.tensor([prompt + targets[key][:-1]]), pool, 0, lengths[frame])
            logits = model.backbone.logits(hidden[0, len(prompt) - 1:])
        assert abs(loss.item() - F.cross_entropy(logits, torch.tensor(targets[key])).item()) < 1e-4


def test_narration_rows_train_stopped_and_resumed_as_one_run_into_the_checkpoints_file(tmp_path):
    """train_panda.py narration on a K/V store (random values, SmolLM2's shape): stopped at
    step 2 (--until) and resumed, it logs the losses of an uninterrupted run step for step, and
    writes its block into the checkpoint's learned_prompt.safetensors beside the answer's."""
    import torch
    from safetensors.torch import load_file
    from test_smol_panda import _gguf_or_skip

    from oxygen_ros.engine.models.smol_panda import learned_prompt
    from oxygen_ros.engine.models.smol_panda.configuration import SMOL_PANDA
    from oxygen_ros.engine.models.smol_panda.training.narration import train

    _gguf_or_skip()
    demos = tmp_path / "demos"
    demos.mkdir()
    _shard(demos / "episode_1001.npz", [0, 0, 1, 1, 2, 2])
    _shard(demos / "episode_1020.npz", [0, 1, 2])
    bb = SMOL_PANDA.backbone
    shape = (2, bb.depth, bb.num_kv_heads, 12, bb.head_dim)

    hp = H.Narration(steps=4, batch=3, rows=4, eval_every=2, checkpoint_every=10, threads=1)
    losses = {}
    for run in ("whole", "resumed"):
        root = tmp_path / run
        _store(root / "kv" / "train_0", [[1001, t] for t in range(6)], shape=shape, seed=1)
        _store(root / "kv" / "val", [[1020, t] for t in range(3)], shape=shape, seed=2)
        out = tmp_path / f"ckpt_{run}"
        learned_prompt.write(out, torch.ones(16, bb.width))            # the answer's block, kept
        if run == "resumed":
            assert train(root, demos, out, hp=hp, until=2) is None
            assert not (out / learned_prompt.FILE).exists() or set(load_file(str(out / learned_prompt.FILE))) == {
                learned_prompt.ANSWER}
        assert train(root, demos, out, hp=hp) == out / learned_prompt.FILE
        log = [json.loads(line) for line in (root / "narration" / "log.jsonl").read_text().splitlines()]
        losses[run] = [r["loss"] for r in log if r["kind"] == "step"]
        assert [r["val_right"] for r in log if r["kind"] == "eval"][0].keys() == {"table", "gripper", "bowl"}
        blocks = load_file(str(out / learned_prompt.FILE))
        assert set(blocks) == {learned_prompt.ANSWER, learned_prompt.NARRATION}
        assert blocks[learned_prompt.NARRATION].shape == (4, bb.width)
        assert torch.equal(blocks[learned_prompt.ANSWER], torch.ones(16, bb.width, dtype=torch.float16))
    assert len(losses["whole"]) == 4 and losses["whole"] == losses["resumed"]
