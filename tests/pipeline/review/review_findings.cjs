// Drives the review page in headless Chromium (playwright-core): opens each recording,
// reads the marks of its located findings, follows a finding's link. Prints one JSON object.
"use strict";
const { chromium } = require("playwright-core");

const args = JSON.parse(process.argv[2]);

(async () => {
  const browser = await chromium.launch({ executablePath: args.chromium, args: args.chromium_args, headless: true });
  const seen = {};
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 }, deviceScaleFactor: 1 });
    await page.goto(args.url + "/review");
    await page.waitForFunction(() => document.querySelectorAll("[data-testid=row]").length >= 2);
    for (const row of await page.locator("[data-testid=row]").all()) {
      const conversation = await row.locator("td:nth-child(2)").textContent();
      await row.click();
      await page.waitForFunction((c) => document.querySelector("#detail h2")?.textContent.includes(c), conversation);
      const marks = await page.$$eval("[data-testid=finding-mark]", (els) =>
        els.map((m) => ({
          text: m.textContent,
          title: m.title,
          categories: m.dataset.categories,
          findings: m.dataset.findings,
          item: m.closest("[data-testid=item]").querySelector(".meta").textContent,
          background: getComputedStyle(m).backgroundColor,
        })),
      );
      const items = await page.$$eval("[data-testid=item]", (els) => els.map((e) => e.textContent));
      const entries = await page.$$eval("[data-testid=finding]", (els) => els.map((e) => e.textContent));
      const link = page.locator("[data-testid=finding-link]").first();
      await link.click();
      const current = await page.$$eval("mark.finding.current", (els) => ({
        count: els.length,
        text: els.map((m) => m.textContent).join(""),
        visible: els.every((m) => { const r = m.getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight; }),
      }));
      await page.screenshot({ path: `${args.out}/${conversation}.png` });
      seen[conversation] = { marks, items, entries, links: await page.locator("[data-testid=finding-link]").count(), current };
    }
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(seen));
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
