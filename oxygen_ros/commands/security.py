"""`oxygen security policy`: an SROS2 access-control policy for oxygen_node as a params
file configures it (docs/deployment.md, "Securing the robot").

    oxygen security policy --params config/humanoid_thor.yaml --namespace /g1 --out policy.xml
    ros2 security create_permission KEYSTORE /oxygen/node policy.xml
"""
import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["policy"], help="policy: write the SROS2 policy XML")
    p.add_argument("--params", metavar="YAML", required=True, help="the node's params file")
    p.add_argument("--namespace", action="append", default=[], metavar="NS",
                   help="the node's namespace (default /); several: one node in each, one profile each")
    p.add_argument("--node", default="oxygen_node", help="the node's name (launch files may rename it)")
    p.add_argument("--out", metavar="XML", help="write the policy here (default: print it)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from oxygen_ros.tools.params_files import params_from_file
    from oxygen_ros.tools.security_policy import NODE_ENCLAVE, OPERATOR_ENCLAVE, node_interfaces, policy_xml

    try:
        params = params_from_file(args.params)
        nodes = [node_interfaces(params, ns, args.node) for ns in (args.namespace or ["/"])]
    except (OSError, ValueError) as e:
        print(f"oxygen security: {e}", file=sys.stderr)
        return 2
    xml = policy_xml(nodes)
    if not args.out:
        sys.stdout.write(xml)
        return 0
    Path(args.out).write_text(xml)
    print(f"wrote {args.out}: enclaves {NODE_ENCLAVE} ({len(nodes)} node profile(s)), {OPERATOR_ENCLAVE}, "
          f"and one per robot; next: ros2 security create_permission KEYSTORE ENCLAVE {args.out}",
          file=sys.stderr)
    return 0
