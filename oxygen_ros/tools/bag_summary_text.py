"""A run's summary (tools/bag_summary.summarize) as the few lines `oxygen report` and
`oxygen demo` print."""
from __future__ import annotations

from .bag_parameters import format_changes

def format_summary(s: dict) -> str:
    """A few lines a person reads in a terminal."""
    def f(x, fmt="{:.1f}"):
        return "-" if x is None else fmt.format(x)

    c, fr, lang = s["chunks"], s["frames"], s["language"]
    iv = c["interval_ms"]
    lines = [
        f"action chunks: {c['count']} in {f(s['duration_s'])} s, {f(c['achieved_rate_hz'], '{:.2f}')} Hz "
        f"(target {f(c['target_rate_hz'], '{:.2f}')} Hz); interval ms mean {f(iv['mean'])} "
        f"p50 {f(iv['p50'])} p95 {f(iv['p95'])} max {f(iv['max'])}",
        f"frames: {fr['count']}, deadline misses {fr['deadline_misses']}"
        + (f", skipped ticks {fr['skipped_ticks']}" if fr["skipped_ticks"] is not None else "")
        + f"; frame ms p50 {f(fr['total_ms']['p50'])} p95 {f(fr['total_ms']['p95'])}; mean split "
        + " / ".join(f"{ph} {f(v)}" for ph, v in fr["phase_ms_mean"].items())
        + "".join(f" / action:{n} {f(v)}" for n, v in fr.get("expert_action_ms_mean", {}).items()),
        f"language: {lang['requests']} requests ({lang['done']} done), {lang['tokens']} tokens, "
        f"{f(lang['tokens_per_s'])} tok/s",
    ]
    held, miss = s.get("rate_held"), fr["deadline_miss_fraction"]
    if held is not None:
        lines.insert(2, (f"rate held: {f(c['achieved_rate_hz'], '{:.2f}')} of {f(c['target_rate_hz'], '{:.2f}')} Hz, "
                         f"{100 * miss:.1f}% of frames over their deadline" if held else
                         f"RATE NOT HELD: {f(c['achieved_rate_hz'], '{:.2f}')} of {f(c['target_rate_hz'], '{:.2f}')} Hz, "
                         f"{fr['deadline_misses']} of {fr['count']} frames ({100 * miss:.1f}%) over their "
                         f"{f(fr['period_ms'], '{:.0f}')} ms deadline: lower control_rate_hz or steps_per_frame"))
    rt = s.get("robot_time")
    if rt:
        lat, j = rt["chunk_latency_ms"], rt["boundary_jumps"]
        lines.append(
            f"robot time: chunk latency ms p50 {f(lat['p50'])} p95 {f(lat['p95'])} (observation to "
            f"trajectory; frame p50 {f(rt['frame_total_ms']['p50'])}), {rt['points_dropped']} past points dropped, "
            f"RTC on {rt['rtc_guided_frames']} frames; boundary jumps at {j['count']} switches: position max "
            f"{f(j['position_max'], '{:.4f}')} p95 {f(j['position_p95'], '{:.4f}')} rad, velocity max "
            f"{f(j['velocity_max'], '{:.3f}')} p95 {f(j['velocity_p95'], '{:.3f}')} rad/s"
            + (f"; {rt['trajectories_rejected']} trajectories REJECTED by the controller"
               if rt["trajectories_rejected"] else ""))
        planned = rt["points_dropped"] + rt.get("points_published", 0)
        if planned and rt["points_dropped"] > 0.75 * planned:    # (a 2-core demo at 64% still succeeded)
            lines.append(
                f"MOST OF EACH CHUNK WAS PAST ON ARRIVAL: {rt['points_dropped']} of {planned} planned points "
                f"({100 * rt['points_dropped'] / planned:.0f}%) were older than their chunk's publication "
                f"(chunk latency p50 {f(lat['p50'])} ms): the arm ran only the rest. A machine that computes "
                "chunks faster (a GPU) or lock-step sim time (`oxygen eval --clock sim`) runs the policy as trained")
        arm = rt.get("arm")
        if arm:
            te, sw = arm["tracking_error"], arm["switches"]
            lines.append(
                f"arm ({arm['joint_states']} joint states): tracking error rms {f(te['rms'], '{:.4f}')} max "
                f"{f(te['max'], '{:.4f}')}; at {sw['actual']['count']} switches, velocity change max/p95 "
                f"commanded {f(sw['commanded']['velocity_change_max'], '{:.3f}')}/"
                f"{f(sw['commanded']['velocity_change_p95'], '{:.3f}')} vs actual "
                f"{f(sw['actual']['velocity_change_max'], '{:.3f}')}/{f(sw['actual']['velocity_change_p95'], '{:.3f}')}"
                f", course deviation commanded {f(sw['commanded']['course_deviation_max'], '{:.4f}')}/"
                f"{f(sw['commanded']['course_deviation_p95'], '{:.4f}')} vs actual "
                f"{f(sw['actual']['course_deviation_max'], '{:.4f}')}/{f(sw['actual']['course_deviation_p95'], '{:.4f}')}")
    ex = s.get("experts")
    if ex:
        if ex["note"]:
            lines.append(f"NOTE: {ex['note']}")
        first = ex["first"]
        lines.append(f"action experts (latency: header stamp to receipt by the recorder): first "
                     f"{ex['trajectory_topic']}: {first['count']} chunks, latency ms p50 "
                     f"{f(first['receive_latency_ms']['p50'])}")
        lines += [f"  expert {topic}: {e['count']} chunks, latency ms p50 {f(e['receive_latency_ms']['p50'])}"
                  for topic, e in ex["by_topic"].items()]
    for stream, b in lang["by_stream"].items():
        lines.append(f"  {stream}: {b['done']}/{b['requests']} done; first token {f(b['seconds_to_first_token_mean'], '{:.2f}')} s, "
                     f"done {f(b['seconds_to_done_mean'], '{:.2f}')} s ({f(b['frames_to_done_mean'])} frames), "
                     f"{f(b['tokens_per_s_mean'])} tok/s per request")
    lines += format_changes(s.get("parameter_changes", []))
    return "\n".join(lines)
