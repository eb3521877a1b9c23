"""Prompts of the two prompted multi-step baselines, IRCoT and Search-o1.

Neither Search-R1 nor Search-R2 prints these prompts; the wording here is ours, written from the
methods' descriptions (IRCoT: Trivedi et al. 2023, Search-o1: Li et al. 2025). Search-o1 asks for
the answer inside `<answer>` tags and uses the Search-R1 `<search>` tags instead of its own
`<|begin_search_query|>` markers, so one parser and one metric serve every method.

IRCoT is few-shot, as in the original: demonstrations of retrieval-interleaved reasoning ending
"So the answer is: X." precede the question. Ours are three (a bridge, a single-hop and a
comparison question; the original annotates 15 per dataset and picks how many fit the model's
context, FlashRAG's reimplementation shows one), written here with our own short passages, and
laid out the way this implementation runs (passages inserted after the line that retrieved
them) rather than the original's all-paragraphs-first prompt.
"""

from __future__ import annotations

from dataclasses import dataclass

from searchrl.data.templates import format_doc, format_information, normalize_question

IRCOT_INSTRUCTION = (
    "Answer the question by reasoning step by step, as in the examples. Write one short "
    "reasoning sentence per line. After each line, documents retrieved for it are shown between "
    "<information> and </information>; use them in your next line. When you know the answer, "
    'end your line with "So the answer is:" followed by the answer.\n\n'
)
"""IRCoT: a chain of thought whose every sentence is the next retrieval query."""


@dataclass(frozen=True)
class Demonstration:
    """One IRCoT example: the question, then for each step the passages retrieved for it and
    the reasoning line written after them (the first step's passages are the question's)."""

    question: str
    steps: tuple[tuple[tuple[str, ...], str], ...]

    def render(self) -> str:
        """The example as the model will see its own run: question, passages, line, …"""
        text = f"Question: {normalize_question(self.question)}\n"
        for passages, line in self.steps:
            text += format_information(list(passages)) + line + "\n"
        return text


IRCOT_DEMONSTRATIONS = (
    Demonstration(
        "When was the author of The Old Man and the Sea born",
        (
            (
                (
                    '"The Old Man and the Sea"\nThe Old Man and the Sea is a short novel by the '
                    "American writer Ernest Hemingway, written in Cuba in 1951 and published in "
                    "1952.",
                ),
                "The Old Man and the Sea was written by Ernest Hemingway.",
            ),
            (
                (
                    '"Ernest Hemingway"\nErnest Miller Hemingway (July 21, 1899 – July 2, 1961) '
                    "was an American novelist, short-story writer and journalist.",
                ),
                "Ernest Hemingway was born on July 21, 1899. So the answer is: July 21, 1899.",
            ),
        ),
    ),
    Demonstration(
        "What is the capital of Canada",
        (
            (
                (
                    '"Ottawa"\nOttawa is the capital city of Canada. It stands on the Ottawa River '
                    "in the province of Ontario.",
                ),
                "Ottawa is the capital of Canada. So the answer is: Ottawa.",
            ),
        ),
    ),
    Demonstration(
        "Who was born first, Marie Curie or Albert Einstein",
        (
            (
                (
                    '"Marie Curie"\nMarie Curie (7 November 1867 – 4 July 1934) was a Polish and '
                    "naturalised-French physicist and chemist.",
                ),
                "Marie Curie was born on 7 November 1867.",
            ),
            (
                (
                    '"Albert Einstein"\nAlbert Einstein (14 March 1879 – 18 April 1955) was a '
                    "German-born theoretical physicist.",
                ),
                "Albert Einstein was born on 14 March 1879, after Marie Curie. So the answer is: "
                "Marie Curie.",
            ),
        ),
    ),
)
"""The few-shot examples (facts as in Wikipedia; passages written for this prompt)."""

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
    """IRCoT's instruction, its demonstrations and the question (its passages follow as the
    first inserted observation)."""
    examples = "\n".join(d.render() for d in IRCOT_DEMONSTRATIONS)
    return f"{IRCOT_INSTRUCTION}{examples}\nQuestion: {normalize_question(question)}\n"


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
