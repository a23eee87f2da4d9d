"""Screenshots for docs/dashboard.md, taken in headless Chromium against the embedded service
with demo traffic: the job list, a running job's page, the queues and the utilization page,
each at 1,400 px wide and at phone width (390 px).

    .venv/bin/python scripts/screenshots.py [--out docs/img] [--warmup 90]

1. Start `python -m gpuqueue.ops.launcher` on a throwaway data folder with demo jobs
   arriving quickly (the tests' Service, with demo traffic on).
2. Let the queue move for `--warmup` seconds; write a sample a minute for the hour before
   (the cluster as it is then), so that the charts are filled; sign in as alice (team-a).
3. Save each page (the whole page, capped in height) as PNG; re-encode with a 256-colour
   palette any that is over 300 KB.
Not part of `make test`: it takes minutes and writes into docs/.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.dashboard.conftest import CHROMEDRIVER, CHROMIUM  # noqa: E402
from tests.foundation.running_service import Service  # noqa: E402

WIDTHS = {"": 1400, "-phone": 390}
MAX_HEIGHT = 2600
MAX_BYTES = 300_000
SAMPLES = (
    "from datetime import timedelta\n"
    "from django.utils import timezone\n"
    "from gpuqueue.services.accounting.utilization import sample_utilization\n"
    "now = timezone.now()\n"
    "[sample_utilization(now - timedelta(minutes=m)) for m in range(60, 0, -1)]"
)


def browser(profile: Path):  # noqa: ANN201 (selenium is a dev dependency)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--hide-scrollbars", "--force-device-scale-factor=1",
                 f"--user-data-dir={profile}"):  # fmt: skip
        options.add_argument(flag)
    return webdriver.Chrome(service=DriverService(CHROMEDRIVER), options=options)


def sign_in(driver, url: str) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    driver.get(f"{url}/accounts/login/")
    driver.find_element(By.ID, "id_username").send_keys("alice")
    driver.find_element(By.ID, "id_password").send_keys("alice-gpuqueue")
    driver.find_element(By.ID, "sign-in").click()
    time.sleep(1)


def save(driver, path: Path, width: int) -> None:  # noqa: ANN001
    driver.set_window_size(width, 900)
    time.sleep(0.5)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, min(int(height) + 20, MAX_HEIGHT))
    time.sleep(0.5)
    driver.save_screenshot(str(path))
    if path.stat().st_size > MAX_BYTES:
        from PIL import Image

        with Image.open(path) as image:
            image.convert("RGB").quantize(colors=256).save(path, optimize=True)
    print(f"{path.relative_to(ROOT)}: {width} px, {path.stat().st_size // 1024} KB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "img"))
    parser.add_argument("--warmup", type=float, default=90)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    service = Service()
    service.env["GPUQUEUE_DEMO_JOBS_PER_MINUTE"] = "40"
    service.start(timeout=240)
    driver = None
    try:
        env = dict(service.env, GPUQUEUE_EMBEDDED="1")
        cmd = [sys.executable, "manage.py", "shell", "-c", SAMPLES]
        time.sleep(args.warmup)
        subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
        driver = browser(Path(tempfile.mkdtemp(prefix="gq-shots-")))
        sign_in(driver, service.url)
        driver.get(f"{service.url}/?state=running")
        job = driver.execute_script(
            "const a = document.querySelector('table.jobs tbody a[href^=\"/jobs/\"]');"
            "return a ? a.getAttribute('href') : null;"
        )
        pages = {"jobs": "/", "queues": "/queues/", "utilization": "/utilization/"}
        if job:
            pages["job"] = job
        for name, page in pages.items():
            for suffix, width in WIDTHS.items():
                driver.get(f"{service.url}{page}")
                time.sleep(1.5)  # htmx parts that load after the page (logs)
                save(driver, out / f"dashboard-{name}{suffix}.png", width)
        return 0
    finally:
        if driver is not None:
            driver.quit()
        service.close()


if __name__ == "__main__":
    sys.exit(main())
