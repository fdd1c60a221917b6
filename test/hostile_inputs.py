"""Hypothesis strategies for hostile inputs, shared by the property tests of the converters
(test_hostile_properties), of a running node over DDS (test_hostile_node) and of a running
`oxygen serve` (test_serve): camera images that lie, joint states with NaN, inf, duplicate
or missing names, questions empty, huge or full of control bytes, openpi wire messages."""
from __future__ import annotations

import math
import struct
import zlib

import msgpack
import numpy as np
from hypothesis import strategies as st
from sensor_msgs.msg import CompressedImage, JointState

from oxygen_ros.node.convert import ENCODINGS, MAX_IMAGE_SIDE, rgb_to_compressed, rgb_to_image
from oxygen_ros.serving.wire import pack, unpack

UINT32 = 2**32 - 1


def observation(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"observation/image": rng.integers(0, 256, (8, 8, 3), dtype=np.uint8),
            "observation/wrist_image": rng.integers(0, 256, (8, 8, 3), dtype=np.uint8),
            "observation/state": rng.uniform(-1, 1, 8), "prompt": "pick up the cube"}


def nested(depth: int, kind: str) -> bytes:
    """A message nested `depth` deep: arrays of one, or maps of one key, around nil."""
    head = b"\x91" if kind == "array" else b"\x81\xa1k"
    return head * depth + b"\xc0"


def many_small(count: int, fanout: int) -> bytes:
    """`count` empty arrays, as one array (fanout 0) or a tree of arrays of `fanout` (a
    decoding bomb: one byte each on the wire, a Python list each when decoded)."""
    if not fanout:
        return b"\xdd" + count.to_bytes(4, "big") + b"\x90" * count
    level, n = b"\x90", 1
    while n * fanout <= count:
        level, n = b"\xdc" + fanout.to_bytes(2, "big") + level * fanout, n * fanout
    return level


def giant_array(shape: list, dtype: str, data: bytes) -> bytes:
    return msgpack.packb({b"__ndarray__": True, b"data": data, b"dtype": dtype, b"shape": shape})


HOSTILE_WIRE = st.one_of(
    st.binary(max_size=256).map(lambda b: ("random", b)),
    st.tuples(st.integers(0, 2**16), st.floats(0, 1, exclude_max=True)).map(
        lambda t: ("truncated", (lambda m: m[:int(t[1] * len(m))])(pack(observation(t[0]))))),
    st.tuples(st.integers(1, 200_000), st.sampled_from(["array", "map"])).map(
        lambda t: ("nested", nested(*t))),
    st.tuples(st.lists(st.integers(0, 2**62), min_size=1, max_size=4), st.sampled_from(["<f4", "|u1", "<f8", "|O",
                                                                                       "<c8", "V8", "x"]),
              st.binary(max_size=64)).map(lambda t: ("giant", giant_array(*t))),
    st.tuples(st.integers(1, 300_000), st.sampled_from([0, 16, 64])).map(
        lambda t: ("many", many_small(*t))),
    # a bin 32 / str 32 / array 32 header declaring 4 GiB with a few bytes behind it
    st.sampled_from([b"\xc6\xff\xff\xff\xff", b"\xdb\xff\xff\xff\xff", b"\xdd\xff\xff\xff\xff",
                     b"\xdf\xff\xff\xff\xff"]).map(lambda h: ("declared", h + b"\x00" * 16)),
)


VALUES = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(),
                                st.text(max_size=20), st.binary(max_size=20),
                                st.builds(lambda shape, seed: np.random.default_rng(seed).standard_normal(shape)
                                          .astype(np.float32), st.lists(st.integers(0, 5), max_size=4),
                                          st.integers(0, 99))),
                      lambda inner: st.one_of(st.lists(inner, max_size=4),
                                              st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=12)


@st.composite
def observations(draw):
    """A LIBERO observation with some keys dropped or replaced by anything."""
    obs = observation(draw(st.integers(0, 99)))
    for key in draw(st.lists(st.sampled_from(sorted(obs)), max_size=4, unique=True)):
        action = draw(st.sampled_from(["drop", "replace"]))
        if action == "drop":
            del obs[key]
        else:
            obs[key] = draw(VALUES)
    return unpack(pack(obs)) if draw(st.booleans()) else obs     # also as the wire delivers it


# ----------------------------------------------------------------- camera images

SIDES = st.one_of(st.integers(0, 24), st.integers(MAX_IMAGE_SIDE - 2, MAX_IMAGE_SIDE + 2),
                  st.integers(MAX_IMAGE_SIDE + 1, UINT32))


@st.composite
def raw_images(draw):
    """(message, the RGB it carries or None when something lies): a valid image of a random
    8-bit encoding, then up to three lies about its size, step, encoding, byte order or data."""
    h, w = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    rgb = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).integers(0, 256, (h, w, 3), dtype=np.uint8)
    enc = draw(st.sampled_from(["rgb8", "bgr8", "rgba8", "bgra8"]))
    msg = rgb_to_image(rgb, enc, padding=draw(st.integers(0, 5)))
    lies = draw(st.lists(st.sampled_from(["height", "width", "step", "encoding", "data", "bigendian"]),
                         max_size=3, unique=True))
    for lie in lies:
        if lie == "height":
            msg.height = draw(SIDES)
        elif lie == "width":
            msg.width = draw(SIDES)
        elif lie == "step":
            msg.step = draw(st.one_of(st.integers(0, 64), st.integers(0, UINT32)))
        elif lie == "encoding":
            msg.encoding = draw(st.one_of(st.sampled_from(sorted(ENCODINGS) + ["yuv422", "16UC1", "RGB8 ", ""]),
                                          st.text(max_size=12)))
        elif lie == "data":
            msg.data = draw(st.binary(max_size=2048))
        else:
            msg.is_bigendian = 1
    honest = not lies or lies == ["bigendian"]
    return msg, (rgb if honest else None)


def _png_with_size(data: bytes, w: int, h: int, fix_crc: bool) -> bytes:
    ihdr = b"IHDR" + struct.pack(">II", w, h) + data[24:29]
    crc = struct.pack(">I", zlib.crc32(ihdr)) if fix_crc else data[29:33]
    return data[:12] + ihdr + crc + data[33:]


def _jpeg_with_size(data: bytes, w: int, h: int) -> bytes:
    sof = data.find(b"\xff\xc0")
    return data[:sof + 5] + struct.pack(">HH", h, w) + data[sof + 9:]


HEADER_SIDES = st.one_of(st.integers(1, 40), st.integers(MAX_IMAGE_SIDE + 1, 65535))


@st.composite
def compressed_images(draw):
    """(message, the RGB it carries or None when something lies, the size its header
    declares when only the header lies): a valid JPEG or PNG, then lies about its format,
    header size, length or bytes, or no image at all."""
    h, w = draw(st.integers(1, 24)), draw(st.integers(1, 24))
    rgb = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).integers(0, 256, (h, w, 3), dtype=np.uint8)
    kind = draw(st.sampled_from(["png", "jpeg"]))
    data = bytes(rgb_to_compressed(rgb, kind, msg=CompressedImage()).data)
    fmt = draw(st.sampled_from([kind, f"rgb8; {kind} compressed bgr8"]))
    lie = draw(st.sampled_from(["none", "size", "format", "truncate", "flip", "junk", "random"]))
    declared = None
    if lie == "size":
        dw, dh = draw(HEADER_SIDES), draw(HEADER_SIDES)
        data = _png_with_size(data, dw, dh, draw(st.booleans())) if kind == "png" else _jpeg_with_size(data, dw, dh)
        declared = (dh, dw)
    elif lie == "format":
        fmt = draw(st.one_of(st.sampled_from(["png" if kind == "jpeg" else "jpeg", "tiff", "",
                                              "16UC1; compressedDepth png"]), st.text(max_size=20)))
    elif lie == "truncate":
        data = data[:draw(st.integers(0, len(data) - 1))]
    elif lie == "flip":
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, len(data) - 1))
            data = data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1:]
    elif lie == "junk":
        data = data + draw(st.binary(min_size=1, max_size=256))
    elif lie == "random":
        data = draw(st.binary(max_size=512))
    msg = CompressedImage(format=fmt, data=data)
    return msg, (rgb if lie == "none" else None), kind, declared


# ----------------------------------------------------------------- joint states

JOINTS = ["joint_1", "joint_2", "joint_3", "gripper"]      # what the property tests ask for
POSITIONS = st.one_of(st.floats(-10, 10), st.sampled_from([math.nan, math.inf, -math.inf]))


@st.composite
def joint_states(draw, joints):
    """A joint state over `joints` and two others, maybe with names missing, repeated or
    without a position, and NaN or inf among the positions."""
    names = draw(st.lists(st.sampled_from(joints + ["wrist", "base"]), max_size=len(joints) + 3))
    if draw(st.booleans()):                                  # mostly complete, in any order
        everyone = draw(st.permutations(joints + ["wrist"]))
        names = everyone[:draw(st.integers(len(joints) - 1, len(joints) + 1))] + names[:1]
    count = len(names) + draw(st.sampled_from([0, 0, 0, -1, 1]))
    positions = draw(st.lists(POSITIONS, min_size=max(0, count), max_size=max(0, count)))
    return JointState(name=list(names), position=positions)


def joint_state_ok(msg, joints) -> bool:
    """The rule, stated independently of convert.joint_positions: every wanted joint once, as
    many positions as names, finite values for the wanted joints (others may be anything)."""
    names, pos = list(msg.name), list(msg.position)
    return (len(names) == len(pos) and len(set(names)) == len(names) and set(joints) <= set(names)
            and all(math.isfinite(pos[names.index(j)]) for j in joints))


# ----------------------------------------------------------------- questions

CONTROL = [chr(c) for c in list(range(32)) + list(range(127, 160))]
QUESTIONS = st.one_of(
    st.text(max_size=80),
    st.text(alphabet=st.sampled_from(CONTROL + list("what now? ")), max_size=40),
    st.builds(lambda c, n: c * n, st.sampled_from(["a", "why ", "\x1b", " "]), st.integers(0, 200_000)))
