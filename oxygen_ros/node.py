"""Placeholder for the oxygen_ros lifecycle node (`oxygen_node`); not implemented yet."""

import sys


def main(argv=None) -> int:
    print("oxygen_node: the node is not implemented yet", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
