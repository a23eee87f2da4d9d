"""Accessibility in a real headless Chromium: axe-core finds no serious or critical violation
on any dashboard page, and a job can be submitted and cancelled with the keyboard only (Tab
and Enter), the focused control always visibly outlined. Also the layout that reading depends
on: sortable headers, no wrapped names or teams at 1,400 px, charts as wide as their section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.test_browser import sign_in, text_of, wait, write_samples
from tests.dashboard.test_browser_security import PAGES

pytestmark = [pytest.mark.browser, pytest.mark.slow]

AXE = (Path(__file__).parent / "vendor" / "axe.min.js").read_text()
RUN_AXE = """
const done = arguments[arguments.length - 1];
axe.run(document, {resultTypes: ['violations']})
  .then((r) => done(r.violations.map((v) => ({
      id: v.id, impact: v.impact, help: v.help,
      nodes: v.nodes.slice(0, 3).map((n) => n.target.join(' '))}))))
  .catch((e) => done([{id: 'axe-error', impact: 'critical', help: String(e), nodes: []}]));
"""
FOCUS = """
const el = document.activeElement;
if (!el || el === document.body) return null;
const style = getComputedStyle(el);
return {id: el.id, outline: style.outlineStyle, width: parseFloat(style.outlineWidth)};
"""

# How many lines each Name and Team cell of the job list takes (a range's rects: one per line).
LINES_OF_NAMES_AND_TEAMS = """
return [...document.querySelectorAll('table.jobs tbody tr')].flatMap((tr) =>
  [tr.children[1], tr.children[2]].map((td) => {
    const r = document.createRange(); r.selectNodeContents(td);
    return new Set([...r.getClientRects()].map((rect) => Math.round(rect.top))).size;
  }));
"""

# Each chart's width, its container's content width and the window's, in CSS pixels.
CHART_WIDTHS = """
return [...document.querySelectorAll('svg.chart')].map((svg) => {
  const box = svg.parentElement, style = getComputedStyle(box);
  const inner = box.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  return [svg.getBoundingClientRect().width, inner, window.innerWidth];
});
"""


# A laptop and a phone (the narrowest phones in use are 375 CSS pixels wide).
WIDTHS = ((1400, 900), (375, 800))


def violations(browser: Any) -> list[dict[str, Any]]:
    """axe-core's serious and critical findings on the page as it is now."""
    browser.execute_script(AXE)
    browser.set_script_timeout(60)
    found = browser.execute_async_script(RUN_AXE)
    return [v for v in found if v["impact"] in ("serious", "critical")]


def ready(browser: Any) -> None:
    wait(browser, lambda b: b.execute_script("return document.readyState") == "complete")


def test_axe_finds_no_serious_violation_on_any_page(browser: Any, service: Any) -> None:
    browser.get(f"{service.url}/accounts/login/")
    ready(browser)
    found = {"/accounts/login/": violations(browser)}
    sign_in(browser, service, "root")
    browser.get(f"{service.url}/jobs/new/?preset=notebook")
    ready(browser)
    from selenium.webdriver.common.by import By

    browser.find_element(By.ID, "submit-job").click()
    wait(browser, lambda b: "/jobs/new/" not in b.current_url and "/jobs/" in b.current_url)
    job = browser.current_url.split(service.url, 1)[1]
    array = service.api(
        "POST",
        "/api/v1/arrays/",
        service.token("alice"),  # a member of team-a; root sees every team's arrays
        {
            "team": "team-a",
            "flavor": "h100",
            "name": "sweep",
            "image": "ghcr.io/acme/train:1",
            "array": "0-7%2",
        },
    )
    pages = [
        f"/arrays/{array['id']}/",
        *PAGES,
        "/jobs/?ordering=-waited&state=active",
        f"/jobs/?expand={array['id']}",
        "/jobs/new/?preset=distributed",
        job,
        f"{job}logs/",
        f"{job}cancel/",
        f"/jobs/new/?from={job.strip('/').rsplit('/', 1)[-1]}",
        "/teams/team-a/",
        "/teams/team-a/quotas/h100/",
        "/usage/",
        "/utilization/?window=week",
        "/no-such-page/",
    ]
    overflow: dict[str, int] = {}
    try:
        for width, height in WIDTHS:
            browser.set_window_size(width, height)
            for page in pages:
                browser.get(f"{service.url}{page}")
                ready(browser)
                # Each page checked is the page itself, not the error page in its place.
                assert ("Not found" in browser.title) == (page == "/no-such-page/"), page
                found[f"{page} at {width} px"] = violations(browser)
                # The page itself never scrolls sideways; wide tables scroll inside their box.
                overflow[f"{page} at {width} px"] = browser.execute_script(
                    "return document.documentElement.scrollWidth - window.innerWidth"
                )
    finally:
        browser.set_window_size(1280, 1000)
    assert found == {page: [] for page in found}
    assert {page: px for page, px in overflow.items() if px > 1} == {}


def tab_to(browser: Any, element_id: str, limit: int = 120) -> dict[str, Any]:
    """Press Tab until `element_id` has the focus; each stop must show its focus."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    for _ in range(limit):
        ActionChains(browser).send_keys(Keys.TAB).perform()
        focus = browser.execute_script(FOCUS)
        if focus is None:
            continue
        assert focus["outline"] != "none" and focus["width"] >= 1, focus  # focus visible
        if focus["id"] == element_id:
            return dict(focus)
    raise AssertionError(f"Tab never reached #{element_id}")


def test_submit_and_cancel_a_job_with_the_keyboard_only(browser: Any, service: Any) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    sign_in(browser, service, "alice")
    browser.get(f"{service.url}/jobs/new/?preset=notebook")
    ready(browser)
    tab_to(browser, "id_name")
    ActionChains(browser).key_down(Keys.CONTROL).send_keys("a").key_up(Keys.CONTROL).perform()
    ActionChains(browser).send_keys("keyboard-only").perform()
    tab_to(browser, "submit-job")
    ActionChains(browser).send_keys(Keys.ENTER).perform()
    wait(browser, lambda b: "/jobs/new/" not in b.current_url and "/jobs/" in b.current_url)
    ready(browser)
    assert "keyboard-only" in browser.title
    tab_to(browser, "cancel-job")
    ActionChains(browser).send_keys(Keys.ENTER).perform()
    # The confirmation is the browser's own dialog, where Enter means OK; WebDriver answers
    # it for the keyboard (it cannot type into native dialogs).
    alert = wait(browser, lambda b: b.switch_to.alert, timeout=10)
    assert "Cancel job #" in alert.text
    alert.accept()
    wait(browser, lambda b: text_of(b, "job-state") == "CANCELLED", timeout=30)


def test_a_column_header_sorts_and_says_so(browser: Any, service: Any) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, service, "root")
    browser.get(f"{service.url}/jobs/")
    ready(browser)
    browser.find_element(By.LINK_TEXT, "GPU-h").click()
    wait(browser, lambda b: "ordering=-gpu_hours" in b.current_url)
    th = browser.find_element(By.CSS_SELECTOR, "th[aria-sort]")
    assert th.get_attribute("aria-sort") == "descending" and "GPU-h" in th.text
    # At 1,400 px no name or team wraps: each of their cells is one line high.
    browser.set_window_size(1400, 1000)
    try:
        lines = browser.execute_script(LINES_OF_NAMES_AND_TEAMS)
        assert lines and set(lines) == {1}, lines
    finally:
        browser.set_window_size(1280, 1000)


def test_charts_use_the_width_of_their_container(browser: Any, service: Any) -> None:
    write_samples(service, minutes=5)
    sign_in(browser, service, "root")
    browser.set_window_size(1400, 1000)
    try:
        browser.get(f"{service.url}/utilization/")
        ready(browser)
        widths = browser.execute_script(CHART_WIDTHS)
        assert widths, "no chart drawn"
        for chart, container, window in widths:
            assert chart >= container - 1 and container >= 0.9 * window, widths
    finally:
        browser.set_window_size(1280, 1000)
