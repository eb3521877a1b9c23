"""One rank of the exit check (see test_train_ddp.py): collectives right up to the end of the
process, the pattern that made gloo abort runs that had succeeded (SIGABRT at teardown)."""

from __future__ import annotations

import sys

from searchrl.train.run import exit_ranks, setup_distributed


def main(leave: bool) -> None:
    dist = setup_distributed()
    total = sum(dist.reduce(1, "sum") for _ in range(20))
    sys.stdout.write(f"rank {dist.rank} summed {total}\n")  # one write: the ranks share a pipe
    sys.stdout.flush()
    # The main thread keeps the GIL from here (no forced switch), so the gloo thread that
    # releases the last collective gets it late: at teardown, when it was fatal.
    sys.setswitchinterval(60.0)
    dist.reduce(0, "min")
    if leave:
        exit_ranks()


if __name__ == "__main__":
    main(sys.argv[1] == "exit")
