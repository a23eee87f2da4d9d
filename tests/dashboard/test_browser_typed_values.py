"""The submit form's numbers as typed in a real headless Chromium against the real embedded
service: letters in Workers or Priority are refused at the field (a number box would have
emptied itself and the job got the default), and a runtime typed as 90m is read as one."""

from __future__ import annotations

from typing import Any

import pytest

from tests.dashboard.test_browser import fill, sign_in, text_of, wait

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.parametrize("field", ["workers", "priority"])
def test_letters_are_refused_at_the_field_and_nothing_is_submitted(
    browser: Any, service: Any, field: str
) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, service, "alice")
    browser.get(f"{service.url}/jobs/new/?preset=notebook")
    fill(browser, "id_name", f"letters-in-{field.replace('_', '-')}")
    fill(browser, f"id_{field}", "abc")
    browser.find_element(By.ID, "submit-job").click()
    wait(browser, lambda b: text_of(b, f"error-{field}") == "Must be an integer.")
    assert "/jobs/new/" in browser.current_url


def test_a_runtime_typed_as_minutes_is_read_as_one(browser: Any, service: Any) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, service, "alice")
    browser.get(f"{service.url}/jobs/new/?preset=notebook")
    fill(browser, "id_name", "ninety-minutes")
    fill(browser, "id_expected_runtime_seconds", "90m")
    fill(browser, "id_max_runtime_seconds", "2h")
    browser.find_element(By.ID, "submit-job").click()
    wait(browser, lambda b: "/jobs/new/" not in b.current_url and "/jobs/" in b.current_url)
    job_id = int(browser.current_url.rstrip("/").rsplit("/", 1)[-1])
    token = service.token("alice")
    job = service.api("GET", f"/api/v1/jobs/{job_id}/", token)
    assert (job["expected_runtime_seconds"], job["max_runtime_seconds"]) == (5400, 7200)
