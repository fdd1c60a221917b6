"""The task in a recorded run: where the cube was over time and whether the episode
succeeded, from the sim's ground truth on /tf (tools/sim_robot.py) by the place rule of
tools/cube_place.py. Any bag with the `world` -> `cube`, `bowl`, `gripper` transforms can
be scored so (`oxygen record` records /tf by default). ROS-free: rosbags + numpy.

Each TFMessage updates the latest pose of the frames it carries; every message after which
all three are known gives one place sample, at that message's stamp (the sim's clock).
"""
from __future__ import annotations

from . import cube_place
from .bag_recorder import TF
from .bag_read import bag_dir, typestore_for

FRAMES = ("cube", "bowl", "gripper")


def read_places(bag) -> tuple[list[float], list[str], int]:
    """(stamps s, places, TFMessages read) of the bag's world -> cube/bowl/gripper
    transforms, in stamp order."""
    from rosbags.rosbag2 import Reader

    latest, samples, count = {}, [], 0
    with Reader(bag_dir(bag)) as reader:
        wanted = [c for c in reader.connections if c.msgtype == TF]
        store = typestore_for(wanted)
        for conn, _, raw in reader.messages(connections=wanted) if wanted else ():   # [] = every one
            msg = store.deserialize_cdr(raw, conn.msgtype)
            count += 1
            stamp = None
            for t in msg.transforms:
                child = t.child_frame_id.lstrip("/")
                if t.header.frame_id.lstrip("/") == "world" and child in FRAMES:
                    v = t.transform.translation
                    latest[child] = (v.x, v.y, v.z)
                    stamp = t.header.stamp.sec + t.header.stamp.nanosec * 1e-9
            if stamp is not None and len(latest) == len(FRAMES):
                samples.append((stamp, cube_place.place(latest["cube"], latest["bowl"], latest["gripper"])))
    samples.sort(key=lambda s: s[0])
    return [s[0] for s in samples], [s[1] for s in samples], count


def task_summary(bag, t0: float | None = None) -> dict | None:
    """{"tf_messages", "places": [{"place", "start_s", "end_s"}], "final_place", "success"}
    with times in seconds since t0 (default: the first sample); None when the bag has no
    ground truth."""
    times, places, count = read_places(bag)
    if not places:
        return None
    t0 = times[0] if t0 is None else t0
    segs = cube_place.segments([t - t0 for t in times], places)
    for s in segs:
        s["start_s"], s["end_s"] = round(s["start_s"], 3), round(s["end_s"], 3)
    return {"tf_messages": count, "places": segs, "final_place": places[-1],
            "success": cube_place.success(places)}


def format_task(task: dict | None) -> str:
    """One line: "cube: table 0.0-5.1 s, gripper 5.1-8.0 s, bowl 8.0-12.0 s; success: yes"."""
    if task is None:
        return "cube: no ground truth in the bag (/tf from `oxygen sim`); success: unknown"
    runs = ", ".join(f"{s['place']} {s['start_s']:.1f}-{s['end_s']:.1f} s" for s in task["places"])
    return f"cube: {runs}; success: {'yes' if task['success'] else 'no'} (ends {cube_place.where(task['final_place'])})"
