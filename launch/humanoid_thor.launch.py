"""oxygen_node on a humanoid with Jetson AGX Thor, brought to active automatically.

    ros2 launch oxygen_ros humanoid_thor.launch.py checkpoint:=/data/pi05_g1 record:=true

The parameters are config/humanoid_thor.yaml's (params_file:= picks another profile);
this file only overrides the arguments below and drives the lifecycle: configure when
the process starts, activate when the node reaches inactive (launch_ros' standard
LifecycleNode + ChangeState pattern). Without launch, the same thing is
    oxygen_node --ros-args --params-file config/humanoid_thor.yaml -p autostart:=true \
        [-r __ns:=/NS] [-p model:=...] [-p checkpoint:=...]
and record:=true is `oxygen record --namespace NS [--out DIR]` beside it.
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

PROFILE = "humanoid_thor.yaml"


def _launch_setup(context):
    arg = lambda name: LaunchConfiguration(name).perform(context)  # noqa: E731
    overrides = {name: arg(name) for name in ("model", "checkpoint") if arg(name)}   # empty: the YAML's
    namespace = arg("namespace")
    node = LifecycleNode(
        package="oxygen_ros", executable="oxygen_node", name="oxygen_node", namespace=namespace,
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
    if arg("record").lower() in ("true", "1", "yes"):
        cmd = [ExecutableInPackage(package="oxygen_ros", executable="oxygen"), "record",
               "--namespace", namespace or "/", "--params", arg("params_file")]
        if arg("record_dir"):
            cmd += ["--out", arg("record_dir")]
        actions.append(ExecuteProcess(cmd=cmd, output="screen", sigterm_timeout="10"))
    return actions


def generate_launch_description():
    default_params = PathJoinSubstitution([FindPackageShare("oxygen_ros"), "config", PROFILE])
    return LaunchDescription([
        DeclareLaunchArgument("params_file", default_value=default_params,
                              description="the node's params file (a profile in config/)"),
        DeclareLaunchArgument("namespace", default_value="", description="namespace of the node and its topics"),
        DeclareLaunchArgument("model", default_value="", description="model profile; empty: the params file's"),
        DeclareLaunchArgument("checkpoint", default_value="",
                              description="π0.5 checkpoint directory or .safetensors; empty: the params file's"),
        DeclareLaunchArgument("record", default_value="false",
                              description="true: also run `oxygen record` (chunks, text, timing, diagnostics)"),
        DeclareLaunchArgument("record_dir", default_value="",
                              description="bag folder for record:=true; empty: oxygen_bag_<date-time>"),
        DeclareLaunchArgument("enclave", default_value="",
                              description="SROS2 enclave of the node (e.g. /oxygen/node; needs ROS_SECURITY_* set); "
                                          "empty: none"),
        OpaqueFunction(function=_launch_setup),
    ])
