"""A session that ends while a page is open, in a real headless Chromium against the real
embedded service: the page's polling regions lead to one full-page sign-in that returns to the
page, and a filled-in submit form survives signing in again."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.dashboard.test_browser import DEMO_PASSWORDS, fill, sign_in, submit_job, wait

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def end_every_session(service: Any) -> None:
    """What an expiry or a sign-out elsewhere does: the server forgets the session."""
    import psycopg

    url = f"postgresql://postgres:@/postgres?host={service.data_dir / 'postgres'}"
    with psycopg.connect(url) as conn:
        conn.execute("DELETE FROM django_session")


def sign_in_here(browser: Any, username: str) -> None:
    """Sign in on the sign-in page the browser is on (keeping its ?next=)."""
    from selenium.webdriver.common.by import By

    browser.find_element(By.ID, "id_username").send_keys(username)
    browser.find_element(By.ID, "id_password").send_keys(DEMO_PASSWORDS[username])
    browser.find_element(By.ID, "sign-in").click()


def on_sign_in_page(browser: Any) -> bool:
    return "/accounts/login/" in browser.current_url


def test_polling_regions_lead_to_one_sign_in_that_returns_to_the_page(
    browser: Any, service: Any
) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, service, "alice")
    job_id = submit_job(browser, service, "session-expiry", duration=600)
    page = browser.current_url
    # The job page polls its status every 2 s and its run-time panel every 5 s.
    assert browser.find_elements(By.CSS_SELECTOR, "#job-status[hx-trigger]")
    browser.execute_script("window.__samePage = true")

    end_every_session(service)
    wait(browser, on_sign_in_page, timeout=30)
    assert f"next=%2Fjobs%2F{job_id}%2F" in browser.current_url
    assert not browser.execute_script("return window.__samePage === true")  # a navigation
    assert len(browser.find_elements(By.ID, "id_password")) == 1
    assert not browser.find_elements(By.ID, "job-status")

    sign_in_here(browser, "alice")
    wait(browser, lambda b: b.current_url == page)
    wait(browser, lambda b: b.find_element(By.ID, "job-status"))


def test_a_filled_form_submitted_after_expiry_comes_back_filled_after_sign_in(
    browser: Any, service: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    sign_in(browser, service, "alice")
    browser.get(f"{service.url}/jobs/new/?preset=training")
    Select(browser.find_element(By.ID, "id_team")).select_by_value("team-a")
    fill(browser, "id_name", "kept-through-sign-in")
    fill(browser, "id_workers", "2")
    fill(browser, "id_priority", "7")
    fill(browser, "id_env", "STEPS=1000")
    browser.find_element(By.ID, "id_preemptible").click()  # the preset's tick, untaken
    time.sleep(1)  # let the curl preview's request (400 ms after typing) finish first

    end_every_session(service)
    browser.find_element(By.ID, "submit-job").click()
    wait(browser, on_sign_in_page, timeout=30)
    assert "next=%2Fjobs%2Fnew%2F" in browser.current_url

    sign_in_here(browser, "alice")
    wait(browser, lambda b: "/jobs/new/" in b.current_url)
    value = lambda field: browser.find_element(By.ID, field).get_attribute("value")  # noqa: E731
    wait(browser, lambda b: value("id_name") == "kept-through-sign-in")
    assert value("id_workers") == "2"
    assert value("id_priority") == "7"
    assert value("id_env") == "STEPS=1000"
    assert value("id_image") == "ghcr.io/acme/train:1.0"
    assert not browser.find_element(By.ID, "id_preemptible").is_selected()
    # Kept once: opening the form again shows the preset, not the old values.
    browser.get(f"{service.url}/jobs/new/")
    assert value("id_name") != "kept-through-sign-in"
