// The review page under its Content-Security-Policy: opens a recording and reports every
// CSP violation the browser raised, and the colours its scripts set (the legend's).
"use strict";
const { chromium } = require("playwright-core");

const args = JSON.parse(process.argv[2]);

(async () => {
  const browser = await chromium.launch({ executablePath: args.chromium, args: args.chromium_args, headless: true });
  const seen = { violations: [], errors: [] };
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on("console", (m) => {
      if (/Content Security Policy|Refused to/i.test(m.text())) seen.violations.push(m.text());
    });
    page.on("pageerror", (e) => seen.errors.push(String(e)));
    await page.addInitScript(() => {
      document.addEventListener("securitypolicyviolation", (e) => console.log(`Refused to: ${e.violatedDirective} ${e.blockedURI}`));
    });
    const response = await page.goto(args.url + "/review");
    seen.csp = response.headers()["content-security-policy"] || null;
    await page.fill("[data-testid=key]", args.key);
    await page.press("[data-testid=key]", "Enter");
    await page.locator("[data-testid=row]").first().click();
    await page.locator("[data-testid=flag-card]").first().waitFor();
    seen.legend = await page.$$eval(".legend span", (els) => els.map((e) => [e.textContent, getComputedStyle(e).color]));
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(seen));
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
