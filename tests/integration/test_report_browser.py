"""The report in a real browser: headless Chromium (the Debian package) driven by Playwright
loads the file from disk, finds every chart and table, filters and opens trajectories, and
saves a screenshot, with no console error and no request leaving the file.

Needs `/usr/bin/chromium` (or $SEARCHRL_CHROMIUM) and the `playwright` package (dev extra);
without either this test alone is skipped, saying what to install. `.ci/run` installs Chromium.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from report_data import HOSTILE, build

from searchrl.report import write_report
from searchrl.report.charts import PANELS, SFT_PANEL

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _chromium() -> str:
    found = os.environ.get("SEARCHRL_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(found).is_file():
        pytest.skip(
            f"browser test of the report skipped: no Chromium at {found} "
            "(apt-get install chromium, or set SEARCHRL_CHROMIUM)"
        )
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("browser test of the report skipped: `pip install playwright` (dev extra)")
    executable = _chromium()
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.mark.slow
def test_report_in_chromium(browser, tmp_path: Path) -> None:
    root = build(tmp_path / "data")
    out = write_report([root], tmp_path / "report.html")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    requests: list[str] = []
    dialogs: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(out.as_uri())
    page.wait_for_load_state("load")

    assert page.locator("figure.chart svg").count() == len(PANELS) + 2  # + SFT loss, methods
    for key, _ in (*PANELS, SFT_PANEL):
        assert page.locator(f'figure.chart[data-metric="{key}"] svg').is_visible()
    assert page.locator("table.runs-table").count() == 1
    assert page.locator("table.eval-table").count() >= 2
    assert page.locator("table.comparison-table tbody tr").count() == 2
    assert page.locator("table.paired-table tbody tr").count() == 1

    rows = page.locator("#traj-list tbody tr")
    assert rows.count() == 20
    page.select_option("#f-correct", "0")
    assert 0 < rows.count() < 20
    assert page.locator("#traj-list tbody td.ok").count() == 0
    page.select_option("#f-correct", "")
    page.select_option("#f-hops", "2")
    assert rows.count() == 8  # rows 1, 4, 7 of both evaluations and one per training run
    page.select_option("#f-hops", "")

    page.select_option("#f-refined", "1")
    assert rows.count() == 3  # one per training seed, one Search-R2 evaluation row
    rows.first.click()
    detail = page.locator("#traj-detail")
    assert detail.locator(".cut").is_visible()
    assert "cut at step 2" in detail.locator(".cut").inner_text()
    assert detail.locator(".segment.regenerated").count() == 1  # 3 segments, prefix of 2 kept
    assert detail.locator(".segment.role-policy").count() >= 2
    page.select_option("#f-refined", "")

    page.select_option("#f-source", "evals/search-r1")
    assert rows.count() == 8
    rows.first.click()
    assert detail.locator(".segment.role-env").count() == 1
    assert HOSTILE in detail.inner_text()  # shown as text …
    assert page.evaluate("window.__pwned") is None  # … never run
    doc = detail.locator(".segment.role-env details.doc").first
    assert not doc.locator("div").is_visible()
    doc.locator("summary").click()
    assert "capital and largest city" in doc.locator("div").inner_text()

    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 20_000
    assert errors == [] and dialogs == []
    assert all(url.startswith(("file:", "data:", "about:")) for url in requests), requests
