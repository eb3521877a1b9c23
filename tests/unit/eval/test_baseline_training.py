"""The fine-tuned Direct and RAG baselines (`searchrl sft source=direct|rag`): trained on the
same references as the search policy, in exactly the prompt `searchrl eval --method
direct-ft|rag-ft` shows; and the paper's rejection-sampling budget."""

from __future__ import annotations

from rollout_fakes import DictRetriever, ScriptedBackend

from searchrl.config.eval import EvalConfig
from searchrl.config.sft import SFTConfig
from searchrl.data.templates import direct_prompt, rag_prompt
from searchrl.data.world import Reference
from searchrl.eval.methods import Context, start_trajectory
from searchrl.train.sft import baseline_examples
from searchrl.types import Question

REF = Reference(
    id="train_7",
    question="What is the capital of France",
    golden_answers=("Paris", "City of Paris"),
    hops=1,
    segments=({"role": "policy", "text": "<answer> Paris </answer>"},),
    answer="Paris",
    em=1.0,
)


def _eval_prompt(tokenizer, text: str) -> list[int]:
    context = Context(ScriptedBackend(tokenizer, str), tokenizer, None, EvalConfig())
    question = Question(REF.id, REF.question, REF.golden_answers)
    return start_trajectory(question, text, context).prompt_ids


def test_rag_examples_use_the_eval_prompt_and_the_retrieved_passages(tokenizer, docs) -> None:
    retriever = DictRetriever(docs)
    topk = EvalConfig().rollout.topk
    (example,) = baseline_examples([REF], "rag", tokenizer, True, retriever, topk)
    passages = [h.document.contents for h in DictRetriever(docs).search([REF.question], topk)[0]]
    assert retriever.calls == [[REF.question]]  # one batched search
    assert example.prompt_ids == _eval_prompt(tokenizer, rag_prompt(REF.question, passages))
    (segment,) = example.segments
    assert segment.role == "policy" and segment.text == "<answer> Paris </answer>"
    assert segment.token_ids[-1] == tokenizer.eos_token_id  # learns to stop
    assert example.loss_mask() == [1] * len(segment.token_ids)
    assert tokenizer.decode(segment.token_ids[:-1]) == "<answer> Paris </answer>"


def test_direct_examples_use_the_eval_prompt(tokenizer) -> None:
    (example,) = baseline_examples([REF], "direct", tokenizer, True, None, 3)
    assert example.prompt_ids == _eval_prompt(tokenizer, direct_prompt(REF.question))
    assert example.golden_answers == ["Paris", "City of Paris"]


def test_rejection_sampling_draws_five_samples_per_question() -> None:
    """Search-R1 §"Baselines": five candidate responses per training prompt."""
    assert SFTConfig().rejection_samples == 5
