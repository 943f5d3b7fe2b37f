"""Headless Debian Chromium driven by Selenium (Debian's ``chromium`` + ``chromium-driver``, same version), for
looking at pages of a real Airflow the way a person does: log in through the login form, open a page, screenshot.

Nothing is downloaded: the browser and its driver are the system's, and the browser's background services
(updates, sync, safe browsing) are off; it only ever talks to 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser")
CHROMEDRIVER = "chromedriver"
INSTALL_HINT = "apt-get install chromium chromium-driver (scripts/setup.sh does it)"


def chromium_paths() -> tuple[str, str]:
    """The system Chromium and its driver; RuntimeError naming the apt packages when missing."""
    browser = next((found for name in CHROMIUM_CANDIDATES if (found := shutil.which(name))), None)
    driver = shutil.which(CHROMEDRIVER) or ("/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None)
    if browser is None or driver is None:
        raise RuntimeError(f"headless Chromium not found: {INSTALL_HINT}")
    return browser, driver


@contextlib.contextmanager
def chromium(width: int = 1440, height: int = 900, failure_screenshot: Path | None = None) -> Iterator[Any]:
    """A headless Chromium WebDriver session; quit at exit (after a screenshot to ``failure_screenshot`` if the
    block raised)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver_path = chromium_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in (
        "--headless=new",
        "--no-sandbox",  # runs as root in CI
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--disable-extensions",
        "--no-proxy-server",
        "--safebrowsing-disable-auto-update",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.set_page_load_timeout(120)
    try:
        yield driver
    except BaseException:
        if failure_screenshot is not None:
            with contextlib.suppress(Exception):
                failure_screenshot.parent.mkdir(parents=True, exist_ok=True)
                driver.save_screenshot(str(failure_screenshot))
        raise
    finally:
        driver.quit()


def wait_for(
    driver: Any, condition: Any, timeout: float = 60.0, message: str = "", *, across_navigation: bool = False
) -> Any:
    """``WebDriverWait(driver, timeout).until(condition)``, polling every 0.2 s; ``across_navigation``: a poll that
    a navigation under way aborts ("aborted by navigation") is polled again, not an error."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    ignored = [WebDriverException] if across_navigation else None
    return WebDriverWait(driver, timeout, poll_frequency=0.2, ignored_exceptions=ignored).until(condition, message)


def log_in(driver: Any, base_url: str, username: str, password: str, timeout: float = 90.0) -> None:
    """Sign in through SimpleAuthManager's login form; returns once Airflow has set its ``_token`` cookie."""
    from selenium.webdriver.common.by import By

    driver.get(f"{base_url}/auth/login")
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "input[name=username]"), timeout, "no login form")
    driver.find_element(By.CSS_SELECTOR, "input[name=username]").send_keys(username)
    driver.find_element(By.CSS_SELECTOR, "input[type=password]").send_keys(password)
    wait_for(driver, lambda d: d.find_element(By.CSS_SELECTOR, "button[type=submit]").is_enabled(), timeout)
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    # The submit navigates (a redirect after the login): a cookie read during it is aborted, and read again.
    wait_for(
        driver, lambda d: d.get_cookie("_token") is not None, timeout, "login set no _token cookie",
        across_navigation=True,
    )  # fmt: skip
