"""rollout layer: the multi-turn search rollout (Search-R1 Algorithm 1) and trajectory files."""

from searchrl.rollout.io import read_trajectories, write_trajectories
from searchrl.rollout.loop import RolloutEngine, run_rollouts
from searchrl.rollout.parse import Action, parse_action

__all__ = [
    "Action",
    "RolloutEngine",
    "parse_action",
    "read_trajectories",
    "run_rollouts",
    "write_trajectories",
]
