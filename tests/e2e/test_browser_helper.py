"""The browser helper: real Chromium on pages written here, and the number checks without it."""

from __future__ import annotations

import base64
import copy
import http.server
import io
import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import matplotlib.image as mpimg
import numpy as np
import pytest
from matplotlib.figure import Figure

from tests import browser
from tests.browser import (
    PageReport,
    assert_numbers_match,
    ensure_chromium,
    json_path_get,
    open_report,
)

SUMMARY: dict[str, Any] = {
    "study": "synthetic_flood",
    "n_units": 12345,
    "analyses": [
        {
            "field": "decision",
            "cases": [
                {"group": "male", "rate": 0.3012, "dpd": -0.1234, "significant": True},
                {"group": "female", "rate": 0.8, "dpd": None, "significant": False},
            ],
        }
    ],
    "pooled": {"rate": 0.5506, "p_value": 0.0004},
}

# Each cell names the summary value it shows; the pooled rate is left empty for the inline
# script to fill, so the helper must read the page after scripts ran.
GOOD_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Synthetic flood report</title>
<style>body {{ font-family: sans-serif; margin: 2em; }} td {{ padding: 0 1em; }}</style>
</head><body>
<h1>Synthetic flood</h1>
<p>Units: <span data-path="n_units">12,345</span></p>
<table>
<tr><th>group</th><th>rate</th><th>DPD</th><th>significant</th></tr>
<tr><td>male</td><td data-path="analyses.0.cases.0.rate" data-value="0.3012">30.1%</td>
<td data-path="analyses.0.cases.0.dpd">\u22120.12*</td>
<td data-path="analyses.0.cases.0.significant">yes</td></tr>
<tr><td>female</td><td data-path="analyses.0.cases.1.rate">80.0%</td>
<td data-path="analyses.0.cases.1.dpd">n/a</td>
<td data-path="analyses.0.cases.1.significant">no</td></tr>
</table>
<p>Pooled rate <span id="pooled" data-path="pooled.rate"></span>,
p = <span data-path="pooled.p_value">0.0004!</span></p>
<img alt="decision rates" src="data:image/png;base64,{png}">
<script id="summary" type="application/json">{{"pooled_rate": 0.5506}}</script>
<script>
  const data = JSON.parse(document.getElementById("summary").textContent);
  document.getElementById("pooled").textContent = (data.pooled_rate * 100).toFixed(1) + "%";
</script>
</body></html>
"""

# Everything a report must not do: a script error, and resources from the network (one
# image on a public host, and an image, a fetch and a WebSocket to a local server that
# counts whether anything reached it).
BAD_PAGE = """<!doctype html>
<html><head><title>Bad report</title></head><body>
<p data-path="n_units">12,345</p>
<img alt="remote logo" src="https://example.com/logo.png">
<img alt="local logo" src="http://127.0.0.1:{port}/logo.png">
<script>
  fetch("http://127.0.0.1:{port}/data.json").catch(() => {{}});
  new WebSocket("ws://127.0.0.1:{port}/live");
  notDefinedAnywhere();
</script>
</body></html>
"""


def chart_png() -> bytes:
    """A small bar chart drawn with matplotlib, as PNG bytes."""
    figure = Figure(figsize=(4, 3), dpi=80)
    axes = figure.add_subplot()
    axes.bar(["male", "female"], [0.3012, 0.8], color="tab:blue")
    axes.set_ylabel("Evacuate rate")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    return buffer.getvalue()


class _CountingHandler(http.server.BaseHTTPRequestHandler):
    """Answers anything with 200 and records the path, to prove nothing reached it."""

    hits: list[str]

    def do_GET(self) -> None:
        self.hits.append(self.path)
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Keep the test output clean."""


@pytest.fixture(scope="module")
def local_server() -> Iterator[tuple[int, list[str]]]:
    """A local HTTP server on a free port, and the list of paths it was asked for."""
    hits: list[str] = []
    handler = type("Handler", (_CountingHandler,), {"hits": hits})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], hits
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def good_report(tmp_path_factory: pytest.TempPathFactory) -> PageReport:
    """The self-contained page, opened once for all tests reading it."""
    folder = tmp_path_factory.mktemp("good")
    page = folder / "report.html"
    page.write_text(GOOD_PAGE.format(png=base64.b64encode(chart_png()).decode("ascii")))
    ensure_chromium()  # outside the timing: a first call may apt-get install Chromium
    started = time.perf_counter()
    report = open_report(page, folder / "report.png")
    print(f"open_report (launch, load, screenshot, close): {time.perf_counter() - started:.2f} s")
    return report


@pytest.fixture(scope="module")
def bad_report(
    tmp_path_factory: pytest.TempPathFactory, local_server: tuple[int, list[str]]
) -> PageReport:
    """The page with a script error and network resources, opened once."""
    folder = tmp_path_factory.mktemp("bad")
    page = folder / "report.html"
    page.write_text(BAD_PAGE.format(port=local_server[0]))
    return open_report(page, folder / "report.png")


@pytest.mark.browser
def test_good_page_is_self_contained(good_report: PageReport) -> None:
    assert good_report.console_errors == []
    assert good_report.requests == []  # the embedded data: image is not a request
    assert good_report.failed_images == []
    assert good_report.title == "Synthetic flood report"
    assert "Synthetic flood" in good_report.text


@pytest.mark.browser
def test_good_page_numbers_are_collected_after_scripts_ran(good_report: PageReport) -> None:
    numbers = {path: (text, value) for path, text, value in good_report.numbers}
    assert len(good_report.numbers) == 9
    assert numbers["analyses.0.cases.0.rate"] == ("30.1%", "0.3012")
    assert numbers["analyses.0.cases.0.dpd"] == ("\u22120.12*", None)
    assert numbers["pooled.rate"] == ("55.1%", None)  # written by the inline script


@pytest.mark.browser
def test_good_page_numbers_match_the_summary(good_report: PageReport) -> None:
    assert assert_numbers_match(good_report, SUMMARY) == 9


@pytest.mark.browser
def test_a_wrong_summary_value_is_reported(good_report: PageReport) -> None:
    summary = copy.deepcopy(SUMMARY)
    summary["analyses"][0]["cases"][0]["dpd"] = -0.2  # shown −0.12*
    summary["pooled"]["rate"] = 0.56  # shown 55.1%
    del summary["analyses"][0]["cases"][1]["significant"]
    with pytest.raises(AssertionError) as caught:
        assert_numbers_match(good_report, summary)
    message = str(caught.value)
    assert "3 of 9 numbers" in message
    assert "analyses.0.cases.0.dpd: shown '\u22120.12*', expected -0.2" in message
    assert "pooled.rate: shown '55.1%', expected 0.56" in message
    assert "analyses.0.cases.1.significant: shown 'no', not in the summary" in message


@pytest.mark.browser
def test_screenshot_is_a_real_rendering(good_report: PageReport) -> None:
    image = mpimg.imread(good_report.screenshot)
    assert image.shape[0] > 100 and image.shape[1] > 100
    # A blank or failed rendering would be one colour; text and the chart are not.
    assert np.ptp(image[..., :3]) > 0.5
    rgb = (image[..., :3] * 255).astype(np.uint32)
    colours = np.unique(rgb[..., 0] << 16 | rgb[..., 1] << 8 | rgb[..., 2])
    assert len(colours) > 20


@pytest.mark.browser
def test_bad_page_reports_the_script_error(bad_report: PageReport) -> None:
    uncaught = [e for e in bad_report.console_errors if e.startswith("uncaught")]
    assert uncaught == ["uncaught ReferenceError: notDefinedAnywhere is not defined"]


@pytest.mark.browser
def test_bad_page_requests_are_recorded_and_blocked(
    bad_report: PageReport, local_server: tuple[int, list[str]]
) -> None:
    port, hits = local_server
    local = f"http://127.0.0.1:{port}"
    assert set(bad_report.requests) == {
        "https://example.com/logo.png",
        f"{local}/logo.png",
        f"{local}/data.json",
        f"ws://127.0.0.1:{port}/live",
    }
    assert hits == []  # nothing left the browser
    assert sorted(bad_report.failed_images) == sorted(
        ["https://example.com/logo.png", f"{local}/logo.png"]
    )
    # Chromium reports each blocked load on the console as well.
    assert any("ERR_BLOCKED_BY_CLIENT" in e for e in bad_report.console_errors)


def test_open_report_needs_an_existing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        open_report(tmp_path / "absent.html", tmp_path / "absent.png")


@pytest.fixture
def no_chromium(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Pretend no Chromium is installed, with the per-process cache emptied around the test."""
    real_which = browser.shutil.which
    monkeypatch.setattr(
        browser.shutil,
        "which",
        lambda name: None if name in browser.CHROMIUM_NAMES else real_which(name),
    )
    monkeypatch.setattr(browser, "DEBIAN_CHROMIUM", Path("/nonexistent/chromium"))
    browser._lookup_chromium.cache_clear()
    yield
    browser._lookup_chromium.cache_clear()


@pytest.mark.usefixtures("no_chromium")
def test_ensure_chromium_skips_when_not_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(browser.os, "geteuid", lambda: 1000)
    with pytest.raises(pytest.skip.Exception, match="not running as root"):
        ensure_chromium()


@pytest.mark.usefixtures("no_chromium")
def test_ensure_chromium_skips_without_apt_get(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(browser.os, "geteuid", lambda: 0)
    monkeypatch.setattr(browser.shutil, "which", lambda name: None)
    with pytest.raises(pytest.skip.Exception, match="apt-get is not available"):
        ensure_chromium()


@pytest.mark.usefixtures("no_chromium")
def test_ensure_chromium_reports_a_failed_install_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A stand-in apt-get: update works, install fails as apt does for an unknown package,
    # and every call is logged so the test sees the outcome is cached.
    log = tmp_path / "calls"
    apt_get = tmp_path / "apt-get"
    apt_get.write_text(
        f'#!/bin/sh\necho "$@" >> {log}\n'
        'if [ "$1" = install ]; then\n'
        '  echo "E: Unable to locate package chromium" >&2; exit 100\n'
        "fi\n"
    )
    apt_get.chmod(0o755)
    monkeypatch.setattr(browser.os, "geteuid", lambda: 0)
    monkeypatch.setattr(
        browser.shutil, "which", lambda name: str(apt_get) if name == "apt-get" else None
    )
    for _ in range(2):
        with pytest.raises(pytest.skip.Exception) as skipped:
            ensure_chromium()
        assert "`apt-get install -y -qq chromium` failed with exit code 100" in skipped.value.msg
        assert "Unable to locate package chromium" in skipped.value.msg
    assert log.read_text().splitlines() == ["update -qq", "install -y -qq chromium"]


def test_open_report_skips_without_playwright(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    page = tmp_path / "report.html"
    page.write_text("<p>hi</p>")
    monkeypatch.setitem(sys.modules, "playwright.sync_api", None)  # import now fails
    with pytest.raises(pytest.skip.Exception, match="playwright package is not importable"):
        open_report(page, tmp_path / "report.png")


def test_json_path_get_resolves_keys_and_indices() -> None:
    assert json_path_get(SUMMARY, "analyses.0.cases.1.rate") == 0.8
    assert json_path_get(SUMMARY, "pooled") == SUMMARY["pooled"]
    # JSON object keys are strings, digits included.
    assert json_path_get(json.loads('{"by": {"3": 7}}'), "by.3") == 7


@pytest.mark.parametrize(
    "path",
    [
        "analyses.0.cases.3.dpd",  # index past the end
        "analyses.first",  # not an index
        "pooled.p",  # no such key
        "n_units.digits",  # into a scalar
        "study.0",  # into a string
    ],
)
def test_json_path_get_raises_key_error_with_the_path(path: str) -> None:
    with pytest.raises(KeyError, match=path.replace(".", r"\.")):
        json_path_get(SUMMARY, path)


def _page(text: str, data_value: str | None = None) -> PageReport:
    """A report with one number showing ``text`` for path ``x``, without a browser."""
    return PageReport(
        url="file:///report.html",
        title="",
        text=text,
        console_errors=[],
        requests=[],
        failed_images=[],
        numbers=[("x", text, data_value)],
        screenshot=Path("report.png"),
    )


@pytest.mark.parametrize(
    ("text", "value", "matches"),
    [
        ("12,345", 12345, True),
        ("12,345", 12346, False),
        ("30.1%", 0.3012, True),
        ("30.1%", 0.302, False),
        ("\u22120.12*", -0.1234, True),
        ("+0.12", 0.1234, True),
        ("-0.12", 0.1234, False),
        ("0.13", 0.125, True),  # half a unit either way is still that display
        ("0.12", 0.125, True),
        ("0.12", 0.1251, False),
        ("4 **", 4, True),
        ("0.0004!", 0.0004, True),
        ("1.2e-05", 1.2e-5, True),
        ("1.2e-05", 1.3e-5, False),
        ("-", None, True),
        ("n/a", float("nan"), True),
        ("-", 0.0, False),
        ("0.00", None, False),
        ("yes", True, True),
        ("no", True, False),
        ("1", True, False),
        ("yes", 1, False),
        ("0.5 (0.4\u20130.6)", 0.5, False),  # a compound display cannot be checked
        ("0.5", "0.5", False),
    ],
)
def test_displayed_text_against_summary_value(text: str, value: Any, matches: bool) -> None:
    if matches:
        assert assert_numbers_match(_page(text), {"x": value}) == 1
    else:
        with pytest.raises(AssertionError, match=r"1 of 1 numbers"):
            assert_numbers_match(_page(text), {"x": value})


@pytest.mark.parametrize(
    ("data_value", "value", "matches"),
    [
        ("0.3012", 0.3012, True),
        ("0.35", 0.3012, False),
        ("null", None, True),
        ("NaN", float("nan"), True),
        ("true", True, True),
    ],
)
def test_data_value_is_checked_at_its_own_precision(
    data_value: str, value: Any, matches: bool
) -> None:
    shown = {0.3012: "30.1%", None: "-", True: "yes"}.get(value, "n/a")
    if matches:
        assert assert_numbers_match(_page(shown, data_value), {"x": value}) == 1
    else:
        with pytest.raises(AssertionError, match=r"data-value '0\.35'"):
            assert_numbers_match(_page(shown, data_value), {"x": value})


def test_a_page_without_numbers_fails() -> None:
    report = _page("")
    report.numbers = []
    with pytest.raises(AssertionError, match="no element with a data-path"):
        assert_numbers_match(report, SUMMARY)
