"""Tiny pi0.5 checkpoints for tests: the real tensor names (written from an independent
list, `real_shapes`), pi0.5's structure at toy widths, and a SentencePiece tokenizer
trained on the fly with PaliGemma's special ids. Used by the weights and node tests."""
import dataclasses as dc
import io
import json
import random
from pathlib import Path

import torch
from safetensors.torch import save_file

from oxygen_ros.engine.models.pi05.configuration import PI05

R = "paligemma_with_expert."
VT = R + "paligemma.model.vision_tower.vision_model."
LM = R + "paligemma.model.language_model."
EX = R + "gemma_expert.model."
LM_HEAD = R + "paligemma.lm_head.weight"
EXPERT_LM_HEAD = R + "gemma_expert.lm_head.weight"
PREFIX = {"lerobot": "model.", "openpi": ""}


def train_tokenizer(directory: Path) -> str:
    """A small SentencePiece model with PaliGemma's special ids, trained on pi0.5-style prompts."""
    import sentencepiece as spm

    words = ("the robot arm picks up red blue green cup block bowl plate and puts it on "
             "table shelf left right gripper open close move slowly carefully now done "
             "describe what you see I am moving toward").split()
    rng = random.Random(0)
    lines = []
    for _ in range(600):
        task = " ".join(rng.choice(words) for _ in range(rng.randint(3, 10)))
        state = " ".join(str(rng.randint(0, 255)) for _ in range(rng.randint(2, 8)))
        lines.append(f"Task: {task}, State: {state};\nAction: {rng.choice(words)}.")
    buf = io.BytesIO()
    # Gemma/PaliGemma conventions: pad 0, eos 1, bos 2, unk 3; byte fallback; no normaliser.
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=buf, vocab_size=400, model_type="bpe",
        byte_fallback=True, pad_id=0, eos_id=1, bos_id=2, unk_id=3, split_digits=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=False, hard_vocab_limit=False, minloglevel=2)
    path = Path(directory) / "paligemma_tokenizer.model"
    path.write_bytes(buf.getvalue())
    return str(path)


def toy_config(tok):
    """pi0.5's structure (from the PI05 profile) at toy widths; vocab = the tokenizer's."""
    return dc.replace(
        PI05, name="pi05-toy",
        vision=dc.replace(PI05.vision, image_size=28, patch_size=14, width=16, depth=2,
                          num_heads=2, mlp_dim=24),
        backbone=dc.replace(PI05.backbone, width=32, depth=2, mlp_dim=64, num_heads=4,
                            num_kv_heads=1, head_dim=8, vocab_size=tok.vocab_size),
        expert=dc.replace(PI05.expert, width=16, mlp_dim=32, horizon=5, action_dim=6,
                          denoise_steps=10))


def real_shapes(cfg, lm_head=True, expert_lm_head=True):
    """Every tensor of a pi0.5 model.safetensors (openpi names), shapes from cfg."""
    v, b, e = cfg.vision, cfg.backbone, cfg.expert
    s = {VT + "embeddings.patch_embedding.weight": (v.width, 3, v.patch_size, v.patch_size),
         VT + "embeddings.patch_embedding.bias": (v.width,),
         VT + "embeddings.position_embedding.weight": ((v.image_size // v.patch_size) ** 2, v.width)}
    for i in range(v.depth):
        p = f"{VT}encoder.layers.{i}."
        for n in ("layer_norm1", "layer_norm2"):
            s[p + n + ".weight"] = s[p + n + ".bias"] = (v.width,)
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            s[p + f"self_attn.{n}.weight"], s[p + f"self_attn.{n}.bias"] = (v.width, v.width), (v.width,)
        s[p + "mlp.fc1.weight"], s[p + "mlp.fc1.bias"] = (v.mlp_dim, v.width), (v.mlp_dim,)
        s[p + "mlp.fc2.weight"], s[p + "mlp.fc2.bias"] = (v.width, v.mlp_dim), (v.width,)
    s[VT + "post_layernorm.weight"] = s[VT + "post_layernorm.bias"] = (v.width,)
    s[R + "paligemma.model.multi_modal_projector.linear.weight"] = (b.width, v.width)
    s[R + "paligemma.model.multi_modal_projector.linear.bias"] = (b.width,)
    s[LM + "embed_tokens.weight"] = (b.vocab_size, b.width)
    if lm_head:
        s[LM_HEAD] = (b.vocab_size, b.width)
    for root, w, mlp, adaptive in ((LM, b.width, b.mlp_dim, False), (EX, e.width, e.mlp_dim, True)):
        for i in range(b.depth):
            p = f"{root}layers.{i}."
            s[p + "self_attn.q_proj.weight"] = (b.num_heads * b.head_dim, w)
            s[p + "self_attn.k_proj.weight"] = (b.num_kv_heads * b.head_dim, w)
            s[p + "self_attn.v_proj.weight"] = (b.num_kv_heads * b.head_dim, w)
            s[p + "self_attn.o_proj.weight"] = (w, b.num_heads * b.head_dim)
            s[p + "mlp.gate_proj.weight"] = s[p + "mlp.up_proj.weight"] = (mlp, w)
            s[p + "mlp.down_proj.weight"] = (w, mlp)
            for n in ("input_layernorm", "post_attention_layernorm"):
                if adaptive:
                    s[p + n + ".dense.weight"], s[p + n + ".dense.bias"] = (3 * w, w), (3 * w,)
                else:
                    s[p + n + ".weight"] = (w,)
    s[LM + "norm.weight"] = (b.width,)
    s[EX + "norm.dense.weight"], s[EX + "norm.dense.bias"] = (3 * e.width, e.width), (3 * e.width,)
    if expert_lm_head:
        s[EXPERT_LM_HEAD] = (b.vocab_size, e.width)
    s["action_in_proj.weight"], s["action_in_proj.bias"] = (e.width, e.action_dim), (e.width,)
    s["action_out_proj.weight"], s["action_out_proj.bias"] = (e.action_dim, e.width), (e.action_dim,)
    for n in ("time_mlp_in", "time_mlp_out"):
        s[n + ".weight"], s[n + ".bias"] = (e.width, e.width), (e.width,)
    return s


def engine_name(real: str) -> str:
    """The test's own statement of where each real tensor lives in the engine."""
    for theirs, ours in ((VT + "embeddings.", "vision."), (VT + "encoder.", "vision."),
                         (VT, "vision."), (R + "paligemma.model.multi_modal_projector.linear.", "vision.projector."),
                         (LM, "backbone."), (EX, "expert."), ("", "expert.")):
        if real.startswith(theirs):
            return ours + real[len(theirs):]
    raise AssertionError(real)


def model_checkpoint(model, layout, lm_head=True, expert_lm_head=True):
    """The real-named tensors of `model` (tied lm_head as its own copy, like real files)."""
    sd = {}
    params = model.state_dict()
    for real in real_shapes(model.cfg, lm_head, expert_lm_head):
        if real == LM_HEAD:
            sd[real] = params["backbone.embed_tokens.weight"].clone()
        elif real == EXPERT_LM_HEAD:
            sd[real] = torch.randn(model.cfg.backbone.vocab_size, model.cfg.expert.width)
        else:
            sd[real] = params[engine_name(real)].clone()
    return {PREFIX[layout] + k: v.contiguous() for k, v in sd.items()}


def write(tmp_path, tensors, config=None, name="ckpt"):
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    save_file(tensors, str(d / "model.safetensors"))
    if config is not None:
        (d / "config.json").write_text(json.dumps(config))
    return str(d)


# -- policy I/O files next to the weights (openpi and LeRobot layouts) ---------------------
def write_json(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")


def openpi_ckpt(root, state=None, actions=None, asset_id="robot", config=None):
    """openpi PyTorch conversion layout: config.json + assets/<asset_id>/norm_stats.json."""
    if config is not None:
        write_json(root / "config.json", config)
    stats = {}
    if state is not None:
        stats["state"] = state
    if actions is not None:
        stats["actions"] = actions
    if asset_id is not None:
        write_json(root / "assets" / asset_id / "norm_stats.json", {"norm_stats": stats})
    else:
        (root / "assets").mkdir(parents=True, exist_ok=True)
    return root


NORMALIZER_FILE = "policy_preprocessor_step_2_normalizer_processor.safetensors"
UNNORMALIZER_FILE = "policy_postprocessor_step_0_unnormalizer_processor.safetensors"


def lerobot_ckpt(root, state=None, actions=None, norm_map=None, eps=None, config=None,
                 write_unnormalizer_file=True):
    """LeRobot layout: config.json, policy_{pre,post}processor.json and the normalizer's
    .safetensors named by each step's state_file (keys `<feature>.<stat>`)."""
    root.mkdir(parents=True, exist_ok=True)
    write_json(root / "config.json", config if config is not None else {
        "type": "pi05", "chunk_size": 50, "n_action_steps": 50, "num_inference_steps": 10,
        "output_features": {"action": {"type": "ACTION", "shape": [3]}}})

    def step(registry, stats_for, file, write_file=True):
        cfg = {"eps": eps if eps is not None else 1e-8,
               "features": {} if not stats_for else {
                   "observation.state": {"type": "STATE", "shape": [2]},
                   "action": {"type": "ACTION", "shape": [3]}}}
        if norm_map is not None:
            cfg["norm_map"] = norm_map
        entry = {"registry_name": registry, "config": cfg}
        if stats_for:
            tensors = {f"{key}.{name}": torch.tensor(v, dtype=torch.float32)
                       for key, stats in stats_for.items() for name, v in stats.items()}
            if write_file:
                save_file(tensors, str(root / file))
            entry["state_file"] = file
        return entry

    pre_stats = {}
    if state is not None:
        pre_stats["observation.state"] = state
    if actions is not None:
        pre_stats["action"] = actions
    write_json(root / "policy_preprocessor.json", {"name": "policy_preprocessor", "steps": [
        {"registry_name": "rename_observations_processor", "config": {"rename_map": {}}},
        {"registry_name": "to_batch_processor", "config": {}},
        step("normalizer_processor", pre_stats, NORMALIZER_FILE)]})
    post_stats = {"action": actions} if actions is not None else {}
    write_json(root / "policy_postprocessor.json", {"name": "policy_postprocessor", "steps": [
        step("unnormalizer_processor", post_stats, UNNORMALIZER_FILE, write_unnormalizer_file),
        {"registry_name": "device_processor", "config": {"device": "cpu"}}]})
    return root
