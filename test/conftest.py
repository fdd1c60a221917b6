"""Session-wide set-up, applied at import time, before any test can initialise rclpy.

DDS traffic stays on this machine (Jazzy reads ROS_LOCALHOST_ONLY, Kilted and later
ROS_AUTOMATIC_DISCOVERY_RANGE; both are set) on a domain chosen at random for this
test session, so parallel runs on one machine do not see each other. The variables
are in os.environ, so every subprocess a test starts inherits them.
"""

import os
import random
import sys

os.environ["ROS_LOCALHOST_ONLY"] = "1"
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["ROS_DOMAIN_ID"] = str(random.SystemRandom().randint(1, 100))
# The venv is the ROS prefix here (what sourcing a ROS setup file would export).
os.environ.setdefault("AMENT_PREFIX_PATH", sys.prefix)


def pytest_report_header(config):
    return (f"ROS_DOMAIN_ID={os.environ['ROS_DOMAIN_ID']} ROS_LOCALHOST_ONLY=1 "
            "ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST")
