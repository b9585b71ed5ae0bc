/* test_stream.c: the streaming trace reader (src/model/trace_reader.c, json_pull.c).
 *
 *  - every fixture trace (tests/fixtures/runs, tests/fixtures/torch) reads into the same
 *    events, devices and info as the former whole-tree reader gave: a digest of every
 *    field, pinned from that reader;
 *  - a trace fed in pieces of every size gives the same events as in one piece;
 *  - bad input: truncated JSON, wrong types, numbers out of range (1e400, ts near the
 *    int64 limit), deep nesting, long tokens, gzip garbage, a FIFO and /dev/zero; each
 *    fails with one line naming the file and leaves the trace empty;
 *  - the progress callback.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "json_pull.h"
#include "pd/pd_analyze.h"
#include "pd_test_util.h"

/* ---- event digest ---------------------------------------------------------------------- */

typedef struct {
  uint64_t h;
} digest_t;

static void dg_bytes(digest_t *d, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    d->h ^= b[i];
    d->h *= 1099511628211ULL;
  }
}
static void dg_u64(digest_t *d, uint64_t v) {
  dg_bytes(d, &v, sizeof v);
}
static void dg_str(digest_t *d, const char *s) {
  if (s == NULL) dg_u64(d, 0x9e3779b97f4a7c15ULL);
  else dg_bytes(d, s, strlen(s) + 1);
}

/* Every field of the event model, by kind. */
static void dg_event(digest_t *d, const pd_event_t *e) {
  dg_u64(d, (uint64_t)e->kind);
  dg_u64(d, (uint64_t)e->start_ns);
  dg_u64(d, (uint64_t)e->end_ns);
  dg_u64(d, e->correlation_id);
  dg_str(d, e->name);
  dg_u64(d, ((uint64_t)e->pid << 32) | e->tid);
  dg_u64(d, ((uint64_t)e->device << 32) | e->context);
  dg_u64(d, e->stream);
  switch (e->kind) {
  case PD_EVENT_KERNEL:
    for (int i = 0; i < 3; i++) dg_u64(d, ((uint64_t)(uint32_t)e->u.kernel.grid[i] << 32) | (uint32_t)e->u.kernel.block[i]);
    dg_u64(d, ((uint64_t)(uint32_t)e->u.kernel.registers_per_thread << 32) | (uint32_t)e->u.kernel.static_smem_bytes);
    dg_u64(d, (uint64_t)(uint32_t)e->u.kernel.dynamic_smem_bytes);
    break;
  case PD_EVENT_MEMCPY:
    dg_u64(d, e->u.memcpy.bytes);
    dg_u64(d, (uint64_t)e->u.memcpy.copy_kind * 100 + (uint64_t)e->u.memcpy.src_kind * 10 + e->u.memcpy.dst_kind);
    break;
  case PD_EVENT_MEMSET:
    dg_u64(d, e->u.memset.bytes);
    dg_u64(d, (uint64_t)e->u.memset.dst_kind);
    break;
  case PD_EVENT_RUNTIME:
  case PD_EVENT_DRIVER:
    dg_u64(d, ((uint64_t)e->u.api.cbid << 32) | (uint32_t)e->u.api.status);
    break;
  case PD_EVENT_SYNC:
    dg_u64(d, (uint64_t)e->u.sync.sync_kind);
    break;
  case PD_EVENT_RANGE:
  case PD_EVENT_CPU_OP:
  case PD_EVENT_GPU_RANGE:
    dg_u64(d, (uint64_t)e->u.range.step);
    dg_str(d, e->u.range.shape);
    dg_u64(d, e->u.range.depth);
    break;
  case PD_EVENT_MEMORY:
    dg_u64(d, e->u.memory.address);
    dg_u64(d, (uint64_t)e->u.memory.bytes);
    dg_u64(d, (uint64_t)e->u.memory.total_allocated);
    dg_u64(d, (uint64_t)e->u.memory.mem_kind);
    break;
  case PD_EVENT_OVERHEAD:
  case PD_EVENT_KIND_COUNT:
    break;
  }
}

/* Digest of the events, devices and the info fields that do not measure time. */
static uint64_t trace_digest(const pd_trace_t *t, const pd_trace_info_t *info) {
  digest_t d = {1469598103934665603ULL};
  const pd_event_t *ev = pd_trace_events(t);
  for (size_t i = 0; i < pd_trace_count(t); i++) dg_event(&d, &ev[i]);
  const pd_device_props_t *dev = pd_trace_devices(t);
  for (size_t i = 0; i < pd_trace_device_count(t); i++) {
    dg_str(&d, dev[i].name);
    dg_u64(&d, dev[i].total_global_mem);
    const int *ints[] = {&dev[i].id, &dev[i].compute_major, &dev[i].compute_minor, &dev[i].num_sms,
                         &dev[i].max_threads_per_block, &dev[i].max_threads_per_sm, &dev[i].max_regs_per_block,
                         &dev[i].max_regs_per_sm, &dev[i].max_shared_mem_per_block, &dev[i].max_shared_mem_per_sm,
                         &dev[i].warp_size, &dev[i].max_blocks_per_sm, &dev[i].max_shared_mem_per_block_optin};
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) dg_u64(&d, (uint64_t)(int64_t)*ints[k]);
  }
  dg_u64(&d, (uint64_t)info->base_time_ns);
  dg_u64(&d, (uint64_t)(int64_t)info->schema_version);
  dg_u64(&d, (uint64_t)info->gzipped * 2 + info->torch);
  dg_str(&d, info->trace_name);
  dg_u64(&d, info->text_bytes);
  dg_u64(&d, info->json_events);
  dg_u64(&d, info->skipped);
  for (int k = 0; k < PD_EVENT_KIND_COUNT; k++) dg_u64(&d, info->kind_counts[k]);
  return d.h;
}

static const char *fixture_path(const char *rel) { return pd_test_fixtures(rel); }

/* Digests of each fixture as read. The torch fixtures' are the former whole-tree (cJSON)
 * reader's, taken while both readers lived and a test compared them event by event
 * (commit 428b47b). The runs/ fixtures were re-recorded afterwards (H100 a4383c4c,
 * 2026-11-25, build of 65c2450, trace format 2; tests/fixtures/runs/README.md): theirs are
 * this reader's on those files, so a change in what the reader keeps shows here
 * (re-recorded fixtures need their digests taken again). formats/
 * clean.v1 is the format-1 recording of clean as it was committed: its digest is the one
 * pinned before format 2, so old traces still read the same. */
static const struct {
  const char *file;
  uint64_t digest;
} k_fixtures[] = {
    {"runs/clean.pt.trace.json.gz", 0xacc740bfe2b46f3cULL},
    {"runs/dataloader.pt.trace.json.gz", 0x005b59254254d654ULL},
    {"runs/sync.pt.trace.json.gz", 0x0a50b4f82987f4f5ULL},
    {"runs/tiny_ops.pt.trace.json.gz", 0xc78ddb442749e11dULL},
    {"runs/memory_churn.pt.trace.json.gz", 0x0adde15bae1460f1ULL},
    {"formats/clean.v1.pt.trace.json.gz", 0xac377e1760c63969ULL},
    {"torch/torch_sync.pt.trace.json.gz", 0xb47da1fbf7f399a6ULL},
    {"torch/torch_memory_churn.pt.trace.json.gz", 0x47ef7a5c2e775c71ULL},
};

Test(stream, fixtures_read_as_the_tree_reader_read_them) {
  for (size_t f = 0; f < sizeof k_fixtures / sizeof k_fixtures[0]; f++) {
    const char *path = fixture_path(k_fixtures[f].file);
    pd_trace_t *t = pd_trace_create();
    pd_trace_info_t info;
    char err[512] = "";
    cr_assert_eq(pd_trace_read_file_info(path, t, &info, err, sizeof err), 0, "%s", err);
    uint64_t d = trace_digest(t, &info);
    cr_expect_eq(d, k_fixtures[f].digest, "%s: digest %016llx, the tree reader's %016llx", k_fixtures[f].file,
                 (unsigned long long)d, (unsigned long long)k_fixtures[f].digest);
    pd_trace_destroy(t);
  }
}

/* ---- the tokenizer: pieces of any size give the same tokens ---------------------------------- */

typedef struct {
  const char *text;
  size_t len, at, piece;
} pieces_t;

static long pieces_read(void *user, char *buf, size_t cap, char *err, size_t errlen) {
  pieces_t *s = user;
  size_t n = s->len - s->at;
  if (n > s->piece) n = s->piece;
  if (n > cap) n = cap;
  memcpy(buf, s->text + s->at, n);
  s->at += n;
  return (long)n;
}

/* Walks the whole value, appending one line per token to out. */
static void walk(an_json_t *p, an_json_type_t t, char *out, size_t cap) {
  char line[300];
  switch (t) {
  case AN_JSON_OBJECT:
    strncat(out, "{\n", cap - strlen(out) - 1);
    while (an_json_key(p) > 0) {
      snprintf(line, sizeof line, "key %s\n", p->str);
      strncat(out, line, cap - strlen(out) - 1);
      walk(p, an_json_value(p), out, cap);
    }
    strncat(out, "}\n", cap - strlen(out) - 1);
    return;
  case AN_JSON_ARRAY:
    strncat(out, "[\n", cap - strlen(out) - 1);
    while (an_json_elem(p) > 0) walk(p, an_json_value(p), out, cap);
    strncat(out, "]\n", cap - strlen(out) - 1);
    return;
  case AN_JSON_STRING:
    snprintf(line, sizeof line, "str %zu %s\n", p->len, p->str);
    break;
  case AN_JSON_NUMBER:
    snprintf(line, sizeof line, "num %a %d %lld\n", p->num, p->num_is_int, (long long)p->num_i64);
    break;
  case AN_JSON_ERROR:
    snprintf(line, sizeof line, "error %s\n", p->err);
    break;
  default:
    snprintf(line, sizeof line, "lit %d\n", (int)t);
    break;
  }
  strncat(out, line, cap - strlen(out) - 1);
}

Test(stream, pieces_give_the_same_tokens) {
  static const char doc[] =
      " {\"a\\u00e9\\ud83d\\ude00\\n\": [1, -0, 12.5e-3, 4380611019770.625, 1E2, 9223372036854775807,"
      " -9223372036854775808, 9223372036854775808, 123456789012345678901234567890, true, false, null,"
      " \"x\\\"y\\\\z\\/\\b\\f\\r\\t\", {}, [], [[\"\"]]], \"long key with spaces\" : {\"k\": 0.1}} \n";
  char whole[8192] = "", split[8192];
  an_json_t p;
  an_json_init_buffer(&p, doc, strlen(doc));
  walk(&p, an_json_value(&p), whole, sizeof whole);
  cr_assert_eq(an_json_finish(&p), 0, "%s", p.err);
  an_json_free(&p);
  cr_assert(strstr(whole, "error") == NULL, "%s", whole);
  cr_expect(strstr(whole, "key a\xc3\xa9\xf0\x9f\x98\x80\n\n") != NULL, "escapes decode to UTF-8: %s", whole);
  cr_expect(strstr(whole, "num 0x1p+63 0") != NULL, "2^63 is no int64: %s", whole);
  for (size_t piece = 1; piece <= 9; piece++) {
    pieces_t s = {doc, strlen(doc), 0, piece};
    cr_assert_eq(an_json_init_reader(&p, pieces_read, &s), 0);
    split[0] = 0;
    walk(&p, an_json_value(&p), split, sizeof split);
    cr_expect_eq(an_json_finish(&p), 0, "%s", p.err);
    an_json_free(&p);
    cr_expect_str_eq(split, whole, "pieces of %zu bytes", piece);
  }
}

Test(stream, numbers_match_strtod) {
  /* the fast path must give strtod's double, bit for bit */
  static const char *const fixed[] = {"0",      "-0",    "1",     "0.1",   "4380611019770.625",
                                      "1e22",   "1e23",  "9007199254740993", "0.000001", "123.456e-7",
                                      "2.2250738585072014e-308", "1.7976931348623157e308", "5e-324"};
  char text[64];
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0] + 20000; i++) {
    if (i < sizeof fixed / sizeof fixed[0]) {
      snprintf(text, sizeof text, "%s", fixed[i]);
    } else {
      /* up to 17 digits, a decimal point somewhere, an exponent sometimes */
      unsigned r = (unsigned)i * 2654435761u;
      int digits = 1 + (int)(r % 17), point = (int)((r >> 5) % (unsigned)(digits + 1));
      size_t n = 0;
      if (r & 1) text[n++] = '-';
      unsigned long long v = (unsigned long long)i * 6364136223846793005ULL + 1442695040888963407ULL;
      for (int d = 0; d < digits; d++) {
        if (d == point && d > 0) text[n++] = '.';
        text[n++] = (char)('0' + (d == 0 && digits > 1 && point != 1 ? 1 + v % 9 : v % 10));
        v /= 10;
        if (v == 0) v = (unsigned long long)i * 7919ULL + 13;
      }
      if ((r >> 11) % 3 == 0) n += (size_t)snprintf(text + n, sizeof text - n, "e%d", (int)((r >> 13) % 60) - 30);
      text[n] = 0;
    }
    an_json_t p;
    an_json_init_buffer(&p, text, strlen(text));
    an_json_type_t t = an_json_value(&p);
    if (t == AN_JSON_ERROR) continue; /* e.g. a leading zero: not JSON, and not this test's concern */
    cr_assert_eq(t, AN_JSON_NUMBER, "%s", text);
    double want = strtod(text, NULL);
    cr_assert(memcmp(&p.num, &want, sizeof want) == 0, "%s: %a vs strtod %a", text, p.num, want);
    an_json_free(&p);
  }
}

/* ---- bad input --------------------------------------------------------------------------------- */

static char g_dir[256];

static void make_dir(void) {
  pd_test_tmpdir_make(g_dir, sizeof g_dir, "pd_stream_test");
}

static void remove_dir(void) {
  pd_test_tmpdir_remove(g_dir);
}

static const char *in_dir(const char *name) { return pd_test_path(g_dir, name); }

static void write_bytes(const char *path, const char *text, size_t n) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  cr_assert_eq(fwrite(text, 1, n, f), n);
  fclose(f);
}

static void write_text(const char *path, const char *text) {
  write_bytes(path, text, strlen(text));
}

/* Reads path (into a trace that holds an event already) and expects failure rc with all of
 * words (separated by '|') in a one-line message that names the file. */
static void expect_error(const char *path, int want, const char *words) {
  pd_trace_t *t = pd_trace_create();
  pd_event_t e = {.kind = PD_EVENT_RANGE, .name = "stale", .start_ns = 1, .end_ns = 2};
  cr_assert_eq(pd_trace_add(t, &e), 0);
  char err[512] = "";
  int rc = pd_trace_read_file(path, t, err, sizeof err);
  cr_expect_eq(rc, want, "%s: rc %d (%s)", path, rc, err);
  char w[256];
  snprintf(w, sizeof w, "%s", words);
  for (char *save = NULL, *tok = strtok_r(w, "|", &save); tok != NULL; tok = strtok_r(NULL, "|", &save))
    cr_expect(strstr(err, tok) != NULL, "message '%s' lacks '%s'", err, tok);
  cr_expect(strstr(err, path) != NULL, "message '%s' names the file", err);
  cr_expect(strchr(err, '\n') == NULL, "one line");
  cr_expect_eq(pd_trace_count(t), 0u, "nothing partial is left");
  pd_trace_destroy(t);
}

static void expect_text_error_rc(const char *name, const char *text, int want, const char *words) {
  const char *path = in_dir(name);
  write_text(path, text);
  expect_error(path, want, words);
}

static void expect_text_error(const char *name, const char *text, const char *words) {
  expect_text_error_rc(name, text, PD_EPARSE, words);
}

#define EVENT_HEAD "{\"traceEvents\":[{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k\",\"pid\":0,\"tid\":7,"

Test(stream, truncated_and_malformed, .init = make_dir, .fini = remove_dir) {
  expect_text_error("cut1.json", EVENT_HEAD "\"ts\":1", "not valid JSON|end of text");
  expect_text_error("cut2.json", "{\"traceEvents\":[{\"ph\":\"X", "not valid JSON|unterminated string");
  expect_text_error("cut3.json", "{\"traceEvents\":[", "not valid JSON");
  expect_text_error("comma.json", "{\"traceEvents\":[1,]}", "not valid JSON|unexpected character ']'");
  expect_text_error("colon.json", "{\"traceEvents\" []}", "expected ':'");
  expect_text_error("trailing.json", "{\"traceEvents\":[]} x", "text after the end");
  expect_text_error("escape.json", "{\"traceEvents\":[\"\\x\"]}", "invalid escape");
  expect_text_error("surrogate.json", "{\"traceEvents\":[\"\\ud800x\"]}", "invalid \\u escape");
  expect_text_error("literal.json", "{\"traceEvents\":[tru]}", "invalid literal");
  expect_text_error("number.json", "{\"traceEvents\":[01]}", "invalid number '01'");
  expect_text_error("space.json", "  \n ", "not valid JSON");
  expect_text_error("empty.json", "", "empty");
  write_bytes(in_dir("nul.json"), "\0\0\0\0", 4);
  expect_error(in_dir("nul.json"), PD_EPARSE, "unexpected byte 0x00 at byte 0");
}

Test(stream, wrong_types, .init = make_dir, .fini = remove_dir) {
  expect_text_error("events_number.json", "{\"traceEvents\": 5}", "no traceEvents array");
  expect_text_error("events_object.json", "{\"traceEvents\": {\"a\": [1]}}", "no traceEvents array");
  expect_text_error("top_array.json", "[{\"traceEvents\": []}]", "no traceEvents array");
  expect_text_error("top_string.json", "\"traceEvents\"", "no traceEvents array");

  /* Wrong types inside an entry read as an absent field, but for ts and dur: a string
   * holding a number is that number (as Perfetto reads it). */
  static const char json[] =
      "{\"traceEvents\":["
      "{\"ph\":5,\"cat\":\"kernel\",\"name\":\"no ph\",\"ts\":1},"
      "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"ts text\",\"ts\":\"1\",\"pid\":0,\"tid\":5},"
      "{\"ph\":\"X\",\"cat\":[\"kernel\"],\"name\":\"cat array\",\"ts\":1},"
      "{\"ph\":\"XX\",\"cat\":\"kernel\",\"name\":\"long ph\",\"ts\":1},"
      "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":{\"n\":1},\"pid\":{\"a\":[1]},\"tid\":true,\"ts\":2,\"dur\":\"9\","
      "\"args\":{\"correlation\":\"7\",\"grid\":\"1\",\"block\":[2,\"x\",{},4],\"registers per thread\":null}},"
      "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"op\",\"pid\":1,\"tid\":1,\"ts\":3,\"dur\":1,\"args\":[1,2]},"
      "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"dims\",\"pid\":1,\"tid\":1,\"ts\":4,\"dur\":1,"
      "\"args\":{\"Input Dims\":{\"a\":1}}},"
      "{\"ph\":\"M\",\"name\":\"meta\",\"ts\":1e400,\"args\":{\"correlation\":1e400}}"
      "], \"deviceProperties\": [5, {\"name\": 7, \"numSms\": \"132\", \"warpSize\": 32}], \"schemaVersion\": \"1\","
      " \"traceName\": 3, \"baseTimeNanoseconds\": [1]}";
  pd_trace_t *t = pd_trace_create();
  pd_trace_info_t info;
  char err[256] = "";
  cr_assert_eq(pd_trace_read_buffer(json, strlen(json), t, &info, err, sizeof err), 0, "%s", err);
  cr_expect_eq(info.json_events, 8u);
  cr_expect_eq(info.skipped, 4u, "no ph, cat array, long ph, metadata");
  cr_assert_eq(pd_trace_count(t), 4u);
  const pd_event_t *e0 = pd_trace_events(t);
  cr_expect_eq(e0[0].kind, PD_EVENT_KERNEL);
  cr_expect_str_eq(e0[0].name, "ts text");
  cr_expect_eq(e0[0].start_ns, 1000, "ts \"1\" is 1 us");
  cr_expect_eq(e0[0].stream, 5u);
  const pd_event_t *e = e0 + 1;
  cr_expect_eq(e[0].kind, PD_EVENT_KERNEL);
  cr_expect_null(e[0].name);
  cr_expect_eq(e[0].end_ns - e[0].start_ns, 9000, "dur \"9\" is 9 us");
  cr_expect_eq(e[0].device, 0u);
  cr_expect_eq(e[0].stream, 0u);
  cr_expect_eq(e[0].correlation_id, 0u);
  cr_expect_eq(e[0].u.kernel.grid[0], 0);
  cr_expect_eq(e[0].u.kernel.block[0], 2);
  cr_expect_eq(e[0].u.kernel.block[1], 0);
  cr_expect_eq(e[0].u.kernel.block[2], 0);
  cr_expect_eq(e[1].kind, PD_EVENT_CPU_OP);
  cr_expect_null(e[2].u.range.shape, "object dims: no shape");
  cr_assert_eq(pd_trace_device_count(t), 1u);
  cr_expect_eq(pd_trace_devices(t)[0].num_sms, 0);
  cr_expect_eq(pd_trace_devices(t)[0].warp_size, 32);
  cr_expect_str_eq(pd_trace_devices(t)[0].name, "");
  cr_expect_eq(info.schema_version, -1);
  cr_expect_eq(info.base_time_ns, 0);
  cr_expect_str_eq(info.trace_name, "");
  pd_trace_destroy(t);
}

Test(stream, numbers_out_of_range, .init = make_dir, .fini = remove_dir) {
  expect_text_error("ts_inf.json", EVENT_HEAD "\"ts\":1e400,\"dur\":1}]}", "traceEvents[0] ts 1e400|out of range");
  expect_text_error("ts_neg_inf.json", EVENT_HEAD "\"ts\":-1e400}]}", "ts -1e400|out of range");
  expect_text_error("ts_int64.json", EVENT_HEAD "\"ts\":9223372036854775807}]}", "ts 9223372036854775807|out of range");
  expect_text_error("ts_big.json", EVENT_HEAD "\"ts\":9.3e15}]}", "ts 9.3e15|out of range");
  expect_text_error("dur_big.json", EVENT_HEAD "\"ts\":1,\"dur\":4.7e15}]}", "dur 4.7e15|out of range");
  expect_text_error("dur_inf.json", EVENT_HEAD "\"ts\":1,\"dur\":1e999}]}", "dur 1e999|out of range");
  expect_text_error("pid.json", EVENT_HEAD "\"ts\":1,\"pid\":1e19}]}", "pid 1e19|out of range");
  expect_text_error("corr.json", EVENT_HEAD "\"ts\":1,\"args\":{\"correlation\":-1e300}}]}",
                    "args.correlation -1e300|out of range");
  expect_text_error("grid.json", EVENT_HEAD "\"ts\":1,\"args\":{\"grid\":[1,1e20,1]}}]}", "args.grid 1e20");
  /* within int64 but beyond the 32 bits the event keeps */
  expect_text_error("grid32.json", EVENT_HEAD "\"ts\":1,\"args\":{\"grid\":[1,3000000000,1]}}]}",
                    "args.grid 3000000000 is out of range (a 32-bit integer)");
  expect_text_error("block32.json", EVENT_HEAD "\"ts\":1,\"args\":{\"block\":[-2147483649]}}]}",
                    "args.block -2147483649 is out of range");
  expect_text_error("regs32.json", EVENT_HEAD "\"ts\":1,\"args\":{\"registers per thread\":4294967296}}]}",
                    "args.registers per thread 4294967296 is out of range");
  expect_text_error("smem32.json", EVENT_HEAD "\"ts\":1,\"args\":{\"shared memory\":1e12}}]}",
                    "args.shared memory 1000000000000 is out of range");
  expect_text_error("sms.json", "{\"deviceProperties\":[{\"id\":0,\"numSms\":1e12}],\"traceEvents\":[]}",
                    "deviceProperties numSms 1000000000000 is out of range");
  expect_text_error("mem_total.json", "{\"deviceProperties\":[{\"totalGlobalMem\":-1}],\"traceEvents\":[]}",
                    "deviceProperties totalGlobalMem -1 is out of range");
  expect_text_error("mem.json",
                    "{\"traceEvents\":[{\"ph\":\"i\",\"cat\":\"cpu_instant_event\",\"name\":\"[memory]\",\"ts\":1,"
                    "\"args\":{\"Bytes\":1e400}}]}",
                    "args.Bytes 1e400");
  expect_text_error("base.json", "{\"baseTimeNanoseconds\": 1e300, \"traceEvents\": []}", "baseTimeNanoseconds");
  /* ts and dur that are not numbers, negative durations, a missing ts */
  expect_text_error("ts_text.json", EVENT_HEAD "\"ts\":\"abc\",\"dur\":1}]}", "traceEvents[0] ts \"abc\" is not a number");
  expect_text_error("ts_hex.json", EVENT_HEAD "\"ts\":\"0x10\"}]}", "ts \"0x10\" is not a number");
  expect_text_error("ts_blank.json", EVENT_HEAD "\"ts\":\" 5\"}]}", "ts \" 5\" is not a number");
  expect_text_error("ts_nan.json", EVENT_HEAD "\"ts\":\"nan\"}]}", "ts \"nan\" is not a number");
  expect_text_error("ts_null.json", EVENT_HEAD "\"ts\":null}]}", "ts null is not a number");
  expect_text_error("ts_bool.json", EVENT_HEAD "\"ts\":true}]}", "ts true is not a number");
  expect_text_error("ts_array.json", EVENT_HEAD "\"ts\":[1]}]}", "ts array is not a number");
  expect_text_error("ts_long.json", EVENT_HEAD "\"ts\":\"12345678901234567890xyz\"}]}",
                    "ts \"1234567890123456...\" is not a number");
  expect_text_error("ts_text_big.json", EVENT_HEAD "\"ts\":\"1e400\"}]}", "ts \"1e400\"|out of range");
  expect_text_error("ts_missing.json", EVENT_HEAD "\"dur\":1}]}", "traceEvents[0] (ph \"X\") has no ts");
  expect_text_error("dur_neg.json", EVENT_HEAD "\"ts\":1,\"dur\":-5}]}", "traceEvents[0] dur -5 is negative");
  expect_text_error("dur_neg_text.json", EVENT_HEAD "\"ts\":1,\"dur\":\"-0.5\"}]}", "dur \"-0.5\" is negative");
  expect_text_error("dur_text.json", EVENT_HEAD "\"ts\":1,\"dur\":\"long\"}]}", "dur \"long\" is not a number");
  expect_text_error("dur_null.json", EVENT_HEAD "\"ts\":1,\"dur\":null}]}", "dur null is not a number");
  /* 300 digits: no number of a trace is that long */
  char json[512];
  int n = snprintf(json, sizeof json, "{\"traceEvents\":[");
  for (int i = 0; i < 300; i++) json[n++] = '7';
  snprintf(json + n, sizeof json - (size_t)n, "]}");
  expect_text_error_rc("digits.json", json, PD_ETOOBIG, "number longer than 255|a reader limit");

  /* just inside the limits: read, not rejected */
  static const char ok[] = EVENT_HEAD "\"ts\":4.5e15,\"dur\":4.5e15,\"args\":{\"correlation\":9223372036854775807}}]}";
  pd_trace_t *t = pd_trace_create();
  char err[256] = "";
  cr_assert_eq(pd_trace_read_buffer(ok, strlen(ok), t, NULL, err, sizeof err), 0, "%s", err);
  cr_assert_eq(pd_trace_count(t), 1u);
  cr_expect_eq(pd_trace_events(t)[0].start_ns, 4500000000000000000LL);
  cr_expect_eq(pd_trace_events(t)[0].end_ns - pd_trace_events(t)[0].start_ns, 4500000000000000000LL);
  cr_expect_eq(pd_trace_events(t)[0].correlation_id, (uint64_t)INT64_MAX, "exact, not through a double");
  pd_trace_destroy(t);
}

Test(stream, nesting_and_token_limits, .init = make_dir, .fini = remove_dir) {
  size_t n = 200000;
  char *deep = malloc(n + 64);
  cr_assert_not_null(deep);
  size_t k = (size_t)snprintf(deep, 64, "{\"traceEvents\":[{\"args\":{\"x\":");
  memset(deep + k, '[', n - k);
  deep[n] = 0;
  expect_text_error_rc("deep.json", deep, PD_ETOOBIG, "nesting deeper than 64 levels|a reader limit");
  /* 63 levels are fine */
  k = (size_t)snprintf(deep, 64, "{\"traceEvents\":[");
  for (int i = 0; i < 61; i++) deep[k++] = '[';
  for (int i = 0; i < 61; i++) deep[k++] = ']';
  snprintf(deep + k, 16, "]}");
  pd_trace_t *t = pd_trace_create();
  char err[256] = "";
  cr_expect_eq(pd_trace_read_buffer(deep, strlen(deep), t, NULL, err, sizeof err), 0, "%s", err);
  pd_trace_destroy(t);
  free(deep);

  /* a 5 MiB name is refused; a 5 MiB string the reader does not keep passes */
  size_t big = (size_t)5 << 20;
  char *s = malloc(big + 256);
  cr_assert_not_null(s);
  k = (size_t)snprintf(s, 256, EVENT_HEAD "\"ts\":1,\"args\":{\"Concrete Inputs\":\"");
  memset(s + k, 'a', big);
  snprintf(s + k + big, 128, "\"}}]}");
  t = pd_trace_create();
  cr_expect_eq(pd_trace_read_buffer(s, strlen(s), t, NULL, err, sizeof err), 0, "%s", err);
  pd_trace_destroy(t);
  k = (size_t)snprintf(s, 256, "{\"traceEvents\":[{\"ph\":\"X\",\"name\":\"");
  memset(s + k, 'a', big);
  snprintf(s + k + big, 128, "\"}]}");
  write_text(in_dir("long.json"), s);
  free(s);
  expect_error(in_dir("long.json"), PD_ETOOBIG, "string longer than 4 MiB|a reader limit");
}

Test(stream, gzip_garbage, .init = make_dir, .fini = remove_dir) {
  /* a gzip header, then noise */
  char noise[4096] = {0x1f, (char)0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
  for (size_t i = 10; i < sizeof noise; i++) noise[i] = (char)(i * 2654435761u >> 13);
  write_bytes(in_dir("noise.json.gz"), noise, sizeof noise);
  expect_error(in_dir("noise.json.gz"), PD_EPARSE, "cannot read|corrupt gzip data");

  /* a valid trace, gzipped, cut in the middle */
  const char *gz = in_dir("cut.json.gz");
  gzFile g = gzopen(gz, "wb");
  cr_assert_not_null(g);
  gzprintf(g, "{\"traceEvents\":[");
  for (int i = 0; i < 20000; i++)
    gzprintf(g, "%s{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k%u\",\"ts\":%d,\"dur\":1}", i ? "," : "",
             (unsigned)(i * 2654435761u), i);
  gzprintf(g, "]}");
  gzclose(g);
  struct stat st;
  cr_assert_eq(stat(gz, &st), 0);
  cr_assert_eq(truncate(gz, st.st_size / 2), 0);
  expect_error(gz, PD_EPARSE, "cannot read|corrupt gzip data");

  /* a whole gzip stream with garbage after it */
  char good[256];
  uLongf glen = sizeof good;
  const char *doc = "{\"traceEvents\":[]}";
  cr_assert_eq(compress2((Bytef *)good, &glen, (const Bytef *)doc, strlen(doc), 6), Z_OK); /* zlib, not gzip */
  write_bytes(in_dir("zlib.json"), good, glen);
  expect_error(in_dir("zlib.json"), PD_EPARSE, "not valid JSON");
}

Test(stream, not_regular_files, .init = make_dir, .fini = remove_dir) {
  /* neither may block or read forever */
  const char *fifo = in_dir("fifo.json");
  cr_assert_eq(mkfifo(fifo, 0600), 0);
  expect_error(fifo, PD_EIO, "not a regular file");
  expect_error("/dev/zero", PD_EIO, "not a regular file");
  expect_error(g_dir, PD_EIO, "not a regular file");
  expect_error(in_dir("missing.json"), PD_EIO, "cannot open|No such file");
}

/* ---- progress ----------------------------------------------------------------------------------- */

typedef struct {
  int calls, done_calls;
  pd_trace_progress_t last;
  bool monotonic;
} progress_log_t;

static void progress_cb(const pd_trace_progress_t *pr, void *user) {
  progress_log_t *log = user;
  if (log->calls > 0 && (pr->text_bytes < log->last.text_bytes || pr->events < log->last.events))
    log->monotonic = false;
  log->calls++;
  log->done_calls += pr->done;
  log->last = *pr;
}

Test(stream, progress_reports_reach_the_end) {
  const char *path = fixture_path("torch/torch_memory_churn.pt.trace.json.gz");
  pd_trace_t *t = pd_trace_create();
  pd_trace_info_t info;
  progress_log_t log = {.monotonic = true};
  char err[256] = "";
  cr_assert_eq(pd_trace_read_file_progress(path, t, &info, progress_cb, &log, err, sizeof err), 0, "%s", err);
  cr_expect_geq(log.calls, 3, "one per MiB of text (2.4 MiB) and the last: %d", log.calls);
  cr_expect_eq(log.done_calls, 1);
  cr_expect(log.last.done);
  cr_expect(log.monotonic);
  struct stat st;
  cr_assert_eq(stat(path, &st), 0);
  cr_expect_eq(log.last.file_bytes, (uint64_t)st.st_size);
  cr_expect_eq(log.last.file_read, log.last.file_bytes);
  cr_expect_eq(log.last.text_bytes, (uint64_t)info.text_bytes);
  cr_expect_eq(log.last.events, pd_trace_count(t));
  pd_trace_destroy(t);
}
