"""KV pool accounting, backpressure, read-only prefix, streaming text, automatic budget."""
import numpy as np
import pytest
import torch

from engine_fixtures import observation, tiny
from oxygen_ros.engine.kv_pool import KVPool, PoolFullError
from oxygen_ros.engine.observation.observation import ObservationError
from oxygen_ros.engine.requests import LanguageRequest, RequestRejected
from oxygen_ros.engine.scheduler import EngineConfig, OxygenEngine
from oxygen_ros.engine.text.tokenizer import ByteTokenizer, TextStream


def test_pool_claim_release_keeps_slots_dense():
    pool = KVPool(depth=2, capacity=3, max_len=8, kv_heads=1, head_dim=4)
    for length in (3, 5, 7):
        slot = pool.staging_slot
        pool.k[:, slot, :, :length] = float(length)
        assert pool.claim(length) == slot
    with pytest.raises(PoolFullError):
        pool.claim(1)
    assert pool.staging_slot == 3, "a full pool still has its reserved staging slot"
    assert pool.release(0) == 2          # the last slot moves into the hole
    assert pool.lengths[:2] == [7, 5] and torch.all(pool.k[:, 0, :, :7] == 7.0)
    pool.release(1)
    pool.release(0)
    assert pool.live == 0 and pool.bytes_in_use() == 0


def test_pool_returns_to_empty_and_never_reallocates():
    model, tok = tiny()
    engine = OxygenEngine(model, tok, EngineConfig(max_requests=3, steps_per_frame=2))
    ptrs = (engine.pool.k.data_ptr(), engine.pool.v.data_ptr())
    for f in range(6):
        if f < 4:
            engine.submit(LanguageRequest("hello", max_new_tokens=3 + f, ignore_eos=True))
        res = engine.step(observation(f))
        assert res.kv_bytes_in_use == engine.pool.bytes_in_use()
    while engine.live or engine.pending:
        engine.step(observation(0))
    assert engine.pool.live == 0 and engine.pool.bytes_in_use() == 0
    assert (engine.pool.k.data_ptr(), engine.pool.v.data_ptr()) == ptrs


def test_action_expert_does_not_touch_prefix_kv():
    model, tok = tiny()
    engine = OxygenEngine(model, tok, EngineConfig(max_requests=2))
    with torch.inference_mode():
        prefix = model.embed_prefix(torch.rand(2, 3, 32, 32) * 2 - 1, tok.encode("task", add_bos=True))
        n = prefix.shape[1]
        model.prefill(prefix, engine.pool, 0)
        before = engine.pool.k[:, 0, :, :n].clone(), engine.pool.v[:, 0, :, :n].clone()
        model.sample_actions(engine.pool, 0, n, torch.randn(10, 8))
    assert torch.equal(engine.pool.k[:, 0, :, :n], before[0])
    assert torch.equal(engine.pool.v[:, 0, :, :n], before[1])


def test_full_queue_rejects_clearly_and_drops_nothing():
    model, tok = tiny()
    engine = OxygenEngine(model, tok, EngineConfig(max_requests=1, max_queue=2, steps_per_frame=1))
    ids = [engine.submit(LanguageRequest("a", max_new_tokens=2, ignore_eos=True)) for _ in range(3)]
    with pytest.raises(RequestRejected, match="too many"):
        engine.submit(LanguageRequest("b", max_new_tokens=2))
    done = set()
    for f in range(12):
        done |= {d.request_id for d in engine.step(observation(f)).finished}
    assert done == set(ids)


@pytest.mark.parametrize("prompt,tokens,match", [
    ("", 4, "empty"), ("   ", 4, "empty"), ("x" * 500, 4, "limit"), ("ok", 0, "max_new_tokens"),
    ("ok", 10_000, "max_new_tokens")])
def test_bad_requests_rejected(prompt, tokens, match):
    model, tok = tiny()
    engine = OxygenEngine(model, tok)
    with pytest.raises(RequestRejected, match=match):
        engine.submit(LanguageRequest(prompt, max_new_tokens=tokens))


def test_bad_observations_raise_observation_error():
    model, tok = tiny()
    engine = OxygenEngine(model, tok)
    o = observation(0)
    o.state = np.array([0.1, np.nan])
    with pytest.raises(ObservationError, match="NaN"):
        engine.step(o)
    o = observation(0)
    o.images["base_0_rgb"] = np.zeros((10, 10), np.uint8)
    with pytest.raises(ObservationError, match="HxWx3"):
        engine.step(o)
    o = observation(0)
    o.images["nose_cam"] = np.zeros((10, 10, 3), np.uint8)
    with pytest.raises(ObservationError, match="unknown camera"):
        engine.step(o)
    assert engine.step(observation(1)).actions.shape == (10, 8)   # still healthy


def test_text_stream_deltas_are_valid_utf8_and_concatenate():
    tok = ByteTokenizer()
    text = "héllo → 世界 🤖!"
    stream = TextStream(tok)
    deltas = [stream.push(b) for b in text.encode("utf-8")] + [stream.close()]
    assert "".join(deltas) == text == stream.text
    assert all("\ufffd" not in d for d in deltas)
    assert sum(1 for d in deltas if d == "") >= 6, "partial characters are held back"
    broken = TextStream(tok)
    out = "".join([broken.push(0xE4), broken.push(0x41), broken.close()])
    assert out == b"\xe4A".decode("utf-8", errors="replace")


def test_automatic_budget_adapts_to_period():
    model, tok = tiny()
    budgets = {}
    for period in (0.0001, 5.0):
        engine = OxygenEngine(model, tok, EngineConfig(max_requests=4, steps_per_frame=0, period_s=period,
                                                       max_auto_steps=16))
        steps = []
        for f in range(6):
            engine.submit(LanguageRequest("x", max_new_tokens=60, ignore_eos=True)) if f < 3 else None
            steps.append(engine.step(observation(f)).decode_steps)
        budgets[period] = steps
    assert max(budgets[0.0001][1:]) == 1, "an impossible period still makes progress, one step"
    assert max(budgets[5.0][1:]) == 16, "a generous period uses the whole automatic budget"
