"""oxygen_ros: onboard vision-language-action inference for ROS 2 (OxyGen method).

`oxygen_ros.engine` is the ROS-free model and scheduler; the modules at this level are
the ROS node, its adapters and the `oxygen` command-line tool.
"""
