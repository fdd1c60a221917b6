"""The recorded demonstrations (scripts/record_demos.py, out/demos/episode_<seed>.npz) as
training frames, their normalisation statistics, and the policy I/O that turns a frame into
model inputs exactly as the node will (the checkpoint's openpi PolicyIO)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from . import hparams as H

_EPISODE = re.compile(r"episode_(\d+)\.npz$")


def episode_files(demo_dir: str | Path) -> dict[int, Path]:
    """seed -> file, for every complete shard (the recorder writes to a temporary name first)."""
    out = {}
    for p in Path(demo_dir).glob("episode_*.npz"):
        m = _EPISODE.search(p.name)
        if m:
            out[int(m.group(1))] = p
    return dict(sorted(out.items()))


@dataclass
class Episode:
    seed: int
    images: dict[str, np.ndarray]      # slot -> uint8 [T, S, S, 3]
    state: np.ndarray                  # float32 [T, 8]
    actions: np.ndarray                # float32 [T, H, 8]
    place: np.ndarray                  # int8 [T]
    grasp: np.ndarray                  # bool [T]
    cube: np.ndarray                   # float32 [T, 3]
    gripper: np.ndarray                # float32 [T, 3]
    bowl: np.ndarray                   # float32 [T, 3]
    cube_yaw: np.ndarray               # float32 [T]: the cube's turn about z (rad)
    gripper_yaw: np.ndarray            # float32 [T]: the gripper frame's turn about z (rad)
    confined: np.ndarray | None = None  # bool [T]: in the phases the recording confined its offsets to
    source: str = "expert"             # "policy": panda_policy_rollout.py --record (for captions, never actions)

    @property
    def length(self) -> int:
        return len(self.place)


def load_episode(path: Path, seed: int) -> Episode | None:
    with np.load(path) as d:
        source = str(d["source"]) if "source" in d.files else "expert"
        # a failed demonstration teaches nothing; a policy's failed episode still shows its states
        if (source == "expert" and not bool(d["success"])) or list(d["place_names"]) != list(H.PLACES):
            return None
        return Episode(seed=seed, images={slot: d[key] for slot, key in H.CAMERAS.items()},
                       state=d["joint_position"].astype(np.float32), actions=d["action_chunk"].astype(np.float32),
                       place=d["place"], grasp=d["grasp_contact"], cube=d["cube_pose"][:, :3],
                       gripper=d["gripper_pose"][:, :3], bowl=d["bowl_pose"][:, :3],
                       cube_yaw=yaw(d["cube_pose"][:, 3:]), gripper_yaw=yaw(d["gripper_pose"][:, 3:]),
                       confined=confined_frames(d), source=source)


def confined_frames(shard) -> np.ndarray:
    """The frames in the phases record_demos --perturb-phases confined the offsets to (the
    gripper led back to the cube); none in clean, free-space DART or older shards."""
    phases = [str(p) for p in shard["perturb_phases"]] if "perturb_phases" in shard.files else []
    if float(shard["perturb_rad"]) <= 0 or not phases:
        return np.zeros(len(shard["phase"]), bool)
    names = [str(n) for n in shard["phase_names"]]
    return np.isin(shard["phase"], [names.index(p) for p in phases])


def yaw(quat_wxyz: np.ndarray) -> np.ndarray:
    """The turn about world z of frames given as quaternions [T, 4] (w, x, y, z)."""
    w, x, y, z = quat_wxyz.astype(np.float64).T
    return np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)).astype(np.float32)


def load_start_frames(path: Path) -> Episode:
    """tools/start_frames.py's frames as one pseudo-episode (each frame its own layout): no
    grasp, no actions (stage 1 does not read them); the cube's place as the file says (files
    rendered before it said: all on the table)."""
    with np.load(path) as d:
        n = len(d["joint_position"])
        place = (np.array([H.PLACES.index(str(p)) for p in d["place"]], np.int8) if "place" in d.files
                 else np.zeros(n, np.int8))
        return Episode(seed=int(d["first_seed"]), images={slot: d[key] for slot, key in H.CAMERAS.items()},
                       state=d["joint_position"], actions=np.zeros((n, 0, 8), np.float32),
                       place=place, grasp=np.zeros(n, bool),
                       cube=d["cube_pose"][:, :3], gripper=d["gripper_pose"][:, :3], bowl=d["bowl_pose"][:, :3],
                       cube_yaw=yaw(d["cube_pose"][:, 3:]), gripper_yaw=yaw(d["gripper_pose"][:, 3:]))


class Demos:
    """The episodes of one split, loaded into memory; `refresh()` adds shards written since."""

    def __init__(self, demo_dir: str | Path, split: str = "train"):
        assert split in ("train", "held_out")
        self.demo_dir, self.split = Path(demo_dir), split
        self.episodes: list[Episode] = []
        self._seen: set[int] = set()
        self.refresh()

    @classmethod
    def of(cls, episodes: list[Episode]) -> "Demos":
        """A split made of these episodes (a subset, or frames that are no recording's)."""
        demos = cls.__new__(cls)
        demos.episodes = list(episodes)
        demos._index()
        return demos

    def refresh(self) -> int:
        added = 0
        for seed, path in episode_files(self.demo_dir).items():
            if seed in self._seen or (H.held_out(seed) != (self.split == "held_out")):
                continue
            try:
                ep = load_episode(path, seed)
            except (OSError, ValueError, KeyError):   # a shard being written: next time
                continue
            self._seen.add(seed)
            if ep is not None:
                self.episodes.append(ep)
                added += 1
        self._index()
        return added

    def _index(self):
        self.frames = np.array([(e, t) for e, ep in enumerate(self.episodes) for t in range(ep.length)],
                               dtype=np.int64).reshape(-1, 2)
        self.places = np.array([self.episodes[e].place[t] for e, t in self.frames], dtype=np.int64)

    def __len__(self):
        return len(self.frames)

    def sample(self, n: int, gen: np.random.Generator, balanced: bool = False) -> np.ndarray:
        """n frame indices; balanced: the places the split has in turn, from a random one (the
        rarer ones, `bowl`, would otherwise be a fifth of the captions; and a batch smaller
        than the places still meets them all over the steps)."""
        if not balanced:
            return gen.integers(0, len(self.frames), n)
        pools = [np.flatnonzero(self.places == p) for p in np.unique(self.places)]
        first = gen.integers(len(pools))
        turns = [pools[(first + i) % len(pools)] for i in range(n)]
        return np.array([pool[gen.integers(len(pool))] for pool in turns], dtype=np.int64)


def pixels(images: list[np.ndarray]) -> torch.Tensor:
    """uint8 [S, S, 3] images -> [N, 3, S, S] in [-1, 1], as openpi's PolicyIO makes them at
    the model's size (x / 255 * 2 - 1 in float32)."""
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).to(torch.float32)
    return x / 255.0 * 2.0 - 1.0


def compute_stats(episodes: list[Episode]) -> dict:
    """openpi's norm_stats (mean, std, q01, q99) of the state and of the actions as the model
    sees them (joints as deltas from the frame's state: DELTA_ACTION_MASK)."""
    state = np.concatenate([e.state for e in episodes]).astype(np.float64)
    mask = np.array(H.DELTA_ACTION_MASK)
    acts = np.concatenate([np.where(mask, e.actions - e.state[:, None], e.actions) for e in episodes])
    acts = acts.reshape(-1, acts.shape[-1]).astype(np.float64)

    def describe(x):
        return {"mean": x.mean(0), "std": x.std(0), "q01": np.quantile(x, 0.01, axis=0),
                "q99": np.quantile(x, 0.99, axis=0)}
    return {"state": describe(state), "actions": describe(acts)}


def checkpoint_config(cfg) -> dict:
    """config.json of a smol-panda checkpoint (what the openpi policy I/O and people read)."""
    return {"action_horizon": cfg.expert.horizon, "num_inference_steps": cfg.expert.denoise_steps,
            "action_rate_hz": H.ACTION_RATE_HZ, "use_quantile_norm": True,
            "delta_action_mask": list(H.DELTA_ACTION_MASK), "camera_slots": list(H.CAMERAS),
            "instruction": H.INSTRUCTION, "narration_prompt": H.NARRATION_PROMPT, "captions": H.CAPTIONS}


def policy_io(checkpoint_dir: Path, tok, cfg):
    """The checkpoint's PolicyIO, as the node builds it from config/smol_panda.yaml
    (policy_io openpi, delta_action_mask)."""
    from ...pi05.processor import load_policy_io

    io = load_policy_io(checkpoint_dir, "openpi", delta_action_mask=list(H.DELTA_ACTION_MASK),
                        image_size=cfg.vision.image_size)
    io.tokenizer, io.max_prompt_tokens = tok, cfg.max_prompt_tokens
    return io
