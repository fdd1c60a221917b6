"""Xiaomi-Robotics-0's action head (engine/models/xr0/head.py) against its formulas.

Tiny random weights; hand-computed numbers in the comments. The reference forward at
the bottom concatenates the prefix K/V as the checkpoint code does, independently of
the pool path, so the in-place reading is checked against it."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from oxygen_ros.engine.kv_pool import KVPool
from oxygen_ros.engine.layers.dict_config import DictConfig
from oxygen_ros.engine.models.xr0 import head as xr0_head
from oxygen_ros.engine.models.xr0.configuration import XR0HeadConfig
from oxygen_ros.engine.models.xr0.head import build_random, time_embedding

TINY = XR0HeadConfig(depth=2, width=32, num_heads=2, head_dim=16, mlp_dim=64, action_dim=6,
                     horizon=7, state_dim=5, denoise_steps=5, time_embed_dim=8, rope_theta=10000.0)
BB_DEPTH, PREFIX, NEXT_POS = 5, 9, 23     # backbone layers; prefix entries; its max MRoPE position + 1


def make_pool(seed=1, cfg=TINY):
    pool = KVPool(BB_DEPTH, capacity=2, max_len=PREFIX + cfg.tokens + 3,
                  kv_heads=cfg.num_heads, head_dim=cfg.head_dim)
    g = torch.Generator().manual_seed(seed)
    pool.k.copy_(torch.randn(pool.k.shape, generator=g))
    pool.v.copy_(torch.randn(pool.v.shape, generator=g))
    return pool


def inputs(seed=2, cfg=TINY, batch=1):
    g = torch.Generator().manual_seed(seed)
    state = torch.randn(batch, 1, cfg.state_dim, generator=g)
    noise = torch.randn(batch, cfg.horizon, cfg.action_dim, generator=g)
    return state, noise


def run(head, pool, state, noise, slot=0, mask=None, steps=None):
    return head.sample_actions(pool.k, pool.v, slot, PREFIX, NEXT_POS, state, noise, mask, steps)


def test_time_embedding_hand_values():
    """dim 4: half 2, freqs = exp(-ln(1e4) * [0, 1] / 2) = [1, 0.01]; args = 1000 t freqs;
    the checkpoint puts cos before sin."""
    # t = 0: args 0 -> [cos 0, cos 0, sin 0, sin 0] = [1, 1, 0, 0]
    assert torch.allclose(time_embedding(0.0, 4), torch.tensor([1.0, 1.0, 0.0, 0.0]))
    # t = 1: args [1000, 10] -> [cos 1000, cos 10, sin 1000, sin 10]
    #      = [0.5623790763, -0.8390715291, 0.8268795405, -0.5440211109]
    want = torch.tensor([0.5623790763, -0.8390715291, 0.8268795405, -0.5440211109])
    assert torch.allclose(time_embedding(1.0, 4), want, atol=2e-6)
    # t = 0.5 scales the argument (t x 1000 = 500): cos 500 = -0.8838492734, sin 5 = -0.9589242747
    assert abs(float(time_embedding(0.5, 4)[0]) - (-0.8838492734)) < 2e-6
    assert abs(float(time_embedding(0.5, 4)[3]) - (-0.9589242747)) < 2e-6


def test_adaln_zero_modulation_reduces_layer_to_its_residual_norms():
    """All six vectors zero (table 0, t_projector 0): the layer is x -> final(middle(x)),
    whatever attention, MLP and the prefix hold; the identity on RMS-normalised x with
    unit norm weights. A nonzero gate breaks it."""
    head = build_random(TINY, TINY.num_heads, TINY.head_dim, BB_DEPTH, seed=3)
    layer = head.dit.layers[0]
    for norm in (layer.middle_layernorm, layer.final_layernorm):
        torch.nn.init.ones_(norm.weight)
    x = F.rms_norm(torch.randn(1, TINY.tokens, TINY.width), (TINY.width,), eps=1e-6)
    rope = xr0_head.rope_tables(head.token_positions(NEXT_POS, TINY.horizon), TINY.head_dim,
                                TINY.rope_theta, x.dtype)
    mask = head.attention_mask(PREFIX, TINY.horizon)

    def layer_out(mods, k_fill=None):
        p = make_pool()
        if k_fill is not None:
            p.k[3].fill_(k_fill)
        cache = xr0_head.CacheView(p.k[3], p.v[3], slice(0, 1), PREFIX, PREFIX + TINY.tokens)
        with torch.no_grad():
            return layer(x, mods, rope, cache, mask)

    zero = torch.zeros(6, TINY.width)
    assert torch.allclose(layer_out(zero), x, atol=1e-5)
    assert torch.allclose(layer_out(zero, k_fill=5.0), x, atol=1e-5)     # prefix irrelevant
    # through the head's own schedule: zero table + zero t_projector -> zero modulations
    with torch.no_grad():
        for l in head.dit.layers:
            l.adaln_table.zero_()
        head.t_projector[0].weight.zero_()
        head.t_projector[0].bias.zero_()
    _, _, mods = head.schedule()
    assert all(torch.count_nonzero(m) == 0 for m in mods)
    gated = zero.clone()
    gated[2] = 0.5                                                         # gate of attention
    assert (layer_out(gated) - x).abs().max() > 1e-2


def test_mask_rows_in_both_modes():
    """Keys: prefix (3), sink, state, actions a0..a5. Every head token sees the whole
    prefix; sink sees itself; state sees sink + itself; neither sees actions."""
    cfg = XR0HeadConfig(**{**TINY.__dict__, "horizon": 6})
    causal = build_random(cfg, cfg.num_heads, cfg.head_dim, BB_DEPTH).attention_mask(3, 6)[0, 0]
    assert causal.shape == (8, 3 + 8)
    assert causal[:, :3].all()
    own = causal[:, 3:].int()
    # causal (checkpoint): plain lower triangle over [sink, state, a0..a5]
    assert torch.equal(own, torch.ones(8, 8, dtype=torch.int).tril())
    win = build_random(XR0HeadConfig(**{**cfg.__dict__, "mask_mode": "train_window"}),
                       cfg.num_heads, cfg.head_dim, BB_DEPTH).attention_mask(3, 6)[0, 0]
    assert win[:, :3].all()
    want = torch.tensor([  # sink state a0 a1 a2 a3 a4 a5
        [1, 0, 0, 0, 0, 0, 0, 0],   # sink
        [1, 1, 0, 0, 0, 0, 0, 0],   # state
        [1, 1, 1, 0, 0, 0, 0, 0],   # a0
        [1, 1, 1, 1, 0, 0, 0, 0],   # a1
        [1, 1, 1, 1, 1, 0, 0, 0],   # a2
        [1, 1, 1, 1, 1, 1, 0, 0],   # a3
        [1, 1, 1, 1, 1, 1, 1, 0],   # a4: a0..a4 (i - 4 = 0)
        [1, 1, 0, 1, 1, 1, 1, 1],   # a5: a1..a5, a0 leaves the window of 4
    ])
    assert torch.equal(win[:, 3:].int(), want)


def test_positions_continue_after_prefix():
    """sink P, state P + 1, action j at P + 2 + offset + j (offset 0 served, 10 in training)."""
    head = build_random(TINY, TINY.num_heads, TINY.head_dim, BB_DEPTH)
    assert head.token_positions(17, 3).tolist() == [17, 18, 19, 20, 21]
    trained = build_random(XR0HeadConfig(**{**TINY.__dict__, "action_position_offset": 10}),
                           TINY.num_heads, TINY.head_dim, BB_DEPTH)
    assert trained.token_positions(17, 3).tolist() == [17, 18, 29, 30, 31]
    # and the rope actually rotates by them: shifting P changes the actions
    pool, (state, noise) = make_pool(), inputs()
    a = head.sample_actions(pool.k, pool.v, 0, PREFIX, NEXT_POS, state, noise)
    pool = make_pool()
    b = head.sample_actions(pool.k, pool.v, 0, PREFIX, NEXT_POS + 1, state, noise)
    assert (a - b).abs().max() > 1e-4


def test_tail_alignment_layer_i_reads_backbone_layer_L_minus_depth_plus_i():
    """L = 5, depth 2: head layers 0, 1 read backbone layers 3, 4. Perturbing layer 1's
    prefix K changes nothing; layer 4's leaves head layer 0's output alone and changes
    layer 1's; layer 3's changes head layer 0's."""
    head = build_random(TINY, TINY.num_heads, TINY.head_dim, BB_DEPTH, seed=4)
    state, noise = inputs()

    def layer_outputs(perturb_layer=None):
        pool = make_pool()
        if perturb_layer is not None:
            pool.k[perturb_layer, 0, :, :PREFIX] += 0.7
        seen = []
        hooks = [l.register_forward_hook(lambda m, a, out: seen.append(out.clone()))
                 for l in head.dit.layers]
        out = run(head, pool, state, noise, steps=1)
        for h in hooks:
            h.remove()
        return seen, out                       # one step: seen = [layer 0 out, layer 1 out]

    base, out = layer_outputs()
    (l0, l1), o1 = layer_outputs(1)
    assert torch.equal(l0, base[0]) and torch.equal(l1, base[1]) and torch.equal(o1, out)
    (l0, l1), _ = layer_outputs(4)
    assert torch.equal(l0, base[0]) and (l1 - base[1]).abs().max() > 1e-4
    (l0, _), _ = layer_outputs(3)
    assert (l0 - base[0]).abs().max() > 1e-4
    xr0 = SimpleNamespace(cfg=XR0HeadConfig())               # XR-0: 16 layers read 20..35 of 36
    assert xr0_head.XR0Head.first_backbone_layer(xr0, 36) == 20


def test_flow_direction_t_from_0_to_1():
    """Times are k/N for k = 0..N-1. A constant velocity c gives noise + N * (1/N) c
    = noise + c. With v = a - noise (the straight path z_t = (1 - t) noise + t a),
    Euler stays on the line and lands on a at t = 1."""
    head = build_random(TINY, TINY.num_heads, TINY.head_dim, BB_DEPTH)
    dt, ts, _ = head.schedule()
    assert dt == pytest.approx(0.2) and ts == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8])
    state, noise = inputs()
    c = torch.linspace(-1, 1, TINY.action_dim)
    head.velocity = lambda x, *a, **k: c.expand_as(x)
    assert torch.allclose(run(head, make_pool(), state, noise), noise + c, atol=1e-6)
    target = torch.full_like(noise, 0.3)
    calls = []

    def straight(x, *a, **k):               # the exact field of a single data point a
        t = ts[len(calls)]
        calls.append(t)
        return (target - x) / (1 - t)

    head.velocity = straight
    assert torch.allclose(run(head, make_pool(), state, noise), target, atol=1e-5)
    assert calls == ts


def test_intermediates_record_every_euler_step():
    """return_intermediates: one FlowStep per step (t_k = k/N, x_k, v_k, dt); x_0 is the
    noise, x_{k+1} = x_k + dt v_k, and the last step's x + dt v is the returned chunk,
    which equals the default call's exactly."""
    head = build_random(TINY, TINY.num_heads, TINY.head_dim, BB_DEPTH, seed=4)
    state, noise = inputs()
    mask = torch.tensor([True, True, True, False, True, True])
    plain = run(head, make_pool(), state, noise, mask=mask)
    actions, steps = head.sample_actions(make_pool().k, make_pool().v, 0, PREFIX, NEXT_POS, state, noise,
                                         mask, return_intermediates=True)
    assert torch.equal(actions, plain)
    assert len(steps) == TINY.denoise_steps
    assert torch.equal(steps[0].x, noise)
    assert [s.t for s in steps] == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8])
    assert all(s.dt == pytest.approx(1 / TINY.denoise_steps) for s in steps)
    for a, b in zip(steps, steps[1:]):
        assert torch.equal(b.x, a.x + a.dt * a.v)
    last = steps[-1]
    assert torch.equal(last.x + last.dt * last.v, actions)
    assert last.v.shape == noise.shape
    actions3, three = head.sample_actions(make_pool().k, make_pool().v, 0, PREFIX, NEXT_POS, state, noise,
                                          steps=3, return_intermediates=True)
    assert len(three) == 3 and torch.equal(actions3, three[-1].x + three[-1].dt * three[-1].v)


def test_action_mask_hides_inactive_dims_from_the_network():
    """The mask multiplies the noisy action before the projector: changing the noise in
    an inactive dim moves that dim's output by exactly the change and nothing else;
    with the dim active it changes every dim."""
    head = build_random(TINY, TINY.num_heads, TINY.head_dim, BB_DEPTH, seed=5)
    state, noise = inputs()
    mask = torch.tensor([True, True, True, False, True, False])
    bumped = noise.clone()
    bumped[..., 3] += 1.5
    a = run(head, make_pool(), state, noise, mask=mask)
    b = run(head, make_pool(), state, bumped, mask=mask)
    active = mask.nonzero().flatten()
    assert torch.allclose(a[..., active], b[..., active], atol=1e-6)
    assert torch.allclose(b[..., 3] - a[..., 3], torch.full_like(a[..., 3], 1.5), atol=1e-5)
    full_a = run(head, make_pool(), state, noise)
    full_b = run(head, make_pool(), state, bumped)
    assert (full_a[..., active] - full_b[..., active]).abs().max() > 1e-4
    assert head.active_actions(a, mask).shape == (1, TINY.horizon, 4)
    assert torch.equal(head.active_actions(a, mask), a[..., [0, 1, 2, 4]])
    with pytest.raises(ValueError):
        run(head, make_pool(), state, noise, mask=torch.ones(5, dtype=torch.bool))


def test_prefix_read_in_place_and_never_mutated(monkeypatch):
    """The prefix region [0, prefix_len) of every layer and every other slot is
    untouched; the head writes only past the prefix in the tail layers of its slot;
    attention reads views of the pool (no copy of the prefix)."""
    head = build_random(TINY, TINY.num_heads, TINY.head_dim, BB_DEPTH, seed=6)
    pool = make_pool()
    k0, v0 = pool.k.clone(), pool.v.clone()
    ptrs = {pool.k[l, 1].data_ptr() for l in range(BB_DEPTH)}
    seen = []
    real = xr0_head.grouped_attention

    def spy(q, k, v, mask):
        seen.append(k.data_ptr() in ptrs and k.shape[2] == PREFIX + TINY.tokens)
        return real(q, k, v, mask)

    monkeypatch.setattr(xr0_head, "grouped_attention", spy)
    state, noise = inputs()
    run(head, pool, state, noise, slot=1)
    assert seen and all(seen)
    assert torch.equal(pool.k[:, :, :, :PREFIX], k0[:, :, :, :PREFIX])
    assert torch.equal(pool.v[:, :, :, :PREFIX], v0[:, :, :, :PREFIX])
    for s in (0, 2):                                       # other slots: not a single write
        assert torch.equal(pool.k[:, s], k0[:, s]) and torch.equal(pool.v[:, s], v0[:, s])
    assert torch.equal(pool.k[:3], k0[:3])                 # layers the head does not read
    end = PREFIX + TINY.tokens
    assert torch.equal(pool.k[:, 1, :, end:], k0[:, 1, :, end:])


def test_backbone_geometry_is_checked():
    with pytest.raises(ValueError, match="KV"):
        build_random(TINY, 1, TINY.head_dim, BB_DEPTH)
    with pytest.raises(ValueError, match="KV"):
        build_random(TINY, TINY.num_heads, 8, BB_DEPTH)
    with pytest.raises(ValueError, match="depth"):
        build_random(TINY, TINY.num_heads, TINY.head_dim, 1)
    head = build_random(TINY, TINY.num_heads, TINY.head_dim, BB_DEPTH)
    small = KVPool(BB_DEPTH, 1, PREFIX + 2, TINY.num_heads, TINY.head_dim)
    state, noise = inputs()
    with pytest.raises(ValueError, match="max_len"):
        head.sample_actions(small.k, small.v, 0, PREFIX, NEXT_POS, state, noise)
    with pytest.raises(ValueError):
        XR0HeadConfig(width=1000)
    with pytest.raises(ValueError):
        XR0HeadConfig(mask_mode="window")


def test_from_hf_dict_reads_the_checkpoint_names():
    d = {"action_length": 30, "action_dim": 32, "state_dim": 32,
         "dit_config": {"hidden_size": 1024, "head_dim": 128, "num_hidden_layers": 16,
                        "num_key_value_heads": 8},
         "vlm_config": {"text_config": {"rope_theta": 5000000}}}
    assert XR0HeadConfig.from_hf_dict(d) == XR0HeadConfig()
    assert XR0HeadConfig.from_hf_dict(d, mask_mode="train_window").mask_mode == "train_window"
    with pytest.raises(ValueError):
        XR0HeadConfig.from_hf_dict({**d, "dit_config": {**d["dit_config"], "num_key_value_heads": 4}})
    with pytest.raises(KeyError, match="action_dim"):
        XR0HeadConfig.from_hf_dict({k: v for k, v in d.items() if k != "action_dim"})


def test_from_dict_and_to_dict_round_trip_with_the_field_names():
    cfg = XR0HeadConfig(depth=3, width=64, num_heads=4, head_dim=16, mlp_dim=128, mask_mode="train_window",
                        action_position_offset=10, rope_theta=1e4)
    d = cfg.to_dict()
    assert d["depth"] == 3 and d["mask_mode"] == "train_window" and set(d) == set(XR0HeadConfig().to_dict())
    assert XR0HeadConfig.from_dict(d) == cfg
    assert XR0HeadConfig.from_dict(json.loads(json.dumps(d))) == cfg
    assert XR0HeadConfig.from_dict({}) == XR0HeadConfig()                 # missing fields: defaults
    assert XR0HeadConfig.from_dict({"horizon": 8}) == XR0HeadConfig(horizon=8)


def test_from_dict_names_unknown_keys_and_the_known_fields():
    with pytest.raises(ValueError, match=r"unknown XR0HeadConfig fields \['action_length', 'bogus'\]; "
                                         r"known fields: \['depth', 'width'.*'action_position_offset'\]"):
        XR0HeadConfig.from_dict({"depth": 2, "action_length": 30, "bogus": 1})
    with pytest.raises(ValueError, match="num_heads"):                 # the config's own checks still run
        XR0HeadConfig.from_dict({"width": 100})
    with pytest.raises(TypeError, match="mapping"):
        XR0HeadConfig.from_dict([("depth", 2)])


def test_dict_config_reads_tuple_fields_from_lists():
    """The shared mixin (layers/dict_config.py): a tuple field is written as a list and read
    back from one (neither head config has one today)."""
    @dataclass(frozen=True)
    class WithTuple(DictConfig):
        dims: tuple[int, ...] = (1, 2)
        name: str = "a"

    d = WithTuple(dims=(3, 4, 5)).to_dict()
    assert d == {"dims": [3, 4, 5], "name": "a"}
    back = WithTuple.from_dict(d)
    assert back == WithTuple(dims=(3, 4, 5)) and isinstance(back.dims, tuple)


# ---- an independent reference: the checkpoint's forward, prefix concatenated --------------

def ref_rms(x, w, eps=1e-6):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def ref_rope(x, pos, theta):
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2).float() / d))
    ang = pos.float()[:, None] * inv[None]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def ref_sample(head, prefix_k, prefix_v, state, noise, keep, cfg, mask_mode, offset):
    """prefix_k/v: per backbone layer [1, Hkv, P, d] (copies). Mirrors modeling_mibot.py's
    forward / dit_forward / DecoderLayer with plain tensor ops."""
    hsz, t = noise.shape[1], 2 + noise.shape[1]
    pos = torch.arange(t) + NEXT_POS
    pos[2:] += offset
    own = torch.tril(torch.ones(t, t))
    if mask_mode == "train_window":
        own[2:, 2:] *= torch.triu(torch.ones(hsz, hsz), diagonal=-cfg.local_window)
    mask = torch.cat([torch.ones(t, PREFIX), own], 1).bool()
    first = len(prefix_k) - cfg.depth
    st = head.state_projector(state)
    x = noise.clone()
    for k in range(cfg.denoise_steps):
        tt = torch.ones(1) * k / cfg.denoise_steps
        half = cfg.time_embed_dim // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)
        args = (tt * 1000)[:, None] * freqs[None]
        temb = head.t_embedder.mlp(torch.cat([args.cos(), args.sin()], -1))
        cond = head.t_projector(temb).view(1, 6, -1)
        h = torch.cat([head.sink.weight[None], st, head.action_projector(x * keep)], 1)
        for i, L in enumerate(head.dit.layers):
            sa, ca, ga, sm, cm, gm = (L.adaln_table[None] + cond).chunk(6, dim=1)
            r = h
            y = ref_rms(h, L.input_layernorm.weight) * (1 + ca) + sa
            q, kk, v = L.attn.qkv_proj(y).view(1, t, 3, cfg.num_heads, cfg.head_dim).unbind(2)
            q = ref_rope(ref_rms(q, L.attn.q_norm.weight).transpose(1, 2), pos, cfg.rope_theta)
            kk = ref_rope(ref_rms(kk, L.attn.k_norm.weight).transpose(1, 2), pos, cfg.rope_theta)
            keys = torch.cat([prefix_k[first + i], kk], 2)
            vals = torch.cat([prefix_v[first + i], v.transpose(1, 2)], 2)
            a = F.scaled_dot_product_attention(q, keys, vals, attn_mask=mask[None, None])
            a = L.attn.o_proj(a.transpose(1, 2).reshape(1, t, -1))
            h = ref_rms(r + ga * a, L.middle_layernorm.weight)
            r = h
            y = ref_rms(h, L.post_layernorm.weight) * (1 + cm) + sm
            m = L.mlp.down_proj(F.silu(L.mlp.gate_proj(y)) * L.mlp.up_proj(y))
            h = ref_rms(r + gm * m, L.final_layernorm.weight)
        x = x + head.action_output_layer(h[:, -hsz:]) * (1.0 / cfg.denoise_steps)
    return x


@pytest.mark.parametrize("mode,offset", [("causal", 0), ("train_window", 10), ("causal", 10)])
def test_matches_concatenating_reference(mode, offset):
    """The pool path equals the checkpoint's concatenate-the-prefix forward (fp32, 1e-5)
    in the served convention and the training one; the two conventions differ."""
    cfg = XR0HeadConfig(**{**TINY.__dict__, "mask_mode": mode, "action_position_offset": offset,
                           "horizon": 8})
    head = build_random(cfg, cfg.num_heads, cfg.head_dim, BB_DEPTH, seed=7)
    pool = make_pool(cfg=cfg)
    state, noise = inputs(cfg=cfg)
    mask = torch.tensor([True, False, True, True, True, False])
    pk = [pool.k[l, 0:1, :, :PREFIX].clone() for l in range(BB_DEPTH)]
    pv = [pool.v[l, 0:1, :, :PREFIX].clone() for l in range(BB_DEPTH)]
    with torch.no_grad():
        want = ref_sample(head, pk, pv, state, noise, mask.float(), cfg, mode, offset)
    got = head.sample_actions(pool.k, pool.v, 0, PREFIX, NEXT_POS, state, noise, mask)
    assert (got - want).abs().max() <= 1e-5
    served = build_random(XR0HeadConfig(**{**cfg.__dict__, "mask_mode": "causal",
                                           "action_position_offset": 0}),
                          cfg.num_heads, cfg.head_dim, BB_DEPTH, seed=7)
    if (mode, offset) != ("causal", 0):
        pool = make_pool(cfg=cfg)
        base = served.sample_actions(pool.k, pool.v, 0, PREFIX, NEXT_POS, state, noise, mask)
        assert (base - got).abs().max() > 1e-4


def test_batch_rows_read_their_own_slots():
    """Two rows over slots [0, 2) equal each row run alone on its slot."""
    head = build_random(TINY, TINY.num_heads, TINY.head_dim, BB_DEPTH, seed=8)
    state, noise = inputs(batch=2)
    both = run(head, make_pool(), state, noise, slot=0)
    for r in range(2):
        alone = run(head, make_pool(), state[r:r + 1], noise[r:r + 1], slot=r)
        assert (both[r:r + 1] - alone).abs().max() <= 1e-5
    assert (both[0] - both[1]).abs().max() > 1e-4
