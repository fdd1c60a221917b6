"""Inputs built to hurt: a small JPEG or PNG that declares an enormous size (a decompression
bomb) is refused from its header, before any decoding, without allocating the declared size;
so is a raw image that declares one."""
import io
import struct
import tracemalloc
import zlib

import numpy as np
import pytest
from sensor_msgs.msg import CompressedImage, Image

from oxygen_ros.node.convert import MAX_IMAGE_SIDE, InputError, check_compressed, compressed_to_rgb, rgb_to_compressed

HUGE = 60_000          # 60000 x 60000 RGB: 10.8 GB if decoded


def _png_declaring(w: int, h: int) -> bytes:
    """A valid tiny PNG whose IHDR (with a correct CRC) declares w x h."""
    png = rgb_to_compressed(np.zeros((2, 2, 3), np.uint8), "png", msg=CompressedImage()).data
    png = bytes(png)
    ihdr = b"IHDR" + struct.pack(">II", w, h) + png[24:29]
    return png[:8] + struct.pack(">I", 13) + ihdr + struct.pack(">I", zlib.crc32(ihdr)) + png[33:]


def _jpeg_declaring(w: int, h: int) -> bytes:
    """A tiny JPEG whose SOF0 frame header declares w x h."""
    data = bytearray(rgb_to_compressed(np.zeros((8, 8, 3), np.uint8), "jpeg", msg=CompressedImage()).data)
    sof = data.find(b"\xff\xc0")
    assert sof > 0
    data[sof + 5:sof + 9] = struct.pack(">HH", h, w)
    return bytes(data)


@pytest.mark.parametrize("fmt,data", [("png", _png_declaring(HUGE, HUGE)), ("jpeg", _jpeg_declaring(HUGE, HUGE)),
                                      ("png", _png_declaring(MAX_IMAGE_SIDE + 1, 4))],
                         ids=["png-bomb", "jpeg-bomb", "png-too-wide"])
def test_a_decompression_bomb_is_refused_from_its_header(fmt, data):
    msg = CompressedImage(format=fmt, data=data)
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match="refused without decoding"):
            check_compressed(msg)
        with pytest.raises(InputError, match="refused without decoding"):
            compressed_to_rgb(msg)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak} bytes allocated for a refused image"


def test_an_image_at_the_limit_still_decodes():
    msg = CompressedImage(format="png", data=_png_declaring(2, 2))
    assert check_compressed(msg)[1:] == (2, 2)


def test_a_raw_image_declaring_an_enormous_size_is_refused():
    msg = Image(height=HUGE, width=HUGE, encoding="rgb8", step=3 * HUGE, data=b"\0" * 12)
    with pytest.raises(InputError, match="refused without decoding"):
        from oxygen_ros.node.convert import image_to_rgb

        image_to_rgb(msg)


@pytest.mark.parametrize("question,problem", [("", "empty question"), ("what\x00 now", "control characters (U+0000)"),
                                              ("clear\x1b[2J\x7f", "control characters (U+001B, U+007F)"),
                                              ("what have you done?", ""), ("qué has hecho? 你做了什么", "")])
def test_questions_with_control_characters_never_reach_the_model(question, problem):
    from oxygen_ros.engine.text.memory_log import question_problem

    got = question_problem(question)
    assert problem in got and bool(got) == bool(problem), got
