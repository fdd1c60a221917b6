"""Qwen3-VL / Xiaomi-Robotics-0 checkpoint directories -> per-part state dicts, the
checkpoint's tokenizer, and `oxygen checkpoint DIR` on them.

The checkpoints are written by transformers itself (a tiny random
Qwen3VLForConditionalGeneration, test-only import) with save_pretrained, sharded and as
one file; the XR-0 one puts the same tensors under `vlm.` beside a random action head
under the checkpoint's own names (`dit.*`, `state_projector.layers.N.*`, ...). The
tokenizer is a byte-level BPE trained here with the `tokenizers` library.
"""
from __future__ import annotations

import io
import json
import os
import shutil

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "Qwen3VLForConditionalGeneration"):
    pytest.skip("this transformers has no Qwen3-VL", allow_module_level=True)

from safetensors.torch import load_file, save_file  # noqa: E402

from oxygen_ros.cli import main  # noqa: E402
from oxygen_ros.engine.layers.decoder import Decoder  # noqa: E402
from oxygen_ros.engine.models.qwen3vl.vision import Qwen3VLVisionEncoder, hf_vision_state_dict_to_ours  # noqa: E402
from oxygen_ros.engine.models.xr0.configuration import XR0HeadConfig  # noqa: E402
from oxygen_ros.engine.models.xr0.head import build_random  # noqa: E402
from oxygen_ros.engine.text.tokenizer import TextStream  # noqa: E402
from oxygen_ros.engine.state_checks import WeightMismatchError  # noqa: E402
from oxygen_ros.engine.models.qwen3vl.checkpoint import (  # noqa: E402
    inspect_qwen3vl_checkpoint, read_qwen3vl_checkpoint, text_state_dict)
from oxygen_ros.engine.models.qwen3vl.tokenizer import Qwen3VLTokenizer  # noqa: E402
from oxygen_ros.engine.models.xr0.checkpoint import read_checkpoint as read_xr0_checkpoint  # noqa: E402

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
            "<|image_pad|>", "<|video_pad|>"]
SENTENCES = ["pick up the red cup and put it in the café", "über die Straße, ü ö ä", "日本の ロボット 日本",
             "hello world, the robot moves the arm", "what have you done? I picked up the cup.",
             "naïve façade 東京 ✓ 🤖"] * 4
CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}"
          "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
          "{% if c['type'] == 'image' %}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
          "{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}{{ '<|im_end|>\\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


# -- fixtures ---------------------------------------------------------------------------
def train_tokenizer():
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(SENTENCES, trainers.BpeTrainer(
        vocab_size=340, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tk.add_tokens([AddedToken("<think>", special=False, normalized=False)])
    return tk


def write_tokenizer(d, tk):
    tk.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<|im_end|>", "bos_token": None, "pad_token": "<|endoftext|>", "chat_template": CHATML}))
    ids = {t: tk.token_to_id(t) for t in SPECIALS}
    (d / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]], "pad_token_id": ids["<|endoftext|>"]}))


def hf_config(tk, tie=True):
    return transformers.Qwen3VLConfig(
        text_config=dict(vocab_size=400, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                          "mrope_section": [4, 2, 2], "mrope_interleaved": True}),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=4,
                           spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64,
                           num_position_embeddings=16, deepstack_visual_indexes=[0, 1]),
        image_token_id=tk.token_to_id("<|image_pad|>"), video_token_id=tk.token_to_id("<|video_pad|>"),
        vision_start_token_id=tk.token_to_id("<|vision_start|>"),
        vision_end_token_id=tk.token_to_id("<|vision_end|>"), tie_word_embeddings=tie)


@torch.no_grad()
def hf_model(tk, tie=True, seed=0):
    torch.manual_seed(seed)
    model = transformers.Qwen3VLForConditionalGeneration._from_config(hf_config(tk, tie))
    for p in model.parameters():        # every tensor distinct, so a mix-up shows
        p.copy_(torch.randn_like(p))
    return model.eval()


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    root = tmp_path_factory.mktemp("qwen3vl")
    tk = train_tokenizer()
    model = hf_model(tk)
    dirs = {}
    for name, shard in (("sharded", "200KB"), ("single", "50GB")):
        d = root / name
        model.save_pretrained(str(d), max_shard_size=shard)
        dirs[name] = d
    write_tokenizer(dirs["sharded"], tk)
    untied = hf_model(tk, tie=False, seed=1)
    untied.save_pretrained(str(root / "untied"))
    dirs["untied"] = root / "untied"
    return {"tk": tk, "model": model, "sd": model.state_dict(), "untied_sd": untied.state_dict(),
            "dirs": dirs, "root": root}


def copy_dir(src, dst):
    shutil.copytree(src, dst)
    return dst


def assert_same(got: dict, want: dict):
    assert sorted(got) == sorted(want)
    bad = [k for k in want if got[k].dtype != want[k].dtype or not torch.equal(got[k], want[k])]
    assert not bad, bad


# -- Qwen3-VL ---------------------------------------------------------------------------
def test_sharded_read_puts_every_tensor_in_its_part_with_equal_values(ckpt):
    d = ckpt["dirs"]["sharded"]
    index = json.loads((d / "model.safetensors.index.json").read_text())
    shards = set(index["weight_map"].values())
    assert len(shards) > 1
    out = io.StringIO()
    ck = read_qwen3vl_checkpoint(d, progress=out)
    assert out.getvalue().count("reading model-") == len(shards)
    assert ck.kind == "qwen3_vl" and ck.head is None and ck.tie_word_embeddings
    assert_same(ck.visual, hf_vision_state_dict_to_ours(ckpt["sd"]))
    assert_same(ck.language, text_state_dict(ckpt["sd"], tie_embeddings=True))
    # every tensor the file holds is consumed (tied: the file has no lm_head.weight)
    assert len(ck.visual) + len(ck.language) == len(index["weight_map"]) and ck.unused == []
    # the comparison is not vacuous: distinct tensors differ
    assert not torch.equal(ck.language["layers.0.self_attn.q_proj.weight"],
                           ck.language["layers.1.self_attn.q_proj.weight"])


def test_parts_load_strictly_into_our_decoder_and_vision_encoder(ckpt):
    ck = read_qwen3vl_checkpoint(ckpt["dirs"]["sharded"], progress=None)
    dec = Decoder(ck.decoder_config())
    dec.load_state_dict(ck.language, strict=True)
    vis = Qwen3VLVisionEncoder(ck.vision_config())
    vis.load_state_dict(ck.visual, strict=True)
    assert dec.cfg.deepstack_layers == 2 and dec.cfg.mrope_section == (4, 2, 2) and dec.cfg.tie_embeddings
    assert torch.equal(dec.embed_tokens.weight, ckpt["sd"]["model.language_model.embed_tokens.weight"])


def test_single_file_with_dtype_cast_and_no_progress_lines(ckpt):
    d = ckpt["dirs"]["single"]
    assert (d / "model.safetensors").is_file() and not (d / "model.safetensors.index.json").exists()
    out = io.StringIO()
    ck = read_qwen3vl_checkpoint(d, dtype="bfloat16", progress=out)
    assert out.getvalue() == ""
    want = {k: v.to(torch.bfloat16) for k, v in hf_vision_state_dict_to_ours(ckpt["sd"]).items()}
    assert_same(ck.visual, want)
    assert all(t.dtype == torch.bfloat16 for t in ck.language.values())


def test_untied_checkpoint_brings_its_lm_head(ckpt):
    ck = read_qwen3vl_checkpoint(ckpt["dirs"]["untied"], progress=None)
    assert not ck.tie_word_embeddings
    assert torch.equal(ck.language["lm_head.weight"], ckpt["untied_sd"]["lm_head.weight"])
    Decoder(ck.decoder_config()).load_state_dict(ck.language, strict=True)


def test_missing_shard_config_or_weights_name_the_file(ckpt, tmp_path):
    d = copy_dir(ckpt["dirs"]["sharded"], tmp_path / "broken")
    (d / "model-00002-of-00005.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model-00002-of-00005.safetensors"):
        read_qwen3vl_checkpoint(d)
    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        read_qwen3vl_checkpoint(bare)
    shutil.copy(d / "config.json", bare / "config.json")
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        read_qwen3vl_checkpoint(bare)


def _rewrite(ckpt, tmp_path, name, edit_tensors=None, edit_config=None):
    d = copy_dir(ckpt["dirs"]["single"], tmp_path / name)
    sd = load_file(str(d / "model.safetensors"))
    if edit_tensors:
        edit_tensors(sd)
    save_file(sd, str(d / "model.safetensors"))
    if edit_config:
        cfg = json.loads((d / "config.json").read_text())
        edit_config(cfg)
        (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_unexpected_text_tensor_is_an_error_but_visual_and_head_extras_are_reported(ckpt, tmp_path):
    def add_bias(sd):
        sd["model.language_model.layers.0.self_attn.q_proj.bias"] = torch.zeros(64)
    with pytest.raises(WeightMismatchError, match=r"q_proj\.bias"):
        read_qwen3vl_checkpoint(_rewrite(ckpt, tmp_path, "bias", add_bias))

    def add_extras(sd):
        sd["model.visual.video_embed.weight"] = torch.zeros(3)
        sd["lm_head.weight"] = sd["model.language_model.embed_tokens.weight"].clone()
        sd["model.mtp.weight"] = torch.zeros(2)
    ck = read_qwen3vl_checkpoint(_rewrite(ckpt, tmp_path, "extras", add_extras))
    assert ck.unused == ["lm_head.weight", "model.mtp.weight", "model.visual.video_embed.weight"]
    assert_same(ck.visual, hf_vision_state_dict_to_ours(ckpt["sd"]))


def test_shape_mismatch_with_the_config_names_the_tensors(ckpt, tmp_path):
    d = _rewrite(ckpt, tmp_path, "shape", edit_config=lambda c: c["text_config"].update(intermediate_size=96))
    with pytest.raises(WeightMismatchError, match=r"shape mismatch.*mlp\.down_proj\.weight"):
        read_qwen3vl_checkpoint(d)


# -- Xiaomi-Robotics-0 -----------------------------------------------------------------------
XR0_DIT = {"hidden_size": 32, "head_dim": 16, "num_hidden_layers": 2, "num_key_value_heads": 2}


def checkpoint_head_name(ours: str) -> str:
    """Our XR0Head name -> modeling_mibot.py's (MLPProjector keeps its Sequential as `layers`)."""
    for module in ("state_projector", "action_projector", "action_output_layer", "t_projector"):
        if ours.startswith(module + "."):
            return f"{module}.layers.{ours[len(module) + 1:]}"
    return ours


@pytest.fixture(scope="module")
def xr0(ckpt):
    d = ckpt["root"] / "xr0"
    d.mkdir()
    vlm = json.loads((ckpt["dirs"]["single"] / "config.json").read_text())
    config = {"architectures": ["MiBoTForActionGeneration"], "vlm_config": vlm, "dit_config": XR0_DIT,
              "action_dim": 7, "action_length": 4, "state_dim": 5}
    (d / "config.json").write_text(json.dumps(config))
    head = build_random(XR0HeadConfig.from_hf_dict(config), 2, 16, 2, seed=3)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn_like(p))
    tensors = {"vlm." + k: v for k, v in load_file(str(ckpt["dirs"]["single"] / "model.safetensors")).items()}
    tensors.update({checkpoint_head_name(k): v.clone() for k, v in head.state_dict().items()})
    assert "state_projector.layers.2.weight" in tensors and "t_projector.layers.0.bias" in tensors
    save_file(tensors, str(d / "model.safetensors"))
    write_tokenizer(d, ckpt["tk"])
    return d, config, head


def test_xr0_head_lands_under_xr0head_names_and_loads_strictly(ckpt, xr0):
    d, config, head = xr0
    ck = read_xr0_checkpoint(d)
    assert ck.kind == "xr0" and ck.unused == []
    assert_same(ck.head, head.state_dict())
    fresh = build_random(ck.head_config(), 2, 16, 2, seed=9)
    fresh.load_state_dict(ck.head, strict=True)
    assert_same(ck.visual, hf_vision_state_dict_to_ours(ckpt["sd"]))
    assert_same(ck.language, text_state_dict(ckpt["sd"]))
    Decoder(ck.decoder_config()).load_state_dict(ck.language, strict=True)


def test_xr0_unexpected_or_missing_head_tensor_is_an_error(xr0, tmp_path):
    d = copy_dir(xr0[0], tmp_path / "xr0")
    sd = load_file(str(d / "model.safetensors"))
    sd["dit.layers.0.attn.extra.weight"] = torch.zeros(2)
    del sd["sink.weight"]
    save_file(sd, str(d / "model.safetensors"))
    with pytest.raises(WeightMismatchError) as e:
        read_xr0_checkpoint(d)
    assert "dit.layers.0.attn.extra.weight" in str(e.value) and "sink.weight" in str(e.value)


# -- tokenizer ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tok(ckpt):
    return Qwen3VLTokenizer.from_dir(ckpt["dirs"]["sharded"])


def test_tokenizer_ids_from_the_checkpoint(ckpt, tok):
    tk = ckpt["tk"]
    name = {t: tk.token_to_id(t) for t in SPECIALS}
    assert tok.bos_id is None
    assert tok.eos_ids == {name["<|im_end|>"], name["<|endoftext|>"]}
    assert tok.special_ids == {"im_start": name["<|im_start|>"], "im_end": name["<|im_end|>"],
                               "endoftext": name["<|endoftext|>"], "vision_start": name["<|vision_start|>"],
                               "vision_end": name["<|vision_end|>"], "image_pad": name["<|image_pad|>"],
                               "video_pad": name["<|video_pad|>"]}
    cfg = json.loads((ckpt["dirs"]["sharded"] / "config.json").read_text())
    assert tok.special_ids["image_pad"] == cfg["image_token_id"]
    assert tok.vocab_size == tk.get_vocab_size(with_added_tokens=True)


@pytest.mark.parametrize("text", ["café ü 日本", "naïve façade 東京 ✓ 🤖 hello", "über die Straße"])
def test_encode_round_trip_and_token_bytes_concatenate_to_decode(ckpt, tok, text):
    tk = ckpt["tk"]
    ids = tok.encode(text)
    assert ids == tk.encode(text, add_special_tokens=False).ids and tok.encode(text, add_bos=True) == ids
    assert len(ids) < len(text.encode("utf-8"))          # merges happened
    assert tok.decode(ids) == text == tk.decode(ids)
    # with control tokens and a non-special added token in the stream
    mixed = [tok.special_ids["im_start"]] + ids + tok.encode("<think>") + [tok.special_ids["im_end"]]
    assert b"".join(tok.token_bytes(i) for i in mixed).decode("utf-8") == tk.decode(mixed, skip_special_tokens=True)
    stream = TextStream(tok)
    deltas = [stream.push(i) for i in mixed] + [stream.close()]
    assert "".join(deltas) == text + "<think>"


def test_a_character_split_over_byte_tokens_streams_whole(tok):
    ids = tok.encode("猫")                    # unseen in training: one token per UTF-8 byte
    assert [tok.token_bytes(i) for i in ids] == [bytes([b]) for b in "猫".encode("utf-8")]
    stream = TextStream(tok)
    assert [stream.push(i) for i in ids] == ["", "", "猫"]


def test_special_tokens_in_text_are_recognised_but_never_added(tok):
    im_start, im_end = tok.special_ids["im_start"], tok.special_ids["im_end"]
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>")
    assert ids[0] == im_start and ids[-1] == im_end and ids.count(im_start) == 1
    assert im_start not in tok.encode("user hi")
    assert tok.token_bytes(im_end) == b"" and tok.token_bytes(10_000) == b""


def test_render_chat_with_the_checkpoints_template(tok):
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "pick up the café cup"}]}]
    text = tok.render_chat(msgs)
    assert text == ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>pick up the café cup"
                    "<|im_end|>\n<|im_start|>assistant\n")
    assert tok.render_chat([{"role": "user", "content": "hi"}], add_generation_prompt=False) == \
        "<|im_start|>user\nhi<|im_end|>\n"
    ids = tok.encode(text)
    assert ids.count(tok.special_ids["image_pad"]) == 1 and ids[-2:] == tok.encode("assistant\n")[-2:]


def test_tokenizer_config_mismatch_and_missing_file_errors(ckpt, tmp_path):
    d = copy_dir(ckpt["dirs"]["sharded"], tmp_path / "tok")
    cfg = json.loads((d / "config.json").read_text())
    cfg["image_token_id"] = cfg["image_token_id"] + 1
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="image_token_id"):
        Qwen3VLTokenizer.from_dir(d)
    (d / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        Qwen3VLTokenizer.from_dir(d)


# -- inspection and the CLI -------------------------------------------------------------------
def test_inspect_counts_from_the_headers(ckpt):
    d = ckpt["dirs"]["sharded"]
    r = inspect_qwen3vl_checkpoint(d)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    assert r["problems"] == [] and r["kind"] == "qwen3_vl" and r["dtype"] == "F32"
    assert r["tensors"] == len(index["weight_map"]) and len(r["files"]) == len(set(index["weight_map"].values()))
    parts = r["parts"]
    assert parts["visual"]["parameters"] + parts["language"]["parameters"] == index["metadata"]["total_parameters"]
    assert parts["visual"]["tensors"] == len(hf_vision_state_dict_to_ours(ckpt["sd"]))
    assert r["decoder_config"]["depth"] == 2 and r["vision_config"]["depth"] == 2
    assert r["tokenizer"]["eos_ids"] == sorted(Qwen3VLTokenizer.from_dir(d).eos_ids)


def test_cli_reports_qwen3vl_parts_and_exits_0(ckpt, xr0, capsys):
    assert main(["checkpoint", str(ckpt["dirs"]["sharded"])]) == 0
    out = capsys.readouterr().out
    assert "qwen3_vl" in out and "parts.visual" in out and "parts.language" in out and "ok:" in out
    assert main(["checkpoint", str(xr0[0]), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["ok"] and r["kind"] == "xr0" and r["parts"]["head"]["tensors"] == len(xr0[2].state_dict())
    assert r["head_config"]["depth"] == 2


def test_cli_on_a_broken_dir_exits_1_naming_the_problem(ckpt, tmp_path, capsys):
    d = copy_dir(ckpt["dirs"]["sharded"], tmp_path / "broken")
    (d / "model-00003-of-00005.safetensors").unlink()
    assert main(["checkpoint", str(d)]) == 1
    captured = capsys.readouterr()
    assert "NOT USABLE" in captured.out and "model-00003-of-00005.safetensors" in captured.err
    # the single-file dir has no tokenizer: required for prompts, so not usable either
    assert main(["checkpoint", str(ckpt["dirs"]["single"])]) == 1
    assert "tokenizer.json" in capsys.readouterr().err


# -- the xr0 profile end to end --------------------------------------------------------------
def test_xr0_profile_loads_the_checkpoint_and_runs_exact_oxygen_frames(xr0):
    """load_model("xr0", checkpoint=DIR): the checkpoint's structure, tokenizer and weights
    (the head equal to what was saved); OxyGen frames equal isolated execution on it."""
    import numpy as np

    from oxygen_ros.engine.bench.baselines import IsolatedRunner
    from oxygen_ros.engine.observation.observation import Observation
    from oxygen_ros.engine.requests import LanguageRequest
    from oxygen_ros.engine.scheduler import EngineConfig, OxygenEngine
    from oxygen_ros.engine.registry import load_model

    d, config, head = xr0
    # the checkpoint's image processing (4-pixel patches here): frames of up to 64 x 64 pixels
    (d / "preprocessor_config.json").write_text(json.dumps(
        {"patch_size": 4, "temporal_patch_size": 2, "merge_size": 2, "size": {"shortest_edge": 32 * 32,
                                                                               "longest_edge": 64 * 64}}))
    model, tok = load_model("xr0", checkpoint=str(d))
    assert model.cfg.vision.images.max_pixels == 64 * 64
    assert model.cfg.expert.horizon == 4 and model.cfg.expert.action_dim == 7
    assert model.cfg.special.image_pad == tok.special_ids["image_pad"]
    assert_same(model.expert.state_dict(), head.state_dict())
    rng = np.random.default_rng(0)
    obs = [Observation({"base_0_rgb": rng.integers(0, 256, (64 + 32 * f, 64, 3), dtype=np.uint8)},
                       rng.uniform(-1, 1, 5), "pick up the cube") for f in range(3)]
    engine = OxygenEngine(model, tok, EngineConfig(max_requests=3, max_new_tokens=8, max_len=600))
    iso = IsolatedRunner(model, tok, EngineConfig(max_new_tokens=8, max_len=600))
    texts = {}
    for f, o in enumerate(obs + obs[-1:] * 8):
        if f < 3:
            texts[engine.submit(LanguageRequest("what now?", max_new_tokens=6, ignore_eos=True))] = f
        noise = torch.randn(4, 7, generator=torch.Generator().manual_seed(f))
        res = engine.step(o, noise)
        assert np.abs(iso.action(o, noise).numpy() - res.actions).max() <= 1e-5
        for dlt in res.deltas:
            if dlt.done:
                ref = []
                iso.language(obs[texts[dlt.request_id]], LanguageRequest("what now?", max_new_tokens=6,
                                                                         ignore_eos=True), deltas=ref)
                assert ref[-1].full_text == dlt.full_text
                texts.pop(dlt.request_id)
    assert not texts


def test_xr0_profile_needs_a_checkpoint():
    from oxygen_ros.engine.registry import load_model

    with pytest.raises(ValueError, match="xr0 profile reads a Xiaomi-Robotics-0 checkpoint"):
        load_model("xr0")
