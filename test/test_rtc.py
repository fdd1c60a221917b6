"""Real-Time Chunking (engine/rtc.py, layers/rtc_guidance.py) and the policy I/O inverse it needs.

Tiny random models in float32; every chunk is drawn from a prefix prefilled once, and the
"previous chunk" is the same model's chunk from other noise, shifted by a few steps.
"""
from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from engine_fixtures import tiny
from oxygen_ros.engine.chunk_graphs import ChunkStep
from oxygen_ros.engine.models.pi05.configuration import TINY
from oxygen_ros.engine.layers.blocks import packed_groups
from oxygen_ros.engine.models.pi05.modeling import build_random_model
from oxygen_ros.engine.models.pi05.processor import load_policy_io
from oxygen_ros.engine.policy_io.limits import LimitsIO
from oxygen_ros.engine.rtc import DelayEstimator, RTCConfig, RTCGuide, guidance_weight, prefix_weights
from pi05_fixtures import lerobot_ckpt, openpi_ckpt

GUIDED = RTCConfig(mode="guided")          # exp schedule, beta 10, execution_horizon 10
TRAINED = RTCConfig(mode="trained")


def _frame(model, seed: int, n_ids: int = 15, max_len: int = 96):
    """A pool with one prefix prefilled in slot 0 -> (pool, prefix length, the prefix, a generator)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.inference_mode():
        pool = model.new_pool(1, max_len)
        images = torch.rand(2, 3, model.cfg.vision.image_size, model.cfg.vision.image_size, generator=gen) * 2 - 1
        prefix = model.embed_prefix(images, torch.randint(0, 256, (n_ids,), generator=gen).tolist())
        model.prefill(prefix, pool, 0)
    return pool, prefix.shape[1], prefix, gen


def _sample(model, pool, length, noise, rtc=None, slot=0):
    with torch.inference_mode():
        return model.sample_actions(pool, slot, length, noise, rtc=rtc)


def _noise(model, gen):
    e = model.cfg.expert
    return torch.randn(e.horizon, e.action_dim, generator=gen)


# ---------------------------------------------------------------- the mask, the weight

def test_prefix_weights_per_schedule():
    """W is 1 over the delay, kinetix's ramp over [delay, end), 0 from end on."""
    # delay 2, end 6, horizon 10: linear (end - i) / (end - delay + 1) = 4/5 3/5 2/5 1/5
    lin = prefix_weights(2, 6, 10, "linear")
    assert lin.shape == (10,)
    torch.testing.assert_close(lin, torch.tensor([1, 1, .8, .6, .4, .2, 0, 0, 0, 0]))
    # exp: w (e^w - 1) / (e - 1), e - 1 = 1.718282: 0.8 * 1.225541 / 1.718282 = 0.570589,
    # 0.6 * 0.822119 / ... = 0.287072, 0.4 * 0.491825 / ... = 0.114492, 0.2 * 0.221403 / ... = 0.025770
    torch.testing.assert_close(prefix_weights(2, 6, 10, "exp"),
                               torch.tensor([1, 1, .570589, .287072, .114492, .025770, 0, 0, 0, 0]),
                               atol=1e-6, rtol=0)
    torch.testing.assert_close(prefix_weights(2, 6, 10, "ones"), torch.tensor([1.] * 6 + [0.] * 4))
    torch.testing.assert_close(prefix_weights(2, 6, 10, "zeros"), torch.tensor([1.] * 2 + [0.] * 8))
    # end clamped into [delay, horizon]: below the delay the delayed rows stay fully guided,
    # past the horizon the ramp runs to the chunk's end: (10 - i) / 9 from i = 2
    torch.testing.assert_close(prefix_weights(4, 2, 10, "linear"), torch.tensor([1.] * 4 + [0.] * 6))
    torch.testing.assert_close(prefix_weights(2, 20, 10, "linear"),
                               torch.tensor([1, 1] + [(10 - i) / 9 for i in range(2, 10)]))
    assert not prefix_weights(0, 0, 10, "exp").any()
    with pytest.raises(ValueError):
        prefix_weights(2, 6, 10, "cosine")


def test_guidance_weight_is_the_papers_with_tau_one_minus_t():
    """w(t) = min(beta, (t^2 + (1-t)^2) / (t (1-t))): capped at the first step (t = 1)."""
    assert guidance_weight(1.0, 10.0) == 10.0
    assert guidance_weight(0.5, 10.0) == pytest.approx(2.0)            # 0.5 / 0.25
    assert guidance_weight(0.9, 10.0) == pytest.approx(0.82 / 0.09)    # 9.111
    assert guidance_weight(0.9, 5.0) == 5.0
    assert guidance_weight(0.3, 0.0) == 0.0


def test_config_and_guide_validation():
    """Bad values fail at construction with a clear message; rows past the prefix get weight 0."""
    for bad in (dict(mode="on"), dict(schedule="cos"), dict(beta=-1.0), dict(beta=float("nan")),
                dict(execution_horizon=-1), dict(execution_horizon=2.5)):
        with pytest.raises(ValueError):
            RTCConfig(**bad)
    with pytest.raises(ValueError):
        RTCGuide(GUIDED, np.zeros(4, np.float32), 1)
    with pytest.raises(ValueError):
        RTCGuide(GUIDED, np.zeros((4, 8), np.float32), -1)
    guide = RTCGuide(RTCConfig("guided", schedule="ones"), np.zeros((4, 8), np.float32), 2)
    assert isinstance(guide.prefix, torch.Tensor)
    torch.testing.assert_close(guide.weights(10), torch.tensor([1.] * 4 + [0.] * 6))   # not 10 ones
    assert guide.active(10)
    assert not RTCGuide(RTCConfig("off"), np.zeros((4, 8)), 2).active(10)
    assert not RTCGuide(TRAINED, np.zeros((4, 8)), 0).active(10)
    assert not RTCGuide(RTCConfig("guided", schedule="zeros"), np.zeros((4, 8)), 0).active(10)


# ---------------------------------------------------------------- guided sampling

def test_zero_guidance_weight_is_plain_sampling():
    """beta = 0 runs the whole guided path (backward passes included) with weight 0: the chunk
    equals plain sampling from the same noise."""
    model, _ = tiny()
    pool, length, _, gen = _frame(model, 0)
    noise, other = _noise(model, gen), _noise(model, gen)
    plain = _sample(model, pool, length, noise)
    previous = _sample(model, pool, length, other)
    got = _sample(model, pool, length, noise, RTCGuide(RTCConfig("guided", beta=0.0), previous[3:], 3))
    assert (got - plain).abs().max() <= 1e-6


def test_guidance_pulls_the_delayed_points_onto_the_previous_chunk():
    """The first d points of a guided chunk follow the previous chunk's remainder Y.

    Bound: in the linear picture (v independent of x) a step moves x0_hat by |dt| w(t) err,
    so the first step (t = 1, w = beta = 10, |dt| = 0.1) lands x0_hat on Y and the later steps
    contract whatever the model's own dependence on x adds back, by (1 - 0.1 w(t)) each. What
    is left is that dependence: over 20 frames x d in {1, 2, 4} the guided max |a[:d] - Y[:d]|
    measured 0.013x (median) to 0.027x (worst) the unguided one. Asserted: <= 0.1x, about 4x
    the worst measured; without guidance the ratio is 1, so the test fails."""
    model, _ = tiny()
    ratios = []
    for seed in range(6):
        pool, length, _, gen = _frame(model, seed)
        noise, other = _noise(model, gen), _noise(model, gen)
        plain = _sample(model, pool, length, noise)
        remainder = _sample(model, pool, length, other)[3:]      # 3 steps executed since
        for d in (1, 2, 4):
            got = _sample(model, pool, length, noise, RTCGuide(GUIDED, remainder, d))
            guided = (got[:d] - remainder[:d]).abs().max()
            unguided = (plain[:d] - remainder[:d]).abs().max()
            assert unguided > 0.5, "the case must start far from the target"
            ratios.append(float(guided / unguided))
    assert max(ratios) <= 0.1, ratios


def test_guided_sampling_leaves_the_pool_alone():
    """The pool is bitwise unchanged and never requires grad; the prefix K/V stay constant
    (no gradient flows into the backbone's cache, nothing is written past the prefix)."""
    model, _ = tiny()
    pool, length, _, gen = _frame(model, 1)
    noise, other = _noise(model, gen), _noise(model, gen)
    previous = _sample(model, pool, length, other)
    k, v = pool.k.clone(), pool.v.clone()
    got = _sample(model, pool, length, noise, RTCGuide(GUIDED, previous[2:], 2))
    assert torch.equal(pool.k, k) and torch.equal(pool.v, v)
    assert not pool.k.requires_grad and not pool.v.requires_grad
    assert pool.k.grad is None and pool.v.grad is None
    assert not got.requires_grad
    # the same holds for a pool made outside inference mode
    plain_pool = model.new_pool(1, 96)
    with torch.inference_mode():
        model.prefill(_frame(model, 1)[2], plain_pool, 0)
    k = plain_pool.k.clone()
    again = _sample(model, plain_pool, length, noise, RTCGuide(GUIDED, previous[2:], 2))
    assert torch.equal(plain_pool.k, k) and not plain_pool.k.requires_grad
    assert (again - got).abs().max() <= 1e-6


def test_guided_gradient_with_onednn_weight_copies():
    """Where the expert's matrices have oneDNN-blocked copies (fp32 CPU, large enough), they
    are the only copies (no dense packed matrix, issue 44) and the guided VJP goes through
    the blocked products' own backward (oneDNN's linear has none). Reference: the same model
    in float64, which runs plain F.linear."""
    cfg = dataclasses.replace(TINY, expert=dataclasses.replace(TINY.expert, width=256, mlp_dim=1024))
    model = build_random_model(cfg)
    blocked = [g for g in packed_groups(model.expert) if g.blocked is not None]
    if not blocked:
        pytest.skip("oneDNN weight copies are not in use here")
    assert all(g.matrix is None for g in blocked)
    pool, length, prefix, gen = _frame(model, 2)
    noise, other = _noise(model, gen), _noise(model, gen)
    previous = _sample(model, pool, length, other)
    got = _sample(model, pool, length, noise, RTCGuide(GUIDED, previous[2:], 3))
    assert all(g.blocked is not None for g in blocked)
    wide = copy.deepcopy(model).to(torch.float64)
    wide_pool = wide.new_pool(1, 96)
    with torch.inference_mode():
        wide.prefill(prefix.double(), wide_pool, 0)
    want = _sample(wide, wide_pool, length, noise.double(), RTCGuide(GUIDED, previous[2:].double(), 3))
    # measured 6e-7 (fp32 rounding, as for plain sampling); with the oneDNN products in the
    # backward the VJP loses those layers' terms and the chunk is off by ~0.3
    assert (got.double() - want).abs().max() <= 1e-5


# ---------------------------------------------------------------- trained mode

def test_trained_mode_inpaints_the_prefix_exactly():
    """Trained RTC: the first d rows are the prefix itself (bitwise), the rest are sampled with
    the prefix in context, so they differ from plain sampling."""
    model, _ = tiny()
    pool, length, _, gen = _frame(model, 3)
    noise, other = _noise(model, gen), _noise(model, gen)
    plain = _sample(model, pool, length, noise)
    remainder = _sample(model, pool, length, other)[4:]
    k = pool.k.clone()
    got = _sample(model, pool, length, noise, RTCGuide(TRAINED, remainder, 3))
    assert torch.equal(got[:3], remainder[:3])
    assert (got[3:] - plain[3:]).abs().max() > 1e-3
    assert torch.equal(pool.k, k)
    # a delay beyond the prefix's rows inpaints the rows there are
    short = _sample(model, pool, length, noise, RTCGuide(TRAINED, remainder[:2], 5))
    assert torch.equal(short[:2], remainder[:2])


def test_off_and_empty_guides_sample_as_without():
    """Mode off, or a guide with nothing to guide, is plain sampling (bitwise)."""
    model, _ = tiny()
    pool, length, _, gen = _frame(model, 4)
    noise = _noise(model, gen)
    plain = _sample(model, pool, length, noise)
    prefix = torch.zeros(6, 8)
    for guide in (RTCGuide(RTCConfig("off"), prefix, 3), RTCGuide(TRAINED, prefix, 0),
                  RTCGuide(RTCConfig("guided", schedule="zeros"), prefix, 0)):
        assert torch.equal(_sample(model, pool, length, noise, guide), plain)


# ---------------------------------------------------------------- the static (graph) path

@pytest.mark.parametrize("mode", ["guided", "trained"])
def test_chunk_step_static_path_equals_sample_actions(mode):
    """ChunkStep.sample with a guide on the bucketed static path (prefix padded in the
    reserved slot) equals VLAModel.sample_actions on an unpadded prefill with that guide."""
    model, _ = tiny()
    ref, length, prefix, gen = _frame(model, 5, n_ids=13)
    noise, other = _noise(model, gen), _noise(model, gen)
    remainder = _sample(model, ref, length, other)[3:]
    guide = RTCGuide(RTCConfig(mode), remainder, 2)
    want = _sample(model, ref, length, noise, guide)
    pool = model.new_pool(capacity=2, max_len=96)
    pool.k.copy_(torch.randn(pool.k.shape, generator=gen))      # stale entries past the prefix
    pool.v.copy_(torch.randn(pool.v.shape, generator=gen))
    step = ChunkStep(model, pool, graphs=False, bucket=8)
    assert step.static and step.prefix_bucket(length) > length, "the case must pad"
    with torch.inference_mode():
        step.prefill(prefix)
        got = step.sample(length, noise, rtc=guide)
        plain = step.sample(length, noise, rtc=RTCGuide(RTCConfig("off"), remainder, 2))
    assert (got - want).abs().max() <= 1e-5
    assert (plain - _sample(model, ref, length, noise)).abs().max() <= 1e-5


# ---------------------------------------------------------------- the delay

def test_delay_estimator_ignores_the_cold_start_and_tracks_a_rise():
    """The delay is ceil(max recent latency x rate) without the first `warmup` samples."""
    est = DelayEstimator(window=10, warmup=2)
    assert est.estimate_s is None and est.delay_steps(50.0) == 0
    est.observe(2.0)
    assert est.delay_steps(50.0) == 100          # only the warm-up sample so far: it is all there is
    for latency in (0.05, 0.06, 0.05):
        est.observe(latency)
    assert est.delay_steps(50.0) == 3            # ceil(0.06 * 50); the 2.0 s spike is gone
    est.observe(0.12)
    assert est.delay_steps(50.0) == 6            # a real rise: ceil(0.12 * 50)
    for _ in range(10):
        est.observe(0.04)
    assert est.delay_steps(50.0) == 2            # the rise left the window: ceil(0.04 * 50)
    est.observe(0.3)
    assert est.delay_steps(10.0) == 3            # 0.3 * 10 = 3.0000000000000004 is 3 steps
    with pytest.raises(ValueError):
        est.observe(-1.0)


# ---------------------------------------------------------------- policy I/O inverse

def test_limits_model_actions_inverts_actions():
    """LimitsIO.model_actions(actions(y)) == y and actions(model_actions(x)) == x."""
    io = LimitsIO.from_limits([-1, -2], [1, 2], [-3.0, 0.0, 10.0], [3.0, 1.0, 20.0], horizon=10)
    y = np.random.default_rng(0).uniform(-1.2, 1.2, (5, 8))
    np.testing.assert_allclose(io.model_actions(io.actions(y)), y[:, :3], atol=1e-12)
    x = np.array([[0.0, 0.5, 15.0], [3.0, 0.0, 10.0]])
    np.testing.assert_allclose(io.model_actions(x), [[0.0, 0.0, 0.0], [1.0, -1.0, -1.0]])  # by hand
    np.testing.assert_allclose(io.actions(io.model_actions(x)), x, atol=1e-12)


ACT3 = {"q01": [-2.0, -1.0, 0.0], "q99": [2.0, 1.0, 4.0]}
MS3 = {"mean": [1.0, -1.0, 0.5], "std": [2.0, 0.5, 4.0]}


def _policies(tmp_path):
    mask = [True, False, True]
    return {
        "openpi-quantile": load_policy_io(openpi_ckpt(tmp_path / "oq", ACT3, ACT3), delta_action_mask=mask),
        "lerobot-mean_std": load_policy_io(
            lerobot_ckpt(tmp_path / "lm", MS3, MS3, norm_map={"STATE": "MEAN_STD", "ACTION": "MEAN_STD"}),
            delta_action_mask=mask),
        # action_dims past the 1-dim statistics: openpi pads mean 0, std 1 there
        "openpi-mean_std-padded": load_policy_io(openpi_ckpt(tmp_path / "om", {"mean": [1.0], "std": [2.0]},
                                                             {"mean": [1.0], "std": [2.0]}),
                                                 normalization="mean_std", action_dims=2),
    }


@pytest.mark.parametrize("name", ["openpi-quantile", "lerobot-mean_std", "openpi-mean_std-padded"])
def test_policy_model_actions_inverts_actions(tmp_path, name):
    """PolicyIO.model_actions is actions()'s inverse with the same state (delta dims too).
    LeRobot's mean_std divides by std + 1e-8 on the way in, multiplies by std on the way out:
    a round trip is off by ~1e-8 relative, within the 1e-6 asserted."""
    io = _policies(tmp_path)[name]
    rng = np.random.default_rng(1)
    state = np.array([0.25, -0.5, 9.0])
    y = rng.uniform(-1, 1, (4, io.action_dims))
    chunk = np.concatenate([y, rng.normal(size=(4, 32 - io.action_dims))], axis=1)   # model width
    robot = io.actions(chunk, state)
    np.testing.assert_allclose(io.model_actions(robot, state), y, atol=1e-6)
    np.testing.assert_allclose(io.actions(io.model_actions(robot, state), state), robot, atol=1e-6)


def test_model_actions_reanchor_delta_dims_to_the_new_state(tmp_path):
    """Positions planned from an old state map to deltas from the NEW state: decoded with the
    new state they are the same positions; only the delta dims' model values move."""
    io = _policies(tmp_path)["openpi-quantile"]
    old, new = np.array([0.25, -0.5, 9.0]), np.array([0.5, 0.0, 8.0])
    robot = io.actions(np.random.default_rng(2).uniform(-1, 1, (3, 3)), old)
    at_new = io.model_actions(robot, new)
    np.testing.assert_allclose(io.actions(at_new, new), robot, atol=1e-9)
    moved = np.abs(at_new - io.model_actions(robot, old)).max(axis=0)
    assert moved[0] > 0.1 and moved[2] > 0.1 and moved[1] == 0.0
    # (0.5 - 0.25) on dim 0: quantile scale 2 / (4 + 1e-6) per unit -> 0.125 by hand
    assert moved[0] == pytest.approx(0.25 * 2 / (4 + 1e-6), abs=1e-12)
