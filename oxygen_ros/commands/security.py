"""`oxygen security policy`: an SROS2 access-control policy for oxygen_node as it will run
(its params file, and the launch file's overrides and remaps), and for the processes
around it (docs/deployment.md, "Securing the robot").

    oxygen security policy --params config/humanoid_thor.yaml --namespace /g1 --out policy.xml
    oxygen security policy --params config/fleet.yaml --node oxygen_fleet --robots arm1,arm2 --out policy.xml
    ros2 security create_permission KEYSTORE /oxygen/node policy.xml
"""
import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["policy"], help="policy: write the SROS2 policy XML")
    p.add_argument("--params", metavar="YAML", required=True, help="the node's params file")
    p.add_argument("--namespace", action="append", default=[], metavar="NS",
                   help="the node's namespace (default /; launch: namespace:=); several: one node in each, "
                        "one profile each")
    p.add_argument("--node", default="oxygen_node", help="the node's name (launch files may rename it)")
    p.add_argument("--robots", metavar="A,B",
                   help="the fleet's robots instead of the params file's (fleet.launch.py's robots:=)")
    p.add_argument("-p", "--param", action="append", default=[], metavar="NAME:=VALUE",
                   help="a parameter override as the node gets it (-p on its command line, launch "
                        "arguments such as model:=); the value is YAML; ROBOT.NAME for one fleet robot")
    p.add_argument("-r", "--remap", action="append", default=[], metavar="FROM:=TO",
                   help="a remap rule the node runs with (-r on its command line, launch remappings)")
    p.add_argument("--out", metavar="XML", help="write the policy here (default: print it)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from oxygen_ros.tools.params_files import params_from_file
    from oxygen_ros.tools.security_policy import (NODE_ENCLAVE, OPERATOR_ENCLAVE, RECORDER_ENCLAVE, apply_overrides,
                                                  node_interfaces, policy_xml)

    try:
        params = apply_overrides(params_from_file(args.params), args.robots, args.param)
        nodes = [node_interfaces(params, ns, args.node, args.remap) for ns in (args.namespace or ["/"])]
    except (OSError, ValueError) as e:
        print(f"oxygen security: {e}", file=sys.stderr)
        return 2
    xml = policy_xml(nodes)
    if not args.out:
        sys.stdout.write(xml)
        return 0
    Path(args.out).write_text(xml)
    print(f"wrote {args.out}: enclaves {NODE_ENCLAVE} ({len(nodes)} node profile(s)), {OPERATOR_ENCLAVE}, "
          f"{RECORDER_ENCLAVE}, and one per robot; next: ros2 security create_permission KEYSTORE ENCLAVE "
          f"{args.out}", file=sys.stderr)
    return 0
