// The loops page on a phone (390x844) in headless Chromium: its weight
// (the bytes of every response the page loads, bodies as sent) and load
// time (navigation start to the load event), the median of RUNS loads,
// and the page's height. Run by bench/console-page.sh.
import { chromium } from "playwright-core";

const base = process.env.CONSOLE_URL;
const runs = Number(process.env.RUNS || 5);
const path = process.env.PAGE || "/";
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu"],
});
try {
  const context = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true });
  const page = await context.newPage();
  await page.goto(base + "/signin");
  await page.fill("#token", process.env.TOKEN);
  await Promise.all([page.waitForURL(base + "/"), page.click("form.card button[type=submit]")]);
  const loads = [];
  let bytes = 0;
  for (let i = 0; i < runs; i++) {
    const cdp = await context.newCDPSession(page);
    await cdp.send("Network.enable");
    await cdp.send("Network.setCacheDisabled", { cacheDisabled: true });
    let sum = 0;
    cdp.on("Network.loadingFinished", (e) => { sum += e.encodedDataLength; });
    await page.goto(base + path, { waitUntil: "load" });
    const ms = await page.evaluate(() => {
      const n = performance.getEntriesByType("navigation")[0];
      return n.loadEventEnd - n.startTime;
    });
    loads.push(ms);
    bytes = sum;
    await cdp.detach();
  }
  loads.sort((a, b) => a - b);
  const height = await page.evaluate(() => document.documentElement.scrollHeight);
  console.log(JSON.stringify({ path, bytes, load_ms_median: loads[Math.floor(runs / 2)], height_px: height }));
} finally {
  await browser.close();
}
