"""eval layer: the methods of both papers over one backend and retriever (`registry`), the
resumable harness behind `searchrl eval` (`harness`), aggregates with bootstrap intervals
(`summary`, `stats`), paired comparisons (`compare`) and the trajectory-quality rubric
(`rubric`)."""
