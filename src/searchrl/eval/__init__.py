"""eval layer: the methods of both papers over one backend and retriever (`registry`), the
questions of `--data` (`sets`), the resumable harness behind `searchrl eval` (`harness`),
aggregates with Wilson and bootstrap intervals (`summary`, `stats`), paired comparisons
(`compare`) and the trajectory-quality rubric (`rubric`)."""
