"""Engine text deltas -> one TextChunk per request per frame."""
from __future__ import annotations

from .engine.requests import TextDelta


def merge_deltas(deltas: list[TextDelta]) -> list[TextDelta]:
    """Join a frame's deltas per request (a request yields one delta per decoded token),
    keeping the order in which requests first appear. The joined deltas of a request,
    concatenated over frames, equal its full text."""
    merged: dict[int, TextDelta] = {}
    for d in deltas:
        m = merged.get(d.request_id)
        if m is None:
            merged[d.request_id] = TextDelta(d.request_id, d.stream, d.start_frame, d.delta,
                                             d.token_count, d.done, d.full_text, d.error)
            continue
        m.delta += d.delta
        m.token_count = d.token_count
        m.done = m.done or d.done
        m.full_text = d.full_text or m.full_text
        m.error = d.error or m.error
    return list(merged.values())


def to_msg(d: TextDelta, stamp, msg_type):
    """A merged delta as an oxygen_msgs/TextChunk (`msg_type`), stamped `stamp`."""
    msg = msg_type()
    msg.header.stamp = stamp
    msg.stream = d.stream
    msg.request_id = max(0, int(d.request_id))
    msg.start_frame = max(0, int(d.start_frame))
    msg.delta = d.delta
    msg.token_count = int(d.token_count)
    msg.done = bool(d.done)
    msg.full_text = d.full_text if d.done else ""
    return msg
