"""Look at a Snakemake report as a reader does: headless Chromium opens every page of every paper's
section and saves a screenshot of each, and prints each HTML table's width against its frame's
(a table wider than its frame makes the reader scroll sideways).

    python tools/report_screenshots.py results/report.html shots/ [--width 1400]

Needs chromium and chromedriver (tools/setup.sh installs them) and selenium (the test extras).
"""

from __future__ import annotations

import argparse
import re
import shutil
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from debatelab.evaluation.papers import PAPER_TITLES

SECTIONS = ("Tables and plots", "Beside the published numbers", "Checkable claims")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--width", type=int, default=1400)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.add_argument(f"--window-size={args.width},1000")
    options.binary_location = shutil.which("chromium")
    driver = webdriver.Chrome(
        service=webdriver.ChromeService(executable_path=shutil.which("chromedriver")), options=options
    )
    wait = WebDriverWait(driver, 20)
    uri = args.report.resolve().as_uri()

    def menu(text: str):
        return wait.until(lambda d: [a for a in d.find_elements(By.CSS_SELECTOR, "nav li a") if a.text == text])[0]

    def shot(name: str) -> None:
        time.sleep(1)  # let the page's scripts lay it out
        driver.save_screenshot(str(args.out / (re.sub(r"[^A-Za-z0-9_.-]+", "_", name) + ".png")))

    def results(paper: str, section: str) -> list[str]:
        driver.get(uri)
        menu(PAPER_TITLES[paper]).click()
        menu(section).click()
        time.sleep(0.5)
        rows = driver.find_elements(By.CSS_SELECTOR, "tbody tr")
        return [r.find_element(By.TAG_NAME, "td").text for r in rows if r.find_elements(By.TAG_NAME, "td")]

    try:
        driver.get(uri)
        menu("Workflow").click()
        shot("front_page")
        for paper in PAPER_TITLES:
            for section in SECTIONS:
                for name in results(paper, section):
                    results(paper, section)
                    row = [r for r in driver.find_elements(By.CSS_SELECTOR, "tbody tr") if r.text.startswith(name)][0]
                    row.find_element(By.CSS_SELECTOR, "a[iconname=eye]").click()
                    shot(f"{paper}_{name}")
                    frames = driver.find_elements(By.TAG_NAME, "iframe")
                    if frames:
                        driver.switch_to.frame(frames[0])
                        width, visible = driver.execute_script(
                            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
                        )
                        driver.switch_to.default_content()
                        flag = "  WIDER THAN ITS FRAME" if width > visible + 1 else ""
                        print(f"{paper:<11} {name:<24} table {width} px, frame {visible} px{flag}")
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
