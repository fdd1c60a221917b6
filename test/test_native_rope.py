"""A pass's rotary embedding and Q/K/V layouts as one native pass (engine/native/rope.cpp):
bitwise ATen's apply_rope and the eager layouts, for the op alone and for a decoder's
prefill (hidden states and the K/V it leaves in the pool)."""
import pytest
import torch

from engine_fixtures import tiny
from oxygen_ros.engine import native
from oxygen_ros.engine.layers.blocks import apply_rope
from oxygen_ros.engine.layers.decoder import CacheView

needs_native = pytest.mark.skipif(not native.available(), reason="no native build (no C++ compiler)")


def tables(positions: torch.Tensor, d: int):
    angles = positions[..., None].float() / (10000 ** (torch.arange(0, d, 2).float() / d))
    angles = torch.cat([angles, angles], -1)
    signed_sin = torch.cat([-angles[..., : d // 2].sin(), angles[..., d // 2:].sin()], -1)
    return angles.cos().unsqueeze(2), signed_sin.unsqueeze(2)


@needs_native
@pytest.mark.parametrize("b,t,h,hkv,d", [(1, 175, 9, 3, 64), (3, 7, 15, 5, 64), (2, 33, 8, 1, 128),
                                         (1, 1, 4, 2, 16), (2, 5, 6, 2, 80)])
def test_rope_split_is_bitwise_the_eager_rotation_and_layouts(b, t, h, hkv, d):
    gen = torch.Generator().manual_seed(b * 1000 + t)
    qkv = torch.randn(b, t, (h + 2 * hkv) * d, generator=gen) * 3
    cos, sin = tables(torch.randint(0, 4000, (b, t), generator=gen), d)
    rotated = apply_rope(qkv[..., :(h + hkv) * d].unflatten(-1, (h + hkv, d)), cos, sin)
    pool_k, pool_v = torch.zeros(b + 1, hkv, t + 4, d), torch.zeros(b + 1, hkv, t + 4, d)
    k_out, v_out = pool_k[1:, :, 2:2 + t], pool_v[1:, :, 2:2 + t]        # strided views, as the pool's
    q = torch.ops.oxygen_native.rope_split(qkv, cos, sin, h, hkv, k_out, v_out)
    assert q.is_contiguous() and q.shape == (b, h, t, d)
    assert torch.equal(q, rotated[:, :, :h].transpose(1, 2))
    assert torch.equal(k_out, rotated[:, :, h:].transpose(1, 2))
    assert torch.equal(v_out, qkv[..., (h + hkv) * d:].unflatten(-1, (hkv, d)).transpose(1, 2))
    for pool in (pool_k, pool_v):      # nothing written outside the views
        assert pool[0].abs().sum() == 0 and pool[1:, :, :2].abs().sum() == 0 and pool[1:, :, 2 + t:].abs().sum() == 0


@needs_native
def test_rope_split_refuses_what_it_cannot_lay_out():
    qkv = torch.randn(1, 4, 100)
    cos, sin = tables(torch.arange(4)[None], 16)
    k_out = v_out = torch.empty(1, 2, 4, 16)
    with pytest.raises(RuntimeError, match="8 heads"):
        torch.ops.oxygen_native.rope_split(qkv, cos, sin, 4, 2, k_out, v_out)    # not 4 + 2 * 2 heads
    with pytest.raises(RuntimeError, match="k_out must be"):
        torch.ops.oxygen_native.rope_split(torch.randn(1, 4, 8 * 16), cos, sin, 4, 2, torch.empty(1, 2, 3, 16), v_out)


@needs_native
def test_a_prefill_through_the_native_pass_equals_the_eager_one(monkeypatch):
    """The tiny model's backbone prefills 2 rows of 11 positions at offset 5 of slots 1-2:
    the same hidden states and pool bitwise with rope_split and with the eager lines."""
    model, _ = tiny()
    backbone = model.backbone
    calls = []
    native_call = torch.ops.oxygen_native.rope_split
    monkeypatch.setattr(torch.ops.oxygen_native, "rope_split", lambda *a: calls.append(1) or native_call(*a),
                        raising=False)
    results = []
    for use_native in (True, False):
        if not use_native:
            monkeypatch.setattr(CacheView, "pass_targets", lambda self, t: None)
        pool = model.new_pool(4, 32)
        gen = torch.Generator().manual_seed(5)
        pool.k.copy_(torch.randn(pool.k.shape, generator=gen))
        pool.v.copy_(torch.randn(pool.v.shape, generator=gen))
        x = torch.randn(2, 11, backbone.cfg.width, generator=gen)
        positions = torch.arange(5, 16).expand(2, 11)
        mask = torch.ones(2, 1, 11, 16, dtype=torch.bool).tril(5)
        with torch.inference_mode():
            hidden = backbone(x, positions, pool, slice(1, 3), 5, 16, mask)
        results.append((hidden, pool.k.clone(), pool.v.clone()))
    assert len(calls) == len(backbone.layers)          # the native pass ran, once a layer
    (h_native, k_native, v_native), (h_eager, k_eager, v_eager) = results
    assert torch.equal(h_native, h_eager)
    assert torch.equal(k_native, k_eager) and torch.equal(v_native, v_eager)
