// Drives the review page in headless Chromium (playwright-core): key, list, filter, open,
// mark a flag false positive, screenshots. Prints one JSON object of what it saw.
"use strict";
const { chromium } = require("playwright-core");

const args = JSON.parse(process.argv[2]);

async function cardBox(page, category) {
  return page.locator(`[data-testid=flag-card][data-category=${category}]`).boundingBox();
}

(async () => {
  const browser = await chromium.launch({ executablePath: args.chromium, args: args.chromium_args, headless: true });
  const seen = {};
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 }, deviceScaleFactor: 1 });
    const requests = [];
    page.on("request", (r) => requests.push(r.url()));
    await page.goto(args.url + "/review");
    // Tenant keys are on: the page asks for one, then lists that tenant's recordings.
    await page.locator("[data-testid=key-form]").waitFor({ state: "visible" });
    seen.error_before_key = await page.locator("[data-testid=error]").textContent();
    await page.fill("[data-testid=key]", args.key);
    await page.press("[data-testid=key]", "Enter");
    await page.waitForFunction(() => document.querySelectorAll("[data-testid=row]").length > 0);
    seen.session = await page.locator("[data-testid=session]").textContent();
    seen.rows_all = await page.locator("[data-testid=row]").count();

    await page.selectOption("[data-testid=filter-decision]", "block");
    await page.click("[data-testid=apply]");
    await page.waitForFunction((n) => document.querySelectorAll("[data-testid=row]").length < n, seen.rows_all);
    seen.rows_block = await page.locator("[data-testid=row] td:nth-child(5)").allTextContents();

    await page.locator("[data-testid=row]").first().click();
    await page.locator("[data-testid=flag-card]").first().waitFor();
    seen.flagged_items = await page.$$eval("[data-testid=item].flagged", (els) =>
      els.map((e) => ({ flagged: e.dataset.flagged, text: e.textContent, background: getComputedStyle(e).backgroundColor })),
    );
    seen.plain_item_background = await page.$eval("[data-testid=item]:not(.flagged)", (e) => getComputedStyle(e).backgroundColor);
    seen.plot = await page.$eval("[data-testid=plot]", (svg) => ({
      width: svg.getBoundingClientRect().width,
      lines: [...svg.querySelectorAll("polyline")].map((p) => ({
        category: p.dataset.category,
        points: p.getAttribute("points").trim().split(/\s+/).length,
      })),
      thresholds: [...svg.querySelectorAll("[data-threshold]")].map((l) => l.dataset.threshold),
      dots: svg.querySelectorAll("circle").length,
    }));
    seen.turns = await page.locator("[data-testid=turn]").count();
    seen.box_before = await cardBox(page, "jailbreak");
    seen.state_before = await page.locator("[data-testid=flag-card][data-category=jailbreak] [data-testid=label-state]").textContent();
    await page.screenshot({ path: args.out + "/before.png" });

    await page.click("[data-testid=flag-card][data-category=jailbreak] [data-testid=mark-false_positive]");
    await page.locator("[data-testid=flag-card][data-category=jailbreak][data-verdict=false_positive]").waitFor();
    await page.waitForFunction(() => document.querySelector("[data-testid=review-state]").textContent === "partly");
    seen.state_after = await page.locator("[data-testid=flag-card][data-category=jailbreak] [data-testid=label-state]").textContent();
    seen.row_review_state = await page.locator("[data-testid=review-state]").first().textContent();
    seen.box_after = await cardBox(page, "jailbreak");
    await page.screenshot({ path: args.out + "/after.png" });
    seen.foreign_requests = requests.filter((u) => !u.startsWith(args.url));
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(seen));
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
