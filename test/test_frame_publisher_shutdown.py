"""A publish that fails because the node's context was shut down (Ctrl-C or SIGTERM in the
middle of a frame) is shutdown, not a robot fault: nothing counted, nothing logged. The
same failure while the context lives is a fault. Real rclpy publishers and contexts; the
logger is a recording stand-in."""
import pytest


@pytest.mark.ros
def test_a_publish_failing_at_shutdown_is_not_a_fault():
    import rclpy
    from std_msgs.msg import String

    from oxygen_ros.node.frame_publisher import FramePublisher
    from oxygen_ros.node.loop_stats import LoopStats

    class Robot:                    # the one Runtime field fault() uses
        stats = LoopStats()

    logged = []

    class Log:
        def error(self, text, **_):
            logged.append(text)

    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("frame_publisher_shutdown", context=context)
    pub = node.create_publisher(String, "shutdown_probe", 1)
    publisher = FramePublisher(Robot, {"timing": pub}, node.get_clock(), lambda topic: Log(), 8, 0,
                               running=context.ok)
    publisher.fault("publishing FrameTiming", RuntimeError("a live fault"))
    assert Robot.stats.robot_faults == 1 and len(logged) == 1

    rclpy.shutdown(context=context)
    with pytest.raises(Exception) as failed:
        pub.publish(String(data="late"))
    publisher.fault("publishing FrameTiming", failed.value)
    assert Robot.stats.robot_faults == 1 and len(logged) == 1, logged
    node.destroy_node()
