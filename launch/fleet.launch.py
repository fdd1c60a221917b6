"""One oxygen_node serving several robots (fleet mode), brought to active automatically.

    ros2 launch oxygen_ros fleet.launch.py                          # config/fleet.yaml's robots
    ros2 launch oxygen_ros fleet.launch.py robots:=arm1,arm2 sims:=true
    ros2 service call /arm1/ask_progress oxygen_msgs/srv/AskProgress "{question: 'what have you done?'}"

The parameters are config/fleet.yaml's (params_file:= picks another); robots:= replaces
its list (each name is a robot's namespace and its parameter prefix). sims:=true also
starts one `oxygen sim` per robot in its namespace, for a demo on one machine (small
images so that it fits a small CPU). The lifecycle is driven as in humanoid_thor.launch.py.
Without launch: oxygen_node --ros-args --params-file config/fleet.yaml -p autostart:=true
[-p "robots:=[arm1, arm2]"], and `oxygen sim --params config/fleet.yaml --namespace /arm1`.
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, ExecuteProcess, OpaqueFunction, RegisterEventHandler
from launch.event_handlers import OnProcessStart
from launch.events import matches_action
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import LifecycleNode
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from launch_ros.substitutions import ExecutableInPackage, FindPackageShare
from lifecycle_msgs.msg import Transition

PROFILE = "fleet.yaml"


def _robots(context) -> list[str]:
    """robots:= as a list, else the params file's."""
    import yaml

    given = LaunchConfiguration("robots").perform(context)
    if given:
        return [r.strip() for r in given.split(",") if r.strip()]
    with open(LaunchConfiguration("params_file").perform(context)) as f:
        return list(yaml.safe_load(f)["/**"]["ros__parameters"].get("robots", []))


def _launch_setup(context):
    arg = lambda name: LaunchConfiguration(name).perform(context)  # noqa: E731
    robots = _robots(context)
    overrides = {"robots": robots} if arg("robots") else {}
    node = LifecycleNode(
        package="oxygen_ros", executable="oxygen_node", name="oxygen_fleet", namespace="",
        parameters=[arg("params_file"), overrides], output="screen", emulate_tty=True,
        # SROS2: the node's keystore enclave (docs/deployment.md, "Securing the robot")
        ros_arguments=["--enclave", arg("enclave")] if arg("enclave") else None)
    configure = RegisterEventHandler(OnProcessStart(target_action=node, on_start=[EmitEvent(event=ChangeState(
        lifecycle_node_matcher=matches_action(node), transition_id=Transition.TRANSITION_CONFIGURE))]))
    activate = RegisterEventHandler(OnStateTransition(target_lifecycle_node=node, goal_state="inactive",
                                                      entities=[EmitEvent(event=ChangeState(
                                                          lifecycle_node_matcher=matches_action(node),
                                                          transition_id=Transition.TRANSITION_ACTIVATE))]))
    actions = [configure, activate, node]
    if arg("sims").lower() in ("true", "1", "yes"):
        oxygen = ExecutableInPackage(package="oxygen_ros", executable="oxygen")
        actions += [ExecuteProcess(cmd=[oxygen, "sim", "--params", arg("params_file"), "--namespace", f"/{r}",
                                        "--image-size", "96", "--camera-hz", "3", "--joint-hz", "50"],
                                   output="screen") for r in robots]
    return actions


def generate_launch_description():
    default_params = PathJoinSubstitution([FindPackageShare("oxygen_ros"), "config", PROFILE])
    return LaunchDescription([
        DeclareLaunchArgument("params_file", default_value=default_params,
                              description="the fleet's params file (config/fleet.yaml: shared and per-robot)"),
        DeclareLaunchArgument("robots", default_value="",
                              description="comma-separated robot names (namespaces); empty: the params file's"),
        DeclareLaunchArgument("sims", default_value="false",
                              description="true: also one `oxygen sim` per robot, in its namespace"),
        DeclareLaunchArgument("enclave", default_value="",
                              description="SROS2 enclave of the node (e.g. /oxygen/node; needs ROS_SECURITY_* set); "
                                          "empty: none"),
        OpaqueFunction(function=_launch_setup),
    ])
