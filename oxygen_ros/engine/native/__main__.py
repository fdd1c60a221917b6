"""Build (or load) the native fused path now: `python -m oxygen_ros.engine.native`."""
import sys

from . import main

sys.exit(main())
