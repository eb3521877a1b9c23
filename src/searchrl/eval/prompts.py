"""Prompts of the two prompted multi-step baselines, IRCoT and Search-o1.

Neither Search-R1 nor Search-R2 prints these prompts; the wording here is ours, written from the
methods' descriptions (IRCoT: Trivedi et al. 2023, Search-o1: Li et al. 2025). Both ask for the
answer inside `<answer>` tags and Search-o1 uses the Search-R1 `<search>` tags instead of its own
`<|begin_search_query|>` markers, so one parser and one metric serve every method.
"""

from __future__ import annotations

from searchrl.data.templates import format_doc, normalize_question

IRCOT_TEMPLATE = (
    "Answer the given question by reasoning step by step. Write one short reasoning sentence "
    "per line. After each line, documents retrieved for that line will be shown to you between "
    "<information> and </information>; use them in your next line. When you know the answer, "
    "write it inside <answer> and </answer>, for example <answer> Beijing </answer>. "
    "Question: {question}\n"
)
"""IRCoT: a chain of thought whose every sentence is the next retrieval query."""

SEARCH_O1_TEMPLATE = (
    "You are a reasoning assistant who can search a knowledge base to answer the question. To "
    "search, write <search> your query </search>; a summary of what the search found will be "
    "returned between <information> and </information>. You may search up to {max_searches} "
    "times, one query at a time, and continue your reasoning after each result. When you have "
    "the information you need, give the final answer inside <answer> and </answer>, for example "
    "<answer> Beijing </answer>. Question: {question}\n"
)
"""Search-o1: agentic search; the documents reach the reasoning through Reason-in-Documents."""

REASON_IN_DOCUMENTS_TEMPLATE = (
    "You are helping with a multi-step reasoning task.\n\nPrevious reasoning:\n{reasoning}\n\n"
    "Current search query: {query}\n\nSearched documents:\n{documents}\n\n"
    "Read the documents and extract only the information that helps answer the current query, "
    "in the light of the previous reasoning. Start your answer with 'Final Information:' "
    "followed by that information in one or two sentences, or write 'Final Information: No "
    "helpful information found.'\n"
)
"""Search-o1's Reason-in-Documents step: condenses retrieved documents before they are shown."""

SEARCH_LIMIT_FEEDBACK = (
    "\nThe search limit is reached: no more searches. Give the final answer inside <answer> and "
    "</answer>.\n"
)
"""Inserted (as env text) when Search-o1 asks for a search beyond its budget."""

_FINAL_INFORMATION = "Final Information:"


def ircot_prompt(question: str) -> str:
    """IRCoT's instruction and question."""
    return IRCOT_TEMPLATE.format(question=normalize_question(question))


def search_o1_prompt(question: str, max_searches: int) -> str:
    """Search-o1's instruction and question."""
    return SEARCH_O1_TEMPLATE.format(
        question=normalize_question(question), max_searches=max_searches
    )


def reason_in_documents_prompt(reasoning: str, query: str, contents: list[str]) -> str:
    """The Reason-in-Documents request for one search."""
    documents = "".join(format_doc(i, c) for i, c in enumerate(contents, start=1)).strip()
    return REASON_IN_DOCUMENTS_TEMPLATE.format(
        reasoning=reasoning.strip() or "(none yet)", query=query, documents=documents
    )


def final_information(output: str) -> str:
    """The text after the last 'Final Information:' of a Reason-in-Documents output (special
    tokens already removed); the whole output when the marker is missing."""
    return output.rpartition(_FINAL_INFORMATION)[2].strip()
