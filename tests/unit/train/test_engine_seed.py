"""Each process's generation engine starts its own stream: vLLM on a CPU takes no per-request
seed, so two ranks seeded alike drew alike wherever their prompts matched."""

from __future__ import annotations

from searchrl.train.collect import engine_seed


def test_one_process_keeps_the_run_s_seed() -> None:
    assert [engine_seed(seed, 0, 1) for seed in range(4)] == [0, 1, 2, 3]


def test_every_rank_of_every_run_seed_starts_its_own_stream() -> None:
    for world in (2, 4, 8):
        seeds = [engine_seed(seed, rank, world) for seed in range(5) for rank in range(world)]
        assert len(set(seeds)) == len(seeds)
