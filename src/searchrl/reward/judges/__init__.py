"""Search-R2 process judges: is each retrieved collection of a trajectory useful (u_i ∈ {0, 1})?

`oracle` and `rule` need no model (`symbolic`), `llm` and `local` run the paper's judge prompt
(`prompt`, `model`). All sit behind one interface (`base.Judge`) and one cache (`CachedJudge`).
"""

from __future__ import annotations

from searchrl.config.train import RewardConfig
from searchrl.models.generation import GenerationBackend
from searchrl.reward.judges.base import (
    CachedJudge,
    Collection,
    Judge,
    JudgeError,
    JudgeRequest,
    Judgment,
)
from searchrl.reward.judges.model import EndpointJudge, LocalJudge
from searchrl.reward.judges.symbolic import OracleJudge, RuleJudge

__all__ = [
    "CachedJudge",
    "Collection",
    "EndpointJudge",
    "Judge",
    "JudgeError",
    "JudgeRequest",
    "Judgment",
    "LocalJudge",
    "OracleJudge",
    "RuleJudge",
    "make_judge",
]


def make_judge(
    config: RewardConfig,
    backend: GenerationBackend | None = None,
    tokenizer: object | None = None,
) -> CachedJudge:
    """The judge `config.judge` names, behind the cache. `local` needs the generation
    `backend` and `tokenizer` it runs on (the trainer passes the policy's own, or a model
    loaded from `local_judge.model`)."""
    inner: Judge
    if config.judge == "oracle":
        inner = OracleJudge()
    elif config.judge == "rule":
        inner = RuleJudge()
    elif config.judge == "llm":
        inner = EndpointJudge(config.llm_judge)
    else:
        if backend is None or tokenizer is None:
            raise JudgeError("the local judge needs a generation backend and its tokenizer")
        inner = LocalJudge(backend, tokenizer, config.local_judge.max_tokens)
    return CachedJudge(inner, config.judge_cache_size)
