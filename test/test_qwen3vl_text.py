"""Our one Decoder, configured as Qwen3-VL's text model, against transformers' Qwen3-VL.

The reference is transformers' own Qwen3VLForConditionalGeneration (test-only import),
tiny and random, its weights copied into our Decoder through models/qwen3vl/checkpoint.py. The
image embeddings and DeepStack features our decoder receives come from the reference's
own vision tower, so these tests pin the text side only (three-axis positions,
interleaved MRoPE, DeepStack, qk-norm, the KV pool and per-request rope_deltas) and do
not depend on our vision encoder. Everything runs in float32 on the CPU.
"""
from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "Qwen3VLForConditionalGeneration"):
    pytest.skip("this transformers has no Qwen3-VL", allow_module_level=True)

from oxygen_ros.engine.models.smollm2.configuration import SMOL  # noqa: E402
from oxygen_ros.engine.models.pi05.configuration import TINY  # noqa: E402
from oxygen_ros.engine.config import DecoderConfig  # noqa: E402
from oxygen_ros.engine.kv_pool import KVPool  # noqa: E402
from oxygen_ros.engine.layers import mrope  # noqa: E402
from oxygen_ros.engine.layers.decoder import Decoder  # noqa: E402
from oxygen_ros.engine.layers.blocks import Rope, packed_groups  # noqa: E402
from oxygen_ros.engine.state_checks import WeightMismatchError  # noqa: E402
from oxygen_ros.engine.models.qwen3vl.checkpoint import load_text_weights, text_state_dict  # noqa: E402
from oxygen_ros.engine.models.qwen3vl.configuration import text_config_from_hf  # noqa: E402

IMAGE, VIDEO, VSTART, VEND = 300, 301, 302, 303   # special ids inside the 320-token vocabulary
MERGE = 2
TOL = 1e-4
NEW_TOKENS = 8


def hf_config(tie: bool, depth: int = 3):
    return transformers.Qwen3VLConfig(
        text_config=dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=depth,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
                         max_position_embeddings=512,
                         # a small theta so positions move every frequency noticeably
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                          "mrope_section": [4, 2, 2], "mrope_interleaved": True}),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=4,
                           spatial_merge_size=MERGE, temporal_patch_size=2, out_hidden_size=64,
                           num_position_embeddings=16, deepstack_visual_indexes=[0, 1]),
        image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=VSTART,
        vision_end_token_id=VEND, tie_word_embeddings=tie)


@torch.no_grad()
def hf_model(tie: bool, seed: int):
    torch.manual_seed(seed)
    model = transformers.Qwen3VLForConditionalGeneration._from_config(hf_config(tie), attn_implementation="eager")
    # unit-scale weights (the library's 0.02 init gives near-uniform logits, where greedy
    # ties would make token comparisons meaningless)
    gen = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if p.dim() >= 2:
            p.copy_(torch.randn(p.shape, generator=gen) / (5.0 if "embed_tokens" in name else p[0].numel() ** 0.5))
        elif name.endswith("norm.weight") or "layernorm" in name or name.endswith("norm1.weight") \
                or name.endswith("norm2.weight"):
            p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen))
        else:
            p.copy_(0.05 * torch.randn(p.shape, generator=gen))
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model.eval()


@pytest.fixture(scope="module")
def tied():
    return hf_model(tie=True, seed=0)


@pytest.fixture(scope="module")
def untied():
    return hf_model(tie=False, seed=1)


def ours_from(hf) -> Decoder:
    cfg = text_config_from_hf(hf.config.to_dict())
    dec = Decoder(cfg, max_positions=512).eval()
    load_text_weights(dec, hf.state_dict())
    for group in packed_groups(dec):
        group.pack()
    return dec


# ---------------------------------------------------------------------------------------
# prompts: (ids, grids, pixel values)
# ---------------------------------------------------------------------------------------
def image_tokens(grid):
    t, h, w = grid
    return [VSTART] + [IMAGE] * (t * h * w // MERGE ** 2) + [VEND]


def prompt(kind: str):
    g = torch.Generator().manual_seed({"text": 1, "one": 2, "two": 3}[kind])
    text = lambda n: torch.randint(0, IMAGE, (n,), generator=g).tolist()   # noqa: E731
    if kind == "text":
        ids, grids = text(13), []
    elif kind == "one":
        grids = [(1, 8, 8)]
        ids = text(4) + image_tokens(grids[0]) + text(5)
    else:
        grids = [(1, 8, 8), (1, 4, 12)]
        ids = text(3) + image_tokens(grids[0]) + text(2) + image_tokens(grids[1]) + text(4)
    patches = sum(t * h * w for t, h, w in grids)
    pixels = torch.randn(patches, 3 * 2 * 4 * 4, generator=g) if grids else None
    return torch.tensor([ids]), (torch.tensor(grids) if grids else None), pixels


def hf_inputs(ids, grids, pixels):
    kw = dict(input_ids=ids, attention_mask=torch.ones_like(ids),
              mm_token_type_ids=(ids == IMAGE).int())
    if grids is not None:
        kw.update(pixel_values=pixels, image_grid_thw=grids)
    return kw


@torch.no_grad()
def visual_features(hf, grids, pixels):
    """The reference vision tower's merged embeddings and DeepStack features."""
    if grids is None:
        return None, None
    out = hf.model.get_image_features(pixels, grids)
    return torch.cat(out.pooler_output), [torch.cat(f) for f in out.deepstack_features]


# ---------------------------------------------------------------------------------------
# our side: prefill and batched decode through the KV pool
# ---------------------------------------------------------------------------------------
def new_pool(dec: Decoder, slots: int, max_len: int) -> KVPool:
    c = dec.cfg
    return KVPool(c.depth, slots, max_len, c.num_kv_heads, c.head_dim)


@torch.no_grad()
def prefill(dec, pool, slot, ids, grids, embeds, deepstack, use_deepstack=True):
    """Causal prefill of one prompt into `slot`; returns (logits [T, V], rope_delta)."""
    positions, delta = mrope.rope_index(ids[0], grids, IMAGE, VSTART, MERGE)
    visual = ids == IMAGE
    x = dec.embed(ids) if embeds is None else dec.embed_with_images(ids, visual, embeds)
    t = ids.shape[1]
    mask = torch.ones(t, t, dtype=torch.bool).tril()[None, None]
    hidden = dec(x, positions[:, None], pool, slice(slot, slot + 1), 0, t, mask,
                 visual_mask=visual, deepstack=deepstack if use_deepstack else None)
    return dec.logits(hidden[0]), delta


@torch.no_grad()
def decode_step(dec, pool, ids, lengths, deltas):
    """One batched step for slots 0..B-1: ids [B] written at lengths[i], positions
    lengths + rope_delta per row. Returns logits [B, V]."""
    b = ids.shape[0]
    read_len = int(lengths.max()) + 1
    hidden_pos = torch.arange(read_len)[None, :] > lengths[:, None]
    mask = torch.zeros(b, 1, 1, read_len).masked_fill_(hidden_pos[:, None, None, :], float("-inf"))
    positions = mrope.text_positions(lengths, 1, deltas)
    hidden = dec(dec.embed(ids[:, None]), positions, pool, slice(0, b), lengths, read_len, mask)
    return dec.logits(hidden[:, 0])


def greedy_alone(dec, hf, kind, n=NEW_TOKENS):
    ids, grids, pixels = prompt(kind)
    embeds, deepstack = visual_features(hf, grids, pixels)
    pool = new_pool(dec, 1, ids.shape[1] + n)
    logits, delta = prefill(dec, pool, 0, ids, grids, embeds, deepstack)
    steps = [logits[-1]]
    length = ids.shape[1]
    for _ in range(n - 1):
        tok = steps[-1].argmax()[None]
        steps.append(decode_step(dec, pool, tok, torch.tensor([length]), torch.tensor([delta]))[0])
        length += 1
    return [int(s.argmax()) for s in steps], torch.stack(steps), delta


# ---------------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["text", "one", "two"])
def test_rope_index_matches_get_rope_index(tied, kind):
    """Three-axis positions and rope_delta equal transformers' get_rope_index, and an
    image really moves them (the delta is negative where a prompt holds images)."""
    ids, grids, pixels = prompt(kind)
    ours, delta = mrope.rope_index(ids, grids, IMAGE, VSTART, MERGE)
    kw = hf_inputs(ids, grids, pixels)
    ref, ref_delta = tied.model.get_rope_index(ids, kw["mm_token_type_ids"], image_grid_thw=grids)
    assert ours.dtype == torch.long and ours.shape == (3, ids.shape[1])
    assert torch.equal(ours, ref[:, 0]), (ours, ref[:, 0])
    assert delta == int(ref_delta[0, 0])
    assert (delta < 0) == (grids is not None)


def test_rope_index_rejects_mismatched_grids():
    ids, grids, _ = prompt("two")
    with pytest.raises(ValueError, match="grid"):
        mrope.rope_index(ids, grids[:1], IMAGE, VSTART, MERGE)
    with pytest.raises(ValueError, match="grid"):
        mrope.rope_index(ids, torch.cat([grids, grids[:1]]), IMAGE, VSTART, MERGE)
    with pytest.raises(ValueError, match="image tokens"):
        mrope.rope_index(ids, torch.tensor([[1, 8, 8], [1, 8, 8]]), IMAGE, VSTART, MERGE)
    with pytest.raises(ValueError, match="vision-start"):
        mrope.rope_index(ids[:, 4:], grids, IMAGE, VSTART, MERGE)


@pytest.mark.parametrize("kind", ["text", "one", "two"])
def test_prompt_logits_match_transformers(tied, kind):
    """Whole-prompt logits of our decoder (fed the reference's image embeddings and
    DeepStack features) equal the reference's within 1e-4; DeepStack and the
    three-axis positions both matter (leaving either out moves the logits)."""
    dec = ours_from(tied)
    ids, grids, pixels = prompt(kind)
    tied.model.rope_deltas = None
    with torch.no_grad():
        ref = tied(**hf_inputs(ids, grids, pixels)).logits[0]
    embeds, deepstack = visual_features(tied, grids, pixels)
    ours, _ = prefill(dec, new_pool(dec, 1, ids.shape[1]), 0, ids, grids, embeds, deepstack)
    diff = (ours - ref).abs().max().item()
    print(f"{kind}: prompt logits max |diff| {diff:.2e}")
    assert diff <= TOL
    if grids is not None:
        no_stack, _ = prefill(dec, new_pool(dec, 1, ids.shape[1]), 0, ids, grids, embeds, deepstack,
                              use_deepstack=False)
        assert (no_stack - ref).abs().max() > 1e-2
        with torch.no_grad():   # the same prompt with 1-D positions 0..T-1
            t = ids.shape[1]
            x = dec.embed_with_images(ids, ids == IMAGE, embeds)
            flat = dec(x, torch.arange(t)[None], new_pool(dec, 1, t), slice(0, 1), 0, t,
                       torch.ones(t, t, dtype=torch.bool).tril()[None, None],
                       visual_mask=ids == IMAGE, deepstack=deepstack)
        assert (dec.logits(flat[0]) - ref).abs().max() > 1e-2


@pytest.mark.parametrize("kind", ["text", "one", "two"])
def test_greedy_decode_matches_generate(tied, kind):
    """Prefill, then per-token decode through the KV pool with positions
    index + rope_delta, gives transformers' generate(do_sample=False) tokens, and each
    step's logits within 1e-4 of the reference's."""
    dec = ours_from(tied)
    ids, grids, pixels = prompt(kind)
    tied.model.rope_deltas = None
    with torch.no_grad():
        out = tied.generate(**hf_inputs(ids, grids, pixels), max_new_tokens=NEW_TOKENS, do_sample=False,
                            output_logits=True, return_dict_in_generate=True)
    ref_tokens = out.sequences[0, ids.shape[1]:].tolist()
    ref_logits = torch.stack(out.logits)[:, 0]
    tokens, logits, _ = greedy_alone(dec, tied, kind)
    diff = (logits - ref_logits).abs().max().item()
    print(f"{kind}: generated {tokens}, per-step logits max |diff| {diff:.2e}")
    assert len(ref_tokens) == NEW_TOKENS
    assert tokens == ref_tokens
    assert diff <= TOL
    assert len(set(tokens)) > 1     # not a degenerate repeat of one token


def test_requests_with_different_rope_deltas_decode_in_one_batch(untied):
    """Requests with different rope_deltas (no image, one image, two images) decode in
    ONE batched call per step, each row with its own delta, and give each request's
    tokens decoded alone (logits within 1e-5). The untied head is used here, and a wrong
    delta (0) visibly changes an image request's logits."""
    dec = ours_from(untied)
    assert dec.lm_head is not None
    kinds = ["one", "text", "two"]
    alone = {k: greedy_alone(dec, untied, k) for k in kinds}
    deltas = torch.tensor([alone[k][2] for k in kinds])
    assert len(set(deltas.tolist())) == 3, deltas

    prompts = [prompt(k) for k in kinds]
    pool = new_pool(dec, len(kinds), max(p[0].shape[1] for p in prompts) + NEW_TOKENS)
    firsts = []
    for slot, (ids, grids, pixels) in enumerate(prompts):
        embeds, deepstack = visual_features(untied, grids, pixels)
        logits, _ = prefill(dec, pool, slot, ids, grids, embeds, deepstack)
        firsts.append(logits[-1])
    steps = [torch.stack(firsts)]
    lengths = torch.tensor([p[0].shape[1] for p in prompts])
    for _ in range(NEW_TOKENS - 1):
        steps.append(decode_step(dec, pool, steps[-1].argmax(-1), lengths, deltas))
        lengths = lengths + 1
    batched = torch.stack(steps, dim=1)              # [requests, steps, vocab]
    for row, k in enumerate(kinds):
        tokens, logits, _ = alone[k]
        assert batched[row].argmax(-1).tolist() == tokens, k
        diff = (batched[row] - logits).abs().max().item()
        print(f"{k}: batched vs alone max |diff| {diff:.2e}")
        assert diff <= 1e-5

    # the same first decode step with rope_delta 0 for every row is a different computation
    pool2 = new_pool(dec, len(kinds), pool.max_len)
    for slot, (ids, grids, pixels) in enumerate(prompts):
        embeds, deepstack = visual_features(untied, grids, pixels)
        prefill(dec, pool2, slot, ids, grids, embeds, deepstack)
    start = torch.tensor([p[0].shape[1] for p in prompts])
    wrong = decode_step(dec, pool2, steps[0].argmax(-1), start, torch.zeros(3, dtype=torch.long))
    assert (wrong[0] - batched[0, 1]).abs().max() > 1e-3     # image request: delta matters
    assert (wrong[1] - batched[1, 1]).abs().max() <= 1e-5    # text request: delta is 0 anyway


def test_from_hf_text_config_reads_both_spellings(tied):
    """The 5.x config (rope_parameters, whole config.json) and the 4.57 one (text_config
    with rope_theta and rope_scaling) give the same decoder config."""
    full = tied.config.to_dict()
    cfg = text_config_from_hf(full)
    assert cfg == DecoderConfig(width=64, depth=3, mlp_dim=128, num_heads=4, num_kv_heads=2, head_dim=16,
                                vocab_size=320, norm="llama", norm_eps=1e-6, activation="silu",
                                rope_theta=10000.0, embed_scale=False, tie_embeddings=True,
                                qk_norm=True, mrope_section=(4, 2, 2), deepstack_layers=2)
    old = {k: v for k, v in full["text_config"].items() if k != "rope_parameters"}
    old.update(rope_theta=10000.0, rope_scaling={"rope_type": "default", "mrope_section": [4, 2, 2],
                                                 "mrope_interleaved": True})
    assert text_config_from_hf(old, tie_embeddings=True, deepstack_layers=2) == cfg
    for bad in ({"attention_bias": True}, {"rope_scaling": {"rope_type": "yarn", "rope_theta": 1.0}},
                {"rope_scaling": {"mrope_interleaved": False, "rope_theta": 1.0}}, {"rope_theta": None}):
        with pytest.raises(ValueError, match="unsupported"):
            text_config_from_hf({**old, **bad})
    with pytest.raises(ValueError, match="mrope_section"):
        DecoderConfig(width=64, depth=1, mlp_dim=8, num_heads=4, num_kv_heads=2, head_dim=16,
                      vocab_size=8, mrope_section=(4, 2, 1))
    # the existing families keep 1-D RoPE and no DeepStack
    for existing in (TINY.backbone, SMOL.backbone):
        assert existing.mrope_section is None and existing.deepstack_layers == 0


def test_weight_mapping_is_strict(tied, untied):
    sd = tied.state_dict()
    ours = text_state_dict(sd, tie_embeddings=True)
    assert "lm_head.weight" not in ours and all(not k.startswith("model.") for k in ours)
    assert set(text_state_dict(untied.state_dict(), tie_embeddings=False)) == set(ours) | {"lm_head.weight"}
    with pytest.raises(WeightMismatchError, match="no place"):
        text_state_dict({**sd, "model.language_model.layers.0.self_attn.q_proj.bias": torch.zeros(64)})
    with pytest.raises(WeightMismatchError, match="lm_head"):
        text_state_dict({k: v for k, v in sd.items() if k != "lm_head.weight"}, tie_embeddings=False)
    dec = Decoder(text_config_from_hf(tied.config.to_dict()))
    with pytest.raises(WeightMismatchError, match="missing"):
        load_text_weights(dec, {k: v for k, v in sd.items() if "layers.2." not in k})


def test_rope_equal_axes_is_the_1d_rotation():
    """[B, T] positions (decode) equal [3, B, T] positions with three equal axes; a
    Rope without mrope_section refuses three-axis positions; the interleaving gives
    h the frequencies 1, 4, .. and w 2, 5, .. within their section sizes."""
    rope = Rope(16, 10000.0, 64, (4, 2, 2))
    pos = torch.tensor([[3, 7, 20], [0, 1, 2]])
    flat, three = rope.tables(pos, torch.float32), rope.tables(pos.expand(3, 2, 3), torch.float32)
    assert all(torch.equal(a, b) for a, b in zip(flat, three))
    assert mrope.frequency_axes((4, 2, 2), 16)[:8].tolist() == [0, 1, 2, 0, 1, 2, 0, 0]
    assert mrope.frequency_axes((24, 20, 20), 128)[57:64].tolist() == [0, 1, 2, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="mrope_section"):
        Rope(16, 10000.0, 64).tables(pos.expand(3, 2, 3), torch.float32)
