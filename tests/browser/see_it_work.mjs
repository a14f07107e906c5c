// Drives Debian's Chromium through the board page and the run inspector of a running demo
// stack, as a person would: sign in as alice, create a task for @picogent, watch its steps tick
// without reloading, ask it a question in the chat, open both runs in the inspector (a chat run
// is named by its question's words), read the events and the health page; every time on the way
// reads "3 min ago" with the exact time on hover, every status as a label. Run by
// tests/browser.rs, which starts the stack and passes:
//   BOARD_URL, INSPECTOR_URL, SCREENSHOTS (a folder), CHROMIUM (the executable), and
//   GUARDED_INSPECTOR_URL with UI_TOKEN: the same inspector on a listener that is not loopback
// Prints one "ok <scenario>" line per scenario and "N passed, N failed" at the end; exits 1 on
// any failure.
import { chromium } from "playwright-core";
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";

const board = process.env.BOARD_URL;
const inspector = process.env.INSPECTOR_URL;
const shots = process.env.SCREENSHOTS;
const guarded = process.env.GUARDED_INSPECTOR_URL;
const uiToken = process.env.UI_TOKEN;
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
if (!board || !inspector || !shots || !guarded || !uiToken) {
  console.error("set BOARD_URL, INSPECTOR_URL, GUARDED_INSPECTOR_URL, UI_TOKEN and SCREENSHOTS (tests/browser.rs does)");
  process.exit(2);
}
rmSync(shots, { recursive: true, force: true });
mkdirSync(shots, { recursive: true });

const browser = await chromium.launch({ executablePath, args: ["--no-sandbox"] });
const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
const page = await context.newPage();
const dialogs = [];
page.on("dialog", async (dialog) => {
  dialogs.push(dialog.message());
  await dialog.dismiss();
});
const pageErrors = [];
page.on("pageerror", (error) => pageErrors.push(String(error)));
page.on("console", (message) => {
  if (message.type() === "error") pageErrors.push(message.text());
});

let passed = 0;
let failed = 0;
async function scenario(name, body) {
  try {
    await body();
    passed += 1;
    console.log(`ok ${name}`);
  } catch (error) {
    failed += 1;
    console.log(`FAILED ${name}: ${error.stack || error}`);
    await page.screenshot({ path: join(shots, `failed-${name.replace(/\W+/g, "-")}.png`), fullPage: true }).catch(() => {});
  }
}
function check(condition, message) {
  if (!condition) throw new Error(message);
}
const timeout = { timeout: 30000 };
let taskUrl = "";
const question = "@picogent what is on the board for the launch?";

// Every <time> on the page reads as how long ago, with the exact time, in this browser's time
// zone, as its title (live.js); returns how many there are.
async function timesReadAsAgo(where) {
  const times = await page.locator(where + " time[datetime]").evaluateAll((elements) =>
    elements.map((element) => ({ text: element.textContent, title: element.title, datetime: element.dateTime })));
  check(times.length > 0, `no time in ${where}`);
  for (const time of times) {
    check(/^(just now|\d+ min ago|\d+ h ago|1 day ago|\d+ days ago)$/.test(time.text), `a time reads ${JSON.stringify(time)}`);
    const at = new Date(time.datetime);
    check(!Number.isNaN(at.getTime()), `an unreadable datetime: ${JSON.stringify(time)}`);
    check(time.title.includes(String(at.getFullYear())) && /\d{1,2}:\d{2}:\d{2}/.test(time.title),
      `the exact time is not the title: ${JSON.stringify(time)}`);
    check(!/T\d{2}:\d{2}/.test(time.text + time.title), `a raw RFC 3339 time shows: ${JSON.stringify(time)}`);
  }
  return times.length;
}

await scenario("alice signs in on the board page", async () => {
  await page.goto(board);
  check(page.url().endsWith("/signin"), `expected the sign-in page, got ${page.url()}`);
  await page.getByRole("button", { name: /Alice/ }).click();
  await page.waitForURL(/\/projects\/team$/, timeout);
  await page.getByText("signed in as @alice").waitFor(timeout);
  const html = await page.content();
  check(!html.includes("tok-alice"), "the page shows alice's token");
  await page.screenshot({ path: join(shots, "board-signed-in.png"), fullPage: true });
});

await scenario("a task assigned to @picogent gets its steps ticked without a reload", async () => {
  await page.fill("#new-task input[name=title]", "Plan the launch checklist");
  await page.fill("#new-task textarea[name=description]", "Get the launch ready.\n- write the announcement\n- update the docs\n- tell the team");
  await page.selectOption("#new-task select[name=assignee]", "picogent");
  await page.click("#new-task button[type=submit]");
  await page.waitForURL(/\/tasks\/TE-\d+$/, timeout);
  taskUrl = page.url();
  // From here the page is never reloaded: what changes arrives over server-sent events.
  await page.evaluate(() => { window.__sameDocument = true; });
  await page.locator("#steps li[data-done]").first().waitFor(timeout);
  await page.waitForFunction(() => {
    const steps = [...document.querySelectorAll("#steps li[data-done]")];
    return steps.length >= 3 && steps.every((step) => step.dataset.done === "true");
  }, null, timeout);
  await page.locator("#task-status", { hasText: "In review" }).waitFor(timeout);
  const line = await page.locator("p", { has: page.locator("#task-status") }).innerText();
  check(!line.includes("in_review") && line.includes("Medium priority"), `the status line reads ${line}`);
  await page.locator("#comments .comment", { hasText: "@picogent" }).first().waitFor(timeout);
  check(await page.evaluate(() => window.__sameDocument === true), "the page was reloaded");
  await timesReadAsAgo("#task");
  await page.screenshot({ path: join(shots, "board-task-worked.png"), fullPage: true });
  await page.goto(board + "/projects/team");
  await page.locator("section.column[data-status=in_review] h2", { hasText: /In review/i }).waitFor(timeout);
  await page.screenshot({ path: join(shots, "board-columns.png"), fullPage: true });
});

await scenario("a question in the chat is answered, and its run is named by its words", async () => {
  await page.goto(board + "/projects/team/chat");
  await page.fill("#say textarea[name=content]", question);
  await page.click("#say button[type=submit]");
  await page.waitForURL(/\/projects\/team\/chat$/, timeout);
  await page.locator("#chat .comment.reply", { hasText: "@picogent" }).first().waitFor(timeout);
  await timesReadAsAgo("#chat");
  await page.screenshot({ path: join(shots, "board-chat.png"), fullPage: true });
  await page.goto(inspector);
  const row = page.locator("#runs tr[data-run]", { has: page.locator("q.words", { hasText: "what is on the board for the launch?" }) });
  await row.first().waitFor(timeout);
  await row.first().locator("[data-status=completed]", { hasText: "Completed" }).waitFor(timeout);
  const named = await row.first().locator("td.trigger").innerText();
  check(!/[0-9a-f]{8}-[0-9a-f]{4}-/.test(named), `the chat run is named by an id: ${named}`);
  check(!named.includes("@picogent"), `the name repeats the mention: ${named}`);
  const status = await page.locator("#runs").innerText();
  check(!/\b(completed|in_review|interrupted)\b/.test(status), "a raw status shows in the runs list");
  await timesReadAsAgo("#runs");
  await page.screenshot({ path: join(shots, "inspector-runs.png"), fullPage: true });
  await row.first().locator("a").first().click();
  await page.waitForURL(/\/runs\/[0-9a-f-]+$/, timeout);
  await page.locator("#run-trigger q.words", { hasText: "what is on the board for the launch?" }).waitFor(timeout);
  await page.locator("#run-status", { hasText: "Completed" }).waitFor(timeout);
  await timesReadAsAgo("#run");
  await page.screenshot({ path: join(shots, "inspector-chat-run.png"), fullPage: true });
});

await scenario("the run shows in the inspector with each tool call and the final text", async () => {
  const key = taskUrl.split("/").pop();
  await page.goto(inspector);
  await page.locator("#runs tr[data-run]", { hasText: key }).first().waitFor(timeout);
  await page.locator("#runs tr[data-run]", { hasText: key }).first().locator("a").first().click();
  await page.waitForURL(/\/runs\/[0-9a-f-]+$/, timeout);
  await page.locator("#run-status", { hasText: "Completed" }).waitFor(timeout);
  const tools = await page.locator("#transcript .call").evaluateAll((calls) => calls.map((call) => call.dataset.tool));
  for (const tool of ["add_step", "complete_step"]) {
    check(tools.includes(tool), `no ${tool} call in the transcript: ${tools}`);
  }
  const results = await page.locator("#transcript .call .result").count();
  check(results === tools.length, `${tools.length} calls but ${results} results`);
  const finalText = await page.locator("#final-message").innerText();
  check(finalText.includes("offline planner"), `final text: ${finalText}`);
  check((await page.locator("#prompt").innerText()).includes("Plan the launch checklist"), "the prompt is missing");
  await page.screenshot({ path: join(shots, "inspector-run.png"), fullPage: true });
  await page.goto(inspector + "/events");
  await page.locator("#events tr", { hasText: "task.assigned" }).first().waitFor(timeout);
  await page.locator("#events tr .pill", { hasText: "Acted" }).first().waitFor(timeout);
  await timesReadAsAgo("#events");
  await page.screenshot({ path: join(shots, "inspector-events.png"), fullPage: true });
  await page.goto(inspector + "/health");
  const today = await page.locator("svg.chart rect.bar").last().getAttribute("height");
  check(Number(today) > 0, `today's bar has height ${today}`);
  // How it started and what reconciliation found: a table in words, not a JSON dump.
  const startup = await page.locator("table#startup").innerText();
  for (const words of ["Began", "a first start: at the tracker's head", "Open tasks assigned to it", "Mentions of it", "answered"]) {
    check(startup.includes(words), `the start table lacks "${words}": ${startup}`);
  }
  check(!/[{}"]/.test(startup) && !startup.includes("reconciliation"), `the start reads as JSON: ${startup}`);
  check((await page.locator("pre").count()) === 0, "the health page still shows a dump");
  await timesReadAsAgo("#health");
  await page.screenshot({ path: join(shots, "inspector-health.png"), fullPage: true });
});

await scenario("a task titled <script>alert(1)</script> renders as text", async () => {
  await page.goto(board + "/projects/team");
  const title = "<script>alert(1)</script>";
  await page.fill("#new-task input[name=title]", title);
  await page.selectOption("#new-task select[name=assignee]", "bob");
  await page.click("#new-task button[type=submit]");
  await page.waitForURL(/\/tasks\/TE-\d+$/, timeout);
  check((await page.locator("#task-title").innerText()) === title, "the title is not shown as text");
  await page.goto(board + "/projects/team");
  await page.locator(".task-card .title", { hasText: title }).waitFor(timeout);
  check(dialogs.length === 0, `a dialog fired: ${dialogs}`);
  check((await page.locator(".task-card script").count()) === 0, "a script element was made from the title");
  await page.screenshot({ path: join(shots, "board-escaped-title.png"), fullPage: true });
});

await scenario("the inspector off loopback refuses a request without the token, and signs out", async () => {
  for (const path of ["/", "/runs", "/events", "/health"]) {
    const response = await page.request.get(guarded + path);
    check(response.status() === 401, `${path} without the token answered ${response.status()}`);
    check(!(await response.text()).includes("task.assigned"), `${path} showed runs without the token`);
  }
  const wrong = await page.request.get(guarded + "/runs", { headers: { Authorization: "Bearer not-the-token" } });
  check(wrong.status() === 401, `a wrong token answered ${wrong.status()}`);
  const guest = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const visitor = await guest.newPage();
  await visitor.goto(guarded + "/runs");
  await visitor.getByRole("heading", { name: "Token needed" }).waitFor(timeout);
  check((await visitor.locator("#runs").count()) === 0, "the runs table was shown without the token");
  await visitor.screenshot({ path: join(shots, "inspector-token-needed.png"), fullPage: true });
  await visitor.fill("input[name=token]", uiToken);
  await visitor.click("form[action='/login'] button[type=submit]");
  await visitor.locator("#runs tr[data-run]").first().waitFor(timeout);
  check(!(await visitor.content()).includes(uiToken), "the page shows the token");
  // Sign out: the browser's own form post passes the Origin check, and the session is over.
  await visitor.click("form[action='/logout'] button[type=submit]");
  await visitor.getByRole("heading", { name: "Token needed" }).waitFor(timeout);
  await visitor.goto(guarded + "/runs");
  await visitor.getByRole("heading", { name: "Token needed" }).waitFor(timeout);
  check((await visitor.locator("#runs").count()) === 0, "the runs were shown after signing out");
  await guest.close();
});

await scenario("no page broke its Content-Security-Policy or threw", async () => {
  check(pageErrors.length === 0, `errors: ${pageErrors.join(" | ")}`);
});

await browser.close();
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
