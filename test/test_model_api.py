"""The model calls outside code uses beside the engine (docs/models.md "Using a model from
Python"), against transformers' Qwen3VLForConditionalGeneration (test-only import):

- a plain Qwen3-VL checkpoint directory (no action head; written here by transformers'
  save_pretrained, with test_weights_qwen3vl's byte-level BPE tokenizer) generates text
  through `oxygen generate --model qwen3vl`, the same greedy tokens as transformers'
  generate; asked for actions, the language-only model says so;
- `Qwen3VLVLA.prefix_from_ids`: a prompt of token ids with one image_pad per frame prefills
  as transformers' processor expands it and as the text-segments path does;
- `decode_logits(ids, pool, lengths, slots)`: any pool slots, argmax = decode's tokens;
- `prefill(..., layer_hidden=True)`: per-layer hidden states against output_hidden_states.
The tiny reference models and their helpers come from test_weights_qwen3vl (the tokenizer,
randn weights) and test_qwen3vl_model (the `pair` fixture: unit-scale weights, ByteTokenizer).
"""
from __future__ import annotations

import json
import os
import types

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "Qwen3VLForConditionalGeneration"):
    pytest.skip("this transformers has no Qwen3-VL", allow_module_level=True)

from engine_fixtures import tiny  # noqa: E402
from test_qwen3vl_model import (IMAGE, INSTRUCTION, STATE, VEND, VSTART, frames, hf_inputs,  # noqa: E402,F401
                                hf_prompt, pair, tok)
from test_weights_qwen3vl import hf_model, train_tokenizer, write_tokenizer  # noqa: E402
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil  # noqa: E402

from oxygen_ros.cli import main  # noqa: E402
from oxygen_ros.engine.observation.observation import ObservationError  # noqa: E402
from oxygen_ros.engine.registry import load_model  # noqa: E402

PROMPT = "pick up the red cup"
NEW_TOKENS = 8
# test_weights_qwen3vl's vision tower has 4-pixel patches: frames of 16 x 16 to 32 x 32 pixels
PREPROCESSOR = {"patch_size": 4, "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5] * 3,
                "image_std": [0.5] * 3, "size": {"shortest_edge": 16 * 16, "longest_edge": 32 * 32}}


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """A plain Qwen3-VL checkpoint directory as transformers writes it (config.json,
    model.safetensors) with a tokenizer and preprocessor_config.json, and the reference."""
    tk = train_tokenizer()
    hf = hf_model(tk)
    d = tmp_path_factory.mktemp("plain_qwen3vl") / "ckpt"
    hf.save_pretrained(str(d))
    write_tokenizer(d, tk)
    (d / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR))
    return d, hf


def reference_ids(d, chat: bool) -> list[int]:
    """The prompt's ids from transformers' own tokenizer of the directory (its chat template)."""
    ref_tok = transformers.AutoTokenizer.from_pretrained(str(d))
    if not chat:
        return ref_tok.encode(PROMPT, add_special_tokens=False)
    ids = ref_tok.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True,
                                      tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


# -- 1. a plain Qwen3-VL checkpoint, language only ---------------------------------------------
@pytest.mark.parametrize("chat", [False, True])
def test_oxygen_generate_on_a_plain_qwen3vl_checkpoint_matches_transformers(plain, capsys, chat):
    d, hf = plain
    args = ["generate", "--model", "qwen3vl", "--checkpoint", str(d), "--prompt", PROMPT,
            "--max-new-tokens", str(NEW_TOKENS), "--json"] + (["--chat"] if chat else [])
    assert main(args) == 0
    ours = json.loads(capsys.readouterr().out)["token_ids"]

    ids = torch.tensor([reference_ids(d, chat)])
    eos = json.loads((d / "generation_config.json").read_text())["eos_token_id"]
    with torch.no_grad():
        out = hf.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                          do_sample=False, eos_token_id=eos, pad_token_id=eos[-1], output_logits=True,
                          return_dict_in_generate=True)
    ref = out.sequences[0, ids.shape[1]:].tolist()
    if ref and ref[-1] in eos:
        ref = ref[:-1]                   # ours stops before EOS and does not return it
    top2 = torch.stack(out.logits)[:, 0].topk(2, dim=-1).values
    print(f"chat={chat}: ours {ours}, transformers {ref}")
    assert (top2[:, 0] - top2[:, 1]).min() > 1e-2       # greedy is not decided by rounding
    assert ours == ref and len(set(ref)) > 2


def test_a_language_only_model_says_so_when_asked_for_actions(plain):
    from oxygen_ros.engine.bench.baselines import IsolatedRunner
    from oxygen_ros.engine.scheduler import OxygenEngine

    d, _ = plain
    model, tok = load_model("qwen3vl", checkpoint=str(d))
    assert model.expert is None and model.cfg.expert is None
    with torch.no_grad():
        prefix = model.prefix_from_ids([], tok.encode(PROMPT))
        pool = model.new_pool(1, prefix.shape[1] + 4)
        model.prefill(prefix, pool, 0)
    assert torch.equal(prefix.state, torch.zeros(1, 0))
    with pytest.raises(ValueError, match="without an action head: language only"):
        model.sample_actions(pool, 0, prefix.shape[1], torch.zeros(4, 7))
    with pytest.raises(ValueError, match="no action head"):
        model.set_action_schedule(horizon=4)
    for engine in (OxygenEngine, IsolatedRunner):
        with pytest.raises(ValueError, match="no action head.*greedy_generate"):
            engine(model, tok)
    # the profile that drives a robot refuses the head-less checkpoint, naming the one that loads it
    with pytest.raises(ValueError, match="without an action head.*qwen3vl profile loads"):
        load_model("xr0", checkpoint=str(d))


# -- 2. a prompt of token ids with image placeholders ----------------------------------------
def test_prefix_from_ids_expands_image_pads_as_transformers_processor_does(plain):
    """A chat template's prompt (one <|image_pad|> per image between vision_start and
    vision_end) and two frames: our ids are those of the text with each pad replaced by
    transformers' Qwen3VLProcessor.replace_image_token (its expansion rule), and the prefill's
    logits are the reference's forward on them with its image processor's pixels."""
    d, hf = plain
    model, tok = load_model("qwen3vl", checkpoint=str(d))
    rng = np.random.default_rng(0)
    imgs = [rng.integers(0, 256, (24, 24, 3), dtype=np.uint8), rng.integers(0, 256, (32, 16, 3), dtype=np.uint8)]
    text = tok.render_chat([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "left"},
                                                         {"type": "image"}, {"type": "text", "text": PROMPT}]}])
    processor = Qwen2VLImageProcessorPil(**PREPROCESSOR)
    pixels = processor(imgs, return_tensors="pt")
    stand_in = types.SimpleNamespace(image_processor=processor, image_token="<|image_pad|>")
    first, *rest = text.split("<|image_pad|>")
    expanded = first + "".join(transformers.Qwen3VLProcessor.replace_image_token(stand_in, pixels, image_idx=i) + piece
                               for i, piece in enumerate(rest))
    ref_ids = torch.tensor([transformers.AutoTokenizer.from_pretrained(str(d)).encode(expanded,
                                                                                      add_special_tokens=False)])
    pad = tok.special_ids["image_pad"]
    with torch.no_grad():
        prefix = model.prefix_from_ids(imgs, tok.encode(text))
        pool = model.new_pool(1, prefix.shape[1])
        mine = model.backbone.logits(model.prefill(prefix, pool, 0)[0])
        ref = hf(input_ids=ref_ids, attention_mask=torch.ones_like(ref_ids), mm_token_type_ids=(ref_ids == pad).int(),
                 **pixels).logits[0]
    assert pixels["image_grid_thw"].tolist() == [[1, 6, 6], [1, 8, 4]]
    assert prefix.ids == ref_ids[0].tolist() and prefix.ids.count(pad) == 9 + 8
    diff = (mine - ref).abs().max().item()
    print(f"prefix logits max |diff| {diff:.2e} (values up to {ref.abs().max().item():.1f})")
    assert diff <= 1e-5 * ref.abs().max().item()


def assert_same_prefill(model, a, b):
    """Two Prefixes are the same tensors and prefill the same K/V and hidden states."""
    assert a.ids == b.ids and a.rope_delta == b.rope_delta
    for name in ("embeds", "positions", "visual_mask", "state"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert len(a.deepstack) == len(b.deepstack) and all(torch.equal(x, y) for x, y in zip(a.deepstack, b.deepstack))
    pools = [model.new_pool(1, a.shape[1]) for _ in range(2)]
    hidden = [model.prefill(p, pool, 0) for p, pool in zip((a, b), pools)]
    assert torch.equal(hidden[0], hidden[1])
    assert torch.equal(pools[0].k, pools[1].k) and torch.equal(pools[0].v, pools[1].v)
    assert torch.equal(pools[0].offsets, pools[1].offsets)


@pytest.mark.parametrize("kind", ["text", "one", "two"])
def test_prefix_from_ids_prefills_as_the_segments_and_default_paths(pair, tok, kind):
    _, ours = pair
    imgs = frames(kind)
    segments = ["look: "] + [piece for i in range(len(imgs)) for piece in (None, f" view {i}, ")] + [INSTRUCTION]
    one_pad = [VSTART, IMAGE, VEND]
    ids = [t for piece in segments for t in (one_pad if piece is None else tok.encode(piece))]
    with torch.no_grad():
        assert_same_prefill(ours, ours.prefix(imgs, [], STATE, tok, segments), ours.prefix_from_ids(imgs, ids, STATE))
        # the default prompt (ChatML user turn, the frames, the instruction), written as ids
        _, text_ids, ref_ids, _, _ = hf_prompt(tok, kind)
        default = ours.prefix(imgs, text_ids, STATE, tok)
        assert default.ids == ref_ids[0].tolist()
        collapsed = [t for i, t in enumerate(default.ids) if t != IMAGE or default.ids[i - 1] == VSTART]
        assert collapsed.count(IMAGE) == len(imgs)
        assert_same_prefill(ours, default, ours.prefix_from_ids(imgs, collapsed, STATE))


def test_prefix_from_ids_errors(pair, tok):
    _, ours = pair
    imgs = frames("one")
    with pytest.raises(ObservationError, match="2 image_pad token"):
        ours.prefix_from_ids(imgs, [VSTART, IMAGE, VEND, VSTART, IMAGE, VEND])
    with pytest.raises(ObservationError, match="0 image_pad token"):
        ours.prefix_from_ids(imgs, tok.encode("no image here"))
    with pytest.raises(ValueError, match="does not follow the vision-start token"):
        ours.prefix_from_ids(imgs, [*tok.encode("a"), IMAGE, VEND])


# -- 3. logits for any slots -------------------------------------------------------------------
def qwen3vl_prefixes(pair, tok):
    """Three prefixes with different image layouts, so three different rope_deltas."""
    _, ours = pair
    with torch.no_grad():
        prefixes = [ours.prefix(frames(k), tok.encode(INSTRUCTION), STATE, tok) for k in ("two", "text", "one")]
    assert len({p.rope_delta for p in prefixes}) == 3
    return ours, prefixes


def pi05_prefixes(pair, tok):
    model, byte_tok = tiny()
    return model, [model.text_prefix(byte_tok.encode(t, add_bos=True))
                   for t in ("pick up the cup", "hello", "where is the red block now?")]


@pytest.mark.parametrize("build", [qwen3vl_prefixes, pi05_prefixes], ids=["qwen3vl", "pi05"])
def test_decode_logits_for_any_slots(pair, tok, build):
    model, prefixes = build(pair, tok)
    lengths = torch.tensor([p.shape[1] for p in prefixes])
    ids = torch.tensor([65, 66, 67])
    max_len = int(lengths.max()) + 2

    def filled_pool(which):
        pool = model.new_pool(3, max_len)
        for slot, i in enumerate(which):
            model.prefill(prefixes[i], pool, slot)
        return pool

    with torch.no_grad():
        pool = filled_pool([0, 1, 2])
        tokens = model.decode(ids, pool, lengths)
        logits = model.decode_logits(ids, pool, lengths)
        assert logits.shape == (3, model.cfg.backbone.vocab_size)
        assert torch.equal(logits.argmax(dim=-1), tokens)
        both = model.decode_logits(ids[[2, 0]], pool, lengths[[2, 0]], slots=[2, 0])
        alone = torch.cat([model.decode_logits(ids[[s]], pool, lengths[[s]], slots=[s]) for s in (2, 0)])
        # prefix 2 alone in slot 0 of a fresh pool, decoded by the engine's path
        fresh = filled_pool([2])
        only = model.decode_logits(ids[[2]], fresh, lengths[[2]])
        # the staging slot (index capacity) is a pool slot too
        staged = filled_pool([0, 1, 1, 2])
        staging = model.decode_logits(ids[[2]], staged, lengths[[2]], slots=[3])
    torch.testing.assert_close(both, alone, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(both, logits[[2, 0]], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(both[:1], only, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(staging, only, rtol=1e-5, atol=1e-5)
    assert (both[0] - both[1]).abs().max() > 1e-2          # the rows differ: a mix-up shows
    for bad in ([0, 0, 1], [0, 1], [0, 1, 4]):
        with pytest.raises(ValueError, match="distinct pool slots"):
            model.decode_logits(ids, pool, lengths, slots=bad)


# -- 4. per-layer hidden states ------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["text", "two"])
def test_layer_hidden_against_transformers_output_hidden_states(pair, tok, kind):
    """prefill(layer_hidden=True) against transformers 5's output_hidden_states, which
    records each layer's output before DeepStack's addition and ends with the normed state:
    ours[0] = its [0]; ours[i] = its [i] + the DeepStack features at the image rows (layers
    DeepStack feeds), for 0 < i < depth; final norm(ours[depth]) = its [depth]."""
    hf, ours = pair
    imgs, text_ids, ids, pixels, grids = hf_prompt(tok, kind)
    hf.model.rope_deltas = None
    with torch.no_grad():
        ref = hf(**hf_inputs(ids, pixels, grids), output_hidden_states=True).hidden_states
        prefix = ours.prefix(imgs, text_ids, STATE, tok)
        pool = ours.new_pool(1, prefix.shape[1] + 4)
        assert pool.hidden is None                    # the XR-0 head reads K/V: the pool keeps none
        hidden, layers = ours.prefill(prefix, pool, 0, layer_hidden=True)
        plain = ours.prefill(prefix, ours.new_pool(1, prefix.shape[1]), 0)
        normed_last = ours.backbone.norm(layers[-1])
    depth = ours.cfg.backbone.depth
    assert torch.equal(hidden, plain) and torch.equal(layers[-1], hidden[0])
    assert layers.shape == (depth + 1, prefix.shape[1], ours.cfg.backbone.width) and len(ref) == depth + 1
    visual = prefix.visual_mask[0]
    want = [ref[0][0]]
    for i in range(1, depth):
        r = ref[i][0].clone()
        if i - 1 < len(prefix.deepstack):
            r[visual] += prefix.deepstack[i - 1]
        want.append(r)
    diffs = [(layers[i] - want[i]).abs().max().item() for i in range(depth)]
    diffs.append((normed_last - ref[depth][0]).abs().max().item())
    print(f"{kind}: per-layer max |diff| {['%.1e' % x for x in diffs]}")
    assert max(diffs) <= 1e-4
    if imgs:
        assert (layers[1] - ref[1][0]).abs().max() > 1e-2    # DeepStack's addition is in ours


def test_layer_hidden_from_a_pool_that_keeps_them_is_a_copy(pair, tok):
    from oxygen_ros.engine.kv_pool import KVPool

    _, ours = pair
    imgs, text_ids, *_ = hf_prompt(tok, "one")
    bb = ours.cfg.backbone
    with torch.no_grad():
        prefix = ours.prefix(imgs, text_ids, STATE, tok)
        n = prefix.shape[1]
        _, fresh = ours.prefill(prefix, ours.new_pool(1, n), 0, layer_hidden=True)
        pool = KVPool(bb.depth, 1, n + 8, bb.num_kv_heads, bb.head_dim, hidden_width=bb.width)
        _, kept = ours.prefill(prefix, pool, 0, layer_hidden=True)
    assert torch.equal(kept, fresh) and torch.equal(pool.hidden[:, :n], fresh)
    pool.hidden.zero_()
    assert torch.equal(kept, fresh)


def test_pi05_layer_hidden_records_every_layer():
    model, byte_tok = tiny()
    prefix = model.text_prefix(byte_tok.encode("pick up the cup", add_bos=True))
    outputs = []
    hooks = [layer.register_forward_hook(lambda m, i, o: outputs.append(o)) for layer in model.backbone.layers]
    try:
        with torch.no_grad():
            hidden, layers = model.prefill(prefix, model.new_pool(1, prefix.shape[1]), 0, layer_hidden=True)
    finally:
        for h in hooks:
            h.remove()
    with torch.no_grad():
        plain = model.prefill(prefix, model.new_pool(1, prefix.shape[1]), 0)
    assert torch.equal(hidden, plain) and torch.equal(layers[0], prefix[0])
    assert all(torch.equal(layers[i + 1], out[0]) for i, out in enumerate(outputs)) and len(outputs) == 3
