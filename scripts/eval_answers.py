#!/usr/bin/env python3
"""Answers to "what have you done?" over whole `oxygen eval --language questions` runs,
judged against the sim's ground truth (issue 41): each answered question's progress from the
episode's place timeline (training/progress.py: not_yet, holding, done, dropped), and whether
the answer says it (answer_right, the rule scripts/answer_prompts.py judges by).

Three figures: right at the moment it was asked, right within one memory period before it
(the node answers from its memory log, whose newest note can be that old: a note every
memory_every_n_frames frames), and right by the notes it was given (the /memory entries the
bag holds from before the answer's first delta: what the answer prompt can say). Unanswered
questions are counted apart.

  .venv/bin/python scripts/eval_answers.py out/eval_v5b/sim_questions [RUN ...] [--json FILE]
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path


def by_notes(bag: Path) -> list[tuple[list[str], str]]:
    """(the places the memory log named when the answer started, the answer) for each finished
    answer in a bag."""
    from rosbags.highlevel import AnyReader

    from oxygen_ros.tools.eval_scoring import named_places

    notes, first, answers = [], {}, []
    with AnyReader([bag]) as reader:
        conns = [c for c in reader.connections if c.topic in ("/memory", "/answer")]
        for c, t, raw in reader.messages(connections=conns):
            m = reader.deserialize(raw, c.msgtype)
            if c.topic == "/memory" and m.done:
                notes.append((t, m.full_text))
            elif c.topic == "/answer":
                first.setdefault(m.request_id, t)
                if m.done:
                    answers.append((m.request_id, m.full_text))
    out = []
    for rid, text in answers:
        log = [n for t, n in notes if t < first[rid]]
        out.append(([p for n in log for p in sorted(named_places(n))[:1]], text))
    return out


def judge(run: Path) -> dict:
    from oxygen_ros.engine.models.smol_panda.training.progress import answer_right, progress, progress_at
    from oxygen_ros.tools.params_files import params_from_file

    if not (run / "eval.json").exists():
        raise SystemExit(f"eval_answers.py: no {run / 'eval.json'} (oxygen eval writes it when the run ends)")
    ev = json.loads((run / "eval.json").read_text())
    # a frame per observation under the sim clock (lock-step), else at the node's rate
    frame_s = ev["sim_period_s"] if ev["clock"] == "sim" else 1.0 / ev["node_control_rate_hz"]
    params = ev.get("node_params") or params_from_file(ev["params"])   # older runs: the file as it reads now
    period, memory_log_size = params["memory_every_n_frames"] * frame_s, params["memory_log_size"]
    asked = answered = now = recent = notes_right = notes_answers = 0
    by_truth = collections.defaultdict(lambda: [0, 0])      # progress -> [right now, answered]
    wrong = []
    for e in ev["episodes"]:
        timeline = e.get("places") or []
        for q in e.get("question_samples", []):
            asked += 1
            if not q["answered"]:
                continue
            answered += 1
            truth = progress_at(timeline, q["asked_s"])
            ok = answer_right(truth, q["answer"])
            # the progress at any moment of the last memory period (sampled every 0.05 s)
            window = {progress_at(timeline, q["asked_s"] - period * i / 100) for i in range(101)}
            now += ok
            recent += ok or any(answer_right(k, q["answer"]) for k in window)
            by_truth[truth][0] += ok
            by_truth[truth][1] += 1
            if not ok:
                wrong.append({"seed": e["seed"], "asked_s": q["asked_s"], "truth": truth, "answer": q["answer"]})
        for places, answer in by_notes(Path(e["bag"])):
            notes_right += answer_right(progress(places[-memory_log_size:]), answer)
            notes_answers += 1
    return {"run": str(run), "asked": asked, "answered": answered, "right_now": now,
            "right_within_memory_period": recent, "memory_period_s": period,
            "right_by_notes": notes_right, "answers_in_bags": notes_answers,
            "by_truth": {k: {"right": r, "answered": n} for k, (r, n) in sorted(by_truth.items())},
            "wrong": wrong}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="oxygen eval output folders (holding eval.json)")
    ap.add_argument("--json", type=Path, help="write the figures here too")
    args = ap.parse_args()
    results = [judge(r) for r in args.runs]
    for r in results:
        n = max(1, r["answered"])
        print(f"{r['run']}: {r['answered']}/{r['asked']} answered; right when asked {r['right_now']}/{r['answered']} "
              f"({100 * r['right_now'] / n:.1f}%), within one memory period ({r['memory_period_s']:.1f} s) "
              f"{r['right_within_memory_period']}/{r['answered']} ({100 * r['right_within_memory_period'] / n:.1f}%); "
              f"by the notes it was given {r['right_by_notes']}/{r['answers_in_bags']}")
        for k, v in r["by_truth"].items():
            print(f"  {k:8s} {v['right']}/{v['answered']}")
        for w in r["wrong"][:8]:
            print(f"  wrong: seed {w['seed']} at {w['asked_s']:g} s ({w['truth']}): {w['answer']!r}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
