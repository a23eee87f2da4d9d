"""In a real headless Chromium against the real embedded service (its beat records usage and
reads GPU utilization every second here, and flags a job after 3 s below the threshold): a job
whose simulated GPUs sit at 1 % is flagged on its page without a reload and marked in the job
list; the usage page shows its GPU-hours to a site admin, filters through htmx, and links a CSV
export holding them; the utilization page shows the idle GPU-hours per team. Screenshots land
in artifacts/screenshots/."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest

from tests.dashboard.test_browser import fill, shot, sign_in, text_of, wait

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def service() -> Any:
    """The embedded service reading usage every second and flagging after 3 s below the
    threshold: the cycle a production service runs every minute, driven in seconds."""
    from tests.foundation.running_service import Service

    svc = Service(prepared=True)
    svc.env["GPUQUEUE_USAGE_SECONDS"] = "1"
    svc.env["GPUQUEUE_IDLE_MINUTES"] = "0.05"
    svc.start(timeout=180)
    yield svc
    svc.close_soon()


def test_an_idle_job_is_flagged_and_its_gpu_hours_reported(browser: Any, service: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    sign_in(browser, service, "alice")
    browser.get(f"{service.url}/jobs/new/?preset=notebook")
    Select(browser.find_element(By.ID, "id_team")).select_by_value("team-a")
    Select(browser.find_element(By.ID, "id_flavor")).select_by_value("h100")
    fill(browser, "id_name", "idle-notebook")
    fill(browser, "id_workers", "1")
    fill(
        browser,
        "id_annotations",
        "gpuqueue.dev/sim-duration-seconds=900\ngpuqueue.dev/sim-gpu-utilization=1",
    )
    browser.find_element(By.ID, "submit-job").click()
    wait(browser, lambda b: "/jobs/new/" not in b.current_url and "/jobs/" in b.current_url)
    job_id = int(browser.current_url.rstrip("/").rsplit("/", 1)[-1])

    # The page polls itself: the flag arrives without a reload, in words.
    browser.execute_script("window.__sameDocument = true")
    wait(browser, lambda b: "Idle:" in text_of(b, "job-gpu-activity"), timeout=60)
    words = text_of(browser, "job-gpu-activity")
    assert "GPU has been below 5 % utilization for" in words, words
    assert browser.execute_script("return window.__sameDocument === true")
    shot(browser, "job-idle-gpus")

    browser.get(f"{service.url}/jobs/?state=running")
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-job-id="{job_id}"]')
    assert "idle GPUs" in row.text

    sign_in(browser, service, "root")
    browser.get(f"{service.url}/usage/")
    assert "GPU-hours" in text_of(browser, "usage-total")
    assert "team-a" in text_of(browser, "usage-teams")
    assert "alice" in text_of(browser, "usage-rows")
    # A filter answers through htmx, and the CSV link carries it.
    Select(browser.find_element(By.NAME, "by")).select_by_value("month")
    Select(browser.find_element(By.NAME, "team")).select_by_value("team-a")
    browser.find_element(By.CSS_SELECTOR, "#usage-filters button[type=submit]").click()
    wait(browser, lambda b: "by=month" in b.current_url)
    wait(browser, lambda b: "Month" in text_of(b, "usage-rows"))
    href = browser.find_element(By.ID, "usage-csv").get_attribute("href")
    assert "team=team-a" in href and "by=month" in href and "export=csv" in href
    # The export holds the running job's GPU-seconds so far (the page rounds seconds to 0.00).
    exported = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(arguments[0]).then(r => r.text()).then(done)",
        href,
    )
    rows = list(csv.DictReader(io.StringIO(exported)))
    mine = [r for r in rows if r["user"] == "alice" and r["flavor"] == "h100"]
    assert mine and float(mine[0]["gpu_hours"]) > 0, exported
    assert float(mine[0]["idle_gpu_hours"]) > 0, exported
    shot(browser, "usage")

    browser.get(f"{service.url}/utilization/")
    idle = text_of(browser, "idle-gpus")
    assert "team-a" in idle
    shot(browser, "utilization-idle-gpus")
