// Opens GraphiQL in headless Chromium as a person would: enters the token in
// the page's bar, runs a query through the editor, opens the Docs pane and
// finds ComputeNode through its search, and types "{ ten" to see what
// autocomplete offers. Before the token, it records what the page says and
// whether it sent any request. Prints one JSON object; writes a screenshot
// of each stage into the directory given as the fourth argument.
//
//   node graphiql.mjs <base URL> <token> <query> <screenshot dir>
import { chromium } from 'playwright-core';

const [base, token, query, shots] = process.argv.slice(2);
const out = { before: null, refused: null, unsendable: null, response: null, blocked: [], docs: null, hints: [], screenshots: [], ms: {}, error: null };
const t0 = Date.now();
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
const shot = async (name) => {
  out.ms[name] = Date.now() - t0;
  const path = `${shots}/${out.screenshots.length + 1}-${name}.png`;
  await page.screenshot({ path }).then(() => out.screenshots.push(path), () => {});
};
// Poll from here: waitForFunction would need 'unsafe-eval', which the page's CSP refuses.
const poll = async (fn, arg, what, tries = 150) => {
  for (let i = 0; i < tries; i++) {
    const v = await page.evaluate(fn, arg);
    if (v) return v;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error('timed out waiting for ' + what);
};
try {
  // Any error or warning in the console, and Chromium's [DOM] notices (a
  // password field outside a form): what a person opening the page's
  // developer tools would see (a CSP refusal, a 404 for /favicon.ico).
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning' || m.text().startsWith('[DOM]')) out.blocked.push(m.type() + ': ' + m.text().slice(0, 200)); });
  page.on('pageerror', (e) => out.blocked.push(String(e).slice(0, 200)));
  // 0. Without a token: the page says which token to paste and sends no
  // request to /graphql (no introspection either), for a while.
  const sent = [];
  page.on('request', (r) => { if (new URL(r.url()).pathname.startsWith('/graphql')) sent.push(r.method() + ' ' + r.url()); });
  await page.goto(base + '/');
  await page.waitForSelector('#help:not([hidden])', { timeout: 45000 });
  await new Promise((r) => setTimeout(r, 1500));
  out.before = await page.evaluate(() => ({
    help: document.getElementById('help').innerText,
    graphiqlShown: !document.getElementById('graphiql').hidden,
    focused: document.activeElement && document.activeElement.id,
  }));
  out.before.requests = [...sent];
  await shot('no-token');
  // 0b. A token the server refuses: the page says so and GraphiQL stays
  // unmounted (it showed "Error fetching schema" and retried a
  // subscription's socket for 40 s).
  const consoleBefore = out.blocked.length;
  await page.fill('#token', 'bct_unknown');
  await page.click('#save');
  await page.waitForSelector('#refused:not([hidden])', { timeout: 45000 });
  out.refused = await page.evaluate(() => ({
    text: document.getElementById('refused').innerText,
    help: !document.getElementById('help').hidden,
    graphiqlShown: !document.getElementById('graphiql').hidden,
  }));
  // The refused try's own 401 is what Chromium logs of any refused
  // fetch; anything else in the console still counts.
  await new Promise((r) => setTimeout(r, 300));
  out.refused.console = out.blocked.splice(consoleBefore).filter((m) => !m.includes('status of 401'));
  out.blocked.push(...out.refused.console);
  await shot('refused-token');
  // 0c. A token with a character no header holds: said, not mounted.
  await page.fill('#token', 'bct_\u200bx');
  await page.click('#save');
  await page.waitForSelector('#refused:not([hidden])', { timeout: 45000 });
  out.unsendable = await page.evaluate(() => ({
    text: document.getElementById('refused').innerText,
    graphiqlShown: !document.getElementById('graphiql').hidden,
  }));
  // 0d. A control character (net/http's plain 400): the same.
  await page.fill('#token', 'bct_a\u007fb');
  await page.click('#save');
  await page.waitForSelector('#refused:not([hidden])', { timeout: 45000 });
  out.control = await page.evaluate(() => !document.getElementById('graphiql').hidden);
  await page.fill('#token', token);
  await page.click('#save');
  await page.waitForSelector('.graphiql-query-editor .CodeMirror', { timeout: 45000 });

  // 1. A query through the editor.
  await page.evaluate((q) => document.querySelector('.graphiql-query-editor .CodeMirror').CodeMirror.setValue(q), query);
  await page.click('.graphiql-execute-button');
  const text = await poll(() => {
    const v = document.querySelector('.graphiql-response .CodeMirror').CodeMirror.getValue();
    return v.includes('"data"') || v.includes('"errors"') ? v : '';
  }, null, 'the response');
  out.response = JSON.parse(text);
  await shot('query');

  // 2. The Docs pane loads the schema (introspection); its search finds ComputeNode.
  await page.click('button[aria-label="Show Documentation Explorer"]');
  await poll(() => {
    const d = document.querySelector('.graphiql-doc-explorer');
    return d && (d.querySelector('.graphiql-doc-explorer-root-type') || d.querySelector('.graphiql-doc-explorer-error'));
  }, null, 'the Docs pane');
  const docError = await page.evaluate(() => document.querySelector('.graphiql-doc-explorer-error')?.textContent || '');
  await shot('docs');
  if (docError) throw new Error('the Docs pane: ' + docError);
  // The search's list can close under a click that lands as it re-renders
  // (a loaded machine): as a person would, search and click again, up to
  // three times; the page must open from the search.
  for (let attempt = 1; ; attempt++) {
    await page.click('[data-cy="doc-explorer-input"]');
    await page.keyboard.press('Control+A');
    await page.keyboard.type('ComputeNode');
    await poll(() => [...document.querySelectorAll('[data-cy="doc-explorer-option"]')].some((o) => o.textContent.trim() === 'ComputeNode'), null, 'ComputeNode in the search results');
    if (attempt === 1) await shot('docs-search');
    await page.locator('[data-cy="doc-explorer-option"]', { hasText: /^ComputeNode$/ }).first().click();
    try {
      out.docs = await poll(() => {
        const t = document.querySelector('.graphiql-doc-explorer-title')?.textContent || '';
        if (t !== 'ComputeNode') return null;
        const fields = [...document.querySelectorAll('.graphiql-doc-explorer-field-name')].map((f) => f.textContent);
        return fields.length ? { title: t, fields } : null;
      }, null, 'the ComputeNode page', 50);
      break;
    } catch (e) {
      if (attempt === 3) throw e;
    }
  }
  await shot('docs-computenode');

  // 3. Autocomplete: type "{ ten" as a person would; the hints list offers fields.
  await page.evaluate(() => document.querySelector('.graphiql-query-editor .CodeMirror').CodeMirror.setValue(''));
  await page.click('.graphiql-query-editor .CodeMirror');
  await page.keyboard.type('{ ten', { delay: 40 });
  out.hints = await poll(() => {
    const hs = [...document.querySelectorAll('.CodeMirror-hints .CodeMirror-hint')].map((h) => h.textContent);
    return hs.length ? hs : null;
  }, null, 'autocomplete hints', 50);
  await shot('autocomplete');
} catch (e) {
  out.error = String(e && e.message || e);
  await shot('failure');
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
