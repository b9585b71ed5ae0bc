/* aggregate.c: key averages, like torch.profiler's key_averages() and its table().
 *
 * The "ops" are host ranges (RANGE, plus CPU_OP records read back from torch traces)
 * and the CUDA runtime/driver API calls themselves (torch shows cudaLaunchKernel rows).
 * Nesting and launch attribution come from the core's one trace index (trace_index.c):
 * each op's parent, and for each GPU activity (kernel, memcpy, memset) the innermost
 * range open on its launching call's thread when the call began; its GPU time counts as
 * self CUDA time of that range. CUDA total = self CUDA + CUDA total of nested ops.
 * Self CPU = duration - durations of direct children (nested ranges and API calls,
 * each clipped to the parent), as torch subtracts its child events; CPU total = duration.
 *
 * Cost: the index (O(n log n)) and linear passes over it.
 */
#define _GNU_SOURCE /* qsort_r */
#include "pd/pd_stats.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- sort keys ---------------------------------------------------------------------- */

static const char *const sort_key_text[] = {
#define PD_SORT_TEXT_GEN(name, text) text,
    PD_SORT_KEY_MAP(PD_SORT_TEXT_GEN)
#undef PD_SORT_TEXT_GEN
};
#define NSORT_KEYS (sizeof sort_key_text / sizeof sort_key_text[0])

int pd_sort_key_parse(const char *text, pd_sort_key_t *key) {
  if (text == NULL || key == NULL) return PD_EINVAL;
  for (size_t i = 0; i < NSORT_KEYS; i++) {
    if (strcmp(text, sort_key_text[i]) == 0) {
      *key = (pd_sort_key_t)i;
      return 0;
    }
  }
  return PD_EINVAL;
}

/* ---- the table ------------------------------------------------------------------------ */

struct pd_op_table {
  pd_group_by_t group_by;
  int stack_frames;  /* group_by_stack_n; 0 = not grouped by stack */
  char *key_buf;     /* a stack key being built */
  size_t key_cap;
  pd_trace_t *pool; /* owns the row names/shapes (a trace used as a string pool) */
  pd_op_stat_t *rows;
  size_t nrows, cap;
  /* open addressing: slot -> row index + 1 (0 = empty), keyed by interned pointers */
  uint32_t *slots;
  size_t nslots;
};

pd_op_table_t *pd_op_table_create(pd_group_by_t group_by) {
  if (group_by != PD_GROUP_BY_RANGE && group_by != PD_GROUP_BY_RANGE_AND_SHAPE &&
      group_by != PD_GROUP_BY_KERNEL)
    return NULL;
  pd_op_table_t *t = calloc(1, sizeof(*t));
  if (t == NULL) return NULL;
  t->group_by = group_by;
  t->pool = pd_trace_create();
  if (t->pool == NULL) {
    free(t);
    return NULL;
  }
  return t;
}

void pd_op_table_destroy(pd_op_table_t *table) {
  if (table == NULL) return;
  pd_trace_destroy(table->pool);
  free(table->key_buf);
  free(table->rows);
  free(table->slots);
  free(table);
}

size_t pd_op_table_count(const pd_op_table_t *table) {
  return table ? table->nrows : 0;
}

const pd_op_stat_t *pd_op_table_rows(const pd_op_table_t *table) {
  return table ? table->rows : NULL;
}

static uint64_t ptr_hash(const void *a, const void *b, const void *c) {
  uint64_t h = (uint64_t)(uintptr_t)a * 0x9E3779B97F4A7C15ULL;
  h ^= (uint64_t)(uintptr_t)b * 0xC2B2AE3D27D4EB4FULL;
  h ^= (uint64_t)(uintptr_t)c * 0x165667B19E3779F9ULL;
  return h ^ (h >> 29);
}

static int table_grow_slots(pd_op_table_t *t) {
  size_t n = t->nslots ? t->nslots * 2 : 64;
  /* Rebuilding after a sort starts from nslots = 0: size for the rows already there, at
   * most half full, or the probe loop below would never find a free slot. */
  while (n < 2 * (t->nrows + 1)) n *= 2;
  uint32_t *slots = calloc(n, sizeof(*slots));
  if (slots == NULL) return PD_ENOMEM;
  for (size_t r = 0; r < t->nrows; r++) {
    size_t j = ptr_hash(t->rows[r].name, t->rows[r].shape, t->rows[r].stack) & (n - 1);
    while (slots[j] != 0) j = (j + 1) & (n - 1);
    slots[j] = (uint32_t)(r + 1);
  }
  free(t->slots);
  t->slots = slots;
  t->nslots = n;
  return 0;
}

/* torch's key_averages() folds the numbered step ranges into one row. */
static const char *row_name(const char *name) {
  if (name == NULL) return "";
  if (strncmp(name, "ProfilerStep#", 13) == 0) return "ProfilerStep*";
  return name;
}

/* Returns the row for (name, shape, stack), creating it; NULL when out of memory. stack
 * is already interned in t->pool (or NULL). */
static pd_op_stat_t *table_row(pd_op_table_t *t, const char *name, const char *shape, const char *istack) {
  const char *iname = pd_trace_intern(t->pool, name);
  if (iname == NULL) return NULL;
  const char *ishape = NULL;
  if (shape != NULL && (ishape = pd_trace_intern(t->pool, shape)) == NULL) return NULL;
  if ((t->nrows + 1) * 2 > t->nslots && table_grow_slots(t) != 0) return NULL;
  size_t mask = t->nslots - 1;
  size_t j = ptr_hash(iname, ishape, istack) & mask;
  while (t->slots[j] != 0) {
    pd_op_stat_t *r = &t->rows[t->slots[j] - 1];
    if (r->name == iname && r->shape == ishape && r->stack == istack) return r;
    j = (j + 1) & mask;
  }
  if (t->nrows == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    pd_op_stat_t *rows = realloc(t->rows, cap * sizeof(*rows));
    if (rows == NULL) return NULL;
    t->rows = rows;
    t->cap = cap;
  }
  pd_op_stat_t *r = &t->rows[t->nrows];
  memset(r, 0, sizeof(*r));
  r->name = iname;
  r->shape = ishape;
  r->stack = istack;
  t->slots[j] = (uint32_t)(++t->nrows);
  return r;
}

/* ---- grouping by call stack (group_by_stack_n) ------------------------------------------ */

int pd_op_table_set_group_by_stack(pd_op_table_t *table, int n) {
  if (table == NULL || n < 1 || table->group_by == PD_GROUP_BY_KERNEL || table->nrows > 0) return PD_EINVAL;
  table->stack_frames = n;
  return 0;
}

/* Sets *out to the row key of e's stack: its first stack_frames frames, interned in the
 * table's pool; NULL when the table is not grouped by stack or e has none. Returns 0 or
 * PD_ENOMEM. */
static int stack_key(pd_op_table_t *t, const pd_event_t *e, const char **out) {
  *out = NULL;
  if (t->stack_frames == 0 || (e->kind != PD_EVENT_RANGE && e->kind != PD_EVENT_CPU_OP) ||
      e->u.range.stack == NULL || e->u.range.stack[0] == '\0')
    return 0;
  const char *s = e->u.range.stack, *end = s;
  for (int f = 0; f < t->stack_frames && *end != '\0'; f++) {
    if (f > 0) end++; /* past the ';' */
    end += strcspn(end, ";");
  }
  size_t len = (size_t)(end - s);
  if (len + 1 > t->key_cap) {
    char *g = realloc(t->key_buf, len + 1);
    if (g == NULL) return PD_ENOMEM;
    t->key_buf = g;
    t->key_cap = len + 1;
  }
  memcpy(t->key_buf, s, len);
  t->key_buf[len] = '\0';
  return (*out = pd_trace_intern(t->pool, t->key_buf)) != NULL ? 0 : PD_ENOMEM;
}

/* ---- attribution ----------------------------------------------------------------------------- */

static int add_kernel_view(pd_op_table_t *t, const pd_trace_t *trace) {
  const pd_event_t *ev = pd_trace_events(trace);
  size_t n = pd_trace_count(trace);
  char buf[128];
  for (size_t i = 0; i < n; i++) {
    if (!pd_event_is_gpu_activity(ev[i].kind)) continue;
    pd_op_stat_t *r = table_row(t, pd_event_display_name(&ev[i], buf, sizeof buf), NULL, NULL);
    if (r == NULL) return PD_ENOMEM;
    int64_t d = pd_event_dur_ns(&ev[i]);
    r->calls++;
    r->kernel_count++;
    r->self_cuda_ns += d;
    r->cuda_total_ns += d;
  }
  return 0;
}

int pd_op_table_add_trace(pd_op_table_t *table, const pd_trace_t *trace) {
  if (table == NULL || trace == NULL) return PD_EINVAL;
  if (table->group_by == PD_GROUP_BY_KERNEL) return add_kernel_view(table, trace);
  pd_trace_index_t ix;
  int rc = pd_trace_index_build(trace, &ix);
  if (rc != 0) return rc;
  rc = pd_op_table_add_index(table, trace, &ix);
  pd_trace_index_free(&ix);
  return rc;
}

int pd_op_table_add_index(pd_op_table_t *table, const pd_trace_t *trace, const pd_trace_index_t *ix) {
  if (table == NULL || trace == NULL || ix == NULL || ix->n != pd_trace_count(trace)) return PD_EINVAL;
  if (table->group_by == PD_GROUP_BY_KERNEL) return add_kernel_view(table, trace);
  const pd_event_t *ev = pd_trace_events(trace);
  size_t n = ix->n;
  if (ix->nhost == 0) return 0;

  int rc = PD_ENOMEM;
  /* Per event: time of direct children (nested ranges and calls, clipped to the parent),
   * GPU time launched directly inside, and the CUDA total including nested ops. */
  int64_t *child_cpu = calloc(n, sizeof(*child_cpu));
  int64_t *self_cuda = calloc(n, sizeof(*self_cuda));
  int64_t *cuda_total = calloc(n, sizeof(*cuda_total));
  int64_t *kcount = calloc(n, sizeof(*kcount));
  if (!child_cpu || !self_cuda || !cuda_total || !kcount) goto out;

  for (size_t k = 0; k < ix->nhost; k++) {
    int32_t e = ix->host_order[k], p = ix->parent[e];
    if (p < 0) continue;
    int64_t end = ev[e].end_ns < ev[p].end_ns ? ev[e].end_ns : ev[p].end_ns;
    int64_t start = ev[e].start_ns;
    if (end > start) child_cpu[p] += end - start;
  }

  /* GPU activities: self CUDA time of the range their launching call ran in (the index's
   * op of the activity). Launched outside every range: not counted. */
  for (size_t i = 0; i < n; i++) {
    if (!pd_event_is_gpu_activity(ev[i].kind) || ix->op[i] < 0) continue;
    self_cuda[ix->op[i]] += pd_event_dur_ns(&ev[i]);
    kcount[ix->op[i]]++;
  }

  /* Children come after their parent in sweep order, so a reverse pass sees every child
   * first. */
  for (size_t k = ix->nhost; k-- > 0;) {
    int32_t e = ix->host_order[k];
    cuda_total[e] += self_cuda[e];
    if (ix->parent[e] >= 0) cuda_total[ix->parent[e]] += cuda_total[e];
  }

  bool by_shape = table->group_by == PD_GROUP_BY_RANGE_AND_SHAPE;
  for (size_t k = 0; k < ix->nhost; k++) {
    const pd_event_t *e = &ev[ix->host_order[k]];
    bool is_range = e->kind == PD_EVENT_RANGE || e->kind == PD_EVENT_CPU_OP;
    const char *shape = (by_shape && is_range) ? e->u.range.shape : NULL;
    const char *skey = NULL;
    pd_op_stat_t *r = stack_key(table, e, &skey) == 0 ? table_row(table, row_name(e->name), shape, skey) : NULL;
    if (r == NULL) goto out;
    int64_t d = pd_event_dur_ns(e);
    size_t ei = (size_t)ix->host_order[k];
    r->calls++;
    r->cpu_total_ns += d;
    r->self_cpu_ns += d - child_cpu[ei];
    r->self_cuda_ns += self_cuda[ei];
    r->cuda_total_ns += cuda_total[ei];
    r->kernel_count += kcount[ei];
  }
  rc = 0;
out:
  free(child_cpu);
  free(self_cuda);
  free(cuda_total);
  free(kcount);
  return rc;
}

/* ---- sorting -------------------------------------------------------------------------------- */

static int64_t sort_value(const pd_op_stat_t *r, pd_sort_key_t key) {
  switch (key) {
  case PD_SORT_SELF_CUDA_TIME_TOTAL: return r->self_cuda_ns;
  case PD_SORT_CUDA_TIME_TOTAL: return r->cuda_total_ns;
  case PD_SORT_SELF_CPU_TIME_TOTAL: return r->self_cpu_ns;
  case PD_SORT_CPU_TIME_TOTAL: return r->cpu_total_ns;
  case PD_SORT_COUNT: return r->calls;
  }
  return 0;
}

static int null_cmp(const char *a, const char *b) {
  if (a == b) return 0;
  if (a == NULL) return -1;
  if (b == NULL) return 1;
  return strcmp(a, b);
}

static int row_cmp(const void *pa, const void *pb, void *ctx) {
  const pd_op_stat_t *a = pa, *b = pb;
  pd_sort_key_t key = *(const pd_sort_key_t *)ctx;
  int64_t va = sort_value(a, key), vb = sort_value(b, key);
  if (va != vb) return va > vb ? -1 : 1; /* descending, like torch */
  int c = strcmp(a->name, b->name);      /* then by name, so the order is reproducible */
  if (c == 0) c = null_cmp(a->shape, b->shape);
  return c != 0 ? c : null_cmp(a->stack, b->stack);
}

void pd_op_table_sort(pd_op_table_t *table, pd_sort_key_t key) {
  if (table == NULL || table->nrows == 0 || (size_t)key >= NSORT_KEYS) return;
  qsort_r(table->rows, table->nrows, sizeof(*table->rows), row_cmp, &key);
  /* row indices moved: rebuild the lookup so later add_trace calls still find rows */
  free(table->slots);
  table->slots = NULL;
  table->nslots = 0;
  table_grow_slots(table); /* on failure the next table_row() retries the allocation */
}

/* ---- printing ------------------------------------------------------------------------------- */

/* torch's _format_time: us below 1 ms, ms below 1 s, else s; three decimals. */
static void format_time(char *buf, size_t len, int64_t ns) {
  double us = (double)ns / 1000.0;
  if (us >= 1e6) snprintf(buf, len, "%.3fs", us / 1e6);
  else if (us >= 1e3) snprintf(buf, len, "%.3fms", us / 1e3);
  else snprintf(buf, len, "%.3fus", us);
}

static void format_share(char *buf, size_t len, int64_t part, int64_t total) {
  if (total == 0) snprintf(buf, len, "NaN");
  else snprintf(buf, len, "%.2f%%", (double)part * 100.0 / (double)total);
}

#define COLUMN_WIDTH 13 /* torch uses 12, which "CUDA time avg" overflows */
#define MAX_NAME_WIDTH 55
#define MAX_SHAPE_WIDTH 80
#define MAX_SOURCE_WIDTH 100
#define SPACING 2

/* Returns the length of the frame that starts at s (up to the next ';'). */
static size_t frame_len(const char *s) { return strcspn(s, ";"); }

static void print_sep(FILE *out, int name_w, int ncols, int shape_w, int src_w) {
  for (int i = 0; i < name_w; i++) fputc('-', out);
  for (int c = 0; c < ncols; c++) {
    fprintf(out, "%*s", SPACING, "");
    for (int i = 0; i < COLUMN_WIDTH; i++) fputc('-', out);
  }
  if (shape_w > 0) {
    fprintf(out, "%*s", SPACING, "");
    for (int i = 0; i < shape_w; i++) fputc('-', out);
  }
  if (src_w > 0) {
    fprintf(out, "%*s", SPACING, "");
    for (int i = 0; i < src_w; i++) fputc('-', out);
  }
  fprintf(out, "%*s\n", SPACING, "");
}

/* Source Location cells: the row's first frame on the row's own line; each further frame
 * on a line of its own under it. A frame too wide loses the start of its path ("...")
 * and keeps file, line and function. */
static void print_frame(FILE *out, const char *f, int src_w) {
  int n = (int)frame_len(f);
  if (n > src_w) fprintf(out, "%*s...%.*s", SPACING, "", src_w - 3, f + (n - (src_w - 3)));
  else fprintf(out, "%*s%-*.*s", SPACING, "", src_w, n, f);
}

static void print_more_frames(FILE *out, const char *stack, int lead_w, int src_w) {
  for (const char *f = stack + frame_len(stack); *f == ';'; f += frame_len(f)) {
    f++;
    fprintf(out, "%*s", lead_w, "");
    print_frame(out, f, src_w);
    fprintf(out, "%*s\n", SPACING, "");
  }
}

void pd_op_table_print(FILE *out, const pd_op_table_t *table, int row_limit) {
  if (out == NULL || table == NULL) return;
  static const char *const headers[] = {"Self CPU %", "Self CPU",    "CPU total %",
                                        "CPU total",  "CPU time avg", "Self CUDA",
                                        "Self CUDA %", "CUDA total",  "CUDA time avg",
                                        "# of Calls"};
  const int ncols = (int)(sizeof headers / sizeof headers[0]);
  bool shapes = table->group_by == PD_GROUP_BY_RANGE_AND_SHAPE;
  bool stacks = table->stack_frames > 0;
  int src_w = stacks ? (int)strlen("Source Location") + 4 : 0;

  int64_t sum_self_cpu = 0, sum_self_cuda = 0;
  int name_w = 4 + 4; /* "Name" + padding */
  int shape_w = shapes ? (int)strlen("Input Shapes") + 4 : 0;
  for (size_t i = 0; i < table->nrows; i++) {
    const pd_op_stat_t *r = &table->rows[i];
    sum_self_cpu += r->self_cpu_ns;
    sum_self_cuda += r->self_cuda_ns;
    int w = (int)strlen(r->name) + 4;
    if (w > name_w) name_w = w;
    if (shapes && r->shape != NULL && (int)strlen(r->shape) + 4 > shape_w) shape_w = (int)strlen(r->shape) + 4;
    for (const char *f = r->stack; stacks && f != NULL && *f; f += *f == ';') {
      int fl = (int)frame_len(f);
      if (fl + 4 > src_w) src_w = fl + 4;
      f += fl;
    }
  }
  if (src_w > MAX_SOURCE_WIDTH) src_w = MAX_SOURCE_WIDTH;
  if (name_w > MAX_NAME_WIDTH) name_w = MAX_NAME_WIDTH;
  if (shape_w > MAX_SHAPE_WIDTH) shape_w = MAX_SHAPE_WIDTH;

  print_sep(out, name_w, ncols, shape_w, src_w);
  fprintf(out, "%*s", name_w, "Name");
  for (int c = 0; c < ncols; c++) fprintf(out, "%*s%*s", SPACING, "", COLUMN_WIDTH, headers[c]);
  if (shapes) fprintf(out, "%*s%*s", SPACING, "", shape_w, "Input Shapes");
  if (stacks) fprintf(out, "%*s%-*s", SPACING, "", src_w, "Source Location");
  fprintf(out, "%*s\n", SPACING, "");
  print_sep(out, name_w, ncols, shape_w, src_w);

  size_t limit = row_limit > 0 && (size_t)row_limit < table->nrows ? (size_t)row_limit : table->nrows;
  for (size_t i = 0; i < limit; i++) {
    const pd_op_stat_t *r = &table->rows[i];
    char name[MAX_NAME_WIDTH + 1];
    size_t nlen = strlen(r->name);
    /* torch cuts long names to width-3 characters and adds "..." */
    if (nlen >= (size_t)MAX_NAME_WIDTH - 3) snprintf(name, sizeof name, "%.*s...", MAX_NAME_WIDTH - 3, r->name);
    else snprintf(name, sizeof name, "%s", r->name);
    int64_t calls = r->calls > 0 ? r->calls : 1;
    char cells[10][32];
    format_share(cells[0], sizeof cells[0], r->self_cpu_ns, sum_self_cpu);
    format_time(cells[1], sizeof cells[1], r->self_cpu_ns);
    format_share(cells[2], sizeof cells[2], r->cpu_total_ns, sum_self_cpu);
    format_time(cells[3], sizeof cells[3], r->cpu_total_ns);
    format_time(cells[4], sizeof cells[4], r->cpu_total_ns / calls);
    format_time(cells[5], sizeof cells[5], r->self_cuda_ns);
    format_share(cells[6], sizeof cells[6], r->self_cuda_ns, sum_self_cuda);
    format_time(cells[7], sizeof cells[7], r->cuda_total_ns);
    format_time(cells[8], sizeof cells[8], r->cuda_total_ns / calls);
    snprintf(cells[9], sizeof cells[9], "%" PRId64, r->calls);
    fprintf(out, "%*s", name_w, name);
    for (int c = 0; c < ncols; c++) fprintf(out, "%*s%*s", SPACING, "", COLUMN_WIDTH, cells[c]);
    if (shapes) fprintf(out, "%*s%*.*s", SPACING, "", shape_w, shape_w, r->shape ? r->shape : "[]");
    if (stacks) print_frame(out, r->stack ? r->stack : "", src_w);
    fprintf(out, "%*s\n", SPACING, "");
    if (stacks && r->stack != NULL)
      print_more_frames(out, r->stack, name_w + ncols * (SPACING + COLUMN_WIDTH) + (shapes ? SPACING + shape_w : 0),
                        src_w);
  }
  print_sep(out, name_w, ncols, shape_w, src_w);
  char total[32];
  format_time(total, sizeof total, sum_self_cpu);
  fprintf(out, "Self CPU time total: %s\n", total);
  format_time(total, sizeof total, sum_self_cuda);
  fprintf(out, "Self CUDA time total: %s\n", total);
}
