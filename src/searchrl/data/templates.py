"""Prompt templates. The Search-R1 one is a compatibility contract with released checkpoints:
its bytes, quirks included ("as your want", the Beijing example, the trailing newline), must
not change."""

from __future__ import annotations

from typing import Any, Protocol

SEARCH_R1_TEMPLATE = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first "
    "every time you get new information. After reasoning, if you find you lack some knowledge, "
    "you can call a search engine by <search> query </search> and it will return the top "
    "searched results between <information> and </information>. You can search as many times "
    "as your want. If you find no further external knowledge needed, you can directly provide "
    "the answer inside <answer> and </answer>, without detailed illustrations. For example, "
    "<answer> Beijing </answer>. Question: {question}\n"
)


class ChatTokenizer(Protocol):
    """The slice of a HF tokenizer the templates need."""

    chat_template: Any

    def apply_chat_template(self, conversation: list[dict[str, str]], **kwargs: Any) -> Any: ...


def normalize_question(question: str) -> str:
    """Strip, and end with '?' as the original data preparation does."""
    question = question.strip()
    return question if question.endswith("?") else question + "?"


def search_r1_prompt(question: str) -> str:
    """The plain-text Search-R1 prompt (base models)."""
    return SEARCH_R1_TEMPLATE.format(question=normalize_question(question))


TEMPLATES = {"search-r1": SEARCH_R1_TEMPLATE}
"""The named templates `rollout.prompt_template` may give (config.rollout.PROMPT_TEMPLATES)."""


def search_prompt(question: str, template: str = "search-r1") -> str:
    """The search instruction for `question`: a named template (`search-r1`) or a text with a
    `{question}` placeholder, filled with the normalized question. Only that placeholder is
    replaced, so other braces in a custom template stay as written."""
    text = TEMPLATES.get(template, template)
    return text.replace("{question}", normalize_question(question))


def render_chat(tokenizer: ChatTokenizer | None, user_text: str) -> str:
    """Wrap `user_text` in the tokenizer's chat template (instruct models), or return it as is
    when the tokenizer has no template (base models)."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return user_text
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": user_text}], tokenize=False, add_generation_prompt=True
    )


INVALID_ACTION_FEEDBACK = (
    "\nMy previous action is invalid. If I want to search, I should put the query between "
    "<search> and </search>. If I want to give the final answer, I should put the answer between "
    "<answer> and </answer>. Let me try again.\n"
)
"""The original Search-R1 observation after a turn with neither a search nor an answer."""

SEARCH_CLOSE = "</search>"
"""Ends a search action (a stop string of the rollout engine)."""

ANSWER_CLOSE = "</answer>"
"""Ends an answer (a stop string of the rollout engine)."""

THINK_CLOSE = "</think>"
"""Ends a reasoning block (a stop string of the final round under `rollout.force_answer`)."""

FORCED_ANSWER = "\n<answer>"
"""What the engine appends after the final round's reasoning under `rollout.force_answer`:
the policy then writes the answer and `</answer>`, as the reference transcripts do."""

INFORMATION_OPEN = "\n\n<information>"
INFORMATION_CLOSE = "</information>\n\n"


def format_doc(index: int, contents: str) -> str:
    """One retrieved passage as Search-R1 shows it: `Doc i(Title: <first line>) <rest>`."""
    title, _, text = contents.partition("\n")
    return f"Doc {index}(Title: {title}) {text}\n"


def format_information(contents: list[str]) -> str:
    """The observation after a search, byte-compatible with Search-R1's `<information>` block
    (the original strips the joined docs, so the last one has no trailing newline)."""
    docs = "".join(format_doc(i, c) for i, c in enumerate(contents, start=1))
    return f"{INFORMATION_OPEN}{docs.strip()}{INFORMATION_CLOSE}"


# Baseline prompts (seed 000 "Evaluation Methodology"). Each asks for the answer inside
# <answer> tags, so one extractor and one set of metrics serve every method.

DIRECT_TEMPLATE = (
    "Answer the given question directly, without any explanation. Give only the answer inside "
    "<answer> and </answer>. For example, <answer> Beijing </answer>. Question: {question}\n"
)
"""Direct inference: the model's parametric knowledge, no reasoning, no retrieval."""

COT_TEMPLATE = (
    "Answer the given question. Think step by step inside <think> and </think> first, then give "
    "the answer inside <answer> and </answer>, without detailed illustrations. For example, "
    "<answer> Beijing </answer>. Question: {question}\n"
)
"""Chain-of-thought prompting without retrieval."""

R1_TEMPLATE = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first. "
    "After reasoning, provide the answer inside <answer> and </answer>, without detailed "
    "illustrations. For example, <answer> Beijing </answer>. Question: {question}\n"
)
"""R1: the Search-R1 instruction without the search engine (RL without retrieval)."""

RAG_TEMPLATE = (
    "Answer the given question using the retrieved documents below. Give only the answer inside "
    "<answer> and </answer>, without detailed illustrations. For example, <answer> Beijing "
    "</answer>.\n\nDocuments:\n{documents}\n\nQuestion: {question}\n"
)
"""RAG: top-k passages retrieved with the question as query, shown as Search-R1 shows them."""


def direct_prompt(question: str) -> str:
    """Prompt of the Direct baseline."""
    return DIRECT_TEMPLATE.format(question=normalize_question(question))


def cot_prompt(question: str) -> str:
    """Prompt of the CoT baseline."""
    return COT_TEMPLATE.format(question=normalize_question(question))


def r1_prompt(question: str) -> str:
    """Prompt of the R1 baseline (reasoning, no search)."""
    return R1_TEMPLATE.format(question=normalize_question(question))


def rag_prompt(question: str, contents: list[str]) -> str:
    """Prompt of the RAG baseline; `contents` are corpus passages (`"Title"\\ntext`)."""
    documents = "".join(format_doc(i, c) for i, c in enumerate(contents, start=1)).strip()
    return RAG_TEMPLATE.format(question=normalize_question(question), documents=documents)
