"""Open a self-contained HTML report in a real headless Chromium and report what a test needs.

The report pages are meant to be opened from disk, offline, years later: so a test loads the
file in a real browser, checks that it requests nothing, raises no script error, shows every
image, and that each number it displays (marked with ``data-path``) is the number in the
summary JSON at the precision shown.

Chromium is the system one (Debian's ``chromium``), driven by the ``playwright`` package with
``executable_path``: Playwright's own browser download is not needed. Tests using this module
are skipped, with the reason, when no Chromium can be had or ``playwright`` is not installed.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import ConsoleMessage, Error, Request, Route, WebSocketRoute

#: Names a Chromium goes by on PATH, most likely first.
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
#: Where Debian's package puts it, in case PATH is trimmed (e.g. under a minimal CI env).
DEBIAN_CHROMIUM = Path("/usr/bin/chromium")
#: Seconds each apt-get step may take before the tests give up and skip.
APT_TIMEOUT = 600
#: Milliseconds for launching, loading and screenshotting: a local page needs far less, but a
#: loaded CI machine should fail with a timeout message rather than hang the run.
BROWSER_TIMEOUT_MS = 60_000
#: Trailing markers a report puts after a number (significance, warnings, footnotes).
MARKERS = "*!†‡§"
#: What a report shows for a missing value.
MISSING_TEXTS = frozenset({"-", "–", "—", "n/a"})
#: What a ``data-value`` attribute holds for a missing value (JSON, Python and JS spellings).
MISSING_DATA_VALUES = frozenset({"", "null", "none", "nan"})

# A displayed number: optional sign (ASCII or the typographic minus), digits with optional
# thousands separators (comma, thin or narrow no-break space), optional decimals and exponent,
# optional percent sign.
_NUMBER = re.compile(
    r"(?P<sign>[+\-\u2212]?)\s*"
    r"(?P<int>\d{1,3}(?:[,\u2009\u202f]\d{3})+|\d*)"
    r"(?:\.(?P<frac>\d+))?"
    r"(?:[eE](?P<exp>[+\-\u2212]?\d+))?"
    r"\s*(?P<percent>%?)"
)

# Run in the page after ``load``: lazy images are made eager (a full-page screenshot would
# otherwise show holes, and they would count as failed), every image is awaited, then fonts
# and two animation frames so the screenshot shows the settled layout. The 10 s race keeps a
# never-settling image from hanging the test; it then counts as failed, which it is.
_SETTLE_AND_FIND_BROKEN_IMAGES = """
async () => {
  const images = [...document.images];
  for (const img of images) if (img.loading === "lazy") img.loading = "eager";
  const settled = (img) => img.complete ? null : new Promise((resolve) => {
    img.addEventListener("load", resolve, {once: true});
    img.addEventListener("error", resolve, {once: true});
  });
  const timeout = new Promise((resolve) => setTimeout(resolve, 10000));
  await Promise.race([Promise.all(images.map(settled)), timeout]);
  await document.fonts.ready;
  await new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve)));
  return images
    .filter((img) => img.naturalWidth === 0)
    .map((img) => img.currentSrc || img.getAttribute("src") || img.outerHTML);
}
"""

_COLLECT_NUMBERS = """
() => [...document.querySelectorAll("[data-path]")].map((el) => [
  el.getAttribute("data-path"), el.innerText.trim(), el.getAttribute("data-value"),
])
"""


@dataclass
class PageReport:
    """What a report page did and showed when opened in Chromium.

    Attributes:
        url: The ``file:`` URL that was loaded.
        title: ``document.title``.
        text: ``document.body.innerText``.
        console_errors: Console messages of type ``error`` (including Chromium's own
            "Failed to load resource" for every failed or blocked request) and uncaught
            exceptions, each as one line of text.
        requests: Every URL the page requested other than the document itself, in order, each
            once; ``file:`` requests are allowed, any other scheme was blocked. ``data:`` URLs
            never appear: Chromium resolves them without a network request, and Playwright
            reports none for them. WebSocket URLs appear too (also blocked).
        failed_images: ``src`` of every ``img`` whose ``naturalWidth`` is 0 after load (long
            ``data:`` URLs shortened).
        numbers: ``(data_path, text, data_value)`` for each element with a ``data-path``
            attribute: the attribute, the element's stripped ``innerText``, and its
            ``data-value`` attribute or None.
        screenshot: The full-page PNG written.
    """

    url: str
    title: str
    text: str
    console_errors: list[str]
    requests: list[str]
    failed_images: list[str]
    numbers: list[tuple[str, str, str | None]]
    screenshot: Path


@dataclass(frozen=True)
class _ChromiumLookup:
    """The outcome of looking for (and maybe installing) Chromium, cached per process."""

    path: str | None
    skip_reason: str | None


def _find_chromium() -> str | None:
    """Return the first Chromium on PATH, else Debian's path if executable, else None."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    if os.access(DEBIAN_CHROMIUM, os.X_OK):
        return str(DEBIAN_CHROMIUM)
    return None


def _install_chromium() -> str | None:
    """Install Debian's ``chromium`` with apt-get.

    Returns:
        None when apt-get succeeded, else why Chromium cannot be had.
    """
    looked = f"no Chromium found ({', '.join(CHROMIUM_NAMES)} on PATH, {DEBIAN_CHROMIUM})"
    if not (hasattr(os, "geteuid") and os.geteuid() == 0):
        return f"{looked}, and not running as root, so cannot apt-get install chromium"
    apt_get = shutil.which("apt-get")
    if apt_get is None:
        return f"{looked}, and apt-get is not available to install it"
    # Noninteractive: a debconf prompt would otherwise wait forever for a tty.
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in ([apt_get, "update", "-qq"], [apt_get, "install", "-y", "-qq", "chromium"]):
        shown = " ".join(["apt-get", *command[1:]])
        try:
            subprocess.run(
                command, check=True, capture_output=True, text=True, timeout=APT_TIMEOUT, env=env
            )
        except subprocess.TimeoutExpired:
            return f"{looked}; `{shown}` timed out after {APT_TIMEOUT} s"
        except subprocess.CalledProcessError as exc:
            output = (exc.stderr or exc.stdout or "").strip()[-500:]
            return f"{looked}; `{shown}` failed with exit code {exc.returncode}: {output}"
        except OSError as exc:
            return f"{looked}; `{shown}` could not run: {exc}"
    return None


@functools.cache
def _lookup_chromium() -> _ChromiumLookup:
    """Find Chromium, installing it if need be; cached so apt-get runs at most once."""
    found = _find_chromium()
    if found is not None:
        return _ChromiumLookup(found, None)
    reason = _install_chromium()
    if reason is not None:
        return _ChromiumLookup(None, reason)
    found = _find_chromium()
    if found is None:
        return _ChromiumLookup(
            None, f"apt-get install chromium succeeded but no Chromium is at {DEBIAN_CHROMIUM}"
        )
    return _ChromiumLookup(found, None)


def ensure_chromium() -> str:
    """Return the path of a Chromium binary, installing Debian's package if need be.

    Looks for ``chromium``, ``chromium-browser`` and ``google-chrome`` on PATH, then
    ``/usr/bin/chromium``. When none is there and this process is root with apt-get, runs
    ``apt-get update`` and ``apt-get install -y chromium`` (quietly, each with a timeout).
    The outcome, found or not, is cached for the process.

    Returns:
        The path of the Chromium executable.

    Raises:
        pytest.skip.Exception: When Chromium cannot be had, saying why (not root, no apt-get,
            or the apt-get failure with its message).
    """
    lookup = _lookup_chromium()
    if lookup.path is None:
        pytest.skip(lookup.skip_reason or "no Chromium")
    return lookup.path


def _launch_args() -> list[str]:
    """Return the Chromium flags this environment needs."""
    args = [
        # Containers often give /dev/shm only 64 MB, and Chromium then crashes on large pages.
        # Debian's wrapper means to add this flag itself when /dev/shm is small, but its check
        # breaks when findmnt prints two lines for /dev/shm (as on this machine).
        "--disable-dev-shm-usage",
        # Belt and braces behind the request routing: DNS prefetch and preconnect hints never
        # reach the routing layer, so make every host name fail to resolve.
        "--host-resolver-rules=MAP * ~NOTFOUND",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # Chromium refuses to start as root with its sandbox on.
        args.append("--no-sandbox")
    return args


def _short(url: str) -> str:
    """Shorten a ``data:`` URL (possibly megabytes of base64) for messages."""
    return url if not url.startswith("data:") or len(url) <= 80 else url[:77] + "..."


def open_report(path: Path, screenshot: Path) -> PageReport:
    """Open an HTML file in headless Chromium, collect what it did, and screenshot it.

    Any request other than ``file:`` and ``data:`` is aborted (and recorded), WebSockets are
    answered by a stub that closes them, and host names do not resolve: a test can never reach
    the network through the page.

    Args:
        path: The HTML file.
        screenshot: Where to write the full-page PNG (parent directories are created).

    Returns:
        The page's console errors, requests, broken images, data-path numbers, title and text.

    Raises:
        FileNotFoundError: When ``path`` does not exist.
        pytest.skip.Exception: When ``playwright`` or Chromium is unavailable.
    """
    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(path)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        pytest.skip(
            f"the playwright package is not importable ({exc}); "
            "install the dev extras: pip install -e '.[dev]'"
        )
    # After the import check, so a missing playwright never costs an apt-get install.
    executable = ensure_chromium()
    url = path.as_uri()
    requests: list[str] = []
    console_errors: list[str] = []
    document_requested = False

    def record(request_url: str) -> None:
        if request_url not in requests:
            requests.append(request_url)

    def on_request(request: Request) -> None:
        nonlocal document_requested
        # The first main-frame navigation is the document itself (compared this way rather
        # than by URL, as Chromium may spell the file: URL differently from pathlib).
        main_frame_navigation = (
            request.is_navigation_request() and request.frame.parent_frame is None
        )
        if main_frame_navigation and not document_requested:
            document_requested = True
            return
        record(request.url)

    def route(route: Route) -> None:
        # The request event has recorded it already; record here too in case a future
        # Playwright routes something it does not announce.
        request_url = route.request.url
        if request_url.startswith(("file:", "data:")):
            route.continue_()
        else:
            record(request_url)
            route.abort("blockedbyclient")

    def route_web_socket(ws: WebSocketRoute) -> None:
        # Not connecting to the server means the socket never leaves the browser.
        record(ws.url)
        ws.close()

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            where = message.location.get("url") or ""
            line = message.location.get("lineNumber")
            if where and line:
                where = f"{where}:{line}"
            console_errors.append(f"{message.text} ({where})" if where else message.text)

    def on_page_error(error: Error) -> None:
        console_errors.append(f"uncaught {error.name or 'Error'}: {error.message}")

    screenshot = Path(screenshot)
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        try:
            browser = playwright.chromium.launch(
                executable_path=executable, args=_launch_args(), timeout=BROWSER_TIMEOUT_MS
            )
        except Exception as exc:
            exc.add_note(f"launching {executable} with Playwright failed")
            raise
        try:
            # Service workers would fetch outside the page's routing; a file: page cannot
            # register one anyway, but a report must not depend on that.
            context = browser.new_context(
                viewport={"width": 1280, "height": 800}, service_workers="block"
            )
            context.set_default_timeout(BROWSER_TIMEOUT_MS)
            context.route("**/*", route)
            context.route_web_socket(lambda _url: True, route_web_socket)
            context.on("request", on_request)
            page = context.new_page()
            page.on("console", on_console)
            page.on("pageerror", on_page_error)
            page.goto(url, wait_until="load")
            # This evaluate also flushes the console events the load produced: they precede
            # its reply on the same protocol connection.
            failed_images = [_short(src) for src in page.evaluate(_SETTLE_AND_FIND_BROKEN_IMAGES)]
            numbers = [
                (data_path, text, data_value)
                for data_path, text, data_value in page.evaluate(_COLLECT_NUMBERS)
            ]
            title = page.title()
            text = page.evaluate("() => document.body ? document.body.innerText : ''")
            page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()
    return PageReport(
        url=url,
        title=title,
        text=text,
        console_errors=console_errors,
        requests=requests,
        failed_images=failed_images,
        numbers=numbers,
        screenshot=screenshot,
    )


def json_path_get(data: Any, path: str) -> Any:
    """Resolve a path such as ``analyses.0.cases.3.dpd`` in parsed JSON.

    Parts index mappings by key (a digit part is tried as a key first, since JSON object keys
    are strings) and lists by non-negative integer. A path written as a JSON array
    (``["analyses", 0, "models", "gpt-4.1", "dpd"]``) allows keys holding dots or nothing.

    Args:
        data: Parsed JSON (dicts, lists, scalars).
        path: Dot-separated keys and list indices, or a JSON array of them.

    Returns:
        The value at the path.

    Raises:
        KeyError: With the path (and the failing part) when it does not resolve.
    """
    parts = [str(p) for p in json.loads(path)] if path.startswith("[") else path.split(".")
    current = data
    for depth, part in enumerate(parts):
        where = ".".join(parts[: depth + 1])
        if isinstance(current, Mapping):
            if part not in current:
                raise KeyError(f"{path!r}: no key {part!r} at {where!r}")
            current = current[part]
        elif isinstance(current, Sequence) and not isinstance(current, str | bytes):
            if not part.isdigit() or int(part) >= len(current):
                raise KeyError(
                    f"{path!r}: {part!r} is not an index of the {len(current)}-item list "
                    f"at {where!r}"
                )
            current = current[int(part)]
        else:
            raise KeyError(f"{path!r}: {type(current).__name__} at {where!r} has no {part!r}")
    return current


@dataclass(frozen=True)
class _Shown:
    """A parsed displayed value: missing, a boolean, a number with its precision, or a bound."""

    kind: str  # "missing", "bool", "number" or "below" (a bound: "< 0.001")
    value: float | bool | None = None
    half_unit: float = 0.0  # half a unit of the last displayed digit
    percent: bool = False


def _parse_shown(text: str, *, raw: bool = False) -> _Shown | None:
    """Parse a displayed value (``raw``: a ``data-value`` attribute); None if unparseable."""
    text = text.strip()
    # Markers only ever follow what the page shows, not the raw attribute.
    if not raw:
        while text and text[-1] in MARKERS:
            text = text[:-1].rstrip()
    lowered = text.lower()
    if lowered in (MISSING_DATA_VALUES if raw else MISSING_TEXTS):
        return _Shown("missing")
    if lowered in ({"true", "false"} if raw else {"yes", "no"}):
        return _Shown("bool", lowered in {"true", "yes"})
    if not raw and text.startswith("< "):
        # A bound, as the one p format writes a tiny p: "< 0.001".
        bound = _parse_shown(text[2:].strip(), raw=False)
        return _Shown("below", bound.value) if bound and bound.kind == "number" else None
    match = _NUMBER.fullmatch(text)
    if match is None or not (match["int"] or match["frac"]):
        return None
    digits = re.sub(r"[,\u2009\u202f]", "", match["int"] or "0")
    frac = match["frac"] or ""
    exponent = int((match["exp"] or "0").replace("\u2212", "-"))
    sign = -1.0 if match["sign"] in ("-", "\u2212") else 1.0
    value = sign * float(f"{digits}.{frac or '0'}e{exponent}")
    return _Shown("number", value, 0.5 * 10.0 ** (exponent - len(frac)), bool(match["percent"]))


def _mismatch(shown: _Shown | None, expected: Any) -> str | None:
    """Return why a parsed displayed value does not show ``expected``, or None if it does."""
    if shown is None:
        return "cannot parse the displayed text"
    missing = expected is None or (isinstance(expected, float) and math.isnan(expected))
    if shown.kind == "missing" or missing:
        return None if shown.kind == "missing" and missing else "missing on one side only"
    if shown.kind == "bool" or isinstance(expected, bool):
        if shown.kind == "bool" and isinstance(expected, bool):
            return None if shown.value == expected else "wrong boolean"
        return "boolean on one side only"
    if not isinstance(expected, int | float):
        return f"expected a number, the summary holds a {type(expected).__name__}"
    if shown.kind == "below":
        return None if expected < shown.value else "shown as below a bound it is not below"
    target = expected * 100 if shown.percent else expected
    assert isinstance(shown.value, float)
    # The relative slack absorbs binary rounding (0.125 is shown "0.13" or "0.12").
    if abs(shown.value - target) <= shown.half_unit * (1 + 1e-9) + 1e-12 * abs(target):
        return None
    return f"off by {shown.value - target:.3g} (allowed ±{shown.half_unit:g})"


def assert_numbers_match(report: PageReport, summary: Mapping[str, Any]) -> int:
    """Assert each ``data-path`` element shows the summary's value at the displayed precision.

    The displayed text may carry a leading sign (``-``, ``+``, ``−``), thousands separators, a
    trailing ``%`` (then it shows value × 100) and trailing markers (``*``, ``!``, ``†``...).
    It must equal the value within half a unit of its last displayed digit. ``-``, ``–``,
    ``—`` and ``n/a`` must stand for None or NaN, ``yes``/``no`` for booleans. A ``data-value``
    attribute, when present, must hold the value too, at its own precision (``null``, ``NaN``
    or empty for missing, ``true``/``false`` for booleans).

    Args:
        report: The opened page.
        summary: The parsed summary JSON the page was rendered from.

    Returns:
        How many numbers were checked.

    Raises:
        AssertionError: Listing every mismatch (path, shown, expected), or when the page has no
            ``data-path`` element at all.
    """
    assert report.numbers, f"{report.url} has no element with a data-path attribute to check"
    mismatches = []
    for data_path, text, data_value in report.numbers:
        try:
            expected = json_path_get(summary, data_path)
        except KeyError as exc:
            mismatches.append(f"{data_path}: shown {text!r}, not in the summary ({exc.args[0]})")
            continue
        why = _mismatch(_parse_shown(text), expected)
        if why is None and data_value is not None:
            why = _mismatch(_parse_shown(data_value, raw=True), expected)
            why = why and f"data-value {data_value!r}: {why}"
        if why is not None:
            mismatches.append(f"{data_path}: shown {text!r}, expected {expected!r} ({why})")
    assert not mismatches, (
        f"{len(mismatches)} of {len(report.numbers)} numbers on {report.url} differ from the "
        "summary:\n  " + "\n  ".join(mismatches)
    )
    return len(report.numbers)
