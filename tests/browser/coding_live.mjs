// Watches a coding run in the inspector in Debian's Chromium, as a person would: the run page of
// a coding agent at work shows its output so far, and its next lines arrive without a reload
// (the page's live updates), escaped as text; when it ends the page shows the branch, the commit
// and that it was pushed. The coding agent (tests/browser.rs's) waits for a file before each
// step, which this script writes once it has seen the page at the step before. Env:
//   RUN_URL (the run's page), GO_1 and GO_2 (the files that let the coding agent go on),
//   SCREENSHOTS (a folder), CHROMIUM (the executable).
// Prints "ok coding run live" or "FAILED …"; exits 1 on failure.
import { chromium } from "playwright-core";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const { RUN_URL: runUrl, GO_1: go1, GO_2: go2, SCREENSHOTS: shots } = process.env;
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
if (!runUrl || !go1 || !go2 || !shots) {
  console.error("set RUN_URL, GO_1, GO_2 and SCREENSHOTS (tests/browser.rs does)");
  process.exit(2);
}
mkdirSync(shots, { recursive: true });
const browser = await chromium.launch({ executablePath, args: ["--no-sandbox"] });
const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
const pageErrors = [];
page.on("pageerror", (error) => pageErrors.push(String(error)));
const timeout = { timeout: 30000 };
let code = 0;
try {
  await page.goto(runUrl);
  const log = page.locator("#coding-log");
  await log.filter({ hasText: "reading the date parser" }).waitFor(timeout);
  await page.locator("#coding", { hasText: "output so far" }).waitFor(timeout);
  if ((await log.textContent()).includes("edited the date parser")) throw new Error("a line before its time");
  // A mark on this page: still there after the update means it came without a reload.
  await page.evaluate(() => { window.__sameLoad = true; });
  await page.screenshot({ path: join(shots, "inspector-coding-live-1.png"), fullPage: true });

  writeFileSync(go1, "");
  await page.locator("#coding-log").filter({ hasText: "edited the date parser <b>bold</b>" }).waitFor(timeout);
  if (!(await page.evaluate(() => window.__sameLoad === true))) throw new Error("the page was reloaded");
  if ((await page.locator("#coding-log b").count()) !== 0) throw new Error("the coding agent's output became markup");
  if ((await page.locator("#run-status").getAttribute("data-status")) !== "running") {
    throw new Error("the run had ended before its second line was seen");
  }
  await page.screenshot({ path: join(shots, "inspector-coding-live-2.png"), fullPage: true });

  writeFileSync(go2, "");
  await page.locator("#coding-work", { hasText: "pushed" }).waitFor(timeout);
  const work = await page.locator("#coding-work").textContent();
  if (!/Branch picogent\/TE-1/.test(work)) throw new Error(`the branch is not named: ${work}`);
  if (!(await page.locator("#coding-log").textContent()).includes("all done")) throw new Error("the last line is missing");
  if (!(await page.evaluate(() => window.__sameLoad === true))) throw new Error("the page was reloaded");
  await page.screenshot({ path: join(shots, "inspector-coding-done.png"), fullPage: true });
  if (pageErrors.length) throw new Error(`page errors: ${pageErrors.join("; ")}`);
  console.log("ok coding run live");
} catch (error) {
  code = 1;
  console.log(`FAILED coding run live: ${error.stack || error}`);
  await page.screenshot({ path: join(shots, "failed-coding-run-live.png"), fullPage: true }).catch(() => {});
} finally {
  await browser.close();
}
process.exit(code);
