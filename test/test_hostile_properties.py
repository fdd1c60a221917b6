"""Property-based tests (hypothesis) of what the node and `oxygen serve` do with hostile input:
camera images with lying sizes, steps, encodings and bytes, joint states with NaN, inf,
duplicate or missing names, questions empty, huge or full of control bytes, and openpi wire
messages truncated, nested as bombs or declaring giant arrays.

The property everywhere: a bad input raises the one error type its caller turns into a log
line or an error reply (convert.InputError, wire.WireError, robot_inputs.InputError), with
a message; a good one gives exactly the values it carries; memory stays within a small bound
of the message's own size (a header cannot make us allocate what it declares; wire messages
are decoded with the server's schema limits, without which a message of many one-byte empty
arrays costs ~60 times its size). Examples are
bounded (max_examples) so the suite keeps its time; the example database is off, so every
run draws afresh (hypothesis keeps only its caches, in .hypothesis/, which ignores itself).

Over DDS, the same inputs against a running node: test_node_inputs, test_hostile_node.
"""
from __future__ import annotations

import tracemalloc

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sensor_msgs.msg import CompressedImage

from oxygen_ros.engine.text.memory_log import question_problem
from oxygen_ros.node.convert import (MAX_IMAGE_SIDE, InputError, check_compressed, compressed_to_rgb, image_to_rgb,
                                     joint_positions, rgb_to_compressed)
from oxygen_ros.serving import robot_inputs
from oxygen_ros.serving.wire import WireError, pack, unpack

from hostile_inputs import (CONTROL, HOSTILE_WIRE, JOINTS, QUESTIONS, compressed_images, giant_array, joint_state_ok,
                            joint_states, observation, observations, raw_images)

SERVER_LIMITS = robot_inputs.wire_limits(robot_inputs.INPUTS["libero"], 32 << 20)   # as oxygen serve decodes
PROPERTY = settings(max_examples=300, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])



class Peak:
    """tracemalloc's peak (bytes) over a block: numpy's and Python's allocations."""

    def __enter__(self):
        tracemalloc.start()
        return self

    def __exit__(self, *exc):
        self.bytes = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()


def outcome(fn, *args, errors=(InputError,)):
    """(result, None) or (None, the error's message); any other exception fails the test."""
    try:
        return fn(*args), None
    except errors as e:
        assert str(e), f"{type(e).__name__} without a message"
        return None, str(e)


def measured(fn, *args, errors=(InputError,)):
    """(outcome, traced peak bytes) of a second call: the first may import modules once."""
    outcome(fn, *args, errors=errors)
    with Peak() as peak:
        result = outcome(fn, *args, errors=errors)
    return result, peak.bytes


# ----------------------------------------------------------------- raw Image

@PROPERTY
@given(raw_images())
def test_a_raw_image_is_its_pixels_or_refused_with_a_reason(case):
    msg, rgb = case
    (out, error), peak = measured(image_to_rgb, msg)
    if rgb is not None:
        assert error is None and np.array_equal(out, rgb)
    if out is not None:       # a lie that still describes the bytes consistently (e.g. fewer rows)
        assert out.shape == (msg.height, msg.width, 3) and out.dtype == np.uint8
        assert msg.height * msg.step == len(msg.data)
    if msg.height > MAX_IMAGE_SIDE or msg.width > MAX_IMAGE_SIDE:
        assert error is not None
    # within a small multiple of the bytes the message brings, whatever it declares
    assert peak < 4 * len(msg.data) + (64 << 10), (peak, msg.height, msg.width, msg.step)


# ----------------------------------------------------------------- CompressedImage

@pytest.fixture(scope="module", autouse=True)
def decoders_loaded():
    """The decoders import their modules on first use; not an allocation of the input's."""
    for kind in ("jpeg", "png"):
        compressed_to_rgb(rgb_to_compressed(np.zeros((4, 4, 3), np.uint8), kind, msg=CompressedImage()))


@PROPERTY
@given(compressed_images())
def test_a_compressed_image_decodes_to_its_header_size_or_is_refused(case):
    msg, rgb, kind, declared = case
    (out, error), peak = measured(compressed_to_rgb, msg)
    if rgb is not None:
        assert error is None and out.shape == rgb.shape
        if kind == "png":                                    # lossless
            assert np.array_equal(out, rgb)
    if out is not None:
        _, h, w = check_compressed(msg)
        assert out.shape == (h, w, 3) and out.dtype == np.uint8 and max(h, w) <= MAX_IMAGE_SIDE
    if declared is not None and max(declared) > MAX_IMAGE_SIDE:
        # a decompression bomb: refused from the header (its size, or a header the JPEG
        # reader will not take), nothing decoded
        assert error is not None and ("refused without decoding" in error or "corrupt JPEG header" in error), error
    assert peak < (1 << 20), peak


# ----------------------------------------------------------------- JointState

@PROPERTY
@given(joint_states(JOINTS))
def test_a_joint_state_gives_the_named_positions_or_is_refused(msg):
    out, error = outcome(joint_positions, msg, JOINTS)
    names, pos = list(msg.name), list(msg.position)
    ok = joint_state_ok(msg, JOINTS)
    assert (error is None) == ok, (names, pos, error)
    if ok:
        assert out.tolist() == [pos[names.index(j)] for j in JOINTS]
    elif len(names) != len(pos):
        assert "names but" in error
    elif len(set(names)) != len(names):
        assert "twice" in error
    elif not set(JOINTS) <= set(names):
        assert "missing joint(s)" in error
    else:
        assert "non-finite position(s)" in error


# ----------------------------------------------------------------- questions

@PROPERTY
@given(QUESTIONS)
def test_a_question_is_asked_only_when_it_has_text_and_no_control_bytes(question):
    collapsed = " ".join(question.split())                   # what the service and serve do first
    problem = question_problem(collapsed)
    if not collapsed:
        assert problem == "empty question"
    elif any(c in CONTROL for c in collapsed):
        assert problem.startswith("question contains control characters (U+"), problem
    else:
        assert problem == ""


# ----------------------------------------------------------------- the openpi wire

@PROPERTY
@given(HOSTILE_WIRE)
def test_a_hostile_wire_message_is_a_wire_error_or_a_small_object(case):
    """Decoded as `oxygen serve` decodes (the observation schema's limits): msgpack alone
    would turn each one-byte empty array of a "many" bomb into a ~60-byte list."""
    kind, data = case
    (obj, error), peak = measured(unpack, data, SERVER_LIMITS, errors=(WireError,))
    if kind in ("truncated", "declared"):
        assert error is not None
    if kind == "many" and len(data) > 1024:
        assert error is not None
    if kind == "giant" and obj is not None:                  # only when the bytes match the shape
        assert obj.nbytes == len(msgpack.unpackb(data)[b"data"])
    assert peak < 8 * len(data) + (256 << 10), (kind, len(data), peak)


@PROPERTY
@given(st.integers(0, 2**32 - 1))
def test_every_proper_prefix_of_a_message_is_refused(seed):
    data = pack(observation(seed))
    for n in sorted({0, 1, len(data) // 2, len(data) - 1, *np.random.default_rng(seed).integers(0, len(data), 8)}):
        assert outcome(unpack, data[:n], errors=(WireError,))[1] is not None, n
    assert np.array_equal(unpack(data)["observation/state"], observation(seed)["observation/state"])


@PROPERTY
@given(observations())
def test_a_hostile_observation_is_repacked_or_refused_naming_the_key(obs):
    inputs = robot_inputs.INPUTS["libero"]
    slots = ["base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb"]
    out, error = outcome(robot_inputs.repack, obs, inputs, slots, errors=(robot_inputs.InputError,))
    if error is None:
        images, state, prompt = out
        assert all(v.dtype == np.uint8 and v.ndim == 3 and v.shape[2] == 3 for v in images.values())
        assert np.isfinite(state).all() and isinstance(prompt, str)
    else:
        assert any(key in error for key in inputs.keys + ["observation"]), error


@pytest.mark.parametrize("shape", [[2**31, 2**31], [0, 2**62], [2**40]])
def test_a_giant_array_declaration_allocates_nothing(shape):
    data = giant_array(shape, "<f4", b"\0" * 16)
    with Peak() as peak:
        with pytest.raises(WireError, match="needs"):
            unpack(data)
    assert peak.bytes < (64 << 10), peak.bytes
