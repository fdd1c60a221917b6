"""The simulated robots a demo or an evaluation runs beside one node: each robot's name,
namespace, child-process names and output folder."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class SimRobot:
    name: str                  # "" : the node's own robot (not a fleet)
    params: dict               # the params with the robot's own overrides applied
    out: Path                  # its bag (and report) go here
    seed: int | None = None    # the sim's layout seed (oxygen sim --seed); None: the scene's own

    @property
    def namespace(self) -> str:
        return f"/{self.name}" if self.name else "/"

    def child(self, kind: str) -> str:
        """The name of this robot's child process of a kind (sim, recorder)."""
        return f"{kind}_{self.name}" if self.name else kind

    @property
    def label(self) -> str:
        return f"{self.name} " if self.name else ""


def fleet_robot_names(params: dict, count: int) -> list[str]:
    """The params file's `robots`, cut or extended (robotK) to `count` (0: as the file
    says; [] is one robot, not a fleet)."""
    names = list(params.get("robots") or [])
    if count <= 0:
        return names
    names = names[:count]
    k = 0
    while len(names) < count:
        k += 1
        if f"robot{k}" not in names:
            names.append(f"robot{k}")
    return names
