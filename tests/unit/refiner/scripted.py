"""A scripted Actor for the refiner's tests: two searches then an answer, each answer new,
so a regenerated suffix can be told apart from the original."""

from __future__ import annotations

from searchrl.types import Document

DOCS = [
    Document("d1", '"Paris"\nParis is the capital of France.'),
    Document("d2", '"Eiffel Tower"\nThe Eiffel Tower was designed by Gustave Eiffel.'),
]


class Script:
    """Search, search, answer; every answer is new (`A1`, `A2`, …), so a regenerated suffix
    can be told apart from the original."""

    def __init__(self) -> None:
        self.answers = 0

    def __call__(self, context: str) -> str:
        seen = context.count("Doc 1(Title")
        if seen == 0:
            return "<think> first </think>\n<search> Paris capital </search>"
        if seen == 1:
            return "<think> second </think>\n<search> Eiffel Tower </search>"
        self.answers += 1
        return f"<think> third </think>\n<answer> A{self.answers} </answer>"


class Answers(Script):
    """`Script` whose answers come from a list in turn (the last one repeated)."""

    def __init__(self, answers: list[str]) -> None:
        super().__init__()
        self.given = answers

    def __call__(self, context: str) -> str:
        if context.count("Doc 1(Title") < 2:
            return super().__call__(context)
        self.answers += 1
        answer = self.given[min(self.answers, len(self.given)) - 1]
        return f"<think> third </think>\n<answer> {answer} </answer>"
