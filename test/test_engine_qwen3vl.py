"""The OxyGen schedule on a Qwen3-VL model (qwen3vl-tiny: Qwen3-VL backbone with three-axis
RoPE and DeepStack, Xiaomi-Robotics-0's action head): requests admitted in different
frames, from prefixes with different image layouts (so different rope_deltas), decode in
one batch and each equals its isolated greedy decode; every chunk equals isolated action
inference with the same noise."""
import numpy as np
import pytest
import torch

from oxygen_ros.engine.bench.baselines import IsolatedRunner
from oxygen_ros.engine.registry import get_config
from oxygen_ros.engine.kv_pool import KVPool
from oxygen_ros.engine.models.qwen3vl.modeling import build_random_qwen3vl
from oxygen_ros.engine.observation.observation import Observation, ObservationError
from oxygen_ros.engine.requests import LanguageRequest
from oxygen_ros.engine.scheduler import EngineConfig, OxygenEngine
from oxygen_ros.engine.text.tokenizer import ByteTokenizer

_MODEL = None
SIZES = [(64, 64), (96, 80), (48, 112), (128, 64)]


def qwen_tiny():
    global _MODEL
    if _MODEL is None:
        _MODEL = build_random_qwen3vl(get_config("qwen3vl-tiny"))
    return _MODEL, ByteTokenizer()


def observation(f: int) -> Observation:
    """Frame f: the base camera at a size that changes frame to frame; the wrist camera
    on odd frames only, at another size."""
    rng = np.random.default_rng(500 + f)
    images = {"base_0_rgb": rng.integers(0, 256, (*SIZES[f % 4], 3), dtype=np.uint8)}
    if f % 2:
        images["left_wrist_0_rgb"] = rng.integers(0, 256, (*SIZES[(f + 1) % 4], 3), dtype=np.uint8)
    return Observation(images=images, state=rng.uniform(-1, 1, 8), instruction="put the cube in the bowl")


def requests_for(f: int) -> list[LanguageRequest]:
    return [LanguageRequest("what now" + "?" * (f + j), stream="narration", max_new_tokens=4 + (3 * f + 5 * j) % 9,
                            ignore_eos=True) for j in range(1 + f % 2)] if f < 6 else []


@pytest.mark.parametrize("k", [1, 4])
def test_qwen3vl_oxygen_equals_isolated(k):
    model, tok = qwen_tiny()
    engine = OxygenEngine(model, tok, EngineConfig(max_requests=6, max_queue=32, max_new_tokens=16,
                                                   steps_per_frame=k))
    iso = IsolatedRunner(model, tok, EngineConfig(max_new_tokens=16))
    horizon, dim = model.cfg.expert.horizon, model.cfg.expert.action_dim
    obs, results, finals, reqs = [], [], {}, {}
    f = 0
    while f < 6 or engine.live or engine.pending:
        o = observation(min(f, 5))
        for req in requests_for(f):
            reqs[engine.submit(req)] = req
        noise = torch.randn(horizon, dim, generator=torch.Generator().manual_seed(f))
        res = engine.step(o, noise)
        obs.append((o, noise))
        results.append(res)
        for d in res.deltas:
            finals.setdefault(d.request_id, []).append(d)
        f += 1
    # the prefixes' image layouts differ, so their rope_deltas do, and requests batch across frames
    deltas = {model.observation_prefix(o, tok).rope_delta for o, _ in obs}
    assert len(deltas) >= 3, deltas
    assert max(r.live_requests for r in results) >= 2
    for (o, noise), res in zip(obs, results):
        assert res.actions.shape == (horizon, dim)
        assert np.abs(iso.action(o, noise).numpy() - res.actions).max() <= 1e-5
    for rid, req in reqs.items():
        text = "".join(d.delta for d in finals[rid])
        ref = []
        iso.language(obs[req.start_frame][0], LanguageRequest(req.prompt, max_new_tokens=req.max_new_tokens,
                                                              ignore_eos=True), deltas=ref)
        assert ref[-1].full_text == text and ref[-1].token_count == finals[rid][-1].token_count, rid


def test_a_wrong_position_offset_changes_the_tokens():
    """The check above can fail: decoding a request at another rope_delta (here 0 instead
    of its prefix's) gives other logits."""
    model, tok = qwen_tiny()
    prefix = model.observation_prefix(observation(1), tok)
    assert prefix.rope_delta != 0
    logits = []
    for offset in (prefix.rope_delta, 0):
        pool = model.new_pool(1, 128)
        model.prefill(prefix, pool, 0)
        pool.offsets[0] = offset
        hidden = model.extend(torch.tensor([model.request_ids(tok, "hi")]), pool, 0, prefix.shape[1])
        logits.append(model.backbone.logits(hidden[:, -1]))
    assert (logits[0] - logits[1]).abs().max() > 1e-3


def test_the_pool_carries_each_slots_offset_with_its_kv():
    pool = KVPool(depth=1, capacity=3, max_len=4, kv_heads=1, head_dim=2)
    pool.offsets[pool.staging_slot] = -7
    pool.claim(2)
    pool.copy_prefix(0, 1, 2)
    assert int(pool.offsets[1]) == -7
    pool.claim(2)
    pool.offsets[2] = 5
    pool.claim(2)
    assert pool.release(0) == 2 and int(pool.offsets[0]) == 5     # the last slot moved into the hole


def test_bad_camera_images_are_clear_errors():
    model, tok = qwen_tiny()
    o = observation(0)
    o.images["base_0_rgb"] = np.zeros((64, 64, 4), np.uint8)
    with pytest.raises(ObservationError, match="camera image"):
        model.observation_prefix(o, tok)
    o = observation(0)
    o.images["top_rgb"] = np.zeros((64, 64, 3), np.uint8)
    with pytest.raises(ObservationError, match="unknown camera slot"):
        model.observation_prefix(o, tok)
    o = observation(0)
    o.state[0] = np.nan
    with pytest.raises(ObservationError, match="NaN"):
        model.observation_prefix(o, tok)


# -- several action experts on one prefix --------------------------------------------------
def multi_expert_model(extra):
    import dataclasses

    from oxygen_ros.engine.models.qwen3vl.configuration import ExtraExpert

    cfg = dataclasses.replace(get_config("qwen3vl-tiny"), name="qwen3vl-tiny-multi",
                              extra_experts=tuple(ExtraExpert(n, c) for n, c in extra))
    return build_random_qwen3vl(cfg), ByteTokenizer()


def second_xr0():
    from oxygen_ros.engine.models.xr0.configuration import XR0HeadConfig

    # another XR-0-style head: its own depth (reads the last backbone layer), chunk and state
    return XR0HeadConfig(depth=1, width=32, num_heads=2, head_dim=16, mlp_dim=64, action_dim=6, horizon=5,
                         state_dim=4, denoise_steps=3, time_embed_dim=16)


def test_every_expert_runs_on_the_one_prefill_and_equals_its_isolated_run():
    """A frame runs the first expert, then each further one in order on the same prefix,
    then language; each chunk equals that expert run alone from its own prefill with the
    same noise (1e-5), as in the sequential baseline; each expert has its phase."""
    from oxygen_ros.engine.bench.baselines import SequentialEngine

    model, tok = multi_expert_model([("hands", second_xr0())])
    engine = OxygenEngine(model, tok, EngineConfig(max_requests=4, max_new_tokens=8, steps_per_frame=2))
    iso = IsolatedRunner(model, tok, EngineConfig(max_new_tokens=8))
    seq = SequentialEngine(model, tok, EngineConfig(max_new_tokens=8))
    for f in range(4):
        o = observation(f)
        noise = torch.randn(10, 8, generator=torch.Generator().manual_seed(f))
        hands = torch.randn(5, 6, generator=torch.Generator().manual_seed(100 + f))
        engine.submit(LanguageRequest("status?", max_new_tokens=3, ignore_eos=True))
        res = engine.step(o, noise, expert_noise={"hands": hands})
        alone = seq.step(o, noise, expert_noise={"hands": hands})
        assert set(res.expert_actions) == {"hands"} and res.expert_actions["hands"].shape == (5, 6)
        assert np.abs(iso.expert_action(o, "hands", hands) - res.expert_actions["hands"]).max() <= 1e-5
        assert np.abs(alone.expert_actions["hands"] - res.expert_actions["hands"]).max() <= 1e-5
        assert np.abs(iso.action(o, noise).numpy() - res.actions).max() <= 1e-5
        t = res.timings_ms
        assert t["action:hands"] > 0 and t["chunk"] <= t["chunk:hands"] <= t["total"]


def test_expert_names_must_be_distinct():
    with pytest.raises(ValueError, match="distinct"):
        multi_expert_model([("hands", second_xr0()), ("hands", second_xr0())])


def test_the_bench_measures_sharing_per_expert_count_and_stays_exact():
    from oxygen_ros.engine.bench.runner import BenchSettings, run_expert_scaling, with_experts

    model, tok = multi_expert_model([("hands", second_xr0()), ("base", second_xr0())])
    assert [len(with_experts(model, n).cfg.extra_experts) for n in (1, 2, 3)] == [0, 1, 2]
    assert len(model.extra_experts) == 2          # the views leave the model whole
    s = BenchSettings(workload="libero", modes=("sequential", "oxygen"), frames=2, tokens=3, steps_per_frame=1,
                      seed=0, rounds=2)
    report = run_expert_scaling(model, tok, s, counts=(1, 3), log=lambda *a, **k: None)
    assert set(report["experts"]) == {1, 3}
    assert report["experts"][3]["names"] == ["main", "hands", "base"]
    for r in report["experts"].values():
        assert len(r["per_round"]) == 2 and r["speedup_per_frame"] > 0
        assert r["exactness"]["text_mismatched_requests"] == 0 and r["exactness"]["requests_compared"] >= 2
        assert r["exactness"]["max_action_abs_diff"] <= 1e-5
    with pytest.raises(ValueError, match="3 action expert"):
        with_experts(model, 4)


def test_the_multi_expert_profile_runs_kv_and_hidden_state_readers_exactly():
    """qwen3vl-multi-tiny: XR-0's head, a PI_v3 head reading the prefix's per-layer hidden
    states (kept in the pool), a second XR-0-style head; each chunk equals its isolated run."""
    from oxygen_ros.engine.registry import load_model

    model, tok = load_model("qwen3vl-multi-tiny")
    engine = OxygenEngine(model, tok, EngineConfig(max_requests=3, max_new_tokens=8))
    iso = IsolatedRunner(model, tok, EngineConfig(max_new_tokens=8))
    assert engine.pool.hidden is not None and engine.pool.hidden.shape[0] == model.cfg.backbone.depth + 1
    for f in range(3):
        o = observation(f)
        gen = torch.Generator().manual_seed(f)
        noise = {"hands": torch.randn(6, 6, generator=gen), "base": torch.randn(5, 3, generator=gen)}
        main = torch.randn(10, 8, generator=gen)
        res = engine.step(o, main, expert_noise=noise)
        assert np.abs(iso.action(o, main).numpy() - res.actions).max() <= 1e-5
        for name, n in noise.items():
            assert np.abs(iso.expert_action(o, name, n) - res.expert_actions[name]).max() <= 1e-5, name
    # the hidden-state reader depends on the image: another frame, another chunk
    other = engine.step(observation(1), main, expert_noise=noise).expert_actions["hands"]
    assert np.abs(other - res.expert_actions["hands"]).max() > 1e-4


# -- Real-Time Chunking on XR-0's head ---------------------------------------------------------
def test_guided_rtc_on_the_xr0_head_pulls_the_start_of_the_chunk_toward_the_prefix():
    """XR-0's time runs 0 -> 1, so x0_hat = x + (1 - t) v and the guidance adds w g. With
    beta 0 the guided path is the plain one (to float rounding of the dense products); with
    the cap at 10 the guided rows end much closer to the target than unguided, the rows past
    the execution horizon are left alone, and the pool's prefix is untouched."""
    from oxygen_ros.engine.rtc import RTCConfig, RTCGuide

    model, tok = qwen_tiny()
    pool = model.new_pool(1, 256)
    prefix = model.observation_prefix(observation(1), tok)
    model.prefill(prefix, pool, 0)
    before = pool.k[:, 0, :, :prefix.shape[1]].clone()
    noise = torch.randn(10, 8, generator=torch.Generator().manual_seed(0))
    target = torch.full((10, 8), 0.5)
    with torch.inference_mode():
        plain = model.sample_actions(pool, 0, prefix.shape[1], noise, prefix=prefix)
        weak = model.sample_actions(pool, 0, prefix.shape[1], noise, prefix=prefix,
                                    rtc=RTCGuide(RTCConfig("guided", beta=0.0, execution_horizon=6), target, 2))
        pulled = model.sample_actions(pool, 0, prefix.shape[1], noise, prefix=prefix,
                                      rtc=RTCGuide(RTCConfig("guided", beta=10.0, execution_horizon=6), target, 2))
    assert (weak - plain).abs().max() <= 1e-4
    far, near = (plain[:2] - 0.5).abs().mean(), (pulled[:2] - 0.5).abs().mean()
    assert near < 0.5 * far, (float(near), float(far))
    assert (pulled[6:] - plain[6:]).abs().max() < (pulled[:2] - plain[:2]).abs().max()
    assert torch.equal(pool.k[:, 0, :, :prefix.shape[1]], before)
    with pytest.raises(ValueError, match="not available for the XR-0 head"):
        with torch.inference_mode():
            model.sample_actions(pool, 0, prefix.shape[1], noise, prefix=prefix,
                                 rtc=RTCGuide(RTCConfig("trained"), target, 2))


# -- Real-Time Chunking on StarVLA's PI_v3 head and on further experts --------------------------
def test_guided_rtc_on_the_pi_v3_head_pulls_the_start_of_the_chunk_toward_the_prefix():
    """PI_v3's flow also runs t = k / N from 0 to 1 (x0_hat = x + (1 - t) v, v' = v + w g),
    over the pool's per-layer hidden states: beta 0 is the plain path, beta 10 pulls the
    guided rows toward the target, rows past the execution horizon move less, and the
    pool's hidden states are untouched."""
    from oxygen_ros.engine.rtc import RTCConfig, RTCGuide
    from oxygen_ros.engine.registry import load_model

    model, tok = load_model("qwen3vl-multi-tiny")
    hands = model.expert_config(1)
    pool = model.new_pool(1, 256)
    prefix = model.observation_prefix(observation(2), tok)
    model.prefill(prefix, pool, 0)
    before = pool.hidden.clone()
    noise = torch.randn(hands.horizon, hands.action_dim, generator=torch.Generator().manual_seed(3))
    target = torch.full((hands.horizon, 4), -0.4)          # 4 of 6 columns guided

    def sample(rtc=None):
        with torch.inference_mode():
            return model.sample_actions(pool, 0, prefix.shape[1], noise, prefix=prefix, expert=1, rtc=rtc)

    plain = sample()
    weak = sample(RTCGuide(RTCConfig("guided", beta=0.0, execution_horizon=4), target, 2))
    pulled = sample(RTCGuide(RTCConfig("guided", beta=10.0, execution_horizon=4), target, 2))
    assert (weak - plain).abs().max() <= 1e-4
    far, near = (plain[:2, :4] + 0.4).abs().mean(), (pulled[:2, :4] + 0.4).abs().mean()
    assert near < 0.5 * far, (float(near), float(far))
    assert (pulled[4:] - plain[4:]).abs().max() < (pulled[:2] - plain[:2]).abs().max()
    assert torch.equal(pool.hidden, before)
    with pytest.raises(ValueError, match="not available for the PI_v3 head"):
        sample(RTCGuide(RTCConfig("trained"), target, 2))


def test_each_further_expert_follows_its_own_guide_and_equals_its_isolated_guided_run():
    """expert_rtc guides each further expert by name (a K/V reader and a hidden-state
    reader), on the one shared prefix; each guided chunk equals the same expert guided
    alone from its own prefill (1e-5), and differs from its unguided chunk."""
    from oxygen_ros.engine.rtc import RTCConfig, RTCGuide
    from oxygen_ros.engine.registry import load_model

    model, tok = load_model("qwen3vl-multi-tiny")
    engine = OxygenEngine(model, tok, EngineConfig(max_requests=2, max_new_tokens=4))
    iso = IsolatedRunner(model, tok, EngineConfig(max_new_tokens=4))
    cfg = RTCConfig("guided", beta=10.0, execution_horizon=4)
    guides = {"hands": RTCGuide(cfg, torch.full((6, 6), 0.3), 2), "base": RTCGuide(cfg, torch.full((5, 3), -0.3), 1)}
    o = observation(3)
    gen = torch.Generator().manual_seed(7)
    noise = {"hands": torch.randn(6, 6, generator=gen), "base": torch.randn(5, 3, generator=gen)}
    main = torch.randn(10, 8, generator=gen)
    guided = engine.step(o, main, expert_noise=noise, expert_rtc=guides)
    plain = engine.step(o, main, expert_noise=noise)
    assert np.abs(guided.actions - plain.actions).max() <= 1e-5      # the first expert was not guided
    for name, guide in guides.items():
        alone = iso.expert_action(o, name, noise[name], rtc=guide)
        assert np.abs(alone - guided.expert_actions[name]).max() <= 1e-5, name
        target = guide.prefix[0, 0].item()
        assert np.abs(guided.expert_actions[name][:guide.delay] - target).mean() < \
            np.abs(plain.expert_actions[name][:guide.delay] - target).mean(), name
