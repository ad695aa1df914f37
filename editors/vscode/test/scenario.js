// The browser scenario of editors/vscode/test/run (see there for the environment it gets).
//
// Drives code-server in headless Chromium like a person would (clicks, keys), and checks
// what happened on the extension's JSON report (data: what the extension saw and showed)
// plus a few DOM facts (the Problems panel row, the squiggle, the status bar text).
// One screenshot per step goes to the output folder.
'use strict';

const { execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');

const env = (name) => {
  const v = process.env[name];
  if (!v) {
    throw new Error(`${name} is not set (run editors/vscode/test/run)`);
  }
  return v;
};
const URL = env('FORGE_TEST_URL');
const REPO = env('FORGE_TEST_REPO');
const T = env('FORGE_TEST_T');
const REPORT = env('FORGE_TEST_REPORT');
const OUT = env('FORGE_TEST_OUT_DIR');
const PLAN_SESSION = env('FORGE_TEST_PLAN_SESSION');
// Machine settings: where a remote window (code-server) keeps machine-scoped settings.
const MACHINE_SETTINGS = env('FORGE_TEST_MACHINE_SETTINGS');
// The user settings of test/run (forge.config with the scripted agent, the report file).
const USER_SETTINGS = path.join(T, 'user-data', 'User', 'settings.json');
const { chromium } = require(env('FORGE_TEST_PLAYWRIGHT'));

const MAIN = path.join(REPO, 'src', 'main.txt');
const LOOP = 'vscode-loop';
const PLAN_URI = `forge://plan/session/${PLAN_SESSION}.md`;
const LOOP_PLAN_URI = `forge://plan/loop/${LOOP}.md`;

let passed = 0;
let failed = 0;
let shot = 0;
let page;
const t0 = Date.now();

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const secs = () => ((Date.now() - t0) / 1000).toFixed(1);

function readReport() {
  try {
    return JSON.parse(fs.readFileSync(REPORT, 'utf8'));
  } catch {
    return undefined;
  }
}

/** Polls `fn(report)` until it returns a truthy value; throws with `what` after `ms`. */
async function until(what, fn, ms = 15000) {
  const end = Date.now() + ms;
  let last;
  for (;;) {
    const r = readReport();
    try {
      last = r && fn(r);
    } catch (e) {
      last = undefined;
    }
    if (last) {
      return last;
    }
    if (Date.now() > end) {
      throw new Error(`timed out after ${ms / 1000} s waiting for ${what}`);
    }
    await sleep(150);
  }
}

/** Polls a page predicate (run in the browser) until it is truthy. */
async function untilPage(what, fn, arg, ms = 15000) {
  try {
    await page.waitForFunction(fn, arg, { timeout: ms, polling: 200 });
  } catch {
    throw new Error(`timed out after ${ms / 1000} s waiting in the page for ${what}`);
  }
}

async function screenshot(name) {
  shot += 1;
  const file = path.join(OUT, `${String(shot).padStart(2, '0')}-${name}.png`);
  try {
    await page.screenshot({ path: file });
  } catch (e) {
    console.log(`    (no screenshot: ${e.message})`);
  }
  return file;
}

const done = new Set();

/**
 * One step: runs `fn`, prints PASS/FAIL, takes the step's screenshot either way. A step
 * whose `requires` (slugs of earlier steps) did not pass fails without running.
 */
async function step(name, slug, fn, requires = []) {
  const missing = requires.filter((r) => !done.has(r));
  if (missing.length > 0) {
    failed += 1;
    console.log(`FAIL  ${name}\n        not run: needs ${missing.join(', ')}`);
    return;
  }
  const started = Date.now();
  try {
    await fn();
    done.add(slug);
    passed += 1;
    console.log(`PASS  ${name} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
  } catch (e) {
    failed += 1;
    console.log(`FAIL  ${name} (${((Date.now() - started) / 1000).toFixed(1)} s)\n        ${String(e.message).replace(/\n/g, '\n        ')}`);
  }
  await screenshot(slug);
}

function check(cond, msg) {
  if (!cond) {
    throw new Error(msg);
  }
}

function forgeCall(args, input) {
  return execFileSync('forge-lsp', ['call', ...args, JSON.stringify(input)], {
    cwd: REPO,
    encoding: 'utf8',
    timeout: 20000,
  });
}

/** Runs a command from the command palette (F1), by its exact title. */
async function palette(title) {
  await page.keyboard.press('Escape');
  await page.keyboard.press('F1');
  const input = page.locator('.quick-input-widget .quick-input-box input');
  await input.waitFor({ state: 'visible', timeout: 5000 });
  await input.fill(`>${title}`);
  const row = page.locator('.quick-input-widget .quick-input-list .monaco-list-row', { hasText: title }).first();
  await row.waitFor({ state: 'visible', timeout: 5000 });
  await page.keyboard.press('Enter');
}

/** Clicks a file in the Explorer (shows the Explorer first). */
async function openFromExplorer(relPath) {
  await palette('View: Show Explorer');
  let dir = '';
  const parts = relPath.split('/');
  for (let i = 0; i < parts.length; i++) {
    dir = dir ? `${dir}/${parts[i]}` : parts[i];
    const row = page.locator(`.explorer-folders-view .monaco-list-row[aria-label="${parts[i]}"]`).first();
    await row.waitFor({ state: 'visible', timeout: 10000 });
    const expanded = await row.getAttribute('aria-expanded');
    if (i < parts.length - 1) {
      if (expanded !== 'true') {
        await row.click();
      }
    } else {
      await row.click();
    }
  }
  await page
    .locator(`.tabs-container .tab[aria-label*="${parts[parts.length - 1]}"]`)
    .first()
    .waitFor({ state: 'visible', timeout: 10000 });
}

/**
 * Sets `forge.server.path` in the Settings editor, as a user would. It is a machine setting:
 * in code-server (a remote window) it lives in the Remote tab.
 */
async function setServerPath(value) {
  await palette('Preferences: Open User Settings');
  // The search box has the focus when the Settings editor opens.
  await page.locator('.settings-editor .settings-header').first().waitFor({ state: 'visible', timeout: 10000 });
  await page.locator('.settings-editor .settings-tabs-widget .action-label', { hasText: 'Remote' }).first().click();
  await page.locator('.settings-editor .settings-header .monaco-editor').first().click();
  await page.keyboard.type('forge.server.path');
  const input = page.locator('.settings-editor .setting-item-contents', { hasText: 'Path of the' }).locator('input').first();
  await input.waitFor({ state: 'visible', timeout: 10000 });
  await input.fill(value);
  await page.keyboard.press('Tab');
  await until(`forge.server.path = "${value}" in settings.json`, () => {
    const cur = JSON.parse(fs.readFileSync(MACHINE_SETTINGS, 'utf8'))['forge.server.path'];
    return (cur ?? '') === value;
  }, 10000);
  await page.keyboard.press('Control+w');
}

/**
 * Rewrites the machine settings file (as a person editing the Remote tab's settings.json
 * would): in code-server the extension's machine-scoped settings are read from there.
 */
function editMachineSettings(fn) {
  let settings = {};
  try {
    settings = JSON.parse(fs.readFileSync(MACHINE_SETTINGS, 'utf8'));
  } catch {
    // none yet
  }
  fn(settings);
  fs.mkdirSync(path.dirname(MACHINE_SETTINGS), { recursive: true });
  fs.writeFileSync(MACHINE_SETTINGS, JSON.stringify(settings, null, 2));
}

/** The text of the notification toasts on screen. */
async function toastsText() {
  return page.evaluate(() =>
    Array.from(document.querySelectorAll('.notifications-toasts .notification-toast')).map((e) => e.textContent || '').join('\n'));
}

/**
 * Chooses `action` in the open context menu, once the menu has finished appearing (as a
 * person sees it before clicking): a click during its fade-in was lost in about one run in
 * two on this machine's Chromium (the menu closed and the command never ran), and never
 * once the menu had settled.
 */
async function menuItem(action) {
  const item = page.locator('.monaco-menu .action-item', { hasText: action }).first();
  await item.waitFor({ state: 'visible', timeout: 5000 });
  await page.waitForFunction(() => {
    const view = document.querySelector('.context-view');
    return (
      view &&
      getComputedStyle(view).opacity === '1' &&
      view.getAnimations({ subtree: true }).every((a) => a.playState === 'finished')
    );
  }, null, { timeout: 5000 });
  await sleep(150);
  await screenshot(`menu-${action.toLowerCase().replace(/ /g, '-')}`);
  await item.click();
}

/** Right-clicks the loop `name` in the Loops view and chooses `action` from its context menu. */
async function loopMenu(name, action) {
  const command = { 'Cancel Loop': 'forgeLsp.cancelLoop', 'Restart Loop': 'forgeLsp.restartLoop' }[action];
  for (let attempt = 1; ; attempt++) {
    const since = Date.now();
    const row = page
      .locator('.pane-body .monaco-list-row')
      .filter({ has: page.locator('.label-name', { hasText: new RegExp(`^${name}$`) }) })
      .first();
    await row.waitFor({ state: 'visible', timeout: 10000 });
    await row.click({ button: 'right' });
    await menuItem(action);
    if (!command) return;
    // The menu can close under the click when the view refreshes while it opens (the loop's
    // status just changed): then the command never ran (seen once in CI). Open it again.
    const deadline = Date.now() + 10000;
    while (Date.now() < deadline) {
      if ((readReport().commands || []).some((c) => c.command === command && c.at >= since - 1000)) return;
      await sleep(100);
    }
    if (attempt >= 3) throw new Error(`${action} in the Loops view menu did not run ${command} (3 attempts)`);
    console.log(`      (${action}: the menu closed before the click; opening it again)`);
    await page.keyboard.press('Escape');
  }
}

async function main() {
  const browser = await chromium.launch({
    executablePath: env('FORGE_TEST_CHROMIUM'),
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-dev-shm-usage',
    ],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  page = await context.newPage();
  const consoleErrors = [];
  page.on('console', (m) => {
    if (m.type() === 'error') {
      consoleErrors.push(m.text());
    }
  });

  try {
    await step('the workspace opens and the extension starts forge-lsp', 'workspace', async () => {
      await page.goto(URL, { waitUntil: 'domcontentloaded', timeout: 30000 });
      await page.locator('.monaco-workbench').waitFor({ state: 'visible', timeout: 30000 });
      const r = await until('the language client to run', (r) => r.client.state === 'running' && r.client.sessionId && r, 60000);
      check(/^ses_/.test(r.client.sessionId), `session id ${r.client.sessionId}`);
      check(/forge-lsp/.test(r.client.serverVersion ?? ''), `server version ${r.client.serverVersion}`);
      check(r.client.serverPath === path.join(T, 'bin', 'forge-lsp'), `server path ${r.client.serverPath} (expected forge-lsp on PATH)`);
      check(r.errors.length === 0, `errors: ${JSON.stringify(r.errors)}`);
      await openFromExplorer('src/main.txt');
    });

    await step('a finding written by `forge-lsp call review-write` appears in Problems and inline', 'finding', async () => {
      forgeCall(['review-write'], {
        file: 'src/main.txt',
        line: 2,
        severity: 'bug',
        description: 'Line two is wrong.',
        scenario: 'Read line two.',
      });
      const d = await until('the finding as a diagnostic on src/main.txt', (r) =>
        (r.diagnostics[MAIN] ?? []).find((x) => x.line === 2 && /Line two is wrong/.test(x.message)),
      );
      check(d.severity === 'error' && d.source === 'forge' && d.code, `diagnostic ${JSON.stringify(d)}`);
      check(d.data && d.data.findingId !== undefined, `diagnostic data ${JSON.stringify(d.data)}`);
      await until('the Findings view to list it', (r) =>
        r.views.findings.find((f) => f.file === 'src/main.txt' && f.items.some((i) => i.line === 2)),
      );
      await untilPage('the squiggle in the editor', () => document.querySelectorAll('.monaco-editor .squiggly-error').length > 0);
      await palette('View: Focus Problems');
      await untilPage('the Problems panel row', () => {
        const p = document.querySelector('.markers-panel');
        return p && /Line two is wrong/.test(p.textContent || '');
      });
    }, ['workspace']);

    await step('a plan opens from the Plans view and shows its text', 'plan', async () => {
      const drawsBefore = readReport().views.findingsDraws;
      await page.keyboard.press('Escape');
      await page.locator('.activitybar [aria-label^="Forge"]').first().click();
      await until('the Plans view to list the session plan', (r) => r.views.plans.find((p) => p.uri === PLAN_URI));
      const row = page.locator('.pane-body .monaco-list-row', { hasText: 'Browser demo' }).first();
      await row.waitFor({ state: 'visible', timeout: 10000 });
      await row.click();
      const ed = await until('the plan in an editor', (r) => r.editors.find((e) => e.uri === PLAN_URI));
      check(/# Browser demo/.test(ed.head) && /Loop Name: vscode-loop/.test(ed.head), `editor text ${JSON.stringify(ed.head)}`);
      check(ed.languageId === 'markdown', `language ${ed.languageId}`);
      await untilPage('the plan text in the editor', () =>
        Array.from(document.querySelectorAll('.monaco-editor .view-lines')).some((v) => /Append a line to work/.test((v.textContent || '').replace(/\u00a0/g, ' '))),
      );
      // Its structure warning (no Key Context) is a diagnostic, not a review finding: not in
      // the Findings view (before: listed and counted, and its Delete failed).
      await until('the plan\'s structure warning', (r) =>
        (r.diagnostics[PLAN_URI] ?? []).find((d) => !d.finding && /Key Context/.test(d.message)),
      );
      await sleep(500);
      const r = readReport();
      check(!r.views.findings.some((f) => /session/.test(f.file)), `Findings view ${JSON.stringify(r.views.findings)}`);
      // Diagnostics that are no findings (this warning, any other extension's) leave the
      // Findings tree alone: a redraw closes a context menu open on it.
      check(r.views.findingsDraws === drawsBefore, `the Findings tree was redrawn ${r.views.findingsDraws - drawsBefore} times for no change of the findings`);
    }, ['workspace']);

    await step('Execute plan (code lens) starts a loop: the status bar and the Loops view follow it', 'loop-running', async () => {
      fs.writeFileSync(path.join(T, 'hold'), 'hold');
      // Its first audit turn writes a loop finding and waits (test/run's agent.sh): see 'loop-finding'.
      fs.writeFileSync(path.join(T, 'loop-finding'), '');
      fs.writeFileSync(path.join(T, 'hold-audit'), '');
      const lens = page.locator('.monaco-editor .codelens-decoration a', { hasText: 'Execute plan' }).first();
      await lens.waitFor({ state: 'visible', timeout: 10000 });
      await lens.click();
      const r = await until('the status bar to show the running loop', (r) =>
        r.statusBar.visible && r.statusBar.text.includes(`Forge: ${LOOP}`) && r.statusBar.text.includes('sync~spin') && r,
      );
      check(/1\/2/.test(r.statusBar.text), `status bar ${r.statusBar.text} (expected section 1/2)`);
      await until('the Loops view to show it running', (r) =>
        r.views.loops.find((l) => l.label === LOOP && /^running/.test(l.description)),
      );
      await untilPage('the status bar item', (loop) =>
        Array.from(document.querySelectorAll('.statusbar-item')).some((e) => (e.textContent || '').includes(`Forge: ${loop}`)), LOOP);
      await untilPage('the work-done progress of the loop', (loop) =>
        Array.from(document.querySelectorAll('.statusbar-item, .notification-toast')).some((e) =>
          (e.textContent || '').includes(`Forge: ${loop}`) && /iteration \d/.test(e.textContent || '')), LOOP);
      await untilPage('the loop in the Loops view', (loop) =>
        Array.from(document.querySelectorAll('.pane-body .monaco-list-row')).some((e) => (e.textContent || '').includes(loop) && /running/.test(e.textContent || '')), LOOP);
      // The picture of editors/vscode/README.md (media/screenshot.jpg is a copy of it).
      await page.screenshot({ path: path.join(OUT, 'readme.jpg'), type: 'jpeg', quality: 70 });
    }, ['plan']);

    await step('the loop\'s plan opens from the Plans view with a status lens on each section', 'loop-plan', async () => {
      await until('the Plans view to list the loop\'s plan', (r) => r.views.plans.find((p) => p.uri === LOOP_PLAN_URI), 20000);
      const row = page.locator('.pane-body .monaco-list-row', { hasText: `loop ${LOOP}` }).first();
      await row.waitFor({ state: 'visible', timeout: 10000 });
      await row.click();
      await until('the loop plan in an editor', (r) => r.editors.find((e) => e.uri === LOOP_PLAN_URI && e.active));
      const lenses = await until('the section lenses of the running loop', (r) => {
        const l = (r.lenses || {})[LOOP_PLAN_URI] || [];
        return l.some((x) => /^Section 1\/2 · in progress$/.test(x.title)) && l.some((x) => /^Section 2\/2 · pending$/.test(x.title)) && l;
      });
      check(lenses.length === 2, `lenses ${JSON.stringify(lenses)}`);
      // What the user sees: the first section's lens above its heading.
      await untilPage('the first section\'s lens in the editor', () =>
        Array.from(document.querySelectorAll('.monaco-editor .codelens-decoration')).some((e) => /Section 1\/2 · in progress/.test(e.textContent || '')));
    }, ['loop-running']);

    await step('a loop finding, published on the worktree and mirrored under the project root, is one finding', 'loop-finding', async () => {
      const readme = path.join(REPO, 'README.md');
      fs.rmSync(path.join(T, 'hold'), { force: true }); // the coder's turn, then the audit's
      const r = await until('the loop finding on the worktree and under the project root', (r) => {
        const root = (r.diagnostics[readme] ?? []).find((d) => d.finding && d.data && d.data.loopName === LOOP);
        const wt = root && Object.entries(r.diagnostics).find(([file, list]) =>
          file !== readme && file.endsWith(`${path.sep}README.md`) && list.some((d) => d.data && d.data.findingId === root.data.findingId));
        return wt && r;
      }, 20000);
      const diagnostics = Object.values(r.diagnostics).flat().filter((d) => d.finding);
      const distinct = new Set(diagnostics.map((d) => String(d.data && d.data.findingId)));
      check(diagnostics.length === distinct.size + 1, `diagnostics ${diagnostics.length}, findings ${distinct.size}: expected one mirrored`);
      await until(`the badge to count ${distinct.size} findings`, (r) => r.views.findingsCount === distinct.size, 5000);
      const r2 = readReport();
      const listed = r2.views.findings.flatMap((f) => f.items.map((i) => `${f.file}:${i.line}`));
      check(listed.length === distinct.size && listed.includes('README.md:1'), `Findings view ${JSON.stringify(r2.views.findings)}`);
      fs.rmSync(path.join(T, 'hold-audit'), { force: true });
    }, ['loop-running']);

    await step('the loop ends: Loops view, status bar and one notification with Open Status', 'loop-completed', async () => {
      fs.rmSync(path.join(T, 'hold'), { force: true });
      fs.rmSync(path.join(T, 'hold-audit'), { force: true });
      const r = await until('the loop to complete', (r) =>
        r.views.loops.find((l) => l.label === LOOP && /^completed/.test(l.description)) && r, 60000);
      check(/completed/.test(r.statusBar.text), `status bar ${r.statusBar.text}`);
      const hist = r.statusBarHistory.filter((t) => t.includes(LOOP));
      check(hist.some((t) => /auditing/.test(t)) || hist.length >= 2, `status bar history ${JSON.stringify(hist)}`);
      await sleep(1500); // a late duplicate from window/showMessage would arrive by now
      const r2 = readReport();
      const told = r2.notifications.filter((n) => n.loop === LOOP);
      check(told.length === 1, `notifications ${JSON.stringify(r2.notifications)}`);
      check(told[0].severity === 'info' && told[0].actions.includes('Open Status'), `notification ${JSON.stringify(told[0])}`);
      const dupes = r2.serverMessages.filter((m) => m.text.includes(LOOP) && m.handling === 'shown');
      check(dupes.length === 0, `server messages shown as well: ${JSON.stringify(dupes)}`);
      const toast = page.locator('.notifications-toasts .notification-toast', { hasText: `loop ${LOOP} completed` }).first();
      await toast.waitFor({ state: 'visible', timeout: 10000 });
      await screenshot('loop-notification');
      if (done.has('loop-plan')) {
        // The open loop plan's lenses follow the loop (workspace/codeLens/refresh) without
        // the user reopening it. (After the toast is seen: it hides itself after a while.)
        await until('the loop plan\'s lenses to show both sections completed', (r) => {
          const l = (r.lenses || {})[LOOP_PLAN_URI] || [];
          return l.length === 2 && l.every((x) => /^Section [12]\/2 · completed$/.test(x.title));
        }, 10000);
        await untilPage('the first section\'s lens in the editor to say completed', () =>
          Array.from(document.querySelectorAll('.monaco-editor .codelens-decoration')).some((e) => /Section 1\/2 · completed/.test(e.textContent || '')), undefined, 10000);
        await screenshot('loop-plan-lenses');
      }
      await toast.locator('a.monaco-button, .monaco-button', { hasText: 'Open Status' }).first().click();
      const ed = await until('the loop status document', (r) => r.editors.find((e) => e.uri === `forge://loop/${LOOP}/status.md`));
      check(/completed/.test(ed.head), `status document ${JSON.stringify(ed.head)}`);
    }, ['loop-running']);

    await step('Execute Plan from the Plans view; Loops view context menu: Cancel Loop, then Restart Loop', 'loop-menu', async () => {
      fs.writeFileSync(path.join(T, 'hold'), 'hold');
      const planRow = page.locator('.pane-body .monaco-list-row', { hasText: 'session plan' }).first();
      await planRow.waitFor({ state: 'visible', timeout: 10000 });
      await planRow.click({ button: 'right' });
      await menuItem('Execute Plan');
      const input = page.locator('.quick-input-widget .quick-input-box input');
      await input.waitFor({ state: 'visible', timeout: 5000 });
      check((await input.inputValue()) === 'Browser demo', `title offered: ${await input.inputValue()}`);
      await page.keyboard.press('Enter');
      const second = await until('a second loop running', (r) =>
        r.views.loops.find((l) => l.label !== LOOP && /^running/.test(l.description)));
      const name = second.label;
      // The status bar item focuses the Loops view.
      await palette('View: Show Explorer');
      await until('the Loops view hidden', (r) => r.views.visible.loops === false);
      await page.locator('.statusbar-item', { hasText: `Forge: ${name}` }).first().click();
      await until('the Loops view shown by the status bar item', (r) => r.views.visible.loops === true);
      await loopMenu(name, 'Cancel Loop');
      await until('the loop to be cancelled', (r) => r.views.loops.find((l) => l.label === name && /^cancelled/.test(l.description)));
      await sleep(800);
      let told = readReport().notifications.filter((n) => n.loop === name);
      check(told.length === 1 && told[0].severity === 'warning' && /cancelled/.test(told[0].text) && told[0].actions.includes('Open Status'),
        `notifications ${JSON.stringify(told)}`);
      await page.locator('.notifications-toasts .notification-toast', { hasText: `loop ${name} cancelled` }).first()
        .waitFor({ state: 'visible', timeout: 10000 });
      await screenshot('loop-cancelled');
      await loopMenu(name, 'Restart Loop');
      await until('the restarted loop to run', (r) => r.views.loops.find((l) => l.label === name && /^running/.test(l.description)));
      fs.rmSync(path.join(T, 'hold'), { force: true });
      await until('the restarted loop to complete', (r) => r.views.loops.find((l) => l.label === name && /^completed/.test(l.description)), 60000);
      await sleep(800);
      told = readReport().notifications.filter((n) => n.loop === name);
      check(told.length === 2 && told[1].severity === 'info', `notifications ${JSON.stringify(told)}`);
      const cmds = readReport().commands.map((c) => `${c.command}:${c.ok}`);
      for (const c of ['forgeLsp.executePlan:true', 'forgeLsp.cancelLoop:true', 'forgeLsp.restartLoop:true']) {
        check(cmds.includes(c), `commands ${cmds}`);
      }
    }, ['loop-completed']);

    await step('a key bound to a server command runs it without arguments (forge.loop-status)', 'keybinding', async () => {
      await openFromExplorer('src/main.txt');
      await page.keyboard.press('Control+Alt+F9');
      await until('the server command to be answered', (r) => r.commands.find((c) => c.command === 'forge.loop-status'));
      const ran = readReport().commands.filter((c) => c.command === 'forge.loop-status');
      check(ran.length === 1 && ran[0].ok, `server command: ${JSON.stringify(ran)}`);
      check(/vscode-loop/.test(ran[0].detail), `loop-status text names the loop: ${JSON.stringify(ran[0].detail)}`);
    }, ['loop-completed']);

    await step('Delete finding (quick fix) removes the finding', 'quick-fix', async () => {
      await openFromExplorer('src/main.txt');
      await page.keyboard.press('Control+g');
      await page.keyboard.type('2');
      await page.keyboard.press('Enter');
      await sleep(300);
      await page.keyboard.press('Control+.');
      const item = page.locator('.action-widget .monaco-list-row', { hasText: 'Delete finding' }).first();
      await item.waitFor({ state: 'visible', timeout: 10000 });
      await screenshot('quick-fix-menu');
      // The menu is keyboard driven (a pointer block covers it until the mouse moves).
      for (let i = 0; i < 5; i++) {
        const focused = await page.locator('.action-widget .monaco-list-row.focused').first().getAttribute('aria-label');
        if (focused === 'Delete finding') {
          break;
        }
        await page.keyboard.press('ArrowDown');
      }
      await page.keyboard.press('Enter');
      await until('the finding to be gone', (r) => (r.diagnostics[MAIN] ?? ['x']).length === 0);
      await until('the Findings view to be empty', (r) => r.views.findings.length === 0);
      await untilPage('no squiggle', () => document.querySelectorAll('.monaco-editor .squiggly-error').length === 0);
      const left = JSON.parse(forgeCall(['--json', 'review-read'], {}));
      check(Array.isArray(left.data.findings) && left.data.findings.length === 0, `review-read: ${JSON.stringify(left.data)}`);
    }, ['finding']);

    await step('a missing binary shows an error that says what to do; fixing the setting brings the server back', 'missing-binary', async () => {
      const errorsBefore = readReport().errors.length;
      await setServerPath('/nonexistent/forge-lsp');
      await page.locator('.notifications-toasts .notification-toast', { hasText: 'server settings changed' }).first()
        .waitFor({ state: 'visible', timeout: 10000 });
      await palette('Forge: Restart Server');
      const r = await until('the error', (r) => r.client.state === 'failed' && r.errors.length > errorsBefore && r);
      const err = r.errors[r.errors.length - 1].text;
      check(/\/nonexistent\/forge-lsp/.test(err) && /forge\.server\.path/.test(err) && /Install forge-lsp/.test(err), `error ${err}`);
      const toast = page.locator('.notifications-toasts .notification-toast', { hasText: 'cannot start the language server' }).first();
      await toast.waitFor({ state: 'visible', timeout: 10000 });
      await screenshot('missing-binary');
      await toast.locator('.monaco-button', { hasText: 'Show Server Log' }).first().click();
      await untilPage('the Forge log in the Output panel', () =>
        Array.from(document.querySelectorAll('.output-view .view-lines, .panel .view-lines')).some((v) =>
          /is not an executable file/.test((v.textContent || '').replace(/\u00a0/g, ' '))));
      await screenshot('server-log');
      await setServerPath('');
      await palette('Forge: Restart Server');
      await until('the server to run again', (r) => r.client.state === 'running' && r.client.startedAt > r.errors[r.errors.length - 1].at);
    }, ['workspace']);

    await step('Restart Server pressed while forge-lsp is still starting leaves one client running', 'restart-starting', async () => {
      // A server that takes 4 s to start (its `--version` is quick).
      const slow = path.join(T, 'slow-forge-lsp');
      fs.writeFileSync(slow, `#!/bin/bash\ncase " $* " in *" serve "*) sleep 4 ;; esac\nexec "${path.join(T, 'bin', 'forge-lsp')}" "$@"\n`);
      fs.chmodSync(slow, 0o755);
      await setServerPath(slow);
      const created = readReport().client.created;
      await palette('Forge: Restart Server');
      await until('the slow server to be starting', (r) => r.client.state === 'starting' && r.client.created === created + 1, 10000);
      await palette('Forge: Restart Server');
      // The second restart waits for the first start, then restarts it: two clients made,
      // one left, and the extension's own requests reach it (the Plans view lists plans).
      const r = await until('the server to run after both restarts', (r) =>
        r.client.state === 'running' && r.client.created === created + 2 && r, 30000);
      check(r.client.clients === 1, `language clients alive: ${r.client.clients}`);
      await until('the Plans view to list the session plan again', (r) => r.views.plans.find((p) => p.uri === PLAN_URI), 15000);
      await sleep(500);
      const r2 = readReport();
      check(r2.client.state === 'running' && r2.client.clients === 1 && r2.client.created === created + 2, `client ${JSON.stringify(r2.client)}`);
      await setServerPath('');
      await palette('Forge: Restart Server');
      await until('the server to run from PATH again', (r) =>
        r.client.state === 'running' && r.client.created === created + 3 && r.client.serverPath === path.join(T, 'bin', 'forge-lsp'), 20000);
    }, ['workspace']);

    await step('a forge.config the server refuses: one error naming the setting; fixing it offers a restart', 'bad-config', async () => {
      const original = JSON.parse(fs.readFileSync(USER_SETTINGS, 'utf8'))['forge.config'];
      const bad = { ...original, loop: { defaultMaxIterations: 'ten' } };
      await palette('Notifications: Clear All Notifications');
      // A running server rejects it as a live change: no restart offered (it would not start).
      let since = Date.now();
      editMachineSettings((s) => { s['forge.config'] = bad; });
      const rejected = await until('the rejection of the live change', (r) =>
        r.notifications.find((n) => n.at >= since && /forge\.config was not applied/.test(n.text)));
      check(/defaultMaxIterations/.test(rejected.text) && rejected.actions.join() === 'Open Settings', `notification ${JSON.stringify(rejected)}`);
      await sleep(2000);
      let r = readReport();
      const offers = r.notifications.filter((n) => n.at >= since && n.actions.includes('Restart'));
      check(offers.length === 0, `a restart was offered: ${JSON.stringify(offers)}`);
      check(r.serverMessages.some((m) => m.at >= since && /previous configuration stays in effect/.test(m.text) && m.handling === 'told'),
        `server messages ${JSON.stringify(r.serverMessages.slice(-3))}`);
      // Restarted with it, forge-lsp refuses `initialize`: one error, naming the setting.
      await palette('Notifications: Clear All Notifications');
      since = Date.now();
      await palette('Forge: Restart Server');
      r = await until('the refusal', (r) => r.client.state === 'failed' && r.errors.some((e) => e.at >= since) && r, 20000);
      const err = r.errors.filter((e) => e.at >= since).map((e) => e.text);
      check(err.length === 1 && /the setting forge\.config/.test(err[0]) && /Restart Server/.test(err[0]), `errors ${JSON.stringify(err)}`);
      const toast = page.locator('.notifications-toasts .notification-toast', { hasText: 'refused to start' }).first();
      await toast.waitFor({ state: 'visible', timeout: 10000 });
      await sleep(1500);
      const shown = await toastsText();
      const refusals = await page.locator('.notifications-toasts .notification-toast', { hasText: 'refused to start' }).count();
      check(!/couldn't create connection/.test(shown) && refusals === 1, `${refusals} refusal toasts; toasts: ${shown}`);
      await screenshot('bad-config');
      await toast.locator('.monaco-button', { hasText: 'Open Settings' }).first().click();
      await untilPage('the Settings editor on forge.config', () =>
        Array.from(document.querySelectorAll('.settings-editor .settings-header .monaco-editor .view-lines')).some((v) =>
          /forge\.config/.test(v.textContent || '')));
      await screenshot('bad-config-settings');
      await page.keyboard.press('Control+w');
      // Fixed while the server is not running: a restart is offered, and starts it.
      since = Date.now();
      editMachineSettings((s) => { delete s['forge.config']; });
      const offer = await until('the restart offer', (r) =>
        r.notifications.find((n) => n.at >= since && n.actions.includes('Restart') && /not running/.test(n.text)));
      const offerToast = page.locator('.notifications-toasts .notification-toast', { hasText: 'not running' }).first();
      await offerToast.waitFor({ state: 'visible', timeout: 10000 });
      await offerToast.locator('.monaco-button', { hasText: 'Restart' }).first().click();
      r = await until('the server to run with the fixed setting', (r) =>
        r.client.state === 'running' && r.client.startedAt > since && r, 20000);
      check(r.client.clients === 1, `language clients alive: ${r.client.clients} (offer ${JSON.stringify(offer)})`);
    }, ['workspace']);
  } finally {
    fs.writeFileSync(path.join(OUT, 'console-errors.txt'), consoleErrors.join('\n'));
    await browser.close();
  }
}

main()
  .catch((e) => {
    failed += 1;
    console.log(`FAIL  the scenario stopped: ${e.stack || e}`);
  })
  .finally(() => {
    console.log(`scenario took ${secs()} s`);
    fs.writeFileSync(path.join(OUT, 'counts.json'), JSON.stringify({ passed, failed }));
    console.log(`scenario: ${passed} passed, ${failed} failed`);
    process.exit(failed > 0 || passed === 0 ? 1 : 0);
  });
