"""OxyGen's outputs equal isolated execution: same tokens per request, same action chunks."""
import numpy as np
import pytest
import torch

from engine_fixtures import observation, tiny
from oxygen_ros.engine.chunk_graphs import ChunkStep
from oxygen_ros.engine.decode_graphs import DecodeStep
from oxygen_ros.engine.bench.baselines import IsolatedRunner, SequentialEngine, SharedEngine
from oxygen_ros.engine.requests import LanguageRequest
from oxygen_ros.engine.scheduler import EngineConfig, OxygenEngine


def _run(engine, n_frames, request_for_frame, drain=True):
    """Step the engine, submitting requests; returns obs per frame, results, finished deltas."""
    obs, results, finals, reqs = [], [], {}, {}
    f = 0
    while f < n_frames or (drain and (engine.live or engine.pending)):
        o = observation(f if f < n_frames else n_frames - 1)
        for req in request_for_frame(f) if f < n_frames else []:
            reqs[engine.submit(req)] = req
        noise = torch.randn(10, 8, generator=torch.Generator().manual_seed(f))
        res = engine.step(o, noise)
        obs.append((o, noise))
        results.append(res)
        for d in res.deltas:
            finals.setdefault(d.request_id, []).append(d)
        f += 1
    return obs, results, finals, reqs


def _varied_requests(f):
    """Requests of different prompt lengths, token limits and EOS handling; 0-3 per frame."""
    out = []
    for j in range(f % 3):
        out.append(LanguageRequest(prompt="say" + " hi" * (f + j), stream="narration",
                                   max_new_tokens=3 + (5 * f + 7 * j) % 28, ignore_eos=(f + j) % 2 == 0))
    if f % 4 == 1:      # done with its first token, which admission itself produces
        out.append(LanguageRequest(prompt="one word", max_new_tokens=1, ignore_eos=True))
    return out


@pytest.mark.parametrize("transfers", ["every-step", "once-per-frame", "once-per-frame+buckets"])
@pytest.mark.parametrize("k", [1, 3, 8])
def test_tokens_and_actions_equal_isolated(k, transfers):
    """Every request's text equals that request decoded alone from its admission frame's
    prefix; every action chunk equals isolated action inference with the same noise.

    "once-per-frame" is the GPU schedule run on the CPU: tokens reach the host once per
    frame and finished requests ride along; "+buckets" also pads the decode batch to a
    power of two and rounds the read length up, and pads the prefix to its bucket in the
    reserved slot (prefill and action chunk on static buffers), as the CUDA graphs do."""
    model, tok = tiny()
    engine = OxygenEngine(model, tok, EngineConfig(max_requests=5, max_queue=32, steps_per_frame=k))
    if transfers != "every-step":
        engine.sync_every_step = False
    if transfers.endswith("buckets"):
        engine.decoder = DecodeStep(model, engine.pool, bucket=16, pad_rows=True)
        engine.chunk = ChunkStep(model, engine.pool, bucket=16)
    obs, results, finals, reqs = _run(engine, 14, _varied_requests)
    iso = IsolatedRunner(model, tok)
    for (o, noise), res in zip(obs, results):
        ref = iso.action(o, noise).numpy()
        assert np.abs(ref - res.actions).max() <= 1e-5
    assert len(reqs) > 10
    batched_frames = [r for r in results if r.live_requests >= 2]
    assert batched_frames, "the workload must actually batch requests across frames"
    for rid, req in reqs.items():
        deltas = finals[rid]
        assert deltas[-1].done and sum(d.done for d in deltas) == 1
        text = "".join(d.delta for d in deltas)
        assert text == deltas[-1].full_text
        o, _ = obs[req.start_frame]
        alone = LanguageRequest(req.prompt, max_new_tokens=req.max_new_tokens, ignore_eos=req.ignore_eos)
        ref_deltas = []
        iso.language(o, alone, deltas=ref_deltas)
        assert ref_deltas[-1].full_text == text, f"request {rid} (k={k}) differs from isolated decoding"
        assert ref_deltas[-1].token_count == deltas[-1].token_count


def test_pool_nearly_full_queues_and_stays_exact():
    """With 2 slots and 3 requests per frame, requests wait in the queue, are admitted in
    later frames, and still match isolated decoding from their admission frame."""
    model, tok = tiny()
    engine = OxygenEngine(model, tok, EngineConfig(max_requests=2, max_queue=64, steps_per_frame=2))
    reqs_per_frame = lambda f: [LanguageRequest("go" * (j + 1), max_new_tokens=4 + j, ignore_eos=True)
                                for j in range(3)] if f < 4 else []
    obs, results, finals, reqs = _run(engine, 6, reqs_per_frame)
    assert max(r.queued_requests for r in results) >= 3
    assert any(req.start_frame > 3 for req in reqs.values()), "some requests must be admitted late"
    iso = IsolatedRunner(model, tok)
    for rid, req in reqs.items():
        ref = []
        iso.language(obs[req.start_frame][0], LanguageRequest(req.prompt, max_new_tokens=req.max_new_tokens,
                                                              ignore_eos=True), deltas=ref)
        assert finals[rid][-1].full_text == ref[-1].full_text
    assert engine.pool.live == 0 and engine.pool.bytes_in_use() == 0


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("engine_cls", [SequentialEngine, SharedEngine])
def test_baselines_match_oxygen(engine_cls, fused):
    """The baselines produce the same actions and texts as oxygen on the same inputs;
    the baselines run eager, oxygen fused (where built) or eager."""
    model, tok = tiny()
    reqs = lambda f: [LanguageRequest("report", max_new_tokens=6, ignore_eos=True)] if f < 5 else []
    ox = _run(OxygenEngine(model, tok, EngineConfig(steps_per_frame=2, fused=fused)), 5, reqs)
    other_engine = engine_cls(model, tok, EngineConfig(fused=False))
    other_engine.live = []  # sequential has no live set; the drain loop reads it
    other = _run(other_engine, 5, reqs)
    for a, b in zip(ox[1], other[1]):
        assert np.abs(a.actions - b.actions).max() <= 1e-5
    texts = lambda finals: sorted(d[-1].full_text for d in finals.values())
    assert texts(ox[2]) == texts(other[2])


@pytest.mark.parametrize("mode", ["guided", "trained"])
def test_rtc_guided_frames_equal_isolated(mode):
    """With Real-Time Chunking on, oxygen (chunk first: act, then talk with language
    decoding across frames) equals sequential isolated execution given the same noise,
    the same previous chunk and the same delay: actions within 1e-5, tokens identical."""
    from oxygen_ros.engine.rtc import RTCConfig, RTCGuide

    model, tok = tiny()
    cfg = RTCConfig(mode=mode, execution_horizon=6)
    oxy = OxygenEngine(model, tok, EngineConfig(max_requests=4, max_queue=32, steps_per_frame=2))
    seq = SequentialEngine(model, tok, EngineConfig(max_requests=4, max_queue=32))
    previous, texts = None, {"oxygen": {}, "sequential": {}}
    for f in range(6):
        o = observation(f)
        noise = torch.randn(10, 8, generator=torch.Generator().manual_seed(f))
        # the previous chunk, 3 steps on, as the guide: what the robot executes meanwhile
        guide = None if previous is None else RTCGuide(cfg, previous[3:].copy(), delay=2)
        for name, engine in (("oxygen", oxy), ("sequential", seq)):
            engine.submit(LanguageRequest(prompt=f"frame {f} says", max_new_tokens=5, ignore_eos=True))
            if name == "oxygen":
                chunk = engine.act(o, noise, rtc=guide)
                res = engine.talk()
                assert np.array_equal(chunk.actions, res.actions)
                assert chunk.timings_ms["chunk"] < res.timings_ms["total"]
            else:
                res = engine.step(o, noise, rtc=guide)
            for d in res.finished:
                texts[name][d.start_frame] = d.full_text
            if name == "oxygen":
                got = res.actions
            else:
                assert np.abs(got - res.actions).max() <= 1e-5, f
        if guide is not None and mode == "trained":
            assert np.abs(got[:2] - previous[3:5]).max() <= 1e-6      # the prefix is inpainted
        previous = got
    while oxy.live or oxy.pending:
        for d in oxy.step(observation(5)).finished:
            texts["oxygen"][d.start_frame] = d.full_text
    assert texts["oxygen"] == texts["sequential"] and len(texts["oxygen"]) == 6
