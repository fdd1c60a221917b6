"""Stage 1: the image encoder and projector learn to make the frozen SmolLM2 say where the
cube is (LLaVA's projector stage, with the encoder trained too since it starts from
scratch), helped by auxiliary heads on the encoder's features that regress the sim's ground
truth (place, grasp contact, cube relative to the gripper, cube / gripper / bowl positions, the
cube's turn in the world and relative to the gripper).
The heads are training aids only: they are not part of the model or its checkpoint."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..configuration import SMOL_PANDA
from . import hparams as H
from .common import ensure_io, frame_inputs, frozen_backbone, training_model
from .data import Demos, load_start_frames
from .run import Run, lr_at

CENTRE = np.array([0.475, 0.0, 0.5], np.float32)     # the workspace's middle, metres
SPAN = 0.2


class AuxHeads(nn.Module):
    """Encoder features of a frame's cameras -> place logits (3), grasp (1), cube - gripper
    (3, decimetres), cube, gripper (3 each) and bowl x, y (2) about the workspace centre, the
    cube's turn and its turn relative to the gripper as sin and cos of 4x the angle (a cube
    looks the same every quarter turn) (4). The turn decides how the wrist meets the cube."""
    OUT = 19

    def __init__(self, cameras: int, tokens: int, width: int, hidden: int = 256):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(cameras * tokens * width, hidden), nn.GELU(), nn.Linear(hidden, self.OUT))

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return self.net(feats.flatten(1))


def aux_targets(pairs) -> dict[str, torch.Tensor]:
    place = torch.tensor([int(ep.place[t]) for ep, t in pairs])
    grasp = torch.tensor([float(ep.grasp[t]) for ep, t in pairs])
    rel = np.stack([(ep.cube[t] - ep.gripper[t]) * 10 for ep, t in pairs])
    pos = np.stack([np.concatenate([(ep.cube[t] - CENTRE) / SPAN, (ep.gripper[t] - CENTRE) / SPAN,
                                    (ep.bowl[t][:2] - CENTRE[:2]) / SPAN]) for ep, t in pairs])
    turn = np.stack([[ep.cube_yaw[t], ep.cube_yaw[t] - ep.gripper_yaw[t]] for ep, t in pairs]) * 4
    turn = np.concatenate([np.sin(turn), np.cos(turn)], 1)
    return {"place": place, "grasp": grasp, "geom": torch.from_numpy(np.concatenate([rel, pos, turn], 1)).float()}


def aux_loss(out: torch.Tensor, tgt: dict) -> tuple[torch.Tensor, dict]:
    l_place = F.cross_entropy(out[:, :3], tgt["place"])
    l_grasp = F.binary_cross_entropy_with_logits(out[:, 3], tgt["grasp"])
    l_geom = F.smooth_l1_loss(out[:, 4:], tgt["geom"], beta=0.1)
    acc = (out[:, :3].argmax(1) == tgt["place"]).float().mean()
    return l_place + l_grasp + l_geom, {"aux_place": l_place.item(), "aux_geom": l_geom.item(), "aux_acc": acc.item()}


@torch.no_grad()
def aux_report(vis, heads, demos: Demos, io, n: int = 96, early_frames: int = 10) -> dict:
    """What the encoder knows of held-out frames, read by the auxiliary heads: the cube's x, y
    (cm) and its turn (mean abs error of sin / cos 4 yaw, the world's and relative to the
    gripper's; a head that learnt nothing errs by the spread, about 0.5-0.6), on frames
    anywhere in the episodes and on the first second's (the arm at READY: the cube far away)."""
    out = {}
    rng = np.random.default_rng(3)
    for name, pool in (("", np.arange(len(demos))), ("_start", np.flatnonzero(demos.frames[:, 1] < early_frames))):
        if not len(pool):
            continue
        idx = rng.choice(pool, min(n, len(pool)), replace=False)
        pix, _, pairs = frame_inputs(demos, idx, io)
        feats = vis.features(pix)
        pred = heads(feats.reshape(len(idx), len(H.CAMERAS), -1, feats.shape[-1]))[:, 4:].numpy()
        err = np.abs(pred - aux_targets(pairs)["geom"].numpy()).mean(0)
        out[f"cube_cm{name}"] = float(err[3:5].mean() * SPAN * 100)
        out[f"turn_err{name}"] = float(err[-4:].mean())
    return out


class CaptionBatch:
    """Token ids of [prompt | narration prompt | caption] per frame and where the caption's
    tokens are predicted."""

    def __init__(self, tok, prompts: list[list[int]], places: list[int], image_tokens: int):
        narr = tok.encode(H.NARRATION_PROMPT)
        eos = next(iter(tok.eos_ids))
        self.rows, self.targets, self.place_pos = [], [], []
        for prompt, place in zip(prompts, places):
            answer = tok.encode(H.CAPTIONS[H.PLACES[place]]) + [eos]
            start = image_tokens + len(prompt) + len(narr)      # position of the first answer token
            self.rows.append(prompt + narr + answer[:-1])
            self.targets.append((start - 1, answer))
        self.length = max(len(r) for r in self.rows)
        self.pad = eos

    def ids(self) -> torch.Tensor:
        return torch.tensor([r + [self.pad] * (self.length - len(r)) for r in self.rows])

    def gather(self, hidden: torch.Tensor):
        """(hidden rows that predict caption tokens [n, W], their targets [n], which of them
        is the place word: the caption's 6th token, after "The cube is on/in the")."""
        rows, tgts, word = [], [], []
        for b, (first, answer) in enumerate(self.targets):
            rows.append(hidden[b, first:first + len(answer)])
            tgts += answer
            word += [j == 5 for j in range(len(answer))]
        return torch.cat(rows), torch.tensor(tgts), torch.tensor(word)


def caption_loss(model, tok, img_tokens: torch.Tensor, prompts, places) -> tuple[torch.Tensor, dict]:
    batch = CaptionBatch(tok, prompts, places, img_tokens.shape[1])
    x = torch.cat([img_tokens, model.backbone.embed(batch.ids())], dim=1)
    hidden = frozen_backbone(model, x)
    rows, tgts, word = batch.gather(hidden)
    logits = model.backbone.logits(rows)
    loss = F.cross_entropy(logits, tgts)
    word_acc = (logits[word].argmax(-1) == tgts[word]).float().mean()
    return loss, {"caption": loss.item(), "word_acc": word_acc.item()}


def narrate(model, tok, io, demos: Demos, idx) -> list[tuple[int, str]]:
    """Greedy narrations of frames, through the engine's isolated reference path (prefill,
    extend, decode), as the node would say them."""
    from ....bench.baselines import IsolatedRunner
    from ....requests import LanguageRequest

    runner = IsolatedRunner(model, tok)
    out = []
    for i in idx:
        e, t = demos.frames[i]
        ep = demos.episodes[e]
        obs = io.observation({s: ep.images[s][t] for s in H.CAMERAS}, ep.state[t], H.INSTRUCTION)
        deltas = []
        runner.language(obs, LanguageRequest(H.NARRATION_PROMPT, max_new_tokens=10), deltas=deltas)
        out.append((int(ep.place[t]), deltas[-1].full_text if deltas else ""))
    return out


def narration_accuracy(results) -> dict:
    """Right: names exactly one of the three words, and it is the place (issue 41's rule)."""
    right, per = 0, {p: [0, 0] for p in H.PLACES}
    for place, text in results:
        said = [w for w in H.PLACES if w in text.lower()]
        ok = len(said) == 1 and said[0] == H.PLACES[place]
        right += ok
        per[H.PLACES[place]][0] += ok
        per[H.PLACES[place]][1] += 1
    return {"narration_acc": right / max(1, len(results)),
            **{f"acc_{p}": (a / n if n else float("nan")) for p, (a, n) in per.items()}}


def start_frames_path(root: Path) -> Path:
    return Path(root) / "start_frames.npz"


def train(root: Path, demo_dir: Path, steps: int | None = None, hp: H.Stage1 | None = None, cfg=SMOL_PANDA,
          until: int | None = None):
    """Run (or resume) stage 1 to `steps` (hparams'), or stop at `until` on that schedule."""
    hp = hp or H.Stage1()
    if steps is not None:
        hp.steps = steps
    torch.set_num_threads(hp.threads)
    run = Run(Path(root) / "stage1", {"stage1": vars(hp), "cfg": cfg.name}, hp.steps)
    torch.manual_seed(hp.seed)
    model, tok = training_model(cfg)
    train_set, held = Demos(demo_dir, "train"), Demos(demo_dir, "held_out")
    print(f"stage 1: {len(train_set.episodes)} training episodes ({len(train_set)} frames), "
          f"{len(held.episodes)} held out", flush=True)
    io = ensure_io(root, train_set, tok, cfg)
    starts = None
    if hp.start_frames:
        path = start_frames_path(root)
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: scripts/train_panda.py stage1 renders it "
                                    "(tools/start_frames.py)")
        starts = Demos.of([load_start_frames(path)])
    vis = model.vision
    with torch.no_grad():
        vis.projector.weight.mul_(hp.projector_init_scale)
        vis.projector.bias.zero_()
    heads = AuxHeads(len(H.CAMERAS), cfg.vision.tokens_per_image, cfg.vision.width)
    params = list(vis.parameters()) + list(heads.parameters())
    opt = torch.optim.AdamW(params, lr=hp.lr, weight_decay=hp.weight_decay)
    state = run.resume()
    if state:
        vis.load_state_dict(state["vision"])
        heads.load_state_dict(state["heads"])
        opt.load_state_dict(state["opt"])
        print(f"resumed at step {state['step']}", flush=True)
    step = run.step0
    model.backbone.eval()
    stop = min(hp.steps, until or hp.steps)
    while step < stop:
        if step % hp.rescan_every == 0 and step > run.step0:
            if train_set.refresh() or held.refresh():
                print(f"  now {len(train_set.episodes)} training episodes", flush=True)
        gen = np.random.default_rng([hp.seed, step])
        for g in opt.param_groups:
            g["lr"] = lr_at(step, hp.lr, hp.warmup, hp.steps)
        # the caption frames (places balanced; a share of them start frames, the off-path ones
        # among them) first, then more frames for the heads (a share of them start frames)
        nc = hp.caption_batch if step >= hp.aux_only_steps else 0
        ncs = int(round(hp.caption_start_share * nc)) if starts is not None else 0
        ns = int(round(hp.start_share * (hp.aux_batch - nc))) if starts is not None else 0
        parts = [(train_set, train_set.sample(nc - ncs, gen, balanced=True)),
                 (starts, starts.sample(ncs, gen, balanced=True) if ncs else []),
                 (train_set, train_set.sample(hp.aux_batch - nc - ns, gen)),
                 (starts, starts.sample(ns, gen) if ns else [])]
        inputs = [frame_inputs(split, idx, io) for split, idx in parts if len(idx)]
        pix = torch.cat([x[0] for x in inputs])
        prompts = [p for x in inputs for p in x[1]]
        pairs = [pair for x in inputs for pair in x[2]]
        t0 = time.time()
        feats = vis.features(pix)                                          # [B*C, 16, width]
        n_cam, tokens = len(H.CAMERAS), cfg.vision.tokens_per_image
        a_loss, a_stats = aux_loss(heads(feats.reshape(len(pairs), n_cam, tokens, -1)), aux_targets(pairs))
        loss, c_stats = hp.aux_weight * a_loss, {}
        if nc:
            img_tokens = vis.projector(feats[: nc * n_cam]).reshape(nc, n_cam * tokens, -1)
            c_loss, c_stats = caption_loss(model, tok, img_tokens, prompts[:nc],
                                           [int(ep.place[t]) for ep, t in pairs[:nc]])
            loss = loss + c_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, hp.grad_clip)
        opt.step()
        step += 1
        stats = {"loss": loss.item(), **c_stats, **a_stats}
        run.log({"kind": "step", "step": step, "time": time.time(), "sec": time.time() - t0, **stats})
        if step % 10 == 0 or step == run.step0 + 1:
            run.progress(step, {k: stats[k] for k in ("loss", "caption", "word_acc", "aux_acc", "aux_geom") if k in stats})
        if step % hp.checkpoint_every == 0 or step == stop:
            run.save({"step": step, "vision": vis.state_dict(), "heads": heads.state_dict(), "opt": opt.state_dict()})
            run.plot("stage 1: captions through frozen SmolLM2 + auxiliary heads")
        if (step % hp.aux_eval_every == 0 or step == stop) and len(held):
            rep = aux_report(vis, heads, held, io)
            run.log({"kind": "eval", "step": step, "time": time.time(), **rep})
            print(f"  held-out heads @ {step}: " + ", ".join(f"{k} {v:.3f}" for k, v in rep.items()), flush=True)
        if (step % hp.eval_every == 0 or step == stop) and step > hp.aux_only_steps and len(held):
            res = narrate(model, tok, io, held, held.sample(hp.eval_frames, np.random.default_rng(7), balanced=True))
            acc = narration_accuracy(res)
            run.log({"kind": "eval", "step": step, "time": time.time(), **acc,
                     "examples": [t for _, t in res[:6]]})
            print(f"  eval @ {step}: {acc}  e.g. {[t for _, t in res[:3]]}", flush=True)
            run.plot("stage 1: captions through frozen SmolLM2 + auxiliary heads")
    return run
