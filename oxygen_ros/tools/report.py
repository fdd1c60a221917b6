"""A recorded run's report: summary.json and the timeline PNG (matplotlib, Agg).

The timeline is what a person should see at a glance.

Four panels on one time axis (seconds since the run started):
1. action chunks: the interval before each chunk, against the control period
   (frames that missed their deadline in red), and each chunk's latency from its
   observation to its publication;
2. every frame as a bar spanning its own duration, stacked by phase: prefill, action,
   admit, decode (ms), with the period as a dashed line; the shared prefill and the
   action chunk come first, a black tick marks where the chunk was published, language
   decoding fills the rest of the frame;
3. the boundary jumps at every trajectory switch (commanded position and velocity,
   tools/trajectory_executor.py) and, with joint states in the bag, the velocity change
   the switch made on the measured joints (tools/arm_motion.py);
4. every language request as a horizontal bar from its first to its last TextChunk,
   colored by stream (narration, memory, answer), with a thin line from the start of
   the frame that admitted it; answers are labelled with their text.
"""
from __future__ import annotations

import json
from pathlib import Path

from .bag_task import task_summary
from .bag_read import TIMING_PHASES, RunData, read_bag
from .bag_summary import FrameLookup, arm_track, boundary_jumps, request_timeline, summarize, time_origin

PHASE_COLORS = {"prefill": "#4C72B0", "action": "#DD8452", "admit": "#8172B3", "decode": "#55A868"}
STREAM_COLORS = {"narration": "#1f77b4", "memory": "#2ca02c", "answer": "#d62728"}
LEGEND = {"loc": "upper left", "bbox_to_anchor": (1.005, 1.0), "fontsize": 8, "frameon": False}


def _lanes(intervals):
    """Greedy lane packing: index of a lane per (start, end) so bars in a lane never overlap."""
    ends, out = [], []
    for start, end in intervals:
        for i, e in enumerate(ends):
            if start > e:
                ends[i] = end
                out.append(i)
                break
        else:
            ends.append(end)
            out.append(len(ends) - 1)
    return out


def _plot_chunks(ax, data: RunData, summary: dict, t0: float) -> None:
    """Panel 1: the interval before each action chunk, missed deadlines, chunk latency."""
    period_ms = summary["frames"]["period_ms"]
    c = summary["chunks"]
    stamps = [s - t0 for s, _, _ in data.chunks]
    if len(stamps) > 1:
        iv = [(b - a) * 1e3 for a, b in zip(stamps, stamps[1:])]
        ax.plot(stamps[1:], iv, "-", color="#333333", lw=0.8, zorder=1)
        ax.scatter(stamps[1:], iv, s=8, color="#333333", zorder=2, label="interval before a chunk")
    missed = [f.end_s - t0 for f in data.frames if f.missed]
    if missed and stamps:
        ax.scatter(missed, [period_ms or 0] * len(missed), marker="v", s=18, color="#d62728", zorder=3,
                  label="frame missed its deadline")
    latency = [(f.end_s - t0, f.chunk_latency_ms) for f in data.frames if f.chunk_latency_ms is not None]
    if latency:
        ax.scatter(*zip(*latency), s=8, marker="s", color="#DD8452", zorder=2,
                  label="chunk latency (observation to publish)")
    if period_ms:
        ax.axhline(period_ms, ls="--", color="gray", lw=1, label=f"period {period_ms:.0f} ms")
    ax.set_ylabel("chunk interval,\nlatency (ms)")
    rate = c["achieved_rate_hz"]
    ax.set_title(f"{c['count']} action chunks at {rate:.2f} Hz" if rate else f"{c['count']} action chunks",
                loc="left", fontsize=10)
    top = max([(b - a) * 1e3 for a, b in zip(stamps, stamps[1:])] + [period_ms or 1.0] + [v for _, v in latency])
    ax.set_ylim(0, top * 1.2)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**LEGEND)


def _plot_frames(ax, data: RunData, summary: dict, t0: float) -> None:
    """Panel 2: frames stacked by phase, each bar as wide as the frame lasted."""
    period_ms = summary["frames"]["period_ms"]
    if data.frames:
        x = [f.start_s - t0 for f in data.frames]
        w = [max(f.total_ms / 1e3, 1e-4) for f in data.frames]
        bottom = [0.0] * len(x)
        for ph in TIMING_PHASES:
            h = [f.phases_ms[ph] for f in data.frames]
            ax.bar(x, h, width=w, bottom=bottom, align="edge", color=PHASE_COLORS[ph], label=ph,
                  linewidth=0)
            bottom = [b + v for b, v in zip(bottom, h)]
        late = [f for f in data.frames if f.missed]
        if late:
            ax.bar([f.start_s - t0 for f in late], [sum(f.phases_ms.values()) for f in late],
                  width=[f.total_ms / 1e3 for f in late], align="edge", fill=False, edgecolor="#d62728",
                  linewidth=1.2, label="missed deadline")
        sent = [(f.start_s - t0 + f.chunk_ms / 1e3, sum(f.phases_ms[p] for p in ("prefill", "action")))
                for f in data.frames if f.chunk_ms]
        if sent:
            ax.scatter(*zip(*sent), marker="_", s=120, color="black", zorder=3, label="chunk published")
        if period_ms:
            ax.axhline(period_ms, ls="--", color="gray", lw=1, label="period")
        means = summary["frames"]["phase_ms_mean"]
        ax.set_title("frames: " + ", ".join(f"{ph} {means[ph]:.1f}" for ph in TIMING_PHASES)
                    + " ms (mean)", loc="left", fontsize=10)
    ax.set_ylabel("frame phases\n(ms)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**LEGEND)


def _plot_jumps(ax, data: RunData, summary: dict, t0: float) -> None:
    """Panel 3: the boundary jumps at each trajectory switch (and the arm's, with joint states)."""
    jumps, _ = boundary_jumps(data)
    if jumps:
        ax.scatter([j.time - t0 for j in jumps], [j.position_jump for j in jumps], s=10, color="#4C72B0",
                  label="position jump (rad)")
        ax_v = ax.twinx()
        ax_v.scatter([j.time - t0 for j in jumps], [j.velocity_jump for j in jumps], s=10, marker="x",
                     color="#C44E52", label="velocity jump (rad/s)")
        arm = arm_track(data)
        if arm:
            actual = arm.scores("actual")
            ax_v.scatter([a[0] - t0 for a in actual], [a[1] for a in actual], s=14, marker="o",
                         facecolors="none", edgecolors="#8C564B",
                         label=f"actual velocity change, {arm.summary()['window_s']:g} s window (rad/s)")
        ax_v.set_ylabel("velocity\n(rad/s)")
        ax_v.set_ylim(bottom=0)
        handles = ax.get_legend_handles_labels()[0] + ax_v.get_legend_handles_labels()[0]
        ax.legend(handles=handles, **{**LEGEND, "bbox_to_anchor": (1.05, 1.0)})
    bj = summary.get("robot_time", {}).get("boundary_jumps", {})
    arm = summary.get("robot_time", {}).get("arm")
    tracking = (f"; arm tracking error rms {arm['tracking_error']['rms']:.4f}, actual velocity change max "
                f"{arm['switches']['actual']['velocity_change_max']:.3f} rad/s"
                if arm and arm["tracking_error"]["rms"] is not None else "")
    ax.set_title(f"boundary jumps at {bj.get('count', 0)} trajectory switches (commanded): position max "
                f"{bj.get('position_max') or 0:.4f} rad, velocity max {bj.get('velocity_max') or 0:.3f} rad/s"
                + tracking, loc="left", fontsize=10)
    ax.set_ylabel("position\n(rad)")
    ax.set_ylim(bottom=0)


def _plot_requests(ax, data: RunData, summary: dict, t0: float) -> None:
    """Panel 4: language requests, one lane set per stream."""
    from matplotlib.patches import Patch

    lookup = FrameLookup.of(data)
    rows = [request_timeline(data, r, t0, lookup) for r in data.requests]
    yticks, ylabels, base = [], [], 0
    for stream in ("narration", "memory", "answer", *sorted({r["stream"] for r in rows} - set(STREAM_COLORS))):
        rs = [r for r in rows if r["stream"] == stream]
        if not rs:
            continue
        lanes = _lanes([(r["start_s"], r["last_chunk_s"]) for r in rs])
        color = STREAM_COLORS.get(stream, "#7f7f7f")
        for r, lane in zip(rs, lanes):
            y = base + lane
            ax.plot([r["start_s"], r["first_chunk_s"]], [y, y], color=color, lw=1, alpha=0.6)
            ax.barh(y, max(r["last_chunk_s"] - r["first_chunk_s"], 0.02), left=r["first_chunk_s"],
                   height=0.7, color=color, alpha=0.85 if r["done"] else 0.4,
                   edgecolor="black" if not r["done"] else color)
            if stream == "answer":         # the answer's text above its bar, inside the panel
                text = " ".join(r["text"].split())
                ax.annotate(f"{text[:90]}{'…' if len(text) > 90 else ''}", (r["first_chunk_s"], y - 0.45),
                           va="bottom", fontsize=8, color=color, annotation_clip=False, clip_on=True)
        n = max(lanes) + 1
        yticks.append(base + (n - 1) / 2)
        ylabels.append(f"{stream} ({len(rs)})")
        base += n + 1
    ax.set_yticks(yticks, ylabels)
    ax.set_ylim(-1, max(base, 1))
    ax.invert_yaxis()
    lang = summary["language"]
    tps = lang["tokens_per_s"]
    ax.set_title(f"language requests, first to last text chunk: {lang['requests']} requests, "
                f"{lang['tokens']} tokens" + (f", {tps:.1f} tok/s" if tps else ""), loc="left", fontsize=10)
    ax.legend(handles=[Patch(color=STREAM_COLORS[s], label=s) for s in STREAM_COLORS],
             **LEGEND)


def plot_timeline(data: RunData, summary: dict, png: str | Path, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = time_origin(data)
    fig, (ax_c, ax_f, ax_j, ax_r) = plt.subplots(4, 1, figsize=(15, 11), sharex=True,
                                                 gridspec_kw={"height_ratios": [1.2, 2.2, 1.2, 2.0]})
    for plot, ax in ((_plot_chunks, ax_c), (_plot_frames, ax_f), (_plot_jumps, ax_j), (_plot_requests, ax_r)):
        plot(ax, data, summary, t0)
    ax_r.set_xlabel("time since the first frame (s)")
    end = summary["duration_s"] or 1.0
    ax_r.set_xlim(-0.01 * end, end * 1.02)
    for ax in (ax_c, ax_f, ax_j, ax_r):
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(title or f"oxygen run: {Path(data.bag).name}", fontsize=12)
    fig.tight_layout()
    png = Path(png)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def write_report(bag, out, title: str = "") -> dict:
    """Read the bag, write out/summary.json and out/timeline.png; returns the summary
    (its "task": bag_task.task_summary, None without /tf)."""
    data = read_bag(bag)
    summary = summarize(data)
    # the cube's place over time and success (the sim's /tf), on the report's time axis
    # when the bag has the node's messages, else from the first ground truth
    has_run = bool(data.frames or data.chunks or data.requests)
    summary["task"] = task_summary(bag, time_origin(data) if has_run else None)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    plot_timeline(data, summary, out / "timeline.png", title)
    return summary
