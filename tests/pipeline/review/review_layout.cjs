// Drives the review page in headless Chromium (playwright-core) under the Content-Security-Policy
// `default-src 'self'`: what is on the page at "load", the layout at two widths, a conversation's
// own URL, and the keyboard. Prints one JSON object of what it saw.
"use strict";
const { chromium } = require("playwright-core");

const args = JSON.parse(process.argv[2]);

// How the list fits its pane: every header cell inside it, nothing to scroll sideways.
function listFit() {
  const pane = document.querySelector("[data-testid=list-pane]").getBoundingClientRect();
  const list = document.querySelector("[data-testid=list-pane]");
  const detail = document.querySelector("[data-testid=detail]");
  return {
    headers: [...document.querySelectorAll("#list th")].map((th) => ({
      text: th.textContent,
      inside: th.getBoundingClientRect().right <= pane.right + 0.5 && th.getBoundingClientRect().width > 0,
    })),
    pane_scrolls: list.scrollWidth > list.clientWidth,
    page_scrolls: document.documentElement.scrollWidth > innerWidth,
    list: { left: pane.left, width: pane.width, bottom: pane.bottom },
    detail: detail.hidden ? null : (({ left, top, width }) => ({ left, top, width }))(detail.getBoundingClientRect()),
    plot: detail.hidden ? null : document.querySelector("[data-testid=plot]").getBoundingClientRect().width,
  };
}

(async () => {
  const browser = await chromium.launch({ executablePath: args.chromium, args: args.chromium_args, headless: true });
  const seen = { console: [] };
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 }, deviceScaleFactor: 1 });
    page.on("console", (m) => seen.console.push(m.text()));
    // The policy the gateway's review page is served with; a refused inline script or style shows in the console.
    await page.route("**/review", async (route) => {
      const response = await route.fetch();
      await route.fulfill({ response, headers: { ...response.headers(), "content-security-policy": "default-src 'self'" } });
    });

    // At "load", the list is already there: nothing is waited for.
    await page.goto(args.url + "/review", { waitUntil: "load" });
    seen.rows_at_load = await page.locator("[data-testid=row]").count();
    seen.ready_at_load = await page.evaluate(() => document.body.dataset.ready);
    seen.ids = await page.$$eval("[data-testid=row]", (rows) => rows.map((r) => Number(r.dataset.id)));
    seen.conversations = await page.$$eval("[data-testid=row] td:nth-child(2)", (tds) => tds.map((td) => td.textContent));
    await page.screenshot({ path: args.out + "/loaded.png" });

    // A conversation's URL opens it, also at "load".
    const [first, second] = seen.ids;
    await page.goto(`${args.url}/review#conversation=${second}`, { waitUntil: "load" });
    await page.reload({ waitUntil: "load" });
    seen.detail_at_load = await page.evaluate(() => document.querySelector("#detail").dataset.id);
    seen.wide = await page.evaluate(listFit);
    await page.screenshot({ path: args.out + "/conversation.png" });

    // Clicking a row changes the URL; back returns to the one before.
    await page.locator(`[data-testid=row][data-id="${first}"]`).click();
    await page.waitForFunction((id) => document.querySelector("#detail").dataset.id === String(id), first);
    seen.hash_after_click = await page.evaluate(() => location.hash);
    await page.goBack();
    await page.waitForFunction((id) => document.querySelector("#detail").dataset.id === String(id), second);
    seen.detail_after_back = await page.evaluate(() => document.querySelector("#detail").dataset.id);

    // The keyboard: k / j move through the list, f and c mark the current flag.
    await page.keyboard.press("k");
    await page.waitForFunction((id) => document.querySelector("#detail").dataset.id === String(id), first);
    seen.hash_after_k = await page.evaluate(() => location.hash);
    await page.keyboard.press("j");
    await page.waitForFunction((id) => document.querySelector("#detail").dataset.id === String(id), second);
    seen.current_flag = await page.getAttribute("[data-testid=flag-card][data-current='1']", "data-category");
    await page.keyboard.press("f");
    await page.waitForSelector(`[data-testid=flag-card][data-category=${seen.current_flag}][data-verdict=false_positive]`);
    seen.after_f = await page.$$eval("[data-testid=flag-card]", (cards) => cards.map((c) => [c.dataset.category, c.dataset.verdict]));
    await page.keyboard.press("c");
    await page.waitForFunction(() => !!document.querySelector("[data-testid=flag-card][data-verdict=confirmed]"));
    seen.after_c = await page.$$eval("[data-testid=flag-card]", (cards) => cards.map((c) => [c.dataset.category, c.dataset.verdict]));
    // Typing in a field is not a shortcut.
    await page.focus("[data-testid=filter-since]");
    await page.keyboard.press("j");
    seen.detail_after_typing = await page.evaluate(() => document.querySelector("#detail").dataset.id);

    // Narrower: the list goes above the transcript, and nothing scrolls sideways.
    await page.setViewportSize({ width: 900, height: 900 });
    seen.narrow = await page.evaluate(listFit);
    await page.screenshot({ path: args.out + "/narrow.png" });
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(seen));
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
