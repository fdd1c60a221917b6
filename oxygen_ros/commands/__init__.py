"""Subcommands of the `oxygen` tool, one module each (see oxygen_ros/cli.py)."""
