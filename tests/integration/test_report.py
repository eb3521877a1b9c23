"""`searchrl report` / `write_report`: what the page holds, and that it holds no URL."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from report_data import HOSTILE, build
from typer.testing import CliRunner

from searchrl.cli import app
from searchrl.report import write_report
from searchrl.report.charts import PANELS, SFT_PANEL
from searchrl.utils.errors import OutputError


def test_report_holds_every_section_and_no_url(tmp_path: Path) -> None:
    root = build(tmp_path)
    out = write_report([root / "runs", root / "evals"], tmp_path / "r" / "report.html")
    page = out.read_text()
    assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", page)
    markup = page.replace(HOSTILE_ESCAPED, "")
    assert not re.search(r"<(link|iframe|object|embed)\b|\bsrc\s*=|@import|url\((?!#)", markup)
    assert all(href.startswith("#") for href in re.findall(r'href="([^"]*)"', markup))
    ids = re.findall(r'\bid="([^"]+)"', markup)
    assert len(ids) == len(set(ids))  # one id per element across all inline figures
    for key, _ in (*PANELS, SFT_PANEL):
        assert f'data-metric="{key}"' in page
    assert 'data-metric="overall-em"' in page
    assert page.count('class="eval-table"') >= 2 and 'class="comparison-table"' in page
    assert 'class="paired-table"' in page and 'class="runs-table"' in page
    assert "Avg. A − B over sets" in page and 'class="grid-table"' in page
    assert "runs/grpo_s* (2 seeds)" in page  # two seeds of one config share a band
    gain = re.search(r'<table class="gain-table">(.*?)</table>', page, re.S)
    assert gain is not None and gain.group(1).count("<tr>") == 3  # header + the two seeds
    assert "0.500" in gain.group(1) and "1 / 0" in gain.group(1)  # 0 → 0.5 on 2 questions
    block = re.search(r'<script type="application/json" id="traj-data">(.*?)</script>', page, re.S)
    records = json.loads(block.group(1), parse_constant=_refuse)  # as the browser parses it
    assert len(records) == 8 + 8 + 2 + 2
    assert {r["source"] for r in records} >= {"evals/search-r1", "runs/grpo_s0 @ step 3"}
    assert any(r["refinement"] and r["refinement"]["revised"] for r in records)
    trained = [r for r in records if r["source"] == "runs/grpo_s0 @ step 3"]
    assert [r["hops"] for r in trained] == [2, 3]  # looked up in the run's world
    assert trained[1]["refinement"]["log_odds"] is None  # −inf has no JSON spelling
    assert HOSTILE not in page  # the raw text never appears unescaped


def _refuse(constant: str) -> None:
    raise ValueError(f"JSON.parse refuses {constant}")


HOSTILE_ESCAPED = HOSTILE.replace("</", "<\\/")


def test_report_command(tmp_path: Path) -> None:
    root = build(tmp_path)
    result = CliRunner().invoke(app, ["report", str(root), "--out", str(tmp_path / "x.html")])
    assert result.exit_code == 0, result.output
    assert "report:" in result.output and (tmp_path / "x.html").stat().st_size > 10_000


def test_report_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    root = build(tmp_path)
    out = tmp_path / "r.html"
    out.write_text("an earlier report\n")
    result = CliRunner().invoke(app, ["report", str(root), "--out", str(out)])
    assert result.exit_code == 1 and "already exists; pass --force" in result.stderr
    assert out.read_text() == "an earlier report\n"
    with pytest.raises(OutputError):
        write_report([root], out)
    forced = CliRunner().invoke(app, ["report", str(root), "--out", str(out), "--force"])
    assert forced.exit_code == 0, forced.output
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and 'class="grid-table"' in page
