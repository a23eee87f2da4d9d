"""Times a person reads are in the viewer's own time zone, with the exact time on hover; the
server's UTC text stays for a browser without JavaScript."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.dashboard.test_browser import sign_in, submit_job, wait

pytestmark = [pytest.mark.browser, pytest.mark.slow]

READ = """
const el = document.querySelector(arguments[0]);
return el ? [el.getAttribute('datetime'), el.textContent, el.title] : null;
"""


def test_the_job_page_and_list_show_times_in_the_viewers_zone(browser: Any, service: Any) -> None:
    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Asia/Tokyo"})
    try:
        sign_in(browser, service, "alice")
        job_id = submit_job(browser, service, "tokyo-time", duration=5)
        browser.get(f"{service.url}/jobs/{job_id}/")
        wait(
            browser,
            lambda b: "GMT+9" in (b.execute_script(READ, "dd time[data-local]") or ["", ""])[1],
        )
        at, text, title = browser.execute_script(READ, "dd time[data-local]")
        tokyo = datetime.fromisoformat(at).astimezone(ZoneInfo("Asia/Tokyo"))
        assert tokyo.strftime("%H:%M") in text and "UTC" not in text
        assert tokyo.strftime("%H:%M:%S") in title and "GMT+9" in title
        browser.get(f"{service.url}/jobs/")
        wait(browser, lambda b: b.execute_script(READ, "td time[data-local='hover']"))
        wait(browser, lambda b: "GMT+9" in b.execute_script(READ, "td time[data-local='hover']")[2])
        at, text, title = browser.execute_script(READ, "td time[data-local='hover']")
        assert "ago" in text or text == "now"  # the relative text stays
        assert (
            datetime.fromisoformat(at).astimezone(ZoneInfo("Asia/Tokyo")).strftime("%H:%M") in title
        )
    finally:
        browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": ""})
