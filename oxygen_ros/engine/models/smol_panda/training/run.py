"""A training run's directory: resumable state, progress lines, the loss log and its PNG.

  state.pt     trainable weights, optimizer, step, RNG (written atomically every N steps)
  log.jsonl    one JSON line per logged step / evaluation
  loss.png     the loss curves (matplotlib), redrawn at each checkpoint
  run.json     the hyper-parameters the run started with (a resume with other values says so
               and logs them: a resumed run trains with hparams.py's values of the day)
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import torch


class Run:
    def __init__(self, directory: str | Path, hparams: dict, total_steps: int):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.total = total_steps
        run_json = self.dir / "run.json"
        if not run_json.exists():
            run_json.write_text(json.dumps(hparams, indent=1))
        self.hparams = json.loads(run_json.read_text())
        now = json.loads(json.dumps(hparams))        # tuples as lists, as run.json holds them
        if now != self.hparams:
            print(f"hyper-parameters differ from {run_json}'s: {changes(self.hparams, now)}", flush=True)
            self.log({"kind": "hparams", "time": time.time(), "hparams": now})
        self.t0, self.step0 = time.time(), 0

    @property
    def state_path(self) -> Path:
        return self.dir / "state.pt"

    def resume(self) -> dict | None:
        if not self.state_path.exists():
            return None
        state = torch.load(self.state_path, map_location="cpu", weights_only=False)
        self.step0 = state["step"]
        return state

    def save(self, state: dict) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, self.state_path)

    def log(self, record: dict) -> None:
        with open(self.dir / "log.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")

    def progress(self, step: int, losses: dict, extra: str = "") -> str:
        """'step 120/1500  loss 1.234 ...  0.45 steps/s  ETA 51 min' (rate over this process's steps)."""
        done = step - self.step0
        rate = done / max(time.time() - self.t0, 1e-9)
        eta = (self.total - step) / rate / 60 if rate > 0 else math.inf
        parts = "  ".join(f"{k} {v:.4f}" for k, v in losses.items())
        line = f"step {step}/{self.total}  {parts}  {rate:.3f} steps/s  ETA {eta:.0f} min {extra}".rstrip()
        print(line, flush=True)
        return line

    def plot(self, title: str) -> Path | None:
        """loss.png from log.jsonl: each numeric key of the step records, smoothed."""
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        records = [json.loads(line) for line in open(self.dir / "log.jsonl")] if (self.dir / "log.jsonl").exists() else []
        # a resumed run repeats the steps after its last checkpoint: keep each step's last record
        steps = list({r["step"]: r for r in records if r.get("kind") == "step"}.values())
        evals = [r for r in records if r.get("kind") == "eval"]
        # the losses (not timings, counts or accuracies) on a log scale
        keys = sorted({k for r in steps for k, v in r.items() if isinstance(v, (int, float))
                       and k not in ("kind", "step", "time", "sec", "data_s", "frames") and "acc" not in k})
        if not steps:
            return None
        fig, axes = plt.subplots(1, 2 if evals else 1, figsize=(12 if evals else 7, 4.5), squeeze=False)
        ax = axes[0][0]
        for k in keys:
            xs = [r["step"] for r in steps if k in r]
            ys = [r[k] for r in steps if k in r]
            ax.plot(xs, ys, alpha=0.25)
            w = max(1, len(ys) // 40)
            sm = [sum(ys[max(0, i - w):i + 1]) / len(ys[max(0, i - w):i + 1]) for i in range(len(ys))]
            ax.plot(xs, sm, label=k, color=ax.lines[-1].get_color())
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_title(title)
        ax.legend(fontsize=8)
        if evals:
            ax2 = axes[0][1]
            ekeys = sorted({k for r in evals for k, v in r.items() if k not in ("kind", "step", "time") and isinstance(v, (int, float))})
            for k in ekeys:
                ax2.plot([r["step"] for r in evals if k in r], [r[k] for r in evals if k in r], "o-", label=k)
            ax2.set_xlabel("step")
            ax2.set_title("held-out evaluation")
            ax2.legend(fontsize=8)
        fig.tight_layout()
        out = self.dir / "loss.png"
        fig.savefig(out, dpi=90)
        plt.close(fig)
        return out


def changes(old: dict, new: dict, prefix: str = "") -> str:
    """'stage2.early_share None -> 0.25, ...' for the keys whose values differ."""
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out.append(changes(a, b, f"{prefix}{k}."))
        elif a != b:
            out.append(f"{prefix}{k} {a} -> {b}")
    return ", ".join(x for x in out if x)


def lr_at(step: int, base: float, warmup: int, total: int) -> float:
    """Linear warmup, then cosine down to a tenth."""
    if step < warmup:
        return base * (step + 1) / warmup
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
