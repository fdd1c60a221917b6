"""A fleet robot's action noise is its own: the engine the node builds for a fleet
(engine/factory.build_engine, as on_configure does) draws each robot's noise from a generator
seeded from the node's `seed` and the robot's name, so a robot's chunk never depends on
which other robots were in the frames before (present, or left out as stale)."""
import numpy as np
import pytest

from engine_fixtures import observation
from node_harness import tiny_params
from oxygen_ros.engine.factory import build_engine

A, B = "arm_a", "arm_b"
FRAMES = 4


def fleet(seed: int = 0):
    """The node's FleetEngine for robots [B, A] (B first: its noise would be drawn first)."""
    p = tiny_params(seed=seed)
    _, _, engine = build_engine(p, {B: p, A: p})
    for robot in (B, A):            # on_configure registers every robot (engine.view)
        engine.view(robot)
    return engine


def a_chunks(b_present, seed: int = 0) -> list:
    """Robot A's chunks over FRAMES frames of the same observations; B is in the frames
    where b_present(frame) (its own observations), left out (stale) in the others."""
    engine = fleet(seed)
    chunks = []
    for f in range(FRAMES):
        obs = {B: observation(50 + f, cameras=3)} if b_present(f) else {}
        obs[A] = observation(f, cameras=3)
        out = engine.act(obs)
        assert not engine.faults and set(out) == set(obs)
        engine.talk()
        chunks.append(out[A].actions)
    return chunks


def test_a_robots_chunk_does_not_depend_on_which_other_robots_were_present():
    """A's chunk for the same observation is the same (max abs diff <= 1e-5) whether B was
    present in every frame, stale in some, or in none; seeded from the node's seed and the
    robot's name: another seed changes it, and two robots' noises differ."""
    present = a_chunks(lambda f: True)
    for name, b_present in (("stale on odd frames", lambda f: f % 2 == 0), ("stale throughout", lambda f: False)):
        other = a_chunks(b_present)
        for f in range(FRAMES):
            diff = np.abs(present[f] - other[f]).max()
            assert diff <= 1e-5, f"frame {f}, B {name}: A's chunk moved by {diff:.3g}"
    # same seed, same robot: reproducible; another seed: another chunk
    assert np.abs(a_chunks(lambda f: True, seed=1)[0] - present[0]).max() > 1e-3
    # two robots given the same observation do not share their noise
    engine = fleet()
    same = observation(0, cameras=3)
    out = engine.act({B: same, A: same})
    engine.talk()
    assert np.abs(out[A].actions - out[B].actions).max() > 1e-3


@pytest.mark.parametrize("seed", [0, 7])
def test_given_noise_still_wins(seed):
    """Noise passed by the caller (oxygen serve's sessions) is used as given, not the
    robot's generator: the chunk equals the one from the same noise in another fleet."""
    import torch

    e = fleet(seed).model.cfg.expert
    noise = torch.randn(e.horizon, e.action_dim, generator=torch.Generator().manual_seed(3))
    chunks = []
    for present in ({A}, {A, B}):
        engine = fleet(seed)
        obs = {r: observation(9, cameras=3) for r in present}
        chunks.append(engine.act(obs, noises={A: noise})[A].actions)
        engine.talk()
    assert np.abs(chunks[0] - chunks[1]).max() <= 1e-5
