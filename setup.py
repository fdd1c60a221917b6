"""ament_python set-up of the oxygen_ros package (colcon on a ROS install, or pip -e here)."""

from glob import glob

from setuptools import find_packages, setup

PACKAGE = "oxygen_ros"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(include=[PACKAGE, PACKAGE + ".*"]),
    # smol-panda's trained weights ship inside the package (its checkpoint: "" reads them)
    package_data={PACKAGE + ".engine.native": ["*.cpp"],
                  PACKAGE + ".engine.models.smol_panda": ["weights/*.json", "weights/*.safetensors",
                                                          "weights/assets/panda/*.json"]},
    data_files=[
        # The ament index marker makes `ros2 run` / get_package_share_directory find us.
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE]),
        ("share/" + PACKAGE, ["package.xml"]),
        ("share/" + PACKAGE + "/launch", sorted(glob("launch/*.launch.py"))),
        ("share/" + PACKAGE + "/config", sorted(glob("config/*.yaml"))),
    ],
    install_requires=["setuptools"],
    zip_safe=False,
    maintainer="oxygen_ros maintainers",
    maintainer_email="oxygen@example.com",
    description="Onboard VLA inference with shared-prefix KV and cross-frame batched language.",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "oxygen_node = oxygen_ros.node.oxygen_node:main",
            "oxygen = oxygen_ros.cli:main",
        ],
    },
)
