"""Two processes exchange a sensor_msgs/Image and an oxygen_msgs/TextChunk over real DDS,
and one calls the other's AskProgress service.

Run by pytest; this file is also the peer program (`python test_ros_dds.py ROLE ...`).
"""

import time

import pytest

from ros_helpers import call_service, run_as_peer, run_peers, spin_until, unique_name

IMAGE_W, IMAGE_H = 4, 3
IMAGE_STEP = IMAGE_W * 3 + 4  # rgb8 rows padded by 4 bytes, as drivers may do
IMAGE_DATA = [(7 * i) % 256 for i in range(IMAGE_STEP * IMAGE_H)]
STAMP = (1_700_000_000, 123_456_789)
REQUEST_ID = 2**40 + 7  # needs all of uint64's width
DELTA = "picked up the cup → placing it on the shelf (é)"
QUESTION = "What have you done so far?"


# ----------------------------------------------------------------- peers

def server(prefix, *, deadline):
    """Publishes an Image and a TextChunk at 20 Hz and serves AskProgress.

    Publishing repeatedly (instead of once after a sleep) makes discovery timing
    irrelevant. Exits once it has answered a call and the client has left the graph.
    """
    import rclpy
    from oxygen_msgs.msg import TextChunk
    from oxygen_msgs.srv import AskProgress
    from sensor_msgs.msg import Image

    rclpy.init()
    node = rclpy.create_node(unique_name("oxygen_test_server"))
    image_pub = node.create_publisher(Image, f"{prefix}/image", 10)
    text_pub = node.create_publisher(TextChunk, f"{prefix}/narration", 10)
    questions = []

    def publish():
        image = Image(height=IMAGE_H, width=IMAGE_W, encoding="rgb8", step=IMAGE_STEP,
                      is_bigendian=0, data=bytes(IMAGE_DATA))
        image.header.stamp.sec, image.header.stamp.nanosec = STAMP
        image.header.frame_id = "camera_front"
        image_pub.publish(image)
        chunk = TextChunk(stream=TextChunk.STREAM_NARRATION, request_id=REQUEST_ID,
                          start_frame=42, delta=DELTA, token_count=17, done=True,
                          full_text="I " + DELTA)
        chunk.header.stamp = node.get_clock().now().to_msg()
        text_pub.publish(chunk)

    def on_ask(request, response):
        start = time.monotonic()
        questions.append(request.question)
        response.success = True
        response.answer = f"answer to: {request.question}"
        response.error = ""
        response.latency_s = time.monotonic() - start
        return response

    node.create_timer(0.05, publish)
    node.create_service(AskProgress, f"{prefix}/ask_progress", on_ask)
    try:
        spin_until(node, lambda: questions, deadline, "an AskProgress call")
        spin_until(node, lambda: node.count_subscribers(f"{prefix}/image") == 0, deadline,
                   "the client to leave the graph")
    finally:
        node.destroy_node()
        rclpy.shutdown()
    return {"questions": questions}


def client(prefix, *, deadline):
    """Waits for one Image and one TextChunk, then asks the server a question."""
    import rclpy
    from oxygen_msgs.msg import TextChunk
    from oxygen_msgs.srv import AskProgress
    from sensor_msgs.msg import Image

    rclpy.init()
    node = rclpy.create_node(unique_name("oxygen_test_client"))
    got = {}
    node.create_subscription(Image, f"{prefix}/image", lambda m: got.setdefault("image", m), 10)
    node.create_subscription(TextChunk, f"{prefix}/narration",
                             lambda m: got.setdefault("text", m), 10)
    ask = node.create_client(AskProgress, f"{prefix}/ask_progress")
    try:
        spin_until(node, lambda: len(got) == 2, deadline, "an Image and a TextChunk")
        response = call_service(node, ask, AskProgress.Request(question=QUESTION, timeout_s=0.0),
                                deadline, "the AskProgress response")
    finally:
        node.destroy_node()
        rclpy.shutdown()
    image, text = got["image"], got["text"]
    return {
        "image": {"height": image.height, "width": image.width, "encoding": image.encoding,
                  "step": image.step, "data": list(image.data), "frame_id": image.header.frame_id,
                  "stamp": [image.header.stamp.sec, image.header.stamp.nanosec]},
        "text": {"stream": text.stream, "request_id": text.request_id,
                 "start_frame": text.start_frame, "delta": text.delta,
                 "token_count": text.token_count, "done": text.done,
                 "full_text": text.full_text, "stamp_sec": text.header.stamp.sec},
        "response": {"success": response.success, "answer": response.answer,
                     "error": response.error, "latency_s": response.latency_s},
    }


# ----------------------------------------------------------------- test

@pytest.mark.ros
def test_image_textchunk_and_askprogress_between_processes():
    """An Image and a TextChunk arrive intact in another process; AskProgress round-trips."""
    prefix = "/" + unique_name("oxygen_test")
    results = run_peers(__file__, {"server": ["server", prefix], "client": ["client", prefix]})

    image = results["client"]["image"]
    assert (image["height"], image["width"], image["encoding"]) == (IMAGE_H, IMAGE_W, "rgb8")
    assert image["step"] == IMAGE_STEP and image["data"] == IMAGE_DATA
    assert image["frame_id"] == "camera_front" and tuple(image["stamp"]) == STAMP

    text = results["client"]["text"]
    assert text["stream"] == "narration"
    assert text["request_id"] == REQUEST_ID and text["start_frame"] == 42
    assert text["delta"] == DELTA and text["full_text"] == "I " + DELTA
    assert text["token_count"] == 17 and text["done"] is True
    assert text["stamp_sec"] > 0

    response = results["client"]["response"]
    assert response["success"] is True and response["error"] == ""
    assert response["answer"] == f"answer to: {QUESTION}"
    assert response["latency_s"] >= 0.0
    assert QUESTION in results["server"]["questions"]


if __name__ == "__main__":
    run_as_peer({"server": server, "client": client})
