"""`benchmarks/search_r2/refiner_gate.py` reads the gate from several rollouts per held-out
question: ROC-AUC raw and within step counts, the step count's own, the trimmer against the best
constant step, with intervals that resample questions, not transcripts."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks" / "search_r2"))

from refiner_gate import (
    STATS,
    Row,
    best_constant,
    clustered_ci,
    gate_table,
    resample_gain,
    trimmer_exact,
)
from searchrl.refiner.meta import Reading


def _reading(probs: list[float]) -> Reading:
    """A reading with P(answer k) = probs[k], k = 0..T."""
    return Reading("", [], [[k] for k in range(len(probs))], [math.log(p) for p in probs])


def _row(uid: str, reading: Reading, label: int, surprisal: float = math.nan) -> Row:
    return Row(uid, reading, label, surprisal, float(label == 0), math.nan)


def test_trimmer_and_best_constant_count_only_the_flawed() -> None:
    rows = [
        _row("a", _reading([0.2, 0.7, 0.1]), 1),  # cut 1, label 1: exact
        _row("b", _reading([0.2, 0.1, 0.7]), 1),  # cut 2, label 1
        _row("c", _reading([0.2, 0.1, 0.7]), 2),  # cut 2, label 2: exact
        _row("d", _reading([0.9, 0.05, 0.05]), 0),  # clean: not counted
    ]
    assert trimmer_exact(rows) == 2 / 3
    assert best_constant(rows) == (1, 2 / 3)
    assert math.isnan(trimmer_exact(rows[3:]))


def test_within_step_counts_removes_what_length_alone_explains() -> None:
    # every flawed transcript is long and every clean one short: the step count alone
    # separates them perfectly, the reading within each length does not at all
    long_flawed = [_row(f"f{i}", _reading([0.5, 0.2, 0.2, 0.1]), 1) for i in range(2)]
    long_clean = [_row(f"c{i}", _reading([0.5, 0.2, 0.2, 0.1]), 0) for i in range(2)]
    short_clean = [_row(f"s{i}", _reading([0.9, 0.1]), 0) for i in range(4)]
    rows = long_flawed + long_clean + short_clean
    assert STATS["ROC-AUC of the step count alone"](rows) > 0.8
    assert STATS["ROC-AUC within each step count"](rows) == 0.5  # ties count half
    assert STATS["ROC-AUC raw"](rows) > 0.8


def test_interval_resamples_questions_not_transcripts() -> None:
    # two questions, each with four identical rollouts: one flawed and read as flawed, one
    # clean and read as clean. Resampling questions draws both or only one kind (no AUC),
    # so every defined resample scores 1.0; resampling transcripts would mix within a
    # question. The revision rate's interval spans 0..1 because a draw of one question
    # takes all four of its rollouts.
    rows = [_row("q1", _reading([0.1, 0.9]), 1)] * 4 + [_row("q2", _reading([0.9, 0.1]), 0)] * 4
    assert clustered_ci(rows, STATS["ROC-AUC raw"], 200, 0) == (1.0, 1.0)
    low, high = clustered_ci(rows, STATS["revised at τ = 0 (raw)"], 200, 0)
    assert (low, high) == (0.0, 1.0)


def test_table_names_the_constant_step_and_counts_questions() -> None:
    rows = [_row("q1", _reading([0.1, 0.9]), 1), _row("q1", _reading([0.9, 0.1]), 0)]
    rows += [_row("q2", _reading([0.2, 0.8]), 1), _row("q3", _reading([0.8, 0.2]), 0)]
    lines = gate_table(rows, resamples=50)
    assert lines[0] == "4 transcripts of 3 questions, 2 flawed"
    cells = {row.split("|")[1].strip(): row.split("|")[2].strip() for row in lines[4:]}
    assert cells["ROC-AUC raw"] == "1.000"
    assert cells["revised at τ = 0 (raw)"] == "0.500"
    assert cells["best constant step (step 1)"] == "1.000"


def test_flaws_split_by_kind_against_the_same_clean_rows() -> None:
    # T = 2 (a search, the answer): label 2 is a wrong answer after a sound search, label 1
    # a search that missed. The reading ranks answer flaws above clean, search flaws below.
    rows = [
        _row("a", _reading([0.2, 0.1, 0.7]), 2),
        _row("b", _reading([0.9, 0.02, 0.08]), 1),
        _row("c", _reading([0.6, 0.2, 0.2]), 0),
    ]
    assert STATS["ROC-AUC raw, answer-step flaws vs clean"](rows) == 1.0
    assert STATS["ROC-AUC raw, search-step flaws vs clean"](rows) == 0.0
    assert STATS["trimmer exact step, answer-step flaws"](rows) == 1.0  # cuts at 2
    assert STATS["trimmer exact step, search-step flaws"](rows) == 0.0  # cuts at 2


def test_kept_readings_are_reused_only_for_the_same_transcripts(tmp_path: Path) -> None:
    from refiner_gate import kept_readings
    from searchrl.types import Trajectory

    trajs = [Trajectory(id=f"t{i}", question="q", golden_answers=["x"]) for i in range(2)]
    path = tmp_path / "readings.jsonl"
    assert kept_readings(path, trajs) is None
    path.write_text(
        '{"id": "t0", "uid": "q", "label": 0, "prior": 0.5, "logprobs": [-0.1, -2.0]}\n'
        '{"id": "t1", "uid": "q", "label": 1, "prior": 0.0, "logprobs": [-3.0, -0.05]}\n'
    )
    readings = kept_readings(path, trajs)
    assert readings is not None and readings[1].cut(None) == 1
    assert readings[0].score == readings[0].log_odds - 0.5
    assert kept_readings(path, trajs[::-1]) is None


def test_surprisal_ranks_and_resampling_its_rejects_gains() -> None:
    """The confidence discriminator's ROC-AUC reads `Row.surprisal`, not the meta reading;
    resampling the rows it ranks highest gains (resampled − drawn EM) over all rows, and a
    score that picks the right answers to resample loses."""
    flat = _reading([0.5, 0.5])  # the meta prompt cannot tell them apart
    rows = [
        Row("q1", flat, 1, 0.40, 0.0, 0.75),  # unsure and wrong; its question's others: 3/4
        Row("q1", flat, 0, 0.01, 1.0, 0.50),
        Row("q2", flat, 1, 0.30, 0.0, 0.25),
        Row("q2", flat, 0, 0.02, 1.0, 0.00),
    ]
    assert STATS["ROC-AUC of the Actor's surprisal (discriminator=confidence)"](rows) == 1.0
    assert STATS["ROC-AUC raw"](rows) == 0.5
    assert resample_gain(lambda r: r.surprisal, 0.5)(rows) == (0.75 + 0.25) / 4
    assert resample_gain(lambda r: -r.surprisal, 0.5)(rows) == (-0.5 - 1.0) / 4


def test_tilted_trimmer_reads_the_rows_tilt_and_the_plain_one_does_not() -> None:
    row = Row("q", _reading([0.2, 0.7, 0.1]), 2, 0.1, 0.0, 0.5, (-5.0, 0.0))
    assert trimmer_exact([row]) == 0.0  # π_h alone cuts at step 1
    assert (
        STATS["trimmer exact step, tilted by the steps' surprisal (trim_surprisal=1)"]([row]) == 1.0
    )


def test_rows_keep_the_paper_s_reading_and_the_tilt_apart() -> None:
    """A reader that tilts (the warm start's report reader does) must not tilt the plain
    trimmer's row: the gate once reported the tilted trimmer under both names. A row also
    knows what resampling would score: its question's other draws' mean EM."""
    from refiner_gate import gate_rows
    from searchrl.types import Trajectory

    def sampled(uid: str, em: float, logprobs: list[list[float]]) -> Trajectory:
        traj = Trajectory(id=f"{uid}#{em}", question="q", golden_answers=["x"], uid=uid)
        for lp in logprobs:
            traj.append("policy", "<search> x </search>", [5] * len(lp), lp)
            traj.append("env", "<information> p </information>", [6])
        traj.metrics = {"em": em}
        return traj

    a = sampled("q1", 0.0, [[-0.1, -0.1], [-3.0, -0.1]])
    b, c = sampled("q1", 1.0, [[-0.1], [-0.1]]), sampled("q1", 1.0, [[-0.1], [-0.1]])
    tilted = replace(_reading([0.2, 0.7, 0.1]), tilt=(-9.0, 9.0))
    rows = gate_rows([(a, 2), (b, 0), (c, 0)], [tilted, tilted, None])
    assert len(rows) == 2 and rows[0].reading.tilt == () and rows[0].reading.cut(None) == 1
    assert rows[0].tilt == pytest.approx((math.log(0.1), math.log(3.0)))
    assert rows[0].checked == 1  # its first search brought no passage
    assert rows[0].resampled == 1.0 and rows[1].resampled == 0.5
    assert rows[0].surprisal == pytest.approx((0.1 + 0.1 + 3.0 + 0.1) / 4)


def test_checked_trimmer_cuts_at_the_rows_checked_step_where_one_fired() -> None:
    """The checked row takes the checked step where a check fired and π_h's argmax where none
    did; the firing rates count the flawed and the clean apart."""
    flagged = Row("q", _reading([0.2, 0.7, 0.1]), 2, 0.1, 0.0, 0.5, (), 2)
    unflagged = Row("r", _reading([0.2, 0.7, 0.1]), 1, 0.1, 0.0, 0.5, (), 0)
    clean = Row("s", _reading([0.9, 0.05, 0.05]), 0, 0.1, 1.0, 0.5, (), 1)
    rows = [flagged, unflagged, clean]
    assert trimmer_exact(rows) == 0.5  # π_h cuts both flawed ones at step 1
    assert STATS["trimmer exact step, checks first (trimmer=checked)"](rows) == 1.0
    assert STATS["a check fires, flawed transcripts"](rows) == 0.5
    assert STATS["a check fires, clean transcripts"](rows) == 1.0


def test_an_rl_run_s_transcripts_get_the_oracle_s_labels(tmp_path: Path) -> None:
    """`--transcripts`: each trajectory an RL run wrote is labelled by the world's oracle over
    its question's supporting passages; one of a question the world does not hold is left out."""
    from refiner_gate import oracle_labelled
    from searchrl.types import Question, SearchCall, Trajectory

    def two_searches(uid: str, docs: list[str]) -> Trajectory:
        traj = Trajectory(id=f"{uid}#0", question="q", golden_answers=["x"], uid=uid)
        for turn, doc in enumerate(docs, start=1):
            traj.append("policy", "<search> x </search>", [5], [-0.1])
            traj.append("env", "<information> p </information>", [6])
            traj.searches.append(SearchCall("x", [doc], turn))
        return traj

    hit, miss = two_searches("w:a", ["1", "2"]), two_searches("w:a", ["1", "9"])
    hit.append("policy", "<answer> x </answer>", [7], [-0.1])
    hit.metrics = {"em": 1.0}
    stranger = two_searches("w:z", ["1", "2"])
    path = tmp_path / "step_1.jsonl"
    path.write_text("".join(json.dumps(t.to_json()) + "\n" for t in (hit, miss, stranger)))
    question = Question("w:a", "q", ("x",), metadata={"support": [["1"], ["2"]]})
    pairs = oracle_labelled([path], [question])
    assert [y for _, y in pairs] == [0, 2]  # both hops found and answered right; hop 2 missed
    assert [t.searches[1].doc_ids for t, _ in pairs] == [["2"], ["9"]]


def test_checks_only_statistics_need_no_reading() -> None:
    """`--checks-only`: the checks' precision where they fire, and the checks with the best
    constant step behind them, from rows whose readings hold no log-probabilities."""
    from refiner_gate import CHECK_STATS, check_precision, checks_then_constant

    unread = Reading("", [], [], [math.nan] * 4)
    rows = [
        Row("a", unread, 2, 0.1, 0.0, 0.5, (), 2),  # checked, right
        Row("b", unread, 3, 0.1, 0.0, 0.5, (), 1),  # checked, wrong
        Row("c", unread, 2, 0.1, 0.0, 0.5, (), 0),  # unchecked: the constant (2) is right
        Row("d", unread, 3, 0.1, 0.0, 0.5, (), 0),  # unchecked: the constant is wrong
        Row("e", unread, 0, 0.1, 1.0, 0.5, (), 0),
    ]
    assert check_precision(rows) == 0.5
    assert checks_then_constant(rows) == 0.5  # a and c
    assert CHECK_STATS["best constant step"](rows) == 0.5  # step 2 (ties: either)
    assert CHECK_STATS["checks first minus the best constant step (paired)"](rows) == 0.0
