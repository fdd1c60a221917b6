"""`oxygen report BAG --video`: a captioned MP4 and a still from a bag with known content.

The bag (MCAP, written with rosbags like test_report.py) holds 3 s of a 5 Hz scene camera
(64x48 JPEG, a blue square moving over grey), a wrist camera that is all red (listed
first: the default must still take the base camera), two action chunks and narration,
memory and answer text at known times.
"""
import numpy as np
import pytest

from oxygen_ros.cli import main
from oxygen_ros.tools import report_video as rv

T0 = 1_700_000_000.0
CAMERA_HZ, CAMERA_FRAMES = 5, 15          # images at 0.0, 0.2 ... 2.8 s
CHUNKS_AT = (0.45, 1.85)                  # video frames 3 (0.6 s) and 10 (2.0 s) are marked
BASE = "/camera/base/image_raw/compressed"
WRIST = "/camera/wrist/image_raw/compressed"
# (stream, request id, time s, delta, done, full_text)
TEXT = [("memory", 1, 0.3, "Saw a cube.", True, "Saw a cube."),
        ("narration", 2, 1.0, "The robot", False, ""),
        ("narration", 2, 1.3, " reaches out.", True, "The robot reaches out."),
        ("answer", 3, 2.2, "I moved the cube.", True, "I moved the cube.")]


def write_bag(path, cameras=True):
    import simplejpeg
    from rosbags.rosbag2 import StoragePlugin, Writer

    from oxygen_ros.tools.bag_types import typestore

    store = typestore()
    T = store.types
    Time, Duration = T["builtin_interfaces/msg/Time"], T["builtin_interfaces/msg/Duration"]

    def header(t):
        t += T0
        return T["std_msgs/msg/Header"](stamp=Time(sec=int(t), nanosec=int(round((t - int(t)) * 1e9))), frame_id="")

    empty = np.zeros(0)
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as w:
        names = [("/joint_trajectory", "trajectory_msgs/msg/JointTrajectory")]
        names += [(f"/{s}", "oxygen_msgs/msg/TextChunk") for s in ("narration", "memory", "answer")]
        names += [(WRIST, rv.CAMERA), (BASE, rv.CAMERA)] if cameras else []
        conns = {topic: w.add_connection(topic, msgtype, typestore=store) for topic, msgtype in names}
        messages = []
        for i in range(CAMERA_FRAMES if cameras else 0):
            t = i / CAMERA_HZ
            img = np.full((48, 64, 3), 128, np.uint8)
            img[10:26, 4 + 3 * i:20 + 3 * i] = (0, 0, 255)            # the moving square
            for topic, rgb in ((BASE, img), (WRIST, np.full_like(img, (255, 0, 0)))):
                data = np.frombuffer(simplejpeg.encode_jpeg(rgb, quality=90, colorspace="RGB"), np.uint8)
                messages.append((t, topic, T[rv.CAMERA](header=header(t), format="jpeg", data=data)))
        for t in CHUNKS_AT:
            point = T["trajectory_msgs/msg/JointTrajectoryPoint"](
                positions=np.zeros(1), velocities=empty, accelerations=empty, effort=empty,
                time_from_start=Duration(sec=0, nanosec=100_000_000))
            messages.append((t, "/joint_trajectory", T["trajectory_msgs/msg/JointTrajectory"](
                header=header(t), joint_names=["a"], points=[point])))
        for stream, rid, t, delta, done, full in TEXT:
            messages.append((t, f"/{stream}", T["oxygen_msgs/msg/TextChunk"](
                header=header(t), stream=stream, request_id=rid, start_frame=0, delta=delta,
                token_count=len(delta.split()), done=done, full_text=full)))
        for t, topic, msg in sorted(messages, key=lambda m: m[0]):
            w.write(conns[topic], int((T0 + t) * 1e9) + 1_000_000, store.serialize_cdr(msg, conns[topic].msgtype))


def marked(frame) -> bool:
    """The marker border: the top rows of the image are orange."""
    strip = frame[2:rv.BORDER - 2, :, :].reshape(-1, 3).astype(float)
    return bool(np.abs(strip.mean(0) - rv.MARKER_COLOR).max() < 30)


def narration_ink(frame) -> int:
    """Dark pixels in the narration text lines (right of the label) of the caption panel."""
    y = rv.HEIGHT + 6 + rv.LINE_H
    region = frame[y:y + 2 * rv.LINE_H, 110:, :]
    return int((region.max(axis=2) < 100).sum())


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    """The bag, and `oxygen report BAG --video` run through the CLI once."""
    tmp = tmp_path_factory.mktemp("video")
    write_bag(tmp / "bag")
    mp4 = tmp / "clips" / "run.mp4"
    rc = main(["report", str(tmp / "bag"), "--out", str(tmp / "rep"), "--video", str(mp4)])
    return tmp, mp4, rc


def test_video_frames_fps_and_size_follow_the_camera(video, capsys):
    import imageio.v2 as imageio

    tmp, mp4, rc = video
    assert rc == 0
    assert (tmp / "rep" / "summary.json").is_file() and (tmp / "rep" / "timeline.png").is_file()
    with imageio.get_reader(mp4, format="FFMPEG") as reader:
        fps = reader.get_meta_data()["fps"]
        frames = [np.asarray(f) for f in reader]
    assert fps == pytest.approx(CAMERA_HZ)
    # one video frame per camera image: length = the camera's span + one frame
    assert len(frames) == CAMERA_FRAMES
    assert len(frames) / fps == pytest.approx((CAMERA_FRAMES - 1) / CAMERA_HZ + 1 / CAMERA_HZ)
    h, w, _ = frames[0].shape
    assert (h, w) == (rv.HEIGHT + rv.PANEL_H, 640) and h % 2 == 0 and w % 2 == 0
    # the base camera (grey, a blue square), not the red wrist camera listed first
    centre = frames[0][rv.HEIGHT // 2 - 50:rv.HEIGHT // 2 + 50, 400:500].reshape(-1, 3).mean(0)
    assert np.abs(centre - 128).max() < 20
    # the square moves: the image differs between the first and the last frame
    assert np.abs(frames[0][:rv.HEIGHT].astype(int) - frames[-1][:rv.HEIGHT]).mean() > 5


def test_captions_accumulate_and_chunks_are_marked(video):
    import imageio.v2 as imageio

    _, mp4, _ = video
    with imageio.get_reader(mp4, format="FFMPEG") as reader:
        frames = [np.asarray(f) for f in reader]
    # narration: nothing at 0.8 s, "The robot" at 1.0 s, the whole sentence from 1.4 s on
    before, first, whole = (narration_ink(frames[k]) for k in (4, 5, 7))
    assert before < 20 < first < whole
    # a chunk at 0.45 s marks the frame at 0.6 s only; one at 1.85 s the frame at 2.0 s
    assert [k for k, f in enumerate(frames) if marked(f)] == [3, 10]


def test_caption_texts_so_far(tmp_path):
    from oxygen_ros.tools.bag_read import read_bag

    write_bag(tmp_path / "bag")
    caps = rv.Captions(read_bag(tmp_path / "bag"), T0, rv.MARK_S)
    assert caps.at(T0 + 0.9).texts == {"narration": "", "memory": "Saw a cube.", "answer": ""}
    assert caps.at(T0 + 1.1).texts["narration"] == "The robot"
    c = caps.at(T0 + 2.5)
    assert c.texts == {"narration": "The robot reaches out.", "memory": "Saw a cube.", "answer": "I moved the cube."}
    assert (c.chunk, c.marked, caps.at(T0 + 1.9).marked, c.t) == (2, False, True, pytest.approx(2.5))


def test_still_is_a_marked_frame_from_the_middle(video):
    from PIL import Image

    _, mp4, _ = video
    png = mp4.with_suffix(".png")
    still = np.asarray(Image.open(png).convert("RGB"))
    assert still.shape == (rv.HEIGHT + rv.PANEL_H, 640, 3)
    # 2.0 s: the chunk marked in the middle half of the run, with narration and memory shown
    assert marked(still) and narration_ink(still) > 20


def test_video_camera_option_and_errors(tmp_path, capsys):
    import imageio.v2 as imageio

    write_bag(tmp_path / "bag")
    assert main(["report", str(tmp_path / "bag"), "--out", str(tmp_path / "rep"), "--video",
                 str(tmp_path / "w.mp4"), "--video-camera", WRIST]) == 0
    with imageio.get_reader(tmp_path / "w.mp4", format="FFMPEG") as reader:
        first = np.asarray(reader.get_data(0))
    centre = first[rv.HEIGHT // 2 - 50:rv.HEIGHT // 2 + 50, 270:370].reshape(-1, 3).mean(0)
    assert centre[0] > 200 and centre[1] < 60                       # the red wrist camera
    capsys.readouterr()
    assert main(["report", str(tmp_path / "bag"), "--video", str(tmp_path / "x.mp4"),
                 "--video-camera", "/camera/nope/compressed"]) == 2
    err = capsys.readouterr().err
    assert "/camera/nope/compressed" in err and BASE in err and WRIST in err
    write_bag(tmp_path / "plain", cameras=False)
    assert main(["report", str(tmp_path / "plain"), "--video", str(tmp_path / "y.mp4")]) == 2
    assert "oxygen record --cameras" in capsys.readouterr().err
    assert not (tmp_path / "x.mp4").exists() and not (tmp_path / "y.mp4").exists()
