"""StarVLA QwenPI_v3 policy I/O (models/starvla/processor.py, state_text.py) and checkpoint reading (models/starvla/checkpoint.py).

The bin numbers, prompt strings and unnormalised actions below are worked out by hand
from StarVLA's rules (see the two modules' docstrings), not by calling the code under test.
Bins: 256 left edges -1 + k/128; bin(x) = k such that -1 + k/128 <= x < -1 + (k+1)/128,
i.e. floor((x + 1) * 128), with 1.0 (and anything above) in bin 255 and anything below -1
in bin -1 (StarVLA's digitize; clip=True / clip_state=True clips to [-1, 1] first: bin 0).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from oxygen_ros.engine.policy_io.errors import PolicyIOError
from oxygen_ros.engine.models.starvla.processor import load_starvla_policy_io
from oxygen_ros.engine.models.starvla.state_text import BIN_EDGES, state_bins, with_state
from oxygen_ros.engine.models.starvla.checkpoint import (StarVLACheckpointError, find_weights,
                                               read_starvla_checkpoint, split_state_dict)

# -- a run directory in StarVLA's layout ---------------------------------------------------
STATS = {
    "oxe_bridge": {
        "action": {
            # 7 dims: x y z roll pitch yaw gripper (gripper mask False, as StarVLA writes it)
            "mean": [0.0] * 7, "std": [1.0] * 7,
            "min": [-2.0, -1.0, 0.0, -1.0, -1.0, -1.0, 0.0], "max": [2.0, 1.0, 4.0, 1.0, 1.0, 1.0, 1.0],
            "q01": [-1.0, -0.5, 0.0, -0.2, -0.2, -0.2, 0.0],
            "q99": [1.0, 0.5, 2.0, 0.2, 0.2, 0.2, 1.0],
            "mask": [True, True, True, True, True, True, False],
        },
        "state": {
            "mean": [0.0] * 4, "std": [1.0, 2.0, 0.0, 1.0],
            "min": [-1.0, -4.0, 5.0, 0.0], "max": [3.0, 4.0, 5.0, 1.0],
            "q01": [0.0, -2.0, 5.0, 0.0], "q99": [1.0, 2.0, 5.0, 1.0],
        },
        "num_transitions": 10, "num_trajectories": 2,
    },
    "oxe_rt1": {
        "action": {"q01": [-1.0] * 7, "q99": [1.0] * 7, "min": [-1.0] * 7, "max": [1.0] * 7,
                   "mean": [0.0] * 7, "std": [1.0] * 7, "mask": [True] * 6 + [False]},
        "proprio": {"q01": [0.0] * 4, "q99": [10.0] * 4},
    },
}
CONFIG_YAML = """\
run_id: tiny_pi_v3
framework:
  name: QwenPI_v3
  qwenvl:
    base_vlm: ./playground/Pretrained_models/Qwen3-VL-4B-Instruct
  action_model:
    action_dim: 7
    state_dim: 7
    action_horizon: 4
datasets:
  vla_data:
    data_mix: bridge_rt_1
    obs: ["image_0"]
    image_size: [224, 224]
"""


def write_run(root, stats=STATS, config=CONFIG_YAML, weights=None, step=50000):
    (root / "checkpoints").mkdir(parents=True, exist_ok=True)
    if config is not None:
        (root / "config.yaml").write_text(config)
    if stats is not None:
        (root / "dataset_statistics.json").write_text(json.dumps(stats))
    pt = root / "checkpoints" / f"steps_{step}_pytorch_model.pt"
    if weights is not None:
        torch.save(weights, pt)
    return pt


@pytest.fixture
def run(tmp_path):
    write_run(tmp_path)
    return tmp_path


# -- state bins ---------------------------------------------------------------------------
def test_bin_edges_are_starvlas_256_left_edges():
    assert BIN_EDGES.shape == (256,)
    assert BIN_EDGES[0] == -1.0 and BIN_EDGES[128] == 0.0 and BIN_EDGES[255] == 1 - 1 / 128


@pytest.mark.parametrize("x, want", [
    (-1.0, 0),                  # the first edge belongs to bin 0
    (-1.0 + 1e-9, 0),           # just inside
    (-1.0 + 1 / 128, 1),        # the second edge opens bin 1
    (-0.5, 64),                 # edge -1 + 64/128
    (0.0, 128),                 # edge -1 + 128/128: an edge is in the bin above it
    (0.1, 140),                 # 1.1 * 128 = 140.8
    (0.8, 230),                 # 1.8 * 128 = 230.4
    (1 - 1 / 128 - 1e-9, 254),  # just below the last edge
    (1 - 1 / 128, 255),         # the last edge
    (1.0 - 1e-9, 255),          # just inside
    (1.0, 255),                 # nothing closes the last bin
    (2.0, 255),                 # above: bin 255 either way
    (-1.5, -1),                 # below: digitize gives 0 -> bin -1, as StarVLA writes it
])
def test_state_bins_at_and_around_the_edges(x, want):
    assert state_bins([x]).tolist() == [want]


def test_below_minus_one_is_bin_minus_one_by_default_and_0_with_the_clip():
    # np.digitize(-1.5, edges) = 0, minus 1 -> -1; above 1 stays 255
    assert state_bins([-1.5, 2.0]).tolist() == [-1, 255]
    assert state_bins([-1.5, 2.0], clip=False).tolist() == [-1, 255]
    assert state_bins([-1.5, 2.0], clip=True).tolist() == [0, 255]


def test_default_bins_are_starvlas_own_digitize():
    x = np.array([-1.5, -1.0, 0.0, 0.999, 1.0, 1.5])
    starvla = np.digitize(x, np.linspace(-1, 1, 257)[:-1]) - 1      # QwenPI_v3.py's expression
    assert starvla.tolist() == [-1, 0, 128, 255, 255, 255]
    assert state_bins(x).tolist() == starvla.tolist()
    assert state_bins(x, clip=True).tolist() == [0, 0, 128, 255, 255, 255]


@pytest.mark.parametrize("bad", [[0.1, float("nan")], [float("inf")], [], [[0.1, 0.2], [0.3, 0.4]], ["a"]])
def test_nan_inf_and_bad_shapes_are_errors(bad):
    with pytest.raises(PolicyIOError):
        state_bins(bad)


def test_state_normalisation_q99_binary_min_max_mean_std(run):
    io = load_starvla_policy_io(run, "oxe_bridge")
    raw = [0.25, 1.0, 5.0, 0.7]
    # q99: 2 (0.25 - 0) / 1 - 1 = -0.5 -> 64; 2 (1 + 2) / 4 - 1 = 0.5 -> 1.5*128 = 192;
    # q01 == q99 = 5 -> the raw 5.0 is kept, then clamped to 1 -> 255; 2 * 0.7 - 1 = 0.4 -> 179.2 -> 179
    assert io.normalize_state(raw).tolist() == [-0.5, 0.5, 1.0, pytest.approx(0.4)]
    assert io.state_text(raw) == "64 192 255 179"
    # the example's [1, S] shape: S1 bins state[0]
    assert io.state_text(np.array([raw])) == "64 192 255 179"

    io = load_starvla_policy_io(run, "oxe_bridge", state_modes=["q99", "q99", "q99", "binary"])
    # binary: 0.7 > 0.5 -> 1.0 -> 255; 0.3 -> 0.0 -> 128
    assert io.state_text(raw) == "64 192 255 255"
    assert io.state_text([0.25, 1.0, 5.0, 0.3]) == "64 192 255 128"

    io = load_starvla_policy_io(run, "oxe_bridge", state_modes="min_max")
    # 2 (0.25 + 1) / 4 - 1 = -0.375 -> 0.625*128 = 80; 2 (1 + 4) / 8 - 1 = 0.25 -> 160;
    # min == max -> 0 -> 128; 2 * 0.7 - 1 = 0.4 -> 179
    assert io.state_text(raw) == "80 160 128 179"
    # min_max is not clamped: 2 (-3 + 1) / 4 - 1 = -2 -> bin -1 (StarVLA's), 0 clipped; 2 * 0 - 1 = -1 -> 0
    assert io.clip_state is False
    assert io.state_text([-3.0, 0.0, 5.0, 0.0]) == "-1 128 128 0"
    clip_io = load_starvla_policy_io(run, "oxe_bridge", state_modes="min_max", clip_state=True)
    assert clip_io.state_text([-3.0, 0.0, 5.0, 0.0]) == "0 128 128 0"

    io = load_starvla_policy_io(run, "oxe_bridge", state_modes="mean_std")
    # 0.25 / 1 -> 160; 1.0 / 2 = 0.5 -> 192; std 0 -> raw 5 -> above 1: 255; 0.7 -> 217.6 -> 217
    assert io.state_text(raw) == "160 192 255 217"

    io = load_starvla_policy_io(run, "oxe_bridge", state_modes="none")
    assert io.state_text([-1.0, 0.0, 1.0]) == "0 128 255"


def test_state_errors_name_the_problem(run):
    io = load_starvla_policy_io(run, "oxe_bridge")
    with pytest.raises(PolicyIOError, match="NaN"):
        io.state_text([0.1, float("nan"), 0.0, 0.0])
    with pytest.raises(PolicyIOError, match="has 4"):
        io.state_text([0.1, 0.2])                          # 2 dims against 4-dim stats
    with pytest.raises(PolicyIOError, match="state_modes names 2"):
        load_starvla_policy_io(run, "oxe_bridge", state_modes=["q99", "binary"]).state_text([0.1] * 4)
    with pytest.raises(PolicyIOError, match="not one of"):
        load_starvla_policy_io(run, "oxe_bridge", state_modes="zscore")
    # "proprio" (older files) is read as the state statistics: 2 * 5 / 10 - 1 = 0 -> 128
    assert load_starvla_policy_io(run, "oxe_rt1").state_text([5.0, 0.0, 10.0, 20.0]) == "128 0 255 255"
    stats = {"k": {"action": STATS["oxe_rt1"]["action"]}}
    (run / "dataset_statistics.json").write_text(json.dumps(stats))
    with pytest.raises(PolicyIOError, match="no 'state'"):
        load_starvla_policy_io(run).state_text([0.1])


# -- prompt -------------------------------------------------------------------------------
def test_exact_prompt_strings(run):
    io = load_starvla_policy_io(run, "oxe_bridge")
    raw = [0.25, 1.0, 5.0, 0.7]
    assert with_state("pick", "1 2") == "pick [STATE] 1 2 [ACTION]"
    assert io.instruction_text("put the spoon on the towel", raw) == \
        "put the spoon on the towel [STATE] 64 192 255 179 [ACTION]"
    assert io.prompt_text("put the spoon on the towel", raw) == (
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>"
        "put the spoon on the towel [STATE] 64 192 255 179 [ACTION]<|im_end|>\n<|im_start|>assistant\n")
    # no state: the instruction as it is (StarVLA's predict_action without "state"); two views
    assert io.prompt_text("open the drawer", n_images=2) == (
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|><|vision_start|><|image_pad|>"
        "<|vision_end|>open the drawer<|im_end|>\n<|im_start|>assistant\n")
    assert io.prompt_messages("open the drawer", n_images=2) == [{"role": "user", "content": [
        {"type": "image"}, {"type": "image"}, {"type": "text", "text": "open the drawer"}]}]
    with pytest.raises(PolicyIOError, match="string"):
        io.prompt_text(None)


def test_cot_prompt_wraps_the_instruction_with_its_state(tmp_path):
    write_run(tmp_path, config=CONFIG_YAML + '    CoT_prompt: "Your task is {instruction}. Go."\n')
    io = load_starvla_policy_io(tmp_path, "oxe_bridge", state_modes="none")
    assert io.instruction_text("stack", [0.0]) == "Your task is stack [STATE] 128 [ACTION]. Go."


# -- actions ------------------------------------------------------------------------------
def test_unnormalisation_by_hand(run):
    io = load_starvla_policy_io(run, "oxe_bridge")
    assert io.horizon == 4 and io.action_dim == 7 and io.binary_dims == (6,)
    chunk = np.array([
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.49],
        [1.0, -1.0, 0.5, 0.5, -0.5, 1.0, 0.5],
        [1.5, -2.0, -1.0, 0.0, 0.0, 0.0, 0.9],   # outside [-1, 1]: clipped first
        [-0.5, 0.5, 1.0, -1.0, 1.0, -1.0, -3.0],
    ])
    # 0.5 (x + 1) (q99 - q01) + q01 per dim, q01/q99 = (-1, 1) (-0.5, 0.5) (0, 2) (-0.2, 0.2) x3;
    # the gripper (mask False) is 0 below 0.5, else 1
    want = np.array([
        [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0],
        [1.0, -0.5, 1.5, 0.1, -0.1, 0.2, 1.0],
        [1.0, -0.5, 0.0, 0.0, 0.0, 0.0, 1.0],
        [-0.5, 0.25, 2.0, -0.2, 0.2, -0.2, 0.0],
    ])
    np.testing.assert_allclose(io.actions(chunk), want, atol=1e-12)
    np.testing.assert_allclose(io.actions(torch.tensor(chunk[None])), want, atol=1e-6)   # [1, H, D] tensor

    # the server path: no clip -> 0.5 * 2.5 * 2 - 1 = 1.5 and 0.5 * -1 * 1 - 0.5 = -1.0
    unclipped = load_starvla_policy_io(run, "oxe_bridge", clip_actions=False).actions(chunk)
    assert unclipped[2, 0] == pytest.approx(1.5) and unclipped[2, 1] == pytest.approx(-1.0)
    # min/max instead of q01/q99: 0.5 * 2 * 4 - 2 = 2 for x = 1 on dim 0
    assert load_starvla_policy_io(run, "oxe_bridge", action_norm="min_max").actions(chunk)[1, 0] == pytest.approx(2.0)
    # delta dims add the raw state: 1.5 + 5.0 on dim 2 of row 1
    d = load_starvla_policy_io(run, "oxe_bridge", delta_dims=[2])
    assert d.actions(chunk, [0.0, 0.0, 5.0, 0.0])[1, 2] == pytest.approx(6.5)
    with pytest.raises(PolicyIOError, match="raw state"):
        d.actions(chunk)


def test_bad_chunks_are_errors(run):
    io = load_starvla_policy_io(run, "oxe_bridge")
    for bad in (np.zeros((4, 6)), np.zeros((16, 7)), np.zeros((4, 7), dtype=np.int64), np.full((4, 7), np.nan)):
        with pytest.raises(PolicyIOError):
            io.actions(bad)


# -- files ----------------------------------------------------------------------------------
def test_keys_config_and_summary(run):
    with pytest.raises(PolicyIOError, match="several keys"):
        load_starvla_policy_io(run)
    with pytest.raises(PolicyIOError, match="oxe_widowx"):
        load_starvla_policy_io(run, "oxe_widowx")
    pt = run / "checkpoints" / "steps_50000_pytorch_model.pt"
    pt.write_bytes(b"")                 # policy I/O reads the files beside it, not the weights
    io = load_starvla_policy_io(pt, "oxe_rt1")
    assert io.run_dir == run and io.config_file == run / "config.yaml"
    s = io.summary()
    assert s["framework"] == "QwenPI_v3" and s["keys"] == ["oxe_bridge", "oxe_rt1"]
    assert s["n_images"] == 1 and s["train_image_size"] == [224, 224] and s["resize_mode"] == "torch"
    assert "unnorm_key: oxe_rt1" in io.describe()


def test_missing_and_invalid_files_name_them(tmp_path):
    with pytest.raises(PolicyIOError, match="does not exist"):
        load_starvla_policy_io(tmp_path / "nope")
    write_run(tmp_path, stats=None)
    with pytest.raises(PolicyIOError, match="dataset_statistics.json"):
        load_starvla_policy_io(tmp_path)
    (tmp_path / "dataset_statistics.json").write_text("{not json")
    with pytest.raises(PolicyIOError, match="cannot read"):
        load_starvla_policy_io(tmp_path)
    (tmp_path / "dataset_statistics.json").write_text(json.dumps({"k": {"action": {"mean": [0.0]}}}))
    with pytest.raises(PolicyIOError, match="lacks"):
        load_starvla_policy_io(tmp_path)
    (tmp_path / "dataset_statistics.json").write_text(json.dumps({"k": {"action": {"q01": [0.0, 0.0], "q99": [1.0]}}}))
    with pytest.raises(PolicyIOError, match="expected 2"):
        load_starvla_policy_io(tmp_path)
    (tmp_path / "dataset_statistics.json").write_text(json.dumps({"k": {"num_transitions": 3}}))
    with pytest.raises(PolicyIOError, match="no key with 'action'"):
        load_starvla_policy_io(tmp_path)
    write_run(tmp_path, config=CONFIG_YAML.replace("action_dim: 7", "action_dim: 8"))
    with pytest.raises(PolicyIOError, match="action_dim is 8"):
        load_starvla_policy_io(tmp_path, "oxe_bridge")


def test_images_take_the_configs_resize_then_qwen3vl(run):
    io = load_starvla_policy_io(run, "oxe_bridge")
    frame = np.random.default_rng(0).integers(0, 256, (96, 128, 3), dtype=np.uint8)
    pixels, grid = io.images([frame])
    # resized to 224 x 224, then smart_resize up to 65536 pixels: 256 x 256 = 16 x 16 patches of 16
    assert grid.tolist() == [[1, 16, 16]] and pixels.shape == (256, 3 * 2 * 16 * 16)
    with pytest.raises(PolicyIOError, match="1 view"):
        io.images([frame, frame])


# -- checkpoints ----------------------------------------------------------------------------
class _Interface(torch.nn.Module):      # StarVLA's _QWen3_VL_Interface keeps the HF model as .model
    def __init__(self, hf):
        super().__init__()
        self.model = hf


class _Head(torch.nn.Module):           # a few LayerwiseFlowmatchingActionHead names
    def __init__(self, w=8):
        super().__init__()
        self.action_encoder = torch.nn.ModuleDict({"layer1": torch.nn.Linear(7, w)})
        self.action_decoder = torch.nn.ModuleDict({"layer2": torch.nn.Linear(w, 7)})
        self.future_tokens = torch.nn.Embedding(32, w)
        self.position_embedding = torch.nn.Embedding(16, w)


class _Framework(torch.nn.Module):      # Qwen_PI_v3's attribute names -> the saved names
    def __init__(self, hf, width):
        super().__init__()
        self.qwen_vl_interface = _Interface(hf)
        self.action_model = _Head()
        self.project_layers = torch.nn.ModuleList(
            [torch.nn.Sequential(torch.nn.LayerNorm(width), torch.nn.Linear(width, 8)) for _ in range(2)])


def tiny_qwen3vl():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Qwen3VLConfig(
        text_config=dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                          "mrope_section": [2, 1, 1], "mrope_interleaved": True}),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, patch_size=4,
                           spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=32,
                           num_position_embeddings=16, deepstack_visual_indexes=[0]),
        image_token_id=290, video_token_id=291, vision_start_token_id=292, vision_end_token_id=293,
        tie_word_embeddings=True)
    torch.manual_seed(0)
    return transformers.Qwen3VLForConditionalGeneration._from_config(cfg), cfg


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    hf, cfg = tiny_qwen3vl()
    fw = _Framework(hf, 32)
    with torch.no_grad():
        for p in fw.parameters():
            p.copy_(torch.randn_like(p))
    sd = fw.state_dict()
    sd["extra_buffer"] = torch.zeros(3)
    root = tmp_path_factory.mktemp("starvla_run")
    pt = write_run(root, weights=sd)
    (root / "config.json").write_text(json.dumps({"framework": {"name": "NotTheYaml"}}))
    base = root / "base_vlm"
    base.mkdir()
    (base / "config.json").write_text(json.dumps(cfg.to_dict()))
    return {"root": root, "pt": pt, "sd": sd, "hf": hf, "fw": fw, "base": base}


def test_checkpoint_splits_into_backbone_head_projectors(saved):
    ck = read_starvla_checkpoint(saved["root"])
    assert ck.path == saved["pt"] and ck.run_dir == saved["root"]
    assert ck.config_file.name == "config.yaml" and ck.framework == "QwenPI_v3"   # the yaml wins
    assert ck.stats_file.name == "dataset_statistics.json" and sorted(ck.stats) == ["oxe_bridge", "oxe_rt1"]
    hf_sd = saved["hf"].state_dict()
    assert set(ck.backbone) == set(hf_sd)       # exactly transformers' own names
    assert any(k.startswith("model.visual.") for k in ck.backbone)
    assert "model.language_model.embed_tokens.weight" in ck.backbone and "lm_head.weight" in ck.backbone
    for name, t in hf_sd.items():
        assert torch.equal(ck.backbone[name], t), name
    assert set(ck.head) == set(saved["fw"].action_model.state_dict())
    assert torch.equal(ck.head["future_tokens.weight"], saved["fw"].action_model.future_tokens.weight)
    assert set(ck.projectors) == {f"{i}.{j}.{p}" for i in range(2) for j in range(2) for p in ("weight", "bias")}
    assert torch.equal(ck.projectors["1.1.weight"], saved["fw"].project_layers[1][1].weight)
    assert ck.unused == ["extra_buffer"]
    assert ck.summary()["head"]["tensors"] == len(ck.head)
    # the same from the .pt path and from checkpoints/
    assert set(read_starvla_checkpoint(saved["pt"]).head) == set(ck.head)
    assert read_starvla_checkpoint(saved["root"] / "checkpoints").path == saved["pt"]


def test_backbone_goes_through_the_qwen3vl_mapping_into_our_modules(saved):
    from oxygen_ros.engine.layers.decoder import Decoder
    from oxygen_ros.engine.models.qwen3vl.vision import Qwen3VLVisionEncoder

    ck = read_starvla_checkpoint(saved["pt"], dtype="float32")
    parts = ck.qwen3vl_parts(saved["base"])
    assert parts.tie_word_embeddings and "lm_head.weight" in parts.unused
    Decoder(parts.decoder_config(), max_positions=8).load_state_dict(parts.language, strict=True)
    Qwen3VLVisionEncoder(parts.vision_config()).load_state_dict(parts.visual, strict=True)
    with pytest.raises(FileNotFoundError, match="base_vlm"):
        ck.qwen3vl_parts()          # ./playground/... does not exist here


def test_legacy_qwen25_layout_is_renamed():
    t = torch.zeros(1)
    bb, head, proj, unused = split_state_dict({
        "qwen_vl_interface.model.visual.blocks.0.attn.qkv.weight": t,
        "qwen_vl_interface.model.model.layers.0.mlp.up_proj.weight": t,
        "qwen_vl_interface.model.model.embed_tokens.weight": t,
        "qwen_vl_interface.model.lm_head.weight": t,
        "action_model.model.transformer_blocks.0.attn1.to_q.weight": t,
        "layer_qformer.x": t})
    assert sorted(bb) == ["lm_head.weight", "model.language_model.embed_tokens.weight",
                          "model.language_model.layers.0.mlp.up_proj.weight",
                          "model.visual.blocks.0.attn.qkv.weight"]
    assert list(head) == ["model.transformer_blocks.0.attn1.to_q.weight"] and not proj and unused == ["layer_qformer.x"]


def test_checkpoint_file_errors_name_the_files(saved, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_starvla_checkpoint(tmp_path / "nothing")
    with pytest.raises(FileNotFoundError, match="steps_<N>_pytorch_model.pt"):
        read_starvla_checkpoint(tmp_path)
    sd = {"qwen_vl_interface.model.lm_head.weight": torch.zeros(2, 2), "action_model.future_tokens.weight": torch.zeros(1)}
    a = tmp_path / "a"
    write_run(a, config=None, weights=sd)
    with pytest.raises(FileNotFoundError, match="config.yaml or config.json"):
        read_starvla_checkpoint(a)
    b = tmp_path / "b"
    write_run(b, stats=None, weights=sd)
    with pytest.raises(FileNotFoundError, match="dataset_statistics.json"):
        read_starvla_checkpoint(b)
    assert read_starvla_checkpoint(b, require_stats=False).stats == {}
    c = tmp_path / "c"
    write_run(c, weights=sd)
    write_run(c, weights=sd, step=60000)
    with pytest.raises(StarVLACheckpointError, match="steps_50000_pytorch_model.pt, steps_60000"):
        find_weights(c)
    d = tmp_path / "d"
    pt = write_run(d, weights={"vlm.model.x": torch.zeros(1), "action_model.y": torch.zeros(1)})
    with pytest.raises(StarVLACheckpointError, match="no backbone tensors.*vlm"):
        read_starvla_checkpoint(pt)
    pt.write_bytes(b"not a torch file")
    with pytest.raises(StarVLACheckpointError, match="cannot read"):
        read_starvla_checkpoint(pt)
    torch.save({"qwen_vl_interface.model.x": torch.zeros(1), "action_model.y": [1, 2]}, pt)
    with pytest.raises(StarVLACheckpointError):     # a list is not a tensor (weights_only may refuse it first)
        read_starvla_checkpoint(pt)
    torch.save({"qwen_vl_interface.model.x": torch.zeros(1)}, pt)
    with pytest.raises(StarVLACheckpointError, match="no action head"):
        read_starvla_checkpoint(pt)


# -- the starvla-pi profile end to end ------------------------------------------------------
def test_starvla_pi_loads_a_run_and_runs_exact_oxygen_frames(tmp_path):
    """load_model("starvla-pi", checkpoint=RUN, tokenizer_path=BASE_VLM): a StarVLA run
    directory (.pt with the backbone under qwen_vl_interface.model., the PI_v3 head under
    action_model. and project_layers.) and the base Qwen3-VL directory it names; the head
    equal to what was saved; OxyGen frames equal isolated execution, the head reading the
    pool's hidden states."""
    import numpy as np
    import yaml

    from test_weights_qwen3vl import hf_model, train_tokenizer, write_tokenizer
    from oxygen_ros.engine.bench.baselines import IsolatedRunner
    from oxygen_ros.engine.models.starvla.configuration import PIv3HeadConfig
    from oxygen_ros.engine.models.starvla.head import build_random
    from oxygen_ros.engine.observation.observation import Observation
    from oxygen_ros.engine.requests import LanguageRequest
    from oxygen_ros.engine.scheduler import EngineConfig, OxygenEngine
    from oxygen_ros.engine.registry import load_model

    tk = train_tokenizer()
    hf = hf_model(tk)
    base = tmp_path / "Qwen3-VL-tiny"
    hf.save_pretrained(str(base))
    write_tokenizer(base, tk)
    (base / "preprocessor_config.json").write_text(json.dumps(     # 4-pixel patches: small frames
        {"patch_size": 4, "temporal_patch_size": 2, "merge_size": 2,
         "size": {"shortest_edge": 32 * 32, "longest_edge": 64 * 64}}))
    config = {"framework": {"name": "QwenPI_v3",
                            "qwenvl": {"base_vlm": str(base), "vl_hidden_dim": 64, "num_vl_layers": 2},
                            "action_model": {"action_dim": 7, "state_dim": 7, "action_horizon": 4,
                                             "num_inference_timesteps": 2, "num_target_vision_tokens": 4,
                                             "max_seq_len": 16,
                                             "diffusion_model_cfg": {"input_embedding_dim": 32, "attention_head_dim": 16,
                                                                     "num_layers": 2}}}}
    head_cfg = PIv3HeadConfig.from_hf_dict(config)
    head = build_random(head_cfg, seed=4)
    weights = {f"qwen_vl_interface.model.{k}": v for k, v in hf.state_dict().items()}
    weights.update(head.state_dict())
    run = tmp_path / "run"
    write_run(run, config=yaml.safe_dump(config), weights=weights)
    model, tok = load_model("starvla-pi", checkpoint=str(run), tokenizer_path=str(base))
    assert type(model.expert).__name__ == "PIv3Head" and model.cfg.expert.horizon == 4
    for k, v in head.state_dict().items():
        assert torch.equal(model.expert.state_dict()[k], v), k
    engine = OxygenEngine(model, tok, EngineConfig(max_requests=2, max_new_tokens=6, max_len=400))
    assert engine.pool.hidden is not None
    iso = IsolatedRunner(model, tok, EngineConfig(max_new_tokens=6, max_len=400))
    rng = np.random.default_rng(0)
    for f in range(3):
        o = Observation({"base_0_rgb": rng.integers(0, 256, (32 + 16 * f, 32, 3), dtype=np.uint8)}, np.zeros(7),
                        "put the spoon on the towel [STATE] 1 2 3 [ACTION]")
        noise = torch.randn(4, 7, generator=torch.Generator().manual_seed(f))
        engine.submit(LanguageRequest("what now?", max_new_tokens=3, ignore_eos=True))
        res = engine.step(o, noise)
        assert np.abs(iso.action(o, noise).numpy() - res.actions).max() <= 1e-5
    # the node's policy I/O: the prefix is StarVLA's chat prompt with the state as text,
    # token for token; the chunk unnormalises to the robot's 7 dims
    from oxygen_ros.engine.models.qwen3vl.image_processing import image_token_count, qwen3vl_pixels
    from oxygen_ros.engine.models.starvla.processor import load_starvla_policy_io

    io = load_starvla_policy_io(run, "oxe_bridge")
    frame = rng.integers(0, 256, (48, 32, 3), dtype=np.uint8)
    obs = io.observation({"base_0_rgb": frame}, [0.5, 0.0, 5.0, 0.5], "put the spoon on the towel")
    prefix = model.observation_prefix(obs, tok)
    _, grids = qwen3vl_pixels([obs.images["base_0_rgb"]], model.cfg.vision.images)
    n = image_token_count(grids, model.cfg.vision.images.merge_size)[0]
    text = io.prompt_text("put the spoon on the towel", [0.5, 0.0, 5.0, 0.5])
    assert "[STATE]" in text and prefix.ids == tok.encode(text.replace("<|image_pad|>", "<|image_pad|>" * n))
    chunk = engine.step(obs, noise).actions
    assert io.actions(chunk).shape == (4, 7)


def test_starvla_pi_needs_its_base_vlm(tmp_path):
    from oxygen_ros.engine.registry import load_model

    with pytest.raises(ValueError, match="starvla-pi profile reads a StarVLA"):
        load_model("starvla-pi")
