"""`benchmarks/search_r2/refiner_overhead.py` reads the arms' metrics into the overhead table: stage
means, the refiner's time split into reading and regenerating, and both overheads."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks" / "search_r2"))

from refiner_overhead import arm_folder, arm_overrides, table


def _write(folder: Path, rows: list[dict[str, float]]) -> None:
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_table_splits_the_refiner_and_compares_with_off(tmp_path: Path) -> None:
    _write(tmp_path / "off", [{"timing_s/step": 50.0}, {"timing_s/step": 70.0}])
    joint = {"timing_s/refine": 30.0, "refiner/read_s": 12.0, "refiner/revision_rate": 0.5}
    _write(
        tmp_path / "joint-0.25",
        [{**joint, "timing_s/step": 80.0, "refiner/meta_rows_trained": 2.0},
         {**joint, "timing_s/step": 100.0, "refiner/meta_rows_trained": 2.0}],
    )  # fmt: skip
    lines = table(tmp_path, ["off", "joint", "joint@0.25"]).splitlines()
    assert len(lines) == 4  # header, rule, off, joint@0.25 (no joint folder)
    cells = [c.strip() for c in lines[3].strip("|").split("|")]
    assert cells[0] == "joint@0.25" and cells[1] == "2"
    assert cells[2:7] == ["90.0", "0.0", "12.0", "18.0", "0.0"]  # step, gen, read, regen, update
    assert cells[8] == "2" and cells[9] == "+50%" and cells[10] == "+60%"  # 90/60, 80/50


def test_arms_and_their_overrides() -> None:
    assert arm_overrides("off") == ["refiner.enabled=false", "refiner.joint=false"]
    assert arm_overrides("joint") == []
    assert arm_overrides("joint@0.25") == ["refiner.joint_share=0.25"]
    assert arm_overrides("module:joint@0.25") == [
        "refiner.read_on_engine=false",
        "refiner.joint_share=0.25",
    ]
    assert arm_folder("module:joint@0.25") == "module-joint-0.25"
    confidence = ["refiner.discriminator=confidence", "refiner.joint=false"]
    assert arm_overrides("confidence") == confidence  # no decision trained: reads only cuts
    assert arm_overrides("conf_first") == [*confidence, "refiner.trimmer=first"]
