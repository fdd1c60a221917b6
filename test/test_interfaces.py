"""The generated oxygen_msgs types import here, have the designed fields, are registered in
the ament index, and serialise through the real typesupport (CDR round trip)."""

import pytest

TEXT_CHUNK_FIELDS = {
    "header": "std_msgs/Header",
    "stream": "string",
    "request_id": "uint64",
    "start_frame": "uint64",
    "delta": "string",
    "token_count": "uint32",
    "done": "boolean",
    "full_text": "string",
}
FRAME_TIMING_FIELDS = {
    "header": "std_msgs/Header",
    "frame_index": "uint64",
    "observation_stamp": "builtin_interfaces/Time",
    "prefill_ms": "float",
    "action_ms": "float",
    "admit_ms": "float",
    "decode_ms": "float",
    "total_ms": "float",
    "decode_steps": "uint32",
    "live_requests": "uint32",
    "queued_requests": "uint32",
    "tokens_emitted": "uint32",
    "period_ms": "float",
    "deadline_missed": "boolean",
    "kv_bytes_in_use": "uint64",
    "chunk_ms": "float",
    "chunk_latency_ms": "float",
    "points_dropped": "uint32",
    "rtc_delay_steps": "uint32",
    "expert_names": "sequence<string>",
    "expert_action_ms": "sequence<float>",
}
ASK_REQUEST_FIELDS = {"question": "string", "timeout_s": "float"}
ASK_RESPONSE_FIELDS = {"success": "boolean", "answer": "string", "error": "string",
                       "latency_s": "float"}


def test_text_chunk_fields_and_stream_names():
    from oxygen_msgs.msg import TextChunk

    assert TextChunk.get_fields_and_field_types() == TEXT_CHUNK_FIELDS
    assert (TextChunk.STREAM_NARRATION, TextChunk.STREAM_MEMORY, TextChunk.STREAM_ANSWER) == (
        "narration", "memory", "answer")


def test_frame_timing_fields():
    from oxygen_msgs.msg import FrameTiming

    assert FrameTiming.get_fields_and_field_types() == FRAME_TIMING_FIELDS


def test_ask_progress_fields():
    from oxygen_msgs.srv import AskProgress

    assert AskProgress.Request.get_fields_and_field_types() == ASK_REQUEST_FIELDS
    assert AskProgress.Response.get_fields_and_field_types() == ASK_RESPONSE_FIELDS
    assert AskProgress.Request().timeout_s == 0.0  # 0 = the node's default


def test_interfaces_registered_in_ament_index():
    from ament_index_python import get_resource

    content, _ = get_resource("rosidl_interfaces", "oxygen_msgs")
    names = set(content.split())
    assert {"msg/TextChunk.msg", "msg/FrameTiming.msg", "srv/AskProgress.srv"} <= names


@pytest.mark.parametrize("make", ["text_chunk", "frame_timing", "ask_request", "ask_response"])
def test_cdr_round_trip(make):
    from oxygen_msgs.msg import FrameTiming, TextChunk
    from oxygen_msgs.srv import AskProgress
    from rclpy.serialization import deserialize_message, serialize_message

    messages = {
        "text_chunk": TextChunk(stream="memory", request_id=2**63 + 1, start_frame=9,
                                delta="ü→", token_count=3, done=False, full_text=""),
        "frame_timing": FrameTiming(frame_index=2**40, prefill_ms=12.5, action_ms=3.25,
                                    decode_steps=4, live_requests=2, queued_requests=1,
                                    tokens_emitted=8, period_ms=20.0, deadline_missed=True,
                                    kv_bytes_in_use=2**33),
        "ask_request": AskProgress.Request(question="what now?", timeout_s=1.5),
        "ask_response": AskProgress.Response(success=False, answer="", error="timeout",
                                             latency_s=1.5),
    }
    message = messages[make]
    assert deserialize_message(serialize_message(message), type(message)) == message
