"""oxygen_ros: onboard vision-language-action inference for ROS 2 (the OxyGen method).

Four folders, each importing only the ones after it:
  commands/  one module per `oxygen` subcommand (cli.py dispatches to them)
  tools/     the library behind `oxygen record | report | sim | demo`
  node/      `oxygen_node`, the lifecycle node, and its ROS adapters
  engine/    ROS-free PyTorch: model, weights, KV pool, frame scheduler, benchmarks
Executables: `oxygen_node` (node/oxygen_node.py) and `oxygen` (cli.py).
"""
