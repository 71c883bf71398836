// Runs a subscription in GraphiQL in headless Chromium, as a person would,
// and watches the response pane while the test makes calls: prints
// "SUBSCRIBED" once the subscription runs, then, when the pane shows the
// final event type (or after a timeout), one JSON object with every event
// type the pane showed, in order. Screenshots go to the given directory.
//
//   node graphiql-subscription.mjs <base URL> <token> <subscription> <final type> <screenshot dir>
import { chromium } from 'playwright-core';

const [base, token, query, last, shots] = process.argv.slice(2);
const out = { seen: [], screenshots: [], error: null };
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
page.on('console', (m) => console.error('console:', m.type(), m.text()));
page.on('websocket', (ws) => { console.error('websocket:', ws.url()); ws.on('framereceived', (f) => console.error('ws<', String(f.payload).slice(0, 200))); ws.on('framesent', (f) => console.error('ws>', String(f.payload).slice(0, 200))); ws.on('close', () => console.error('ws closed')); });
const shot = async (name) => {
  const path = `${shots}/${out.screenshots.length + 1}-${name}.png`;
  await page.screenshot({ path }).then(() => out.screenshots.push(path), () => {});
};
try {
  await page.goto(base + '/');
  await page.fill('#token', token);
  await page.click('#save');
  await page.waitForSelector('.graphiql-query-editor .CodeMirror', { timeout: 45000 });
  await page.evaluate((q) => document.querySelector('.graphiql-query-editor .CodeMirror').CodeMirror.setValue(q), query);
  // GraphiQL parses the editor's text after a short debounce; the fetcher
  // picks the WebSocket only once the parsed document is a subscription.
  await new Promise((r) => setTimeout(r, 1500));
  await page.click('.graphiql-execute-button');
  // The subscription is open once the execute button turns into a stop button.
  for (let i = 0; i < 100; i++) {
    const running = await page.evaluate(() => !!document.querySelector('.graphiql-execute-button svg path, .graphiql-execute-button') && document.querySelector('.graphiql-execute-button').getAttribute('aria-label'));
    if (running && /stop/i.test(running)) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  await new Promise((r) => setTimeout(r, 500));
  await shot('subscribed');
  console.log('SUBSCRIBED');
  const deadline = Date.now() + 60000;
  while (Date.now() < deadline) {
    const v = await page.evaluate(() => document.querySelector('.graphiql-response .CodeMirror').CodeMirror.getValue());
    const m = v.match(/"type":\s*"([A-Z_]+)"/);
    if (m && out.seen[out.seen.length - 1] !== m[1]) {
      out.seen.push(m[1]);
      await shot(m[1].toLowerCase());
    }
    if (m && m[1] === last) break;
    await new Promise((r) => setTimeout(r, 40));
  }
  await shot('end');
} catch (e) {
  out.error = String(e && e.message || e);
  await shot('failure');
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
