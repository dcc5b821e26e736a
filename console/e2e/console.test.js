// Browser tests of the outbox console, run by cmd/outbox's
// TestConsoleBrowser, which starts two `outbox console` servers on a seeded
// PostgreSQL schema and passes their addresses:
//
//   CONSOLE_URL     writable, with a token
//   CONSOLE_RO_URL  read-only, with the same token
//   CONSOLE_TOKEN   the token
//   CONSOLE_SCREENSHOT  when set, where to write a screenshot
//
// The seed: 40 DEAD order.paid messages failing alike, 15 invoice.sent,
// 5 user.deleted, 5 NEW ones.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const URL_RW = need("CONSOLE_URL");
const URL_RO = need("CONSOLE_RO_URL");
const TOKEN = need("CONSOLE_TOKEN");

function need(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run these tests through TestConsoleBrowser (cd cmd/outbox && go test -run TestConsoleBrowser)`);
  return v;
}

let browser;
before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
});
after(async () => { await browser?.close(); });

async function newPage(viewport = { width: 1440, height: 900 }) {
  const ctx = await browser.newContext({ viewport });
  const page = await ctx.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("console", (m) => { if (m.type() === "error" && !/status of 40[13]/.test(m.text())) errors.push(m.text()); });
  page.errors = errors;
  return page;
}

async function login(page, base, token = TOKEN) {
  await page.goto(base + "/");
  await page.locator("#login").waitFor({ state: "visible" });
  await page.fill("#token", token);
  await page.click("#login-form button[type=submit]");
}

// reloaded runs action and waits until the DEAD list has been drawn again.
async function reloaded(page, action, table = "#dead-table") {
  const before = Number((await page.locator(table).getAttribute("data-loads")) || 0);
  await action();
  await page.waitForFunction(([t, n]) => Number(document.querySelector(t).dataset.loads || 0) > n, [table, before]);
}

async function openDead(page) {
  await reloaded(page, () => page.click("button[data-tab=dead]"));
}

const rows = (page) => page.locator("#dead-table tbody tr");

async function searchBy(page, fields) {
  for (const k of ["msg_id", "topic", "key", "error", "from", "until"]) await page.fill("#f-" + k, fields[k] || "");
  await reloaded(page, () => page.click("#search"));
}

async function confirm(page, expectText) {
  const dialog = page.locator("#confirm");
  await dialog.waitFor({ state: "visible" });
  const text = await page.locator("#confirm-text").textContent();
  if (expectText) assert.match(text, expectText);
  const answered = page.waitForResponse((r) => /\/api\/dead\/(retry|drop)$/.test(r.url()));
  await page.click("#confirm-ok");
  const res = await answered;
  assert.equal(res.status(), 200, await res.text());
  return { text, body: await res.json() };
}

async function apiFromPage(page, method, path, body, headers = {}) {
  return page.evaluate(async ([method, path, body, headers]) => {
    const res = await fetch(path, { method, credentials: "same-origin", headers: { "Content-Type": "application/json", ...headers }, body: body && JSON.stringify(body) });
    return { status: res.status, body: await res.text() };
  }, [method, path, body, headers]);
}

test("auth refused: no token, wrong token", async () => {
  const page = await newPage();
  await page.goto(URL_RW + "/");
  await page.locator("#login").waitFor({ state: "visible" });
  assert.equal(await page.locator("#dead").isVisible(), false);
  const res = await apiFromPage(page, "GET", "api/dead");
  assert.equal(res.status, 401, res.body);
  assert.doesNotMatch(res.body, /order-/);
  const msg = await apiFromPage(page, "GET", "api/message?msg_id=order-1:OrderPaid");
  assert.equal(msg.status, 401);
  await login(page, URL_RW, "wrong-token-wrong-token");
  await page.locator("#login-error", { hasText: "Wrong token" }).waitFor();
  assert.equal(await page.locator("#tabs").isVisible(), false);
  const still = await apiFromPage(page, "GET", "api/dead");
  assert.equal(still.status, 401);
  await page.context().close();
});

test("list, page, search and show", async () => {
  const page = await newPage();
  await login(page, URL_RW);
  await page.locator("#tabs").waitFor();
  await page.locator("#s-pending", { hasText: "5" }).waitFor();
  await openDead(page);
  assert.equal(await rows(page).count(), 50);
  assert.equal(await page.locator("#next-page").isEnabled(), true);
  await reloaded(page, () => page.click("#next-page"));
  assert.equal(await rows(page).count(), 10);

  await searchBy(page, { topic: "invoice.sent" });
  assert.equal(await rows(page).count(), 15);
  await searchBy(page, { error: "not_found" });
  assert.equal(await rows(page).count(), 5);
  await searchBy(page, { topic: "invoice.sent", key: "cust-3" });
  assert.ok((await rows(page).count()) >= 2);
  for (const t of await page.locator("#dead-table tbody tr td:nth-child(5)").allTextContents()) assert.equal(t, "cust-3");
  await searchBy(page, { msg_id: "order-7:OrderPaid" });
  assert.equal(await rows(page).count(), 1);
  const future = new Date(Date.now() + 3600e3);
  const local = new Date(future.getTime() - future.getTimezoneOffset() * 60e3).toISOString().slice(0, 19);
  await searchBy(page, { from: local });
  assert.equal(await rows(page).count(), 0);
  await page.locator("#dead-empty").waitFor();

  await searchBy(page, { msg_id: "order-7:OrderPaid" });
  await rows(page).first().click();
  await page.locator("#detail").waitFor({ state: "visible" });
  assert.equal(await page.locator("#d-title").textContent(), "order-7:OrderPaid");
  assert.match(await page.locator("#d-payload").textContent(), /"order": 7/);
  assert.match(await page.locator("#d-headers").textContent(), /traceparent/);
  assert.match(await page.locator("#d-history").textContent(), /nats: timeout/);
  assert.match(await page.locator("#d-fields").textContent(), /DEAD/);
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test("retry one, drop a selection", async () => {
  const page = await newPage();
  await login(page, URL_RW);
  await openDead(page);
  await searchBy(page, { msg_id: "order-3:OrderPaid" });
  await rows(page).first().click();
  await page.locator("#detail").waitFor({ state: "visible" });
  await page.click("#d-retry");
  const { body } = await confirm(page, /order-3:OrderPaid/);
  assert.equal(body.retried, 1);
  await page.locator("#toast", { hasText: "1 DEAD message retried" }).waitFor();
  const shown = JSON.parse((await apiFromPage(page, "GET", "api/message?msg_id=order-3:OrderPaid")).body);
  assert.equal(shown.status, "NEW");
  assert.equal(shown.history[0].what, "retried");
  assert.match(shown.history[0].text, /^retried by token at \S+ via the console$/);
  assert.match(shown.history[1].text, /nats: timeout/);

  await searchBy(page, { topic: "order.paid" });
  const before = await rows(page).count();
  await page.locator("#dead-table tbody tr input[type=checkbox]").nth(0).check();
  await page.locator("#dead-table tbody tr input[type=checkbox]").nth(1).check();
  await page.locator("#selinfo", { hasText: "2 selected" }).waitFor();
  const gone = await page.locator("#dead-table tbody tr td:nth-child(3)").evaluateAll((tds) => tds.slice(0, 2).map((td) => td.textContent));
  await page.click("#drop-sel");
  const dropped = await confirm(page, /Drop 2 selected/);
  assert.equal(dropped.body.dropped, 2);
  await page.locator("#toast", { hasText: "2 DEAD messages dropped" }).waitFor();
  await page.waitForFunction((n) => document.querySelectorAll("#dead-table tbody tr").length === n, before - 2);
  for (const id of gone) {
    const r = await apiFromPage(page, "GET", "api/message?msg_id=" + encodeURIComponent(id));
    assert.equal(r.status, 404, `${id} was dropped`);
  }
  await page.context().close();
});

test("retry by filter, after a count confirmation", async () => {
  const page = await newPage();
  await login(page, URL_RW);
  await openDead(page);
  await searchBy(page, { topic: "user.deleted" });
  assert.equal(await rows(page).count(), 5);
  await page.click("#retry-all");
  await page.locator("#confirm").waitFor({ state: "visible" });
  // The dialog says how many before anything happens.
  assert.match(await page.locator("#confirm-text").textContent(), /Retry 5 DEAD messages matching topic=user\.deleted/);
  await page.click("#confirm-cancel");
  assert.equal(await rows(page).count(), 5);
  await page.click("#retry-all");
  let body;
  await reloaded(page, async () => { ({ body } = await confirm(page, /Retry 5 DEAD/)); });
  assert.equal(body.retried, 5);
  assert.equal(await rows(page).count(), 0);
  // A stale confirmation touches nothing new: the same bounds with a
  // smaller expectation are refused.
  const count = JSON.parse((await apiFromPage(page, "GET", "api/dead/count?topic=invoice.sent")).body);
  assert.equal(count.count, 15);
  const session = JSON.parse((await apiFromPage(page, "GET", "api/session")).body);
  const stale = await apiFromPage(page, "POST", "api/dead/retry",
    { filter: { topic: "invoice.sent" }, max_id: count.max_id, dead_until: count.dead_until, expect: 3 }, { "X-CSRF-Token": session.csrf });
  assert.equal(stale.status, 409, stale.body);
  await page.context().close();
});

test("failure groups: one line per error, retry a group", async () => {
  const page = await newPage();
  await login(page, URL_RW);
  await page.click("button[data-tab=groups]");
  const lines = page.locator("#groups-table tbody tr");
  await lines.first().waitFor();
  const order = page.locator('#groups-table tbody tr[data-signature="publish …: nats: timeout after #ms"]');
  await order.waitFor();
  // 40 seeded, one retried and two dropped by the test before.
  assert.equal(await order.locator("td").first().textContent(), "37");
  const invoice = page.locator('#groups-table tbody tr[data-signature="webhook answered #: invalid schema for customer …"]');
  assert.equal(await invoice.locator("td").first().textContent(), "15");
  await invoice.locator("button", { hasText: "Retry" }).click();
  const { body } = await confirm(page, /Retry the 15 DEAD messages/);
  assert.equal(body.retried, 15);
  await page.locator('#groups-table tbody tr[data-signature="webhook answered #: invalid schema for customer …"]').waitFor({ state: "detached" });
  await page.context().close();
});

test("read-only: no write buttons, and the POST refused", async () => {
  const page = await newPage();
  await login(page, URL_RO);
  await page.locator("#mode", { hasText: "read-only" }).waitFor();
  await openDead(page);
  for (const b of ["#retry-sel", "#drop-sel", "#retry-all", "#drop-all"]) assert.equal(await page.locator(b).isVisible(), false, b);
  await rows(page).first().click();
  await page.locator("#detail").waitFor({ state: "visible" });
  assert.equal(await page.locator("#d-retry").isVisible(), false);
  await page.click("button[data-tab=groups]");
  await page.locator("#groups-table tbody tr").first().waitFor();
  assert.equal(await page.locator("#groups-table button").count(), 0);
  const session = JSON.parse((await apiFromPage(page, "GET", "api/session")).body);
  assert.equal(session.writable, false);
  const res = await apiFromPage(page, "POST", "api/dead/drop", { msg_ids: ["order-10:OrderPaid"] }, { "X-CSRF-Token": session.csrf });
  assert.equal(res.status, 403, res.body);
  assert.match(res.body, /read-only/);
  const still = await apiFromPage(page, "GET", "api/message?msg_id=order-10:OrderPaid");
  assert.equal(JSON.parse(still.body).status, "DEAD");
  await page.context().close();
});

test("CSRF refused: no token, a wrong one, another origin", async () => {
  const page = await newPage();
  await login(page, URL_RW);
  await page.locator("#tabs").waitFor();
  const body = { msg_ids: ["order-11:OrderPaid"] };
  for (const headers of [{}, { "X-CSRF-Token": "forged" }]) {
    const res = await apiFromPage(page, "POST", "api/dead/drop", body, headers);
    assert.equal(res.status, 403, res.body);
    assert.match(res.body, /CSRF/);
  }
  // The session cookie with the right CSRF token, sent from another
  // origin (outside the browser, which would not send the cookie there).
  const session = JSON.parse((await apiFromPage(page, "GET", "api/session")).body);
  const cookies = await page.context().cookies();
  const cookie = cookies.find((c) => c.name === "outbox_console");
  assert.ok(cookie.httpOnly && cookie.sameSite === "Strict", JSON.stringify(cookie));
  const res = await fetch(URL_RW + "/api/dead/drop", { method: "POST", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json", Cookie: `${cookie.name}=${cookie.value}`, "X-CSRF-Token": session.csrf, Origin: "https://evil.example" } });
  assert.equal(res.status, 403);
  assert.match(await res.text(), /came from/);
  const still = await apiFromPage(page, "GET", "api/message?msg_id=order-11:OrderPaid");
  assert.equal(JSON.parse(still.body).status, "DEAD");
  await page.context().close();
});

test("screenshot", { skip: !process.env.CONSOLE_SCREENSHOT }, async () => {
  const page = await newPage({ width: 1440, height: 900 });
  await login(page, URL_RW);
  await page.locator("#tabs").waitFor();
  await openDead(page);
  await page.locator("#dead-table tbody tr input[type=checkbox]").nth(1).check();
  await page.locator("#dead-table tbody tr input[type=checkbox]").nth(2).check();
  await page.screenshot({ path: process.env.CONSOLE_SCREENSHOT });
  const shot = (name) => process.env.CONSOLE_SCREENSHOT.replace(/\.png$/, `-${name}.png`);
  await rows(page).nth(4).click();
  await page.locator("#detail").waitFor({ state: "visible" });
  await page.screenshot({ path: shot("message") });
  await page.click("#d-close");
  await page.click("button[data-tab=groups]");
  await page.locator("#groups-table tbody tr").first().waitFor();
  await page.screenshot({ path: shot("groups") });
  await page.click("button[data-tab=overview]");
  await page.locator("#topics tbody tr").first().waitFor();
  await page.waitForTimeout(600);
  await page.screenshot({ path: shot("overview") });
  await page.context().close();
});
