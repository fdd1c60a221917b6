"""The demo on ROS 2: simulated robot + oxygen_node (config/smol_panda.yaml: the policy trained
here, on the CPU).

    ros2 launch oxygen_ros demo.launch.py [record:=true]
    ros2 service call /oxygen_node/ask_progress oxygen_msgs/srv/AskProgress "{question: 'what have you done?'}"

humanoid_thor.launch.py with the trained demo profile (the same lifecycle handling, namespace
and record arguments), plus `oxygen sim` (the MuJoCo Panda) publishing the cameras and
joint states the profile names, at the rates `oxygen demo` uses. `oxygen demo` does all
of this without launch, asks the question and writes the report.
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess, IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.substitutions import ExecutableInPackage, FindPackageShare


def generate_launch_description():
    share = FindPackageShare("oxygen_ros")
    params = LaunchConfiguration("params_file")
    namespace = LaunchConfiguration("namespace")
    return LaunchDescription([
        DeclareLaunchArgument("params_file", default_value=PathJoinSubstitution([share, "config", "smol_panda.yaml"]),
                              description="the node's params file; the sim takes its joints and topics from it"),
        DeclareLaunchArgument("namespace", default_value="/", description="namespace of the node, the sim and topics"),
        DeclareLaunchArgument("record", default_value="false", description="true: also run `oxygen record`"),
        # the image size and rates `oxygen demo` uses for smol_panda.yaml (2 Hz): each MuJoCo
        # view costs ~20 ms of CPU; the policy was trained on 128 px renders
        ExecuteProcess(cmd=[ExecutableInPackage(package="oxygen_ros", executable="oxygen"), "sim",
                            "--params", params, "--namespace", namespace, "--image-size", "128",
                            "--camera-hz", "6", "--joint-hz", "50"],
                       output="screen"),
        IncludeLaunchDescription(
            PythonLaunchDescriptionSource(PathJoinSubstitution([share, "launch", "humanoid_thor.launch.py"])),
            launch_arguments={"params_file": params, "namespace": namespace,
                              "record": LaunchConfiguration("record")}.items()),
    ])
