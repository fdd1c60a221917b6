"""Loading pi0.5 checkpoints (LeRobot and openpi layouts) and PaliGemma-style tokenizers.

Checkpoints here are tiny but carry exactly the real tensor names, written from an
independent list (`real_shapes`), with the pi0.5 structure (Gemma norms, MQA,
gelu-tanh, embedding scaling, adaptive expert norms, expert depth = backbone depth).
The SentencePiece model is trained on the fly (byte fallback, PaliGemma's special ids).
A float64 reference written from PI05_FACTS.md checks that loaded weights reproduce
pi0.5's math (camera masking included), not just that they round-trip.
"""
import dataclasses as dc
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from oxygen_ros.engine.models.pi05 import checkpoint as pc
from oxygen_ros.engine.models.pi05.modeling import build_random_model
from oxygen_ros.engine.observation.observation import Observation
from oxygen_ros.engine.requests import LanguageRequest
from oxygen_ros.engine.scheduler import EngineConfig, OxygenEngine
from oxygen_ros.engine.models.pi05.tokenizer import SentencePieceTokenizer
from pi05_fixtures import (EX, EXPERT_LM_HEAD, LM, LM_HEAD, PREFIX, R, VT, engine_name, model_checkpoint,
                           real_shapes, toy_config, train_tokenizer, write)

spm = pytest.importorskip("sentencepiece")

# -- fixtures -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sp_path(tmp_path_factory):
    return train_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def tok(sp_path):
    return SentencePieceTokenizer(sp_path)


@pytest.fixture(scope="module")
def cfg(tok):
    return toy_config(tok)


@pytest.fixture(scope="module")
def source(cfg):
    return build_random_model(cfg, seed=7)


def observation(cfg, seed=0, cameras=("base_0_rgb", "right_wrist_0_rgb")):
    rng = np.random.default_rng(seed)
    s = cfg.vision.image_size
    return Observation(images={c: rng.integers(0, 256, (s, s, 3), dtype=np.uint8) for c in cameras},
                       state=rng.uniform(-1, 1, 8), instruction="pick up the red cup")


def run_frame(model, tok, obs, noise, request=None):
    eng = OxygenEngine(model, tok, EngineConfig(max_requests=2, steps_per_frame=8))
    if request is not None:
        eng.submit(request)
    res = eng.step(obs, noise)
    return res


# -- names and layouts ------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["lerobot", "openpi"])
def test_export_names_are_the_real_names(cfg, source, layout):
    exported = pc.export_state_dict(source, layout, include_lm_head=True)
    want = {PREFIX[layout] + k: v for k, v in real_shapes(cfg, expert_lm_head=False).items()}
    assert set(exported) == set(want)
    assert {k: tuple(v.shape) for k, v in exported.items()} == want


@pytest.mark.parametrize("layout", ["lerobot", "openpi"])
def test_every_tensor_lands_in_its_parameter(cfg, tok, sp_path, tmp_path, layout):
    gen = torch.Generator().manual_seed(3)
    tensors = {PREFIX[layout] + k: torch.randn(shape, generator=gen) * 0.1
               for k, shape in real_shapes(cfg).items()}
    tensors[PREFIX[layout] + LM_HEAD] = tensors[PREFIX[layout] + LM + "embed_tokens.weight"].clone()
    model, tok2 = pc.load_pi05(cfg, write(tmp_path, tensors), sp_path)
    params = dict(model.named_parameters())
    used = set()
    for name, t in tensors.items():
        real = name[len(PREFIX[layout]):]
        if real in (LM_HEAD, EXPERT_LM_HEAD):
            continue
        ours = engine_name(real)
        assert torch.equal(params[ours], t), name
        used.add(ours)
    assert used == set(params)                    # every parameter came from the file
    assert tok2.vocab_size == tok.vocab_size


def test_layout_detection(cfg):
    names = real_shapes(cfg)
    assert pc.detect_layout(["model." + n for n in names]) == "lerobot"
    assert pc.detect_layout(list(names)) == "openpi"
    with pytest.raises(pc.CheckpointError, match="mixes"):
        pc.detect_layout(["model." + LM_HEAD, LM_HEAD])
    with pytest.raises(pc.CheckpointError, match="not a pi0"):
        pc.detect_layout(["encoder.weight", "decoder.weight"])


# -- the loaded model computes what the source model computes ----------------------------
@pytest.mark.parametrize("layout", ["lerobot", "openpi"])
def test_round_trip_is_identical(cfg, source, tok, sp_path, tmp_path, layout):
    path = write(tmp_path, model_checkpoint(source, layout))
    model, tok2 = pc.load_pi05(cfg, path, sp_path)
    for (n, p), (m, q) in zip(source.state_dict().items(), model.state_dict().items()):
        assert n == m and torch.equal(p, q), n
    obs, noise = observation(cfg), torch.randn(5, 6, generator=torch.Generator().manual_seed(1))
    req = lambda: LanguageRequest(prompt="describe what you see", max_new_tokens=6, ignore_eos=True)
    a, b = run_frame(source, tok, obs, noise, req()), run_frame(model, tok2, obs, noise, req())
    assert a.actions.shape == (5, 6)
    assert np.array_equal(a.actions, b.actions)
    assert [d.delta for d in a.deltas] == [d.delta for d in b.deltas]


def test_frame_end_to_end_with_text(cfg, source, sp_path, tmp_path):
    path = write(tmp_path, model_checkpoint(source, "lerobot", lm_head=False))   # lm_head absent
    model, tok = pc.load_pi05(cfg, path, sp_path)
    eng = OxygenEngine(model, tok, EngineConfig(max_requests=2, steps_per_frame=4))
    eng.submit(LanguageRequest(prompt="describe what you see", max_new_tokens=8, ignore_eos=True))
    frames = [eng.step(observation(cfg, seed=f)) for f in range(3)]
    for r in frames:
        assert r.actions.shape == (cfg.expert.horizon, cfg.expert.action_dim)
        assert np.isfinite(r.actions).all()
    done = [d for r in frames for d in r.deltas if d.done]
    assert len(done) == 1 and done[0].token_count == 8
    text = "".join(d.delta for r in frames for d in r.deltas)
    assert text == done[0].full_text and text.strip()


def test_matches_float64_reference_from_the_facts(cfg, source, sp_path, tmp_path):
    """Actions and greedy text from a loaded checkpoint equal an independent float64
    implementation of pi0.5 that reads the real tensor names (masked wrist camera)."""
    path = write(tmp_path, model_checkpoint(source, "openpi"))
    model, tok = pc.load_pi05(cfg, path, sp_path)
    T = {k: v.double() for k, v in load_file(path + "/model.safetensors").items()}
    obs = observation(cfg, seed=5)                       # left wrist camera missing
    noise = torch.randn(5, 6, generator=torch.Generator().manual_seed(2))
    res = run_frame(model, tok, obs, noise,
                    LanguageRequest(prompt="describe what you see", max_new_tokens=4, ignore_eos=True))
    bins = np.digitize(np.clip(obs.state, -1, 1), np.linspace(-1, 1, 257)[:-1]) - 1
    text = f"Task: {obs.instruction}, State: {' '.join(map(str, bins))};\nAction: "
    ids = tok.encode(text, add_bos=True)
    actions, tokens = reference(T, cfg, obs, ids, tok.encode("describe what you see"), noise.double(), 4)
    np.testing.assert_allclose(res.actions, actions.numpy(), rtol=0, atol=2e-5)
    got = [d for d in res.deltas if d.done][0].full_text
    assert got == tok.decode(tokens)


# -- failures name every offending tensor -----------------------------------------------
def test_wrong_shapes_are_all_named(cfg, source, sp_path, tmp_path):
    t = model_checkpoint(source, "lerobot")
    bad1 = "model." + LM + "layers.1.mlp.up_proj.weight"
    bad2 = "model." + EX + "layers.0.input_layernorm.dense.bias"
    t[bad1] = torch.zeros(63, 32)
    t[bad2] = torch.zeros(47)
    with pytest.raises(pc.CheckpointError) as err:
        pc.load_pi05(cfg, write(tmp_path, t), sp_path)
    msg = str(err.value)
    assert "2 tensor(s) with the wrong shape" in msg
    assert f"{bad1}: checkpoint [63, 32], model expects [64, 32]" in msg
    assert f"{bad2}: checkpoint [47], model expects [48]" in msg


def test_missing_and_unexpected_are_all_named(cfg, source, sp_path, tmp_path):
    t = model_checkpoint(source, "openpi")
    gone = [VT + "encoder.layers.1.mlp.fc2.bias", EX + "norm.dense.weight"]
    for g in gone:
        del t[g]
    t["state_proj.weight"] = torch.zeros(16, 32)
    t[R + "paligemma.model.language_model.layers.2.mlp.up_proj.weight"] = torch.zeros(64, 32)
    with pytest.raises(pc.CheckpointError) as err:
        pc.load_pi05(cfg, write(tmp_path, t), sp_path)
    msg = str(err.value)
    assert "2 missing tensor(s)" in msg and all(g in msg for g in gone)
    assert "2 unexpected tensor(s)" in msg and "state_proj.weight [16, 32]" in msg
    assert "layers.2.mlp.up_proj.weight" in msg
    assert "pi0 (not pi0.5)" in msg and "backbone has 3 in the checkpoint" in msg


def test_depth_mismatch_is_explained(cfg, source, sp_path, tmp_path):
    deeper = dc.replace(cfg, backbone=dc.replace(cfg.backbone, depth=3))
    with pytest.raises(pc.CheckpointError) as err:
        pc.load_pi05(deeper, write(tmp_path, model_checkpoint(source, "lerobot")), sp_path)
    msg = str(err.value)
    assert "backbone has 2 in the checkpoint, profile 'pi05-toy' expects 3" in msg
    assert "expert has 2" in msg
    assert "model." + LM + "layers.2.self_attn.q_proj.weight" in msg
    assert "model." + EX + "layers.2.mlp.down_proj.weight" in msg


def test_tied_lm_head(cfg, source, tok, sp_path, tmp_path):
    t = model_checkpoint(source, "lerobot")
    # save_model may keep only the lm_head name of the tied pair: accepted
    del t["model." + LM + "embed_tokens.weight"]
    model, _ = pc.load_pi05(cfg, write(tmp_path, t, name="head_only"), sp_path)
    assert torch.equal(model.backbone.embed_tokens.weight, source.backbone.embed_tokens.weight)
    # both present but different: refused
    t = model_checkpoint(source, "lerobot")
    t["model." + LM_HEAD] = t["model." + LM_HEAD] + 1
    with pytest.raises(pc.CheckpointError, match="lm_head.weight differs from .*embed_tokens"):
        pc.load_pi05(cfg, write(tmp_path, t, name="untied"), sp_path)


# -- configuration from the checkpoint ------------------------------------------------
def test_action_dim_and_horizon_from_the_checkpoint(cfg, source, sp_path, tmp_path):
    wide = cfg.with_expert(action_dim=32, horizon=50, denoise_steps=10)   # the PI05 defaults
    t = model_checkpoint(source, "openpi")
    model, _ = pc.load_pi05(wide, write(tmp_path, t, {"action_dim": 6, "action_horizon": 3}, "op"), sp_path)
    assert (model.cfg.expert.action_dim, model.cfg.expert.horizon) == (6, 3)
    t = model_checkpoint(source, "lerobot")
    meta = {"type": "pi05", "chunk_size": 7, "max_action_dim": 6, "num_inference_steps": 4}
    model, tok = pc.load_pi05(wide, write(tmp_path, t, meta, "lr"), sp_path)
    e = model.cfg.expert
    assert (e.action_dim, e.horizon, e.denoise_steps) == (6, 7, 4)
    res = run_frame(model, tok, observation(cfg), None)
    assert res.actions.shape == (7, 6)
    with pytest.raises(pc.CheckpointError, match="'pi0' policy"):
        pc.load_pi05(wide, write(tmp_path, t, {"type": "pi0"}, "pi0"), sp_path)
    with pytest.raises(pc.CheckpointError, match="max_action_dim=32"):
        pc.load_pi05(wide, write(tmp_path, t, {"type": "pi05", "max_action_dim": 32}, "bad"), sp_path)


def test_paths_dtype_device_arguments(cfg, source, sp_path, tmp_path):
    path = write(tmp_path, model_checkpoint(source, "lerobot"))
    model, _ = pc.load_pi05(cfg, path + "/model.safetensors", sp_path)     # the file itself
    assert model.dtype == torch.float32 and model.device.type == "cpu"
    with pytest.raises(FileNotFoundError, match="has no model.safetensors"):
        pc.load_pi05(cfg, str(tmp_path), sp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        pc.load_pi05(cfg, str(tmp_path / "nope"), sp_path)
    with pytest.raises(ValueError, match="unsupported dtype"):
        pc.load_pi05(cfg, path, sp_path, dtype="int8")
    assert pc.parse_dtype("bf16") is torch.bfloat16 and pc.parse_dtype("fp16") is torch.float16
    assert pc.parse_dtype(torch.float32) is torch.float32
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            pc.load_pi05(cfg, path, sp_path, device="cuda")


def test_bfloat16_loading(cfg, source, sp_path, tmp_path):
    path = write(tmp_path, model_checkpoint(source, "lerobot"))
    ref, tok = pc.load_pi05(cfg, path, sp_path)
    model, _ = pc.load_pi05(cfg, path, sp_path, dtype="bfloat16")
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert torch.equal(model.expert.action_in_proj.weight,
                       source.expert.action_in_proj.weight.to(torch.bfloat16))
    obs, noise = observation(cfg), torch.randn(5, 6, generator=torch.Generator().manual_seed(1))
    a = run_frame(ref, tok, obs, noise).actions
    b = run_frame(model, tok, obs, noise,
                  LanguageRequest(prompt="describe", max_new_tokens=3, ignore_eos=True)).actions
    assert b.dtype == np.float32 and np.isfinite(b).all()
    assert np.abs(a - b).max() < 0.1 * max(1.0, np.abs(a).max())


# -- tokenizer ----------------------------------------------------------------------------
def test_sentencepiece_tokenizer(tok):
    assert (tok.bos_id, tok.eos_ids, tok.vocab_size) == (2, frozenset({1}), tok.sp.GetPieceSize())
    text = "Task: pick up the cup, State: 12 200;\nAction: d\u00e9j\u00e0 \u20ac\U0001F916"
    ids = tok.encode(text)
    assert tok.encode(text, add_bos=True) == [2] + ids
    assert tok.decode(ids) == text                        # bytes of every piece, exactly
    assert any(tok.sp.IsByte(i) for i in ids)             # the emoji needs byte fallback
    euro = [i for i in ids if tok.sp.IsByte(i) and tok.token_bytes(i) == b"\xe2"]
    assert euro and tok.sp.IdToPiece(euro[0]) == "<0xE2>"
    word = next(i for i in range(tok.vocab_size) if tok.sp.IdToPiece(i).startswith("\u2581"))
    assert tok.token_bytes(word) == tok.sp.IdToPiece(word).replace("\u2581", " ").encode()
    assert tok.token_bytes(0) == tok.token_bytes(1) == tok.token_bytes(2) == b""
    assert tok.token_bytes(tok.vocab_size + 5) == b""


def test_tokenizer_is_required_and_explained(cfg, source, tmp_path):
    path = write(tmp_path, model_checkpoint(source, "lerobot"))
    with pytest.raises(ValueError, match="paligemma_tokenizer.model"):
        pc.load_pi05(cfg, path, None)
    with pytest.raises(FileNotFoundError, match="paligemma_tokenizer.model"):
        pc.load_pi05(cfg, path, str(tmp_path / "missing.model"))
    junk = tmp_path / "junk.model"
    junk.write_bytes(b"not a model")
    with pytest.raises(ValueError, match="not a SentencePiece model"):
        pc.load_pi05(cfg, path, str(junk))


# -- float64 reference written from PI05_FACTS.md -------------------------------------
def _lin(T, name, x):
    return x @ T[name + ".weight"].T + (T[name + ".bias"] if name + ".bias" in T else 0)


def _rms(x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def _rope(x, pos, theta=10000.0):
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = pos.double()[:, None] * inv[None]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    return x * cos + torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1) * sin


def _attend(q, k, v, visible):
    """q [H,Tq,d], k/v [Hkv,Tk,d] (MQA: heads grouped over kv heads), visible [Tq,Tk]."""
    k = k.repeat_interleave(q.shape[0] // k.shape[0], 0)
    v = v.repeat_interleave(q.shape[0] // v.shape[0], 0)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~visible, -1e30)
    return s.softmax(-1) @ v


def _qkv(T, p, x, b, pos):
    t = x.shape[0]
    q = _lin(T, p + "self_attn.q_proj", x).view(t, b.num_heads, b.head_dim).transpose(0, 1)
    k = _lin(T, p + "self_attn.k_proj", x).view(t, b.num_kv_heads, b.head_dim).transpose(0, 1)
    v = _lin(T, p + "self_attn.v_proj", x).view(t, b.num_kv_heads, b.head_dim).transpose(0, 1)
    return _rope(q, pos), _rope(k, pos), v


def _mlp(T, p, x):
    g = F.gelu(_lin(T, p + "mlp.gate_proj", x), approximate="tanh")
    return _lin(T, p + "mlp.down_proj", g * _lin(T, p + "mlp.up_proj", x))


def _siglip(T, v, img):
    x = F.conv2d(img[None], T[VT + "embeddings.patch_embedding.weight"],
                 T[VT + "embeddings.patch_embedding.bias"], stride=v.patch_size)
    x = x.flatten(2).transpose(1, 2)[0] + T[VT + "embeddings.position_embedding.weight"]
    ln = lambda n, y: F.layer_norm(y, (v.width,), T[n + ".weight"], T[n + ".bias"], 1e-6)
    for i in range(v.depth):
        p = f"{VT}encoder.layers.{i}."
        h = ln(p + "layer_norm1", x)
        q, k, vv = (_lin(T, p + f"self_attn.{n}", h).view(-1, v.num_heads, v.width // v.num_heads).transpose(0, 1)
                    for n in ("q_proj", "k_proj", "v_proj"))
        a = _attend(q, k, vv, torch.ones(q.shape[1], k.shape[1], dtype=torch.bool))
        x = x + _lin(T, p + "self_attn.out_proj", a.transpose(0, 1).reshape(-1, v.width))
        h = ln(p + "layer_norm2", x)
        x = x + _lin(T, p + "mlp.fc2", F.gelu(_lin(T, p + "mlp.fc1", h), approximate="tanh"))
    x = ln(VT + "post_layernorm", x)
    return _lin(T, R + "paligemma.model.multi_modal_projector.linear", x)     # not scaled


def reference(T, cfg, obs, prefix_ids, prompt_ids, noise, n_tokens):
    """pi0.5 inference with big_vision masks: all three camera slots enter, a missing one
    as a masked block; returns (action chunk [H, D], n_tokens greedy tokens after prompt)."""
    v, b, e = cfg.vision, cfg.backbone, cfg.expert
    emb, valid = [], []
    for slot in cfg.camera_slots:
        img = obs.images.get(slot)
        x = (torch.from_numpy(img).permute(2, 0, 1).double() / 127.5 - 1.0) if img is not None \
            else -torch.ones(3, v.image_size, v.image_size, dtype=torch.float64)
        emb.append(_siglip(T, v, x))
        valid += [img is not None] * v.tokens_per_image
    table = T[LM + "embed_tokens.weight"]
    emb.append(table[prefix_ids] * math.sqrt(b.width))
    valid += [True] * len(prefix_ids)
    x, valid = torch.cat(emb), torch.tensor(valid)
    pos = torch.cumsum(valid.long(), 0) - 1
    n_valid = int(valid.sum())

    def backbone(x, pos, visible):
        kv = []
        for i in range(b.depth):
            p = f"{LM}layers.{i}."
            q, k, vv = _qkv(T, p, _rms(x) * (1 + T[p + "input_layernorm.weight"]), b, pos)
            kv.append((k, vv))
            a = _attend(q, k, vv, visible).transpose(0, 1).reshape(x.shape[0], -1)
            h = x + _lin(T, p + "self_attn.o_proj", a)
            x = h + _mlp(T, p, _rms(h) * (1 + T[p + "post_attention_layernorm.weight"]))
        return x, kv

    visible = valid[None, :].expand(len(valid), -1)             # prefix: bidirectional, valid keys
    _, kv = backbone(x, pos, visible)

    def velocity(xt, t):
        frac = torch.linspace(0, 1, e.width // 2, dtype=torch.float64)
        period = 4e-3 * (4.0 / 4e-3) ** frac
        te = torch.cat([torch.sin(2 * math.pi * t / period), torch.cos(2 * math.pi * t / period)])
        te = te.float().double()
        cond = F.silu(_lin(T, "time_mlp_out", F.silu(_lin(T, "time_mlp_in", te))))
        h = _lin(T, "action_in_proj", xt)
        apos = n_valid + torch.arange(e.horizon)
        see = torch.cat([valid[None].expand(e.horizon, -1), torch.ones(e.horizon, e.horizon, dtype=torch.bool)], 1)
        for i in range(b.depth):
            p = f"{EX}layers.{i}."
            scale, shift, gate = _lin(T, p + "input_layernorm.dense", cond).chunk(3)
            q, k, vv = _qkv(T, p, _rms(h) * (1 + scale) + shift, b, apos)
            pk, pv = kv[i]
            a = _attend(q, torch.cat([pk, k], 1), torch.cat([pv, vv], 1), see)
            h = h + _lin(T, p + "self_attn.o_proj", a.transpose(0, 1).reshape(e.horizon, -1)) * gate
            scale, shift, gate = _lin(T, p + "post_attention_layernorm.dense", cond).chunk(3)
            h = h + _mlp(T, p, _rms(h) * (1 + scale) + shift) * gate
        scale, shift, _ = _lin(T, EX + "norm.dense", cond).chunk(3)
        return _lin(T, "action_out_proj", _rms(h) * (1 + scale) + shift)

    xt, dt = noise, -1.0 / e.denoise_steps
    for k in range(e.denoise_steps):
        xt = xt + dt * velocity(xt, float(np.float32(1 + k * dt)))

    # language: the request prompt after the prefix, causal among itself, then greedy
    seq = list(prompt_ids)
    out = []
    head = T.get(LM_HEAD, table)
    for _ in range(n_tokens):
        n = len(seq)
        xs = torch.cat([x, table[seq] * math.sqrt(b.width)])
        vis = torch.cat([valid, torch.ones(n, dtype=torch.bool)])
        allowed = vis[None, :].expand(len(vis), -1).clone()
        allowed[-n:, -n:] &= torch.ones(n, n, dtype=torch.bool).tril()
        allowed[:-n, -n:] = False
        ps = torch.cat([pos, n_valid + torch.arange(n)])
        hs, _ = backbone(xs, ps, allowed)
        logits = (_rms(hs[-1]) * (1 + T[LM + "norm.weight"])) @ head.T
        token = int(logits.argmax())
        out.append(token)
        seq.append(token)
    return xt.float(), out
