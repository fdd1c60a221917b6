"""A TEST FAKE of tools/panda_world.PandaWorld: joints that track a commanded position,
and a scene drawn with numpy, fast enough for unit tests (the product's one simulator is
the MuJoCo Panda; pass this to SimRobot(world=...) only where a test must be quick).

ROS-free. The world is a 2D side view: a table, a red cube and a blue bowl on it, and a
planar arm whose first three joints are its shoulder, elbow and wrist; the end effector
is a yellow blob at the tip, opened and closed by the last joint (the gripper). The
cube sticks to a closed gripper that touches it and drops onto the table when it opens.
Joints are normalised with their limits (lower -> -1, upper -> +1), as the node does.

`command(positions)` sets the commanded joint positions (what the trajectory controller,
tools/trajectory_executor.py, outputs each control update), clipped to the limits;
`step(dt)` moves every joint toward them, rate-limited, so the robot lags a fast command.
`render(view, size)`: "base" sees the whole scene; "left_wrist" looks at the gripper
up close, "right_wrist" at the cube.
"""
from __future__ import annotations

import copy

import numpy as np

TABLE_Y = 0.4
LINKS = (0.55, 0.45, 0.22)
BASE = np.array([-0.7, TABLE_Y])
CUBE_HALF = 0.06
BOWL = np.array([0.62, TABLE_Y])
VIEWS = {"base": 1.0, "left_wrist": 3.0, "right_wrist": 2.5}


class FakeWorld:
    def __init__(self, names, lower, upper, speed: float = 1.5):
        self.names = list(names)
        self.lower = np.asarray(lower, dtype=float)
        self.upper = np.asarray(upper, dtype=float)
        if not (len(self.names) == len(self.lower) == len(self.upper)) or not self.names:
            raise ValueError("joint names and limits must have the same, non-zero length")
        if np.any(self.upper <= self.lower):
            raise ValueError("every upper limit must be above its lower limit")
        self.q = np.clip(np.zeros(len(self.names)), self.lower, self.upper)
        self.speed = speed * (self.upper - self.lower)     # per second: `speed` ranges
        self.commanded = self.q.copy()                     # where the joints head
        self.velocity = np.zeros_like(self.q)              # of the last step
        self.cube = np.array([0.25, TABLE_Y + CUBE_HALF])
        self.held = None                                   # cube offset from the gripper

    # -- joints --------------------------------------------------------------------------
    def normalised(self) -> np.ndarray:
        return 2.0 * (self.q - self.lower) / (self.upper - self.lower) - 1.0

    def command(self, positions) -> None:
        """The commanded positions [J] in joint units, clipped to the limits."""
        self.commanded = np.clip(np.asarray(positions, dtype=float).reshape(self.q.shape),
                                 self.lower, self.upper)

    def step(self, dt: float) -> None:
        move = np.clip(self.commanded - self.q, -self.speed * dt, self.speed * dt)
        q = np.clip(self.q + move, self.lower, self.upper)
        self.velocity = (q - self.q) / dt if dt > 0 else np.zeros_like(q)
        self.q = q
        self._update_cube()

    def velocities(self) -> np.ndarray:
        return self.velocity.copy()

    def cube_position(self) -> np.ndarray:
        """[x, 0, height]: PandaWorld's frame with the side view's plane at y = 0."""
        return np.array([self.cube[0], 0.0, self.cube[1]])

    def close(self) -> None:
        """Nothing to release (PandaWorld closes its renderers)."""

    # -- kinematics ----------------------------------------------------------------------
    def arm_points(self) -> np.ndarray:
        """Base, elbow, wrist and gripper positions of the planar arm."""
        qn = np.zeros(3)
        n = self.normalised()
        qn[: min(3, len(n))] = n[:3]
        # neutral (all 0): leaning over the table, the gripper above the cube
        angle = np.cumsum([np.pi / 2 - 0.5 - 1.1 * qn[0], -1.0 - 1.3 * qn[1], -0.6 - 1.3 * qn[2]])
        pts = [BASE]
        for length, a in zip(LINKS, angle):
            pts.append(pts[-1] + length * np.array([np.cos(a), np.sin(a)]))
        return np.array(pts)

    def gripper_open(self) -> float:
        """0 (closed) .. 1 (open), from the last joint."""
        return float((self.normalised()[-1] + 1) / 2)

    def _update_cube(self) -> None:
        tip = self.arm_points()[-1]
        closed = self.gripper_open() < 0.4
        if self.held is None and closed and np.linalg.norm(tip - self.cube) < 0.12:
            self.held = self.cube - tip
        elif self.held is not None and not closed:
            self.held = None
        if self.held is not None:
            self.cube = tip + self.held
        else:
            self.cube[1] = TABLE_Y + CUBE_HALF     # dropped: back on the table

    # -- rendering -----------------------------------------------------------------------
    def snapshot(self) -> "FakeWorld":
        """A copy of the world as it is now, for render(state=...)."""
        twin = copy.copy(self)
        twin.q, twin.cube = self.q.copy(), self.cube.copy()
        return twin

    def render(self, view: str = "base", size: int = 160, state: "FakeWorld | None" = None) -> np.ndarray:
        """An RGB uint8 image [size, size, 3] of the scene (or of a snapshot) from a camera."""
        if state is not None:
            return state.render(view, size)
        zoom = VIEWS[view]
        arm = self.arm_points()
        center = {"base": np.array([0.0, 0.8]), "left_wrist": arm[-1],
                  "right_wrist": (self.cube + arm[-1]) / 2}[view]
        half = 1.0 / zoom
        ys, xs = np.mgrid[0:size, 0:size].astype(np.float32)
        x = center[0] - half + (xs + 0.5) * (2 * half / size)
        y = center[1] + half - (ys + 0.5) * (2 * half / size)
        img = np.empty((size, size, 3), np.float32)
        img[:] = (0.80 + 0.15 * (y[..., None] - 0.4)).clip(0, 1) * np.array([0.85, 0.9, 1.0], np.float32)
        paint = _Painter(img, x, y)
        paint.where(y < TABLE_Y, (0.55, 0.38, 0.22))                                    # table
        paint.where((y < TABLE_Y) & (y > TABLE_Y - 0.03), (0.45, 0.3, 0.17))            # its edge
        paint.where(((x - BOWL[0]) / 0.16) ** 2 + ((y - BOWL[1]) / 0.09) ** 2 < 1, (0.2, 0.35, 0.8))
        paint.where(((x - BOWL[0]) / 0.12) ** 2 + ((y - BOWL[1] - 0.02) / 0.05) ** 2 < 1, (0.1, 0.2, 0.55))
        paint.where((abs(x - self.cube[0]) < CUBE_HALF) & (abs(y - self.cube[1]) < CUBE_HALF), (0.85, 0.1, 0.1))
        for (a, b), width in zip(zip(arm[:-1], arm[1:]), (0.05, 0.04, 0.03)):            # links
            paint.segment(a, b, width, (0.3, 0.3, 0.35))
        for p in arm[:-1]:
            paint.disc(p, 0.045, (0.15, 0.15, 0.2))                                     # joints
        tip = arm[-1]
        opening = 0.03 + 0.06 * self.gripper_open()
        direction = (arm[-1] - arm[-2]) / np.linalg.norm(arm[-1] - arm[-2])
        side = np.array([-direction[1], direction[0]])
        for s in (-1, 1):                                                               # fingers
            paint.segment(tip + s * opening * side, tip + s * opening * side + 0.07 * direction, 0.015,
                          (0.2, 0.2, 0.2))
        paint.disc(tip, 0.04, (1.0, 0.85, 0.1))                                         # end effector
        return (img.clip(0, 1) * 255).astype(np.uint8)


class _Painter:
    def __init__(self, img, x, y):
        self.img, self.x, self.y = img, x, y

    def where(self, mask, color) -> None:
        self.img[mask] = color

    def disc(self, c, r, color) -> None:
        self.where((self.x - c[0]) ** 2 + (self.y - c[1]) ** 2 < r * r, color)

    def segment(self, a, b, width, color) -> None:
        ab = b - a
        t = ((self.x - a[0]) * ab[0] + (self.y - a[1]) * ab[1]) / max(float(ab @ ab), 1e-9)
        t = t.clip(0, 1)
        dx, dy = self.x - (a[0] + t * ab[0]), self.y - (a[1] + t * ab[1])
        self.where(dx * dx + dy * dy < width * width, color)
