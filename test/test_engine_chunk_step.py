"""The static-buffer prefill + action chunk the CUDA graphs replay, per prefix-length bucket
(CPU-testable; the capture itself needs a GPU: scripts/cuda_check.py)."""
import dataclasses

import numpy as np
import pytest
import torch

from engine_fixtures import observation, tiny
from oxygen_ros.engine.bench.baselines import IsolatedRunner
from oxygen_ros.engine.chunk_graphs import ChunkStep
from oxygen_ros.engine.models.pi05.configuration import TINY
from oxygen_ros.engine.decode_graphs import DecodeStep
from oxygen_ros.engine.models.pi05.modeling import build_random_model
from oxygen_ros.engine.requests import LanguageRequest
from oxygen_ros.engine.scheduler import EngineConfig, OxygenEngine

_CAUSAL = None


def model_for(attention: str):
    global _CAUSAL
    if attention == "bidirectional":
        return tiny()[0]
    if _CAUSAL is None:
        _CAUSAL = build_random_model(dataclasses.replace(TINY, prefix_attention="causal"))
    return _CAUSAL


def test_buckets_cover_every_prefix_length():
    """capture_all() records buckets(); every prefix a frame can prefill must map onto one
    of them, padded to no less than itself and leaving room for the action horizon."""
    model, _ = tiny()
    pool = model.new_pool(capacity=3, max_len=100)       # horizon 10: prefixes up to 90 tokens
    step = ChunkStep(model, pool, bucket=16)
    assert step.static and not step.graphs and step.slot == pool.capacity
    buckets = step.buckets()
    assert buckets == [16, 32, 48, 64, 80, 90]
    for length in range(1, 91):
        span = step.prefix_bucket(length)
        assert span in buckets and length <= span and span + 10 <= pool.max_len, length
    assert step.prefix_bucket(81) == 90 and step.prefix_bucket(16) == 16 and step.prefix_bucket(17) == 32
    with pytest.raises(ValueError):
        step.prefix_bucket(91)


def test_the_cpu_engine_keeps_the_eager_path():
    """Without CUDA nothing changes: the prefix goes to the staging slot through
    VLAModel.prefill / sample_actions, no static buffers, no reserved slot."""
    model, tok = tiny()
    engine = OxygenEngine(model, tok, EngineConfig(max_requests=3))
    assert not engine.chunk.graphs and not engine.chunk.static
    assert engine.chunk.slot == engine.pool.staging_slot == 0


def _prefix(model, n_ids: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    images = torch.rand(2, 3, 32, 32, generator=gen) * 2 - 1
    ids = torch.randint(0, 256, (n_ids,), generator=gen).tolist()
    with torch.inference_mode():
        return model.embed_prefix(images, ids)


@pytest.mark.parametrize("attention", ["bidirectional", "causal"])
@pytest.mark.parametrize("bucket", [16, 64])
def test_padded_prefill_and_chunk_equal_the_unpadded_ones(attention, bucket):
    """The padded prefix changes neither the actions nor the prefix K/V a request forks,
    whatever stale data the static buffers and the slot held; nothing outside the
    reserved slot is touched."""
    model = model_for(attention)
    max_len = 96
    gen = torch.Generator().manual_seed(1)
    for n_ids, seed in ((3, 0), (17, 1), (50, 2)):          # prefix lengths 35, 49, 82
        prefix = _prefix(model, n_ids, seed)
        length = prefix.shape[1]
        noise = torch.randn(10, 8, generator=gen)
        ref = model.new_pool(capacity=1, max_len=max_len)
        pool = model.new_pool(capacity=3, max_len=max_len)
        with torch.inference_mode():
            model.prefill(prefix, ref, 0)
            want = model.sample_actions(ref, 0, length, noise)
            pool.k.copy_(torch.randn(pool.k.shape, generator=gen))    # stale entries everywhere
            pool.v.copy_(torch.randn(pool.v.shape, generator=gen))
            before_k, before_v = pool.k[:, :3].clone(), pool.v[:, :3].clone()
            step = ChunkStep(model, pool, bucket=bucket)
            step._prefix.copy_(torch.randn(step._prefix.shape, generator=gen))   # an earlier frame's
            step.prefill(prefix)
            got = step.sample(length, noise)
        span = step.prefix_bucket(length)
        assert span > length or length == 82 and bucket == 16 and span == 86, "the case must pad"
        assert got.shape == (10, 8)
        assert (got - want).abs().max() <= 1e-5, (attention, bucket, length)
        s = pool.capacity
        assert pool.lengths[s] == length
        assert (pool.k[:, s, :, :length] - ref.k[:, 0, :, :length]).abs().max() <= 1e-5
        assert (pool.v[:, s, :, :length] - ref.v[:, 0, :, :length]).abs().max() <= 1e-5
        assert torch.equal(pool.k[:, :3], before_k) and torch.equal(pool.v[:, :3], before_v)


def test_a_schedule_change_after_the_build_is_followed():
    model, _ = tiny()
    prefix = _prefix(model, 9, 3)
    noise = torch.randn(10, 8, generator=torch.Generator().manual_seed(4))
    pool, ref = model.new_pool(capacity=1, max_len=80), model.new_pool(capacity=1, max_len=80)
    step = ChunkStep(model, pool, bucket=16)
    try:
        model.set_action_schedule(denoise_steps=3)
        with torch.inference_mode():
            step.prefill(prefix)
            got = step.sample(prefix.shape[1], noise)
            model.prefill(prefix, ref, 0)
            want = model.sample_actions(ref, 0, prefix.shape[1], noise)
    finally:
        model.set_action_schedule(denoise_steps=TINY.expert.denoise_steps)
    assert step._schedule[2].shape[0] == 3
    assert (got - want).abs().max() <= 1e-5


def test_graph_schedule_with_a_full_pool_stays_exact():
    """The whole GPU schedule on the CPU: padded prefix in the reserved slot, every
    admitted request forking it, padded decode rows (one of which decodes in the
    reserved slot at a stale position), tokens read once per frame, a pool that fills
    up. Actions and texts equal isolated execution."""
    model, tok = tiny()
    engine = OxygenEngine(model, tok, EngineConfig(max_requests=3, max_queue=64, steps_per_frame=2))
    engine.sync_every_step = False
    engine.chunk = ChunkStep(model, engine.pool, bucket=32)
    engine.decoder = DecodeStep(model, engine.pool, bucket=16, pad_rows=True)
    engine.decoder._lengths[3] = 40       # the padding row of 3 live requests writes slot 3 here
    iso = IsolatedRunner(model, tok)
    texts, reqs, obs, live_max = {}, {}, {}, 0
    f = 0
    while f < 7 or engine.live or engine.pending:
        o = observation(min(f, 6))
        if f < 5:
            for j in range(2):
                req = LanguageRequest("tell" + " me" * (f + 2 * j), max_new_tokens=6 + 2 * j + f % 3,
                                      ignore_eos=True)
                reqs[engine.submit(req)] = req
        noise = torch.randn(10, 8, generator=torch.Generator().manual_seed(f))
        res = engine.step(o, noise)
        obs[f] = o
        live_max = max(live_max, res.live_requests)
        assert np.abs(iso.action(o, noise).numpy() - res.actions).max() <= 1e-5
        texts.update({d.request_id: d.full_text for d in res.deltas if d.done})
        f += 1
    assert live_max == 3, "the pool must fill so a padded decode row lands in the reserved slot"
    assert len(texts) == len(reqs) == 10
    for rid, req in reqs.items():
        ref = []
        iso.language(obs[req.start_frame], LanguageRequest(req.prompt, max_new_tokens=req.max_new_tokens,
                                                           ignore_eos=True), deltas=ref)
        assert texts[rid] == ref[-1].full_text, rid
