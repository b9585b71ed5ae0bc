#!/usr/bin/env node
// browser_check.cjs: do our traces draw in speedscope, and does the HTML report render?
// Headless Debian Chromium driven by puppeteer-core; both from scripts/setup.sh (npm packages
// in .tools). Nothing leaves 127.0.0.1.
//
// usage: node scripts/browser_check.cjs TOOLS_DIR SHOT_DIR [--html REPORT.html] TRACE...
//   TRACE: *.pt.trace.json[.gz], or collapsed stacks (*.txt, what --export_stacks writes);
//          each must import in speedscope 1.25 (its npm release build, served from 127.0.0.1
//          and opened as index.html#profileURL=...), a *.txt as "collapsed stack format"
//          (speedscope guesses the format from the content), draw a coloured chart and raise
//          no page error or alert, and log no nesting warning (speedscope's "Tried to end X
//          when Y was on the top of the stack", "was still open at end of profile": events of
//          one row that do not nest, which it draws wrong). Speedscope shows one profile per
//          (pid, tid) row, the first GPU stream first; a stream that is idle most of the trace
//          (the dataloader scenario's) draws almost nothing, so the check steps through the
//          profiles ('n') until one is coloured.
//   --html: the report must render: a screenshot that is not blank, and a DOM with the
//          verdict and every section heading profile_analyze writes.
// Prints one line per check, "BROWSER <what> <file>: PASS|FAIL detail"; exits 1 when any
// check fails or the browser cannot be started (a missing browser is a failure, not a skip).
'use strict';
const fs = require('fs'), os = require('os'), path = require('path'), http = require('http'), zlib = require('zlib');

const args = process.argv.slice(2);
if (args.length < 3) {
  console.error('usage: browser_check.cjs TOOLS_DIR SHOT_DIR [--html REPORT.html] TRACE...');
  process.exit(2);
}
const TOOLS = path.resolve(args[0]), SHOTS = path.resolve(args[1]);
let html = null;
const traces = [];
for (let i = 2; i < args.length; i++) {
  if (args[i] === '--html') html = path.resolve(args[++i]);
  else traces.push(path.resolve(args[i]));
}
const CHROME = process.env.CHROMIUM || '/usr/bin/chromium';
const SPEEDSCOPE = path.join(TOOLS, 'node_modules/speedscope/dist/release');
// The section headings analyze_html.c writes for one trace (src/analyze/analyze_html.c).
const SECTIONS = ['Verdict and step metrics', 'Step time breakdown', 'GPU utilization and idle time',
  'Top device activity', 'Device memory timeline', 'Key averages'];
const sleep = ms => new Promise(r => setTimeout(r, ms));

function fail(msg) {
  console.log(`BROWSER setup: FAIL ${msg}`);
  process.exit(1);
}
let puppeteer;
try {
  puppeteer = require(path.join(TOOLS, 'node_modules/puppeteer-core'));
} catch (e) {
  fail(`puppeteer-core not in ${TOOLS}/node_modules: run scripts/setup.sh`);
}
if (!fs.existsSync(path.join(SPEEDSCOPE, 'index.html'))) fail(`speedscope not in ${TOOLS}/node_modules: run scripts/setup.sh`);
if (!fs.existsSync(CHROME)) fail(`no browser at ${CHROME}: run scripts/setup.sh (Debian package chromium)`);
fs.mkdirSync(SHOTS, {recursive: true});

// speedscope's files under /ss/, trace i under /trace/i (gunzipped: what a user drops in).
function serve() {
  const types = {'.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.wasm': 'application/wasm',
    '.png': 'image/png', '.ico': 'image/x-icon', '.woff2': 'font/woff2'};
  const srv = http.createServer((req, res) => {
    const u = decodeURIComponent(req.url.split(/[?#]/)[0]);
    try {
      let body, type;
      if (u.startsWith('/trace/')) {
        const file = traces[parseInt(u.split('/')[2], 10)];
        body = fs.readFileSync(file);
        if (file.endsWith('.gz')) body = zlib.gunzipSync(body);
        type = 'application/json';
      } else if (u.startsWith('/ss/')) {
        const file = path.join(SPEEDSCOPE, path.normalize(u.slice(4) || 'index.html'));
        if (!file.startsWith(SPEEDSCOPE)) throw new Error('outside');
        body = fs.readFileSync(file);
        type = types[path.extname(file)] || 'application/octet-stream';
      } else {
        throw new Error('unknown');
      }
      res.writeHead(200, {'Content-Type': type});
      res.end(body);
    } catch (e) {
      res.writeHead(404);
      res.end();
    }
  });
  return new Promise(r => srv.listen(0, '127.0.0.1', () => r(srv)));
}

// Distinct colours and the share of coloured (not grey) pixels of a screenshot, in the page.
function pixels(page, png) {
  return page.evaluate(async b64 => {
    const img = new Image();
    img.src = 'data:image/png;base64,' + b64;
    await img.decode();
    const c = document.createElement('canvas');
    c.width = img.width;
    c.height = img.height;
    const g = c.getContext('2d');
    g.drawImage(img, 0, 0);
    const d = g.getImageData(0, 0, c.width, c.height).data;
    const colours = new Set();
    let coloured = 0, n = 0;
    for (let i = 0; i < d.length; i += 16, n++) {
      colours.add((d[i] >> 3) << 10 | (d[i + 1] >> 3) << 5 | (d[i + 2] >> 3));
      if (Math.max(d[i], d[i + 1], d[i + 2]) - Math.min(d[i], d[i + 1], d[i + 2]) > 40) coloured++;
    }
    return {colours: colours.size, coloured: coloured / n};
  }, png.toString('base64'));
}

async function speedscope(browser, base, i) {
  const name = path.basename(traces[i]);
  const page = await browser.newPage();
  await page.setViewport({width: 1400, height: 900});
  const logs = [], errors = [], alerts = [];
  page.on('console', m => logs.push(m.text()));
  page.on('pageerror', e => errors.push(String(e.message || e)));
  page.on('dialog', async d => { alerts.push(d.message()); await d.dismiss(); });
  const profile = encodeURIComponent(`${base}/trace/${i}/${name}`);
  await page.goto(`${base}/ss/index.html#profileURL=${profile}&title=${encodeURIComponent(name)}`, {waitUntil: 'load'});
  let imported = false;
  const importer = name.endsWith('.txt') ? /Importing as collapsed stack format/ : /Importing as/;
  for (let t = 0; t < 60 && !alerts.length && !errors.length; t++) {
    await sleep(500);
    imported = logs.some(l => importer.test(l));
    const drawn = await page.evaluate(() => document.querySelectorAll('canvas').length > 0 &&
                                           !/Loading/i.test(document.body.innerText));
    if (imported && drawn) {
      await sleep(1500);
      break;
    }
  }
  const drawn = p => p.colours > 20 && p.coloured > 0.02;
  let px = await pixels(page, await page.screenshot({path: path.join(SHOTS, `speedscope_${name}.png`)}));
  const count = (await page.evaluate(() => document.body.innerText)).match(/\((\d+)\/(\d+)\)/);
  const profiles = count ? Number(count[2]) : 1;
  let shown = 1;
  for (let k = 2; k <= Math.min(profiles, 8) && !drawn(px); k++) {
    await page.keyboard.press('n');
    await sleep(700);
    const next = await pixels(page, await page.screenshot({path: path.join(SHOTS, `speedscope_${name}_${k}.png`)}));
    if (next.coloured > px.coloured) {
      px = next;
      shown = k;
    }
  }
  const nesting = logs.filter(l => /Tried to end|was still open|never entered/.test(l));
  const ok = imported && !errors.length && !alerts.length && drawn(px) && !nesting.length;
  console.log(`BROWSER speedscope ${name}: ${ok ? 'PASS' : 'FAIL'} imported=${imported} profile=${shown}/${profiles} ` +
              `colours=${px.colours} coloured=${px.coloured.toFixed(3)} nesting warnings=${nesting.length}` +
              `${nesting.length ? ' e.g. ' + JSON.stringify(nesting[0].slice(0, 160)) : ''} ` +
              `page errors=${JSON.stringify(errors.slice(0, 2))} alerts=${JSON.stringify(alerts.slice(0, 2))}`);
  await page.close();
  return ok;
}

async function report(browser) {
  const page = await browser.newPage();
  await page.setViewport({width: 1400, height: 1000});
  const errors = [];
  page.on('pageerror', e => errors.push(String(e.message || e)));
  await page.goto('file://' + html, {waitUntil: 'load'});
  await sleep(500);
  const dom = await page.evaluate(() => ({
    headings: Array.from(document.querySelectorAll('h2')).map(h => h.textContent),
    verdict: (document.querySelector('.verdict') || {}).textContent || '',
    svgs: document.querySelectorAll('svg').length,
  }));
  const png = await page.screenshot({path: path.join(SHOTS, 'report.png'), fullPage: true});
  const px = await pixels(page, png);
  const missing = SECTIONS.filter(s => !dom.headings.some(h => h.startsWith(s)));
  const ok = /Verdict: \w+/.test(dom.verdict) && !missing.length && dom.svgs > 0 && !errors.length &&
             px.colours > 20 && px.coloured > 0.005;
  console.log(`BROWSER report ${path.basename(html)}: ${ok ? 'PASS' : 'FAIL'} verdict=${JSON.stringify(dom.verdict.slice(0, 80))} ` +
              `sections missing=${JSON.stringify(missing)} svg charts=${dom.svgs} colours=${px.colours} ` +
              `coloured=${px.coloured.toFixed(3)} page errors=${JSON.stringify(errors.slice(0, 2))}`);
  await page.close();
  return ok;
}

(async () => {
  const profileDir = fs.mkdtempSync(path.join(os.tmpdir(), 'pd_browser_'));
  const srv = await serve();
  const base = `http://127.0.0.1:${srv.address().port}`;
  let browser, rc = 0;
  try {
    browser = await puppeteer.launch({
      executablePath: CHROME, headless: true, userDataDir: profileDir,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync',
        '--disable-dev-shm-usage', '--proxy-server=direct://', '--proxy-bypass-list=*'],
    });
    for (let i = 0; i < traces.length; i++) if (!(await speedscope(browser, base, i))) rc = 1;
    if (html && !(await report(browser))) rc = 1;
  } catch (e) {
    console.log(`BROWSER run: FAIL ${e.message.split('\n')[0]}`);
    rc = 1;
  } finally {
    if (browser) await browser.close().catch(() => {});
    srv.close();
    fs.rmSync(profileDir, {recursive: true, force: true});
  }
  process.exit(rc);
})();
