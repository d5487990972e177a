// The console in a real browser: headless Chromium (Debian's, not a
// downloaded one) driven by playwright-core, on a phone's viewport.
// tests/it/serve_browser.rs starts `automaton serve` with an awaiting loop
// and two users, runs this, then checks the store. Exits non-zero with the
// step that failed.
import { chromium } from "playwright-core";

const base = process.env.CONSOLE_URL;
const approver = process.env.APPROVER_TOKEN;
const viewer = process.env.VIEWER_TOKEN;
const shots = process.env.SCREENSHOTS || "";
const phone = { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, timezoneId: "Asia/Tokyo" };
const desktop = { viewport: { width: 1280, height: 800 }, timezoneId: "Europe/Paris" };
let passed = 0;

function check(ok, what) {
  if (!ok) throw new Error(what);
  passed += 1;
}

async function signIn(context, token) {
  const page = await context.newPage();
  await page.goto(base + "/");
  check(new URL(page.url()).pathname === "/signin", "a visitor is sent to sign in, not " + page.url());
  await page.fill("#token", token);
  await Promise.all([page.waitForURL(base + "/"), page.click("form.card button[type=submit]")]);
  return page;
}

async function shot(page, name) {
  if (shots) await page.screenshot({ path: `${shots}/${name}.png`, fullPage: true });
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
});
try {
  const page = await signIn(await browser.newContext(phone), approver);

  // A running tick's page grows by itself, without loading again.
  await page.goto(base + "/loops/slow/runs/1");
  check(await page.locator("h1 .badge.running").count() === 1, "the run page says the tick runs");
  check(await page.locator("button", { hasText: "Cancel tick" }).count() === 1, "an operator may cancel it from there");
  check((await page.locator("dl.run").innerText()).includes("Running for"), "the run page says how long it has run");
  await page.evaluate(() => { window.stillThisPage = true; });
  const before = (await page.locator("#stdout").innerText()).split("\n").length;
  await page.waitForFunction((n) => document.querySelector("#stdout").innerText.split("\n").length > n + 2, before, { timeout: 15000 });
  check(await page.evaluate(() => window.stillThisPage === true), "the output was appended, the page not loaded again");
  await page.goto(base + "/");
  const first = page.locator("table.loops tbody tr").first();
  check((await first.innerText()).includes("waiting"), "the awaiting loop is listed first");
  check(await first.locator(".badge.awaiting-approval").count() === 1, "it is shown awaiting approval");
  const wide = await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth + 1);
  check(!wide, "the list fits a phone's width");
  const since = await first.locator("time").first().innerText();
  check(since.includes("Asia/Tokyo") && / \((just now|\d+[smhd] ago)\)$/.test(since) && !since.includes("UTC"),
    "a time is shown in the viewer's zone with its age, not " + since);
  await shot(page, "loops");

  await Promise.all([page.waitForURL(/\/loops\/waiting\/review$/), first.locator("a", { hasText: "review" }).click()]);
  check(await page.locator("section.pending").isVisible(), "the review shows the pending await");
  check((await page.content()).includes("hello from the step"), "the review shows the tick's output");
  const ticksAt = (await page.locator("h2", { hasText: "Ticks since the last approval" }).boundingBox()).y;
  const approveAt = (await page.locator("button.approve").boundingBox()).y;
  check(ticksAt < approveAt, "on a phone the evidence comes before the Approve button");
  check((await page.locator("p.approvals").innerText()).includes("0 of 1 approvals so far"), "the review says the approvals so far");
  await shot(page, "review");
  await page.click("button.reject");
  check(new URL(page.url()).pathname.endsWith("/review"), "Reject with no reason is stopped by the browser");
  check(await page.evaluate(() => !document.querySelector("#reason").validity.valid), "the reason is required");
  await page.fill("#note", "approved from a phone");
  await Promise.all([page.waitForURL(base + "/loops/waiting?done=approve"), page.click("button.approve")]);
  check((await page.locator("p.flash").innerText()).includes("Approved."), "the page says the approval was given");
  check((await page.content()).includes("approved from a phone"), "the loop's history shows the approval and its note");

  // A change made elsewhere shows up without a reload by hand.
  await page.goto(base + "/loops/other");
  check(await page.locator("h1 .badge.active").count() === 1, "the other loop is active");
  const paused = await fetch(base + "/api/loops/other/pause", {
    method: "POST",
    headers: { Authorization: "Bearer " + approver },
  });
  check(paused.status === 200, "the API pauses the other loop");
  await page.waitForSelector("h1 .badge.paused", { timeout: 10000 });
  check(true, "the open page shows the pause by itself");

  const seen = await signIn(await browser.newContext(desktop), viewer);
  await seen.goto(base + "/loops/waiting/review");
  check(await seen.locator("section.pending").isVisible(), "a viewer sees the review");
  check(await seen.locator("button.approve, button.reject").count() === 0, "a viewer sees no Approve or Reject");
  check((await seen.locator("section.pending time").first().innerText()).includes("Europe/Paris"), "a desktop shows its own zone");
  await seen.goto(base + "/loops/other");
  check(await seen.locator(".actions button").count() === 0, "a viewer sees no Pause, Resume or Cancel");
  await shot(seen, "viewer");
  const csrf = await seen.getAttribute("input[name=csrf]", "value");
  const forged = await seen.evaluate(async (csrf) => {
    const body = new URLSearchParams({ csrf, note: "forged" });
    const r = await fetch("/loops/waiting/approve", { method: "POST", body });
    return r.status;
  }, csrf);
  check(forged === 403, "a viewer's forged approval is refused, not " + forged);
  const noToken = await seen.evaluate(async () => {
    const r = await fetch("/loops/other/resume", { method: "POST", body: new URLSearchParams({ note: "x" }) });
    return r.status;
  });
  check(noToken === 403, "a form without its CSRF token is refused, not " + noToken);
  console.log(`browser: ${passed} passed, 0 failed`);
} catch (e) {
  console.error(`browser: failed after ${passed} checks: ${e.message}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
