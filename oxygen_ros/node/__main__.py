"""`python -m oxygen_ros.node` runs oxygen_node."""
import sys

from .oxygen_node import main

sys.exit(main())
