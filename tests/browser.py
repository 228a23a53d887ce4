"""Open an HTML file in headless Chromium (Debian's chromium + chromium-driver) with networking off.

Used by the scorecard's browser test; also runnable by hand:
``python tests/browser.py reports/scorecard.html OUT_DIR`` prints the findings and saves screenshots.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
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


def inspect(html: Path, artifacts: Path, width: int = 1400, height: int = 1000) -> dict:
    """Load ``html`` from a file URL, offline; return console errors, non-local requests, and what rendered.

    Networking is disabled twice over: an unreachable proxy for every host, and DevTools' offline
    emulation. Every request the page makes is logged (DevTools performance log); any that is not a
    ``file:`` or ``data:`` URL is reported, and so is every failed load. Screenshots of the first
    screen and the whole page go to ``artifacts``.
    """
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
    driver = webdriver.Chrome(service=Service(shutil.which(DRIVER)), options=opts)
    try:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": True, "latency": 0,
                                                                    "downloadThroughput": 0, "uploadThroughput": 0})
        driver.get(Path(html).resolve().as_uri())
        driver.execute_script("return document.readyState")
        console = [e for e in driver.get_log("browser")]
        requests, failed = [], []
        for entry in driver.get_log("performance"):
            msg = json.loads(entry["message"])["message"]
            if msg["method"] == "Network.requestWillBeSent":
                requests.append(msg["params"]["request"]["url"])
            elif msg["method"] == "Network.loadingFailed":
                failed.append(msg["params"].get("errorText", "?"))
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
    finally:
        driver.quit()
    non_local = [u for u in requests if not u.startswith(("file:", "data:"))]
    severe = [e for e in console if e.get("level") in ("SEVERE", "ERROR")]
    return {"console_errors": severe, "non_local_requests": non_local, "failed_loads": failed,
            "requests": requests, **rendered}


if __name__ == "__main__":
    out = inspect(Path(sys.argv[1]), Path(sys.argv[2] if len(sys.argv) > 2 else os.getcwd()))
    out.pop("first_screen_text")
    print(json.dumps(out, indent=2))
