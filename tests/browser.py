"""Open an HTML file in headless Chromium (Debian's chromium + chromium-driver) with networking off.

Used by the scorecard's browser test; also runnable by hand:
``python tests/browser.py reports/scorecard.html OUT_DIR`` prints the findings and saves screenshots.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
DRIVER = "chromedriver"


def available() -> str | None:
    """Why the browser cannot run here, or None when it can."""
    if not any(shutil.which(b) for b in CHROMIUM):
        return "no chromium on PATH (apt-get install chromium chromium-driver)"
    if not shutil.which(DRIVER):
        return "no chromedriver on PATH (apt-get install chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


@contextlib.contextmanager
def offline_chromium(width: int = 1400, height: int = 1000, downloads: Path | None = None) -> Iterator:
    """A headless Chromium (selenium) with networking off: an unreachable proxy for every host, and DevTools'
    offline emulation; its requests are logged (``driver.get_log("performance")``). ``downloads``: the folder a
    page's downloads are saved in."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    binary = next(shutil.which(b) for b in CHROMIUM if shutil.which(b))
    opts.binary_location = binary
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              f"--window-size={width},{height}", "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
              "--no-first-run", "--disable-background-networking", "--disable-component-update"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    if downloads is not None:
        opts.add_experimental_option("prefs", {"download.default_directory": str(Path(downloads).resolve()),
                                               "download.prompt_for_download": False})
    driver = webdriver.Chrome(service=Service(shutil.which(DRIVER)), options=opts)
    try:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": True, "latency": 0,
                                                                    "downloadThroughput": 0, "uploadThroughput": 0})
        if downloads is not None:
            driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow",
                                                                   "downloadPath": str(Path(downloads).resolve())})
        yield driver
    finally:
        driver.quit()


def requests_of(driver) -> tuple[list[str], list[str]]:
    """The URLs a page requested so far, and the error texts of failed loads (DevTools performance log)."""
    requests, failed = [], []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent":
            requests.append(msg["params"]["request"]["url"])
        elif msg["method"] == "Network.loadingFailed":
            failed.append(msg["params"].get("errorText", "?"))
    return requests, failed


def answer_study(html: Path, choose: Callable[[str], str], downloads: Path, timeout: float = 120.0) -> dict:
    """A study page answered as a rater would: agree to the consent text, then for every trial wait until the
    answer buttons unlock (after the declared plays), ask ``choose(trial_id)`` for "left" or "right" and click
    that button; at the end click "Save answers" and read the file the page downloads. Returns the answers,
    the page's requests and its console errors."""
    import time

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    downloads.mkdir(parents=True, exist_ok=True)
    with offline_chromium(downloads=downloads) as driver:
        driver.get(Path(html).resolve().as_uri())
        # Polled every 20 ms (selenium's default is 0.5 s: two waits a trial made each trial last about a second).
        wait = WebDriverWait(driver, timeout, poll_frequency=0.02)
        wait.until(ec.element_to_be_clickable((By.ID, "consent-agree"))).click()
        shown = []
        while driver.execute_script("return document.body.dataset.state") == "trial":
            trial = driver.execute_script("return document.body.dataset.trial")
            shown.append(trial)
            side = choose(trial)
            wait.until(ec.element_to_be_clickable((By.ID, f"choose-{side}"))).click()
            wait.until(lambda d, t=trial: d.execute_script("return document.body.dataset.trial") != t
                       or d.execute_script("return document.body.dataset.state") == "done")
        driver.find_element(By.ID, "save").click()
        deadline = time.time() + 30
        files = []
        while time.time() < deadline:
            files = [f for f in downloads.glob("answers-*.json")]
            if files and not list(downloads.glob("*.crdownload")):
                break
            time.sleep(0.1)
        requests, failed = requests_of(driver)
        console = [e for e in driver.get_log("browser") if e.get("level") in ("SEVERE", "ERROR")]
        text_copy = driver.find_element(By.ID, "answers-text").get_attribute("value")
        driver.save_screenshot(str(downloads / "done_screen.png"))
    if not files:
        raise AssertionError(f"the page saved no answers file into {downloads}")
    return {"file": files[0], "answers": json.loads(files[0].read_text()), "shown": shown,
            "text_copy": json.loads(text_copy), "requests": requests, "failed_loads": failed,
            "console_errors": console}


def inspect(html: Path, artifacts: Path, width: int = 1400, height: int = 1000) -> dict:
    """Load ``html`` from a file URL, offline; return console errors, non-local requests, and what rendered.

    Networking is disabled twice over: an unreachable proxy for every host, and DevTools' offline
    emulation. Every request the page makes is logged (DevTools performance log); any that is not a
    ``file:`` or ``data:`` URL is reported, and so is every failed load. Screenshots of the first
    screen and the whole page go to ``artifacts``.
    """
    with offline_chromium(width, height) as driver:
        driver.get(Path(html).resolve().as_uri())
        driver.execute_script("return document.readyState")
        console = [e for e in driver.get_log("browser")]
        requests, failed = requests_of(driver)
        rendered = driver.execute_script("""
            const svgs = [...document.querySelectorAll('svg')];
            const imgs = [...document.querySelectorAll('img')];
            const tables = [...document.querySelectorAll('table')];
            return {
              svgs: svgs.length,
              empty_svgs: svgs.filter(s => { const r = s.getBoundingClientRect(); return r.width < 10 || r.height < 10
                                            || s.querySelectorAll('path, line, text').length === 0; }).length,
              imgs: imgs.length,
              broken_imgs: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).length,
              tables: tables.length,
              empty_tables: tables.filter(t => t.querySelectorAll('tbody tr').length === 0
                                            || t.getBoundingClientRect().height < 5).length,
              title: document.title,
              first_screen_text: document.body.innerText.slice(0, 4000),
              page_height: document.documentElement.scrollHeight,
            };""")
        artifacts.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(artifacts / "scorecard_first_screen.png"))
        full = driver.execute_cdp_cmd("Page.captureScreenshot", {"captureBeyondViewport": True, "format": "png",
                                                                  "clip": {"x": 0, "y": 0, "width": width, "scale": 0.5,
                                                                           "height": min(rendered["page_height"], 16000)}})
        (artifacts / "scorecard_full.png").write_bytes(base64.b64decode(full["data"]))
    non_local = [u for u in requests if not u.startswith(("file:", "data:"))]
    severe = [e for e in console if e.get("level") in ("SEVERE", "ERROR")]
    return {"console_errors": severe, "non_local_requests": non_local, "failed_loads": failed,
            "requests": requests, **rendered}


if __name__ == "__main__":
    out = inspect(Path(sys.argv[1]), Path(sys.argv[2] if len(sys.argv) > 2 else os.getcwd()))
    out.pop("first_screen_text")
    print(json.dumps(out, indent=2))
