"""StarVLA QwenPI_v3's action head (engine/models/starvla/head.py, its DiT in dit.py) against
its formulas.

Tiny random weights; hand-computed numbers in the comments. `reference_velocity` at the
bottom is a plain re-statement of the block formulas (no precomputed K/V, concatenated
tokens, explicit softmax) that the head's sample_actions is checked against."""
from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from oxygen_ros.engine.models.starvla import dit as dit_blocks
from oxygen_ros.engine.models.starvla import head as pv
from oxygen_ros.engine.models.starvla.configuration import PIv3HeadConfig
from oxygen_ros.engine.models.starvla.head import build_random

TINY = PIv3HeadConfig(depth=3, width=8, num_heads=2, head_dim=4, backbone_hidden=12, future_tokens=3,
                      horizon=5, action_dim=4, state_dim=3, denoise_steps=4, max_seq_len=16,
                      time_proj_dim=8, ff_mult=4, decoder_hidden=6, state_hidden=6, dit_output_dim=5)
BB_LAYERS, BATCH, PREFIX = 5, 2, 6          # per-layer entries; batch; prefix tokens


def cfg_with(**kw) -> PIv3HeadConfig:
    return PIv3HeadConfig(**{**TINY.__dict__, **kw})


def hidden(seed=1, layers=BB_LAYERS, batch=BATCH, t=PREFIX, w=TINY.backbone_hidden):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(layers, batch, t, w, generator=g)


def noise(seed=2, batch=BATCH, cfg=TINY):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, cfg.horizon, cfg.action_dim, generator=g)


def bump(t, seed=12):
    """A random perturbation (a constant one would vanish in the projector's LayerNorm)."""
    g = torch.Generator().manual_seed(seed)
    return 0.7 * torch.randn(t.shape, generator=g)


def keep_input(store, key):
    """A forward pre-hook recording the first input (returns None: inputs unchanged)."""
    def hook(module, args):
        store.setdefault(key, args[0].clone())
    return hook


def block_outputs(head, layers, x, mask=None, steps=1):
    """Outputs of every DiT block during one sample_actions call (steps=1: one pass)."""
    seen = []
    hooks = [b.register_forward_hook(lambda m, a, out: seen.append(out.clone()))
             for b in head.action_model.model.transformer_blocks]
    try:
        out = head.sample_actions(layers, mask, x, steps)
    finally:
        for h in hooks:
            h.remove()
    return seen, out


# ---- time ----------------------------------------------------------------------------
def test_timestep_projection_hand_values():
    """diffusers Timesteps(4, flip_sin_to_cos=True, downscale_freq_shift=1): half 2,
    f = exp(-ln(1e4) * [0, 1] / (2 - 1)) = [1, 1e-4], output [cos(b f), sin(b f)]."""
    got = dit_blocks.timestep_proj(torch.tensor([0, 1, 250]), 4)
    # b = 0 (t = 0): [1, 1, 0, 0]
    assert torch.allclose(got[0], torch.tensor([1.0, 1.0, 0.0, 0.0]))
    # b = 1: [cos 1, cos 1e-4, sin 1, sin 1e-4] = [0.5403023059, 0.999999995, 0.8414709848, 1e-4]
    assert torch.allclose(got[1], torch.tensor([0.5403023059, 0.999999995, 0.8414709848, 1e-4]), atol=1e-6)
    # b = 250 (t = 0.25 of 1000 buckets): [cos 250, cos .025, sin 250, sin .025]
    want = torch.tensor([0.2409883053, 0.9996875163, -0.9705280195, 0.0249973959])
    assert torch.allclose(got[2], want, atol=2e-5)


def test_action_encoder_time_encoding_hand_values():
    """ActionEncoder's sinusoid, dim 4: half 2, g = exp(-[0, 1] ln(1e4) / 2) = [1, 0.01],
    output [sin(b g), cos(b g)] (sin FIRST, no frequency shift)."""
    got = dit_blocks.action_time_encoding(torch.tensor([0, 1, 1000]), 4)
    # t = 0 (b = 0): [0, 0, 1, 1]
    assert torch.allclose(got[0], torch.tensor([0.0, 0.0, 1.0, 1.0]))
    # b = 1: [sin 1, sin .01, cos 1, cos .01]
    assert torch.allclose(got[1], torch.tensor([0.8414709848, 0.0099998333, 0.5403023059, 0.9999500004]),
                          atol=1e-6)
    # t = 1 (b = 1000): [sin 1000, sin 10, cos 1000, cos 10]
    assert torch.allclose(got[2], torch.tensor([0.8268795405, -0.5440211109, 0.5623790763, -0.8390715291]),
                          atol=2e-5)


def test_bucket_schedule_is_int_of_k_over_n_times_1000():
    assert pv.bucket_schedule(4, 1000) == [0, 250, 500, 750]
    assert pv.bucket_schedule(3, 1000) == [0, 333, 666]      # int(333.33), int(666.67)
    assert pv.bucket_schedule(1, 1000) == [0]


# ---- AdaLayerNorm --------------------------------------------------------------------
def test_ada_layer_norm_zero_modulation_and_known_scale_shift():
    """x = [1, 2, 3, 4]: mean 2.5, var 1.25, LN = (x - 2.5)/sqrt(1.25 + 1e-5)
    = [-1.3416354, -0.4472118, 0.4472118, 1.3416354]. Zero linear: plain LN (no affine).
    Bias = [scale 1 x4 | shift 0.5 x4] (scale is the FIRST chunk): 2 LN + 0.5
    = [-2.1832708, -0.3944236, 1.3944236, 3.1832708]."""
    norm = dit_blocks.AdaLayerNorm(4, 1e-5)
    x = torch.tensor([[[1.0, 2.0, 3.0, 4.0]]])
    temb = torch.randn(1, 4)
    with torch.no_grad():
        norm.linear.weight.zero_()
        norm.linear.bias.zero_()
        assert torch.allclose(norm(x, temb), torch.tensor([[[-1.3416354, -0.4472118, 0.4472118, 1.3416354]]]),
                              atol=1e-6)
        norm.linear.bias.copy_(torch.tensor([1.0] * 4 + [0.5] * 4))
        assert torch.allclose(norm(x, temb), torch.tensor([[[-2.1832708, -0.3944236, 1.3944236, 3.1832708]]]),
                              atol=1e-6)
        # the modulation reads SiLU(temb): weight 1 on temb[0] -> scale = silu(temb0)
        norm.linear.bias.zero_()
        norm.linear.weight[0, 0] = 1.0
        scale, shift = norm.modulation(torch.tensor([[2.0, 0, 0, 0]]))
        assert float(scale[0, 0, 0]) == pytest.approx(2.0 / (1 + math.exp(-2.0)))   # silu(2) = 1.7615942
        assert torch.count_nonzero(shift) == 0


# ---- which layer each block reads ----------------------------------------------------
def test_block_i_reads_only_projected_layer_L_minus_depth_plus_i():
    """5 entries, depth 3: blocks 0, 1, 2 read entries 2, 3, 4 (tail: hidden_states[-3:]).
    to_k of block i sees exactly project_layers[i](entry 2 + i); perturbing entry 3
    leaves block 0 alone and changes block 1; entries 0 and 1 are never read."""
    head = build_random(TINY, seed=3)
    layers, x = hidden(), noise()
    assert head.read_layers(BB_LAYERS) == [2, 3, 4]
    seen_k = {}
    hooks = [b.attn1.to_k.register_forward_pre_hook(keep_input(seen_k, i))
             for i, b in enumerate(head.action_model.model.transformer_blocks)]
    base, out = block_outputs(head, layers, x)
    for h in hooks:
        h.remove()
    with torch.no_grad():
        for i in range(3):
            assert torch.equal(seen_k[i], head.project_layers[i](layers[2 + i]))
    for unread in (0, 1):
        bumped = layers.clone()
        bumped[unread] += bump(bumped[unread])
        seen, o = block_outputs(head, bumped, x)
        assert all(torch.equal(a, b) for a, b in zip(seen, base)) and torch.equal(o, out)
    bumped = layers.clone()
    bumped[3] += bump(bumped[3])
    seen, _ = block_outputs(head, bumped, x)
    assert torch.equal(seen[0], base[0])
    assert (seen[1] - base[1]).abs().max() > 1e-4
    # a list of layers works the same as the stacked tensor
    assert torch.equal(head.sample_actions(list(layers.unbind(0)), None, x, 1), out)


def test_interleaved_even_cross_odd_self_and_legacy_all_cross():
    """interleave_self_attention + canonical forward: blocks 0, 2 cross, 1, 3 self (their
    keys are the block's own normed tokens; their layer is neither projected nor read).
    use_canonical_forward False (legacy): every block cross-attends its layer."""
    cfg = cfg_with(depth=4, interleave_self_attention=True)
    assert [cfg.block_is_cross(i) for i in range(4)] == [True, False, True, False]
    assert [cfg.block_built_cross(i) for i in range(4)] == [True, False, True, False]
    head = build_random(cfg, seed=4)
    assert head.read_layers(BB_LAYERS) == [1, None, 3, None]
    layers, x = hidden(), noise()
    normed, keys, projected = {}, {}, []
    blocks = head.action_model.model.transformer_blocks
    hooks = [blocks[1].norm1.register_forward_hook(lambda m, a, o: normed.update({1: o.clone()})),
             blocks[1].attn1.to_k.register_forward_pre_hook(keep_input(keys, 1)),
             head.project_layers[1].register_forward_hook(lambda m, a, o: projected.append(1)),
             head.project_layers[3].register_forward_hook(lambda m, a, o: projected.append(3))]
    base, out = block_outputs(head, layers, x)
    for h in hooks:
        h.remove()
    assert torch.equal(keys[1], normed[1])                      # self-attention over its own tokens
    assert projected == []                                      # odd blocks' layers not projected
    bumped = layers.clone()
    bumped[2] += bump(bumped[2])                                # block 1's layer: unread
    _, o = block_outputs(head, bumped, x)
    assert torch.equal(o, out)
    bumped = layers.clone()
    bumped[3] += bump(bumped[3])                                            # block 2's layer
    seen, _ = block_outputs(head, bumped, x)
    assert torch.equal(seen[1], base[1]) and (seen[2] - base[2]).abs().max() > 1e-4
    legacy = build_random(cfg_with(depth=4, interleave_self_attention=True, use_canonical_forward=False), seed=4)
    assert legacy.read_layers(BB_LAYERS) == [1, 2, 3, 4]
    base_l, out_l = block_outputs(legacy, layers, x)        # same weights (same seed, same shapes)
    assert torch.equal(base_l[0], base[0]) and (out_l - out).abs().max() > 1e-4
    bumped = layers.clone()
    bumped[2] += bump(bumped[2])                                # block 1's layer IS read in legacy
    seen, _ = block_outputs(legacy, bumped, x)
    assert torch.equal(seen[0], base_l[0]) and (seen[1] - base_l[1]).abs().max() > 1e-4


# ---- tokens ----------------------------------------------------------------------------
def test_token_layout_future_tokens_then_actions_with_position_embedding():
    """DiT input rows: [future token 0..F-1, action_encoder(x, b) + position_embedding[j]];
    with state_mode 'encoder' a state token comes first."""
    head = build_random(TINY, seed=5)
    layers, x = hidden(), noise()
    got = {}
    blk = head.action_model.model.transformer_blocks[0]
    h = blk.register_forward_pre_hook(keep_input(got, "in"))
    head.sample_actions(layers, None, x, 1)
    h.remove()
    am = head.action_model
    tokens = got["in"]
    assert tokens.shape == (BATCH, TINY.future_tokens + TINY.horizon, TINY.width)
    assert torch.equal(tokens[:, :3], am.future_tokens.weight[None].expand(BATCH, -1, -1))
    with torch.no_grad():
        act = am.action_encoder(x, torch.zeros(BATCH, dtype=torch.long))
        assert torch.allclose(tokens[:, 3:], act + am.position_embedding.weight[:TINY.horizon], atol=1e-6)
        # position j's embedding really is row j: swapping rows 0 and 1 changes exactly those tokens
        pe = am.position_embedding.weight
        pe[[0, 1]] = pe[[1, 0]]
    got.clear()
    h = blk.register_forward_pre_hook(keep_input(got, "in"))
    head.sample_actions(layers, None, x, 1)
    h.remove()
    diff = (got["in"] - tokens).abs().amax(dim=(0, 2))
    assert diff[:3].max() == 0 and diff[3] > 0 and diff[4] > 0 and diff[5:].max() == 0
    # state token first in encoder mode; refused in text mode
    enc = build_random(cfg_with(state_mode="encoder"), seed=5)
    state = torch.randn(BATCH, 1, TINY.state_dim)
    got.clear()
    h = enc.action_model.model.transformer_blocks[0].register_forward_pre_hook(
        keep_input(got, "in"))
    enc.sample_actions(layers, None, x, 1, state=state)
    h.remove()
    assert got["in"].shape[1] == 1 + 3 + TINY.horizon
    with torch.no_grad():
        assert torch.allclose(got["in"][:, :1], enc.action_model.state_encoder(state), atol=1e-6)
    with pytest.raises(ValueError, match="state as text"):
        head.sample_actions(layers, None, x, state=state)


# ---- flow ------------------------------------------------------------------------------
def test_flow_direction_t_from_0_to_1_and_step_count():
    """Euler x += (1/N) v at t = k/N, k = 0..N-1 (buckets 0, 250, 500, 750). A constant
    velocity c lands on noise + c; the exact field of one data point a,
    (a - x) / (1 - t), lands on a (x_t = (1 - t) noise + t a, v = a - noise)."""
    head = build_random(TINY, seed=6)
    layers, x = hidden(), noise()
    c = torch.linspace(-1, 1, TINY.action_dim)
    calls = []
    head.velocity = lambda xx, b, prep: (calls.append(b), c.expand_as(xx))[1]
    assert torch.allclose(head.sample_actions(layers, None, x), x + c, atol=1e-6)
    assert calls == [0, 250, 500, 750]
    calls.clear()
    head.sample_actions(layers, None, x, steps=3)
    assert calls == [0, 333, 666]
    target = torch.full_like(x, 0.3)
    ts = []

    def straight(xx, b, prep):
        t = len(ts) / 4
        ts.append(t)
        return (target - xx) / (1 - t)

    head.velocity = straight
    assert torch.allclose(head.sample_actions(layers, None, x), target, atol=1e-5)
    assert ts == [0.0, 0.25, 0.5, 0.75]


def test_intermediates_record_every_euler_step():
    """return_intermediates: one FlowStep per step (t_k = k/N; the network sees bucket
    int(1000 t_k)); x_0 is the noise, x_{k+1} = x_k + dt v_k, and the last step's x + dt v
    is the returned chunk, which equals the default call's exactly."""
    head = build_random(TINY, seed=8)
    layers, x = hidden(), noise()
    plain = head.sample_actions(layers, None, x)
    actions, steps = head.sample_actions(layers, None, x, return_intermediates=True)
    assert torch.equal(actions, plain)
    assert len(steps) == TINY.denoise_steps
    assert torch.equal(steps[0].x, x)
    assert [s.t for s in steps] == [0.0, 0.25, 0.5, 0.75] and all(s.dt == 0.25 for s in steps)
    for a, b in zip(steps, steps[1:]):
        assert torch.equal(b.x, a.x + a.dt * a.v)
    last = steps[-1]
    assert torch.equal(last.x + last.dt * last.v, actions)
    assert torch.allclose(last.v, reference_velocity(head, layers, last.x, 750), atol=1e-5)
    actions3, three = head.sample_actions(layers, None, x, steps=3, return_intermediates=True)
    assert len(three) == 3 and torch.equal(actions3, three[-1].x + three[-1].dt * three[-1].v)


def test_sample_actions_matches_reference_forward():
    """The head (precomputed per-block K/V, SDPA) against the formulas written out."""
    for cfg in (TINY, cfg_with(depth=4, interleave_self_attention=True),
                cfg_with(positional_embeddings="sinusoidal", max_num_positional_embeddings=12)):
        head = build_random(cfg, seed=7)
        layers, x = hidden(seed=8), noise(seed=9, cfg=cfg)
        got = head.sample_actions(layers, None, x, steps=2)
        want = x.clone()
        for b in (0, 500):
            want = want + 0.5 * reference_velocity(head, layers, want, b)
        assert torch.allclose(got, want, atol=1e-5), cfg


def test_prefix_mask_hides_padded_tokens_from_cross_attention():
    """Valid lengths [4, 6]: row 0's tokens 4, 5 are padding: changing them leaves row 0
    unchanged (and row 1 too, which reads nothing changed); without a mask they matter.
    A bool mask and lengths agree."""
    head = build_random(TINY, seed=10)
    layers, x = hidden(), noise()
    lengths = torch.tensor([4, 6])
    a = head.sample_actions(layers, lengths, x)
    bumped = layers.clone()
    bumped[:, 0, 4:] += bump(bumped[:, 0, 4:])
    assert torch.allclose(head.sample_actions(bumped, lengths, x), a, atol=1e-6)
    assert (head.sample_actions(bumped, None, x)[0] - head.sample_actions(layers, None, x)[0]).abs().max() > 1e-4
    mask = torch.arange(PREFIX)[None] < lengths[:, None]
    assert torch.allclose(head.sample_actions(layers, mask, x), a, atol=1e-6)
    # row 0 masked to 4 tokens equals row 0 run alone on its first 4 tokens
    alone = head.sample_actions(layers[:, :1, :4], None, x[:1])
    assert torch.allclose(alone, a[:1], atol=1e-5)


# ---- structure, checkpoint, config ----------------------------------------------------
def test_parameter_counts_match_starvla_docstring():
    """QwenPI_v3.py's breakdown (Qwen3-VL-4B, action_dit_hidden_dim 1024):
    action_model 538,678,305, project_layers 94,593,024 = 36 x (2 x 2560 + 2560 x 1024 + 1024)."""
    with torch.device("meta"):
        head = pv.PIv3Head(PIv3HeadConfig())
    count = lambda prefix: sum(p.numel() for n, p in head.named_parameters() if n.startswith(prefix))
    assert count("project_layers.") == 94_593_024 == 36 * (2 * 2560 + 2560 * 1024 + 1024)
    assert count("action_model.") == 538_678_305
    names = set(dict(head.named_parameters()))
    for name in ("action_model.model.timestep_encoder.timestep_embedder.linear_1.weight",
                 "action_model.model.transformer_blocks.35.norm1.linear.weight",
                 "action_model.model.transformer_blocks.0.attn1.to_q.bias",
                 "action_model.model.transformer_blocks.0.attn1.to_out.0.weight",
                 "action_model.model.transformer_blocks.0.ff.net.0.proj.weight",
                 "action_model.model.transformer_blocks.0.ff.net.2.bias",
                 "action_model.model.proj_out_2.weight", "action_model.action_encoder.layer3.weight",
                 "action_model.action_decoder.layer2.bias", "action_model.state_encoder.layer1.weight",
                 "action_model.future_tokens.weight", "action_model.position_embedding.weight",
                 "project_layers.35.0.weight", "project_layers.35.1.bias"):
        assert name in names, name
    assert head.action_model.future_tokens.weight.shape == (32, 1024)
    assert head.action_model.model.transformer_blocks[0].ff.net[0].proj.weight.shape == (4096, 1024)


def test_checkpoint_state_dict_loads_by_prefix_selection():
    src = build_random(TINY, seed=11)
    ckpt = {f"module.{k}": v for k, v in src.state_dict().items()}
    ckpt["module.qwen_vl_interface.model.lm_head.weight"] = torch.zeros(3, 3)
    sd = pv.head_state_dict(ckpt)
    assert not any(k.startswith("qwen_vl_interface") for k in sd)
    dst = pv.PIv3Head(TINY).eval()
    dst.load_state_dict(sd, strict=True)
    layers, x = hidden(), noise()
    assert torch.equal(dst.sample_actions(layers, None, x), src.sample_actions(layers, None, x))


def test_identity_projector_when_backbone_width_equals_dit_width():
    cfg = cfg_with(backbone_hidden=8)
    head = build_random(cfg)
    assert all(isinstance(p, torch.nn.Identity) for p in head.project_layers)
    out = head.sample_actions(hidden(w=8), None, noise())
    assert out.shape == (BATCH, TINY.horizon, TINY.action_dim) and torch.isfinite(out).all()


def test_from_hf_dict_reads_starvla_config_names():
    cfg_json = {"framework": {
        "name": "QwenPI_v3",
        "qwenvl": {"vl_hidden_dim": 2560, "num_vl_layers": 36},
        "action_model": {"action_model_type": "LayerwiseFM", "action_dim": 7, "state_dim": 7,
                         "action_horizon": 16, "num_inference_timesteps": 4, "num_target_vision_tokens": 32,
                         "max_seq_len": 1024, "add_pos_embed": True, "num_timestep_buckets": 1000,
                         "diffusion_model_cfg": {"action_dit_hidden_dim": 1024, "attention_head_dim": 64,
                                                 "interleave_self_attention": False,
                                                 "use_canonical_forward": True, "positional_embeddings": None,
                                                 "norm_type": "ada_norm"}}}}
    cfg = PIv3HeadConfig.from_hf_dict(cfg_json)
    assert cfg == PIv3HeadConfig()                                  # the released defaults
    am = cfg_json["framework"]["action_model"]
    am.pop("action_horizon")
    am["future_action_window_size"] = 7
    am["diffusion_model_cfg"].update(interleave_self_attention=True, num_layers=12, input_embedding_dim=512)
    cfg = PIv3HeadConfig.from_hf_dict(cfg_json["framework"], denoise_steps=10)
    assert (cfg.horizon, cfg.depth, cfg.width, cfg.num_heads, cfg.interleave_self_attention,
            cfg.denoise_steps) == (8, 12, 512, 8, True, 10)
    del am["action_dim"]
    with pytest.raises(KeyError, match="action_dim"):
        PIv3HeadConfig.from_hf_dict(cfg_json)
    with pytest.raises(TypeError, match="unknown"):
        PIv3HeadConfig.from_hf_dict({**cfg_json, "framework": {**cfg_json["framework"],
                                     "action_model": {**am, "action_dim": 7}}}, bogus=1)


def test_from_dict_and_to_dict_round_trip_with_the_field_names():
    cfg = cfg_with(interleave_self_attention=True, positional_embeddings="sinusoidal", state_mode="encoder")
    d = cfg.to_dict()
    assert d["depth"] == 3 and d["positional_embeddings"] == "sinusoidal" and d["state_mode"] == "encoder"
    assert set(d) == set(PIv3HeadConfig().to_dict())
    assert PIv3HeadConfig.from_dict(d) == cfg
    assert PIv3HeadConfig.from_dict(json.loads(json.dumps(d))) == cfg
    assert PIv3HeadConfig.from_dict(PIv3HeadConfig().to_dict()) == PIv3HeadConfig()
    assert PIv3HeadConfig.from_dict({"horizon": 8}) == PIv3HeadConfig(horizon=8)


def test_from_dict_names_unknown_keys_and_the_known_fields():
    # StarVLA's own names (from_hf_dict reads those) are not field names here
    with pytest.raises(ValueError, match=r"unknown PIv3HeadConfig fields \['action_horizon', 'num_layers'\]; "
                                         r"known fields: \['depth', 'width'.*'projector_eps'\]"):
        PIv3HeadConfig.from_dict({"depth": 2, "action_horizon": 16, "num_layers": 36})
    with pytest.raises(ValueError, match="state_mode"):                # the config's own checks still run
        PIv3HeadConfig.from_dict({"state_mode": "tokens"})


def test_shape_and_argument_errors():
    head = build_random(TINY)
    layers, x = hidden(), noise()
    with pytest.raises(ValueError, match="noise must be"):
        head.sample_actions(layers, None, torch.zeros(BATCH, 5, 3))
    with pytest.raises(ValueError, match="only 2 backbone layers"):
        head.sample_actions(layers[:2], None, x)
    with pytest.raises(ValueError, match="batch"):
        head.sample_actions(layers[:, :1], None, x)
    with pytest.raises(ValueError, match=r"\[B, T, 12\]"):
        head.sample_actions(hidden(w=10), None, x)
    with pytest.raises(ValueError, match="prefix_mask"):
        head.sample_actions(layers, torch.ones(BATCH, 3, dtype=torch.bool), x)
    with pytest.raises(ValueError, match="valid lengths"):
        head.sample_actions(layers, torch.tensor([0, 6]), x)
    with pytest.raises(ValueError, match="steps"):
        head.sample_actions(layers, None, x, steps=0)
    with pytest.raises(ValueError, match="width"):
        cfg_with(num_heads=3)
    with pytest.raises(ValueError, match="state_mode"):
        cfg_with(state_mode="tokens")
    # another horizon works (position embedding has max_seq_len rows)
    assert head.sample_actions(layers, None, torch.zeros(BATCH, 7, 4)).shape == (BATCH, 7, 4)


# ---- the formulas, written out ---------------------------------------------------------
def reference_velocity(head, layers, x, bucket):
    cfg, am = head.cfg, head.action_model
    dit = am.model
    b, h, _ = x.shape
    with torch.no_grad():
        bt = torch.full((b,), float(bucket))
        half = cfg.time_proj_dim // 2
        f = torch.exp(-math.log(10000.0) * torch.arange(half) / (half - 1))
        tproj = torch.cat([torch.cos(bt[:, None] * f), torch.sin(bt[:, None] * f)], -1)
        e = dit.timestep_encoder.timestep_embedder
        temb = e.linear_2(F.silu(e.linear_1(tproj)))
        g = torch.exp(-torch.arange(cfg.width // 2) * math.log(10000.0) / (cfg.width // 2))
        tau = torch.cat([torch.sin(bt[:, None] * g), torch.cos(bt[:, None] * g)], -1)
        enc = am.action_encoder
        a = enc.layer1(x)
        z = enc.layer2(torch.cat([a, tau[:, None].repeat(1, h, 1)], -1))
        act = enc.layer3(z * torch.sigmoid(z)) + am.position_embedding.weight[:h]
        hs = torch.cat([am.future_tokens.weight[None].repeat(b, 1, 1), act], 1)
        first = len(layers) - cfg.depth
        for i, blk in enumerate(dit.transformer_blocks):
            mod = blk.norm1.linear(F.silu(temb))
            scale, shift = mod[:, : cfg.width, None].transpose(1, 2), mod[:, cfg.width:, None].transpose(1, 2)
            n = F.layer_norm(hs, (cfg.width,), eps=1e-5) * (1 + scale) + shift
            if blk.pos_embed is not None:
                n = n + dit_blocks.sinusoidal_table(n.shape[1], cfg.width)
            ctx = head.project_layers[i](layers[first + i]) if cfg.block_is_cross(i) else n
            at = blk.attn1
            q = at.to_q(n).view(b, -1, cfg.num_heads, cfg.head_dim).transpose(1, 2)
            k = at.to_k(ctx).view(b, -1, cfg.num_heads, cfg.head_dim).transpose(1, 2)
            v = at.to_v(ctx).view(b, -1, cfg.num_heads, cfg.head_dim).transpose(1, 2)
            w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(cfg.head_dim), -1)
            hs = hs + at.to_out[0]((w @ v).transpose(1, 2).reshape(b, -1, cfg.width))
            m = F.layer_norm(hs, (cfg.width,), eps=1e-5)
            hs = hs + blk.ff.net[2](F.gelu(blk.ff.net[0].proj(m), approximate="tanh"))
        return am.action_decoder.layer2(torch.relu(am.action_decoder.layer1(hs[:, -h:])))
