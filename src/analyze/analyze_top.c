/* analyze_top.c: the device top table (MegEngine's profile_analyze) and the diff of two.
 *
 * Rows are GPU activities grouped by name (kernel name, Kineto's copy/set name) or by
 * type (kernel, memcpy, memset, range). Each row sums device self time (the activity's
 * own duration: GPU work does not nest), calls, min/max, bytes moved; it also names the
 * op that launched it (innermost host range or torch op open on the launching thread,
 * found through the correlation id) and that op's input shapes, flagging rows whose calls
 * came from several ops or shapes. gpu_user_annotation spans are RANGE rows: they contain
 * kernels, so they are listed only when asked for (type "range"), are never added to
 * the device total and show no share.
 *
 * Percentages are of the device total of the whole trace (kernel + memcpy + memset
 * before any filter), so a filtered table shows how much of the GPU time it explains.
 * FLOPs are not shown: neither trace format carries them for our kernels.
 */
#define _GNU_SOURCE /* qsort_r */
#include "analyze_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const dev_type_names[PD_DEV_TYPE_COUNT] = {
#define PD_DEV_TYPE_TEXT(name, text) text,
    PD_DEV_TYPE_MAP(PD_DEV_TYPE_TEXT)
#undef PD_DEV_TYPE_TEXT
};

const char *pd_dev_type_name(pd_dev_type_t t) {
  if ((int)t < 0 || t >= PD_DEV_TYPE_COUNT) return "unknown";
  return dev_type_names[t];
}

int pd_dev_type_parse(const char *text, pd_dev_type_t *t) {
  if (text == NULL || t == NULL) return PD_EINVAL;
  for (int i = 0; i < PD_DEV_TYPE_COUNT; i++) {
    if (strcmp(text, dev_type_names[i]) == 0) {
      *t = (pd_dev_type_t)i;
      return 0;
    }
  }
  return PD_EINVAL;
}

/* ---- the table ------------------------------------------------------------------------------- */

struct pd_top {
  pd_trace_t *pool; /* owns row names, ops and shapes */
  pd_top_row_t *rows;
  size_t nrows, cap;
  uint32_t *slots;  /* open addressing on (type, interned name): row index + 1, 0 empty */
  size_t nslots;
  int64_t device_total_ns;
  pd_top_opts_t opts;
};

static uint64_t key_hash(pd_dev_type_t type, const char *name) {
  uint64_t h = (uint64_t)(uintptr_t)name * 0x9E3779B97F4A7C15ULL + (uint64_t)type;
  return h ^ (h >> 31);
}

static int grow_slots(pd_top_t *t) {
  size_t n = t->nslots ? t->nslots * 2 : 64;
  uint32_t *slots = calloc(n, sizeof(*slots));
  if (slots == NULL) return PD_ENOMEM;
  for (size_t r = 0; r < t->nrows; r++) {
    size_t j = key_hash(t->rows[r].type, t->rows[r].name) & (n - 1);
    while (slots[j] != 0) j = (j + 1) & (n - 1);
    slots[j] = (uint32_t)(r + 1);
  }
  free(t->slots);
  t->slots = slots;
  t->nslots = n;
  return 0;
}

static pd_top_row_t *find_row(pd_top_t *t, pd_dev_type_t type, const char *name) {
  const char *iname = pd_trace_intern(t->pool, name);
  if (iname == NULL) return NULL;
  if ((t->nrows + 1) * 2 > t->nslots && grow_slots(t) != 0) return NULL;
  size_t mask = t->nslots - 1;
  size_t j = key_hash(type, iname) & mask;
  while (t->slots[j] != 0) {
    pd_top_row_t *r = &t->rows[t->slots[j] - 1];
    if (r->name == iname && r->type == type) return r;
    j = (j + 1) & mask;
  }
  if (t->nrows == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    pd_top_row_t *rows = realloc(t->rows, cap * sizeof(*rows));
    if (rows == NULL) return NULL;
    t->rows = rows;
    t->cap = cap;
  }
  pd_top_row_t *r = &t->rows[t->nrows];
  memset(r, 0, sizeof(*r));
  r->name = iname;
  r->type = type;
  r->min_ns = INT64_MAX;
  t->slots[j] = (uint32_t)(++t->nrows);
  return r;
}

static int dev_type_of(pd_event_kind_t k) {
  switch (k) {
  case PD_EVENT_KERNEL: return PD_DEV_KERNEL;
  case PD_EVENT_MEMCPY: return PD_DEV_MEMCPY;
  case PD_EVENT_MEMSET: return PD_DEV_MEMSET;
  case PD_EVENT_GPU_RANGE: return PD_DEV_RANGE;
  default: return -1;
  }
}

static int64_t order_value(const pd_top_row_t *r, pd_order_t o) {
  switch (o) {
  case PD_ORDER_MEMORY: return (int64_t)r->bytes;
  case PD_ORDER_CALLS: return r->calls;
  case PD_ORDER_TIME: break;
  }
  return r->total_ns;
}

static int row_cmp(const void *pa, const void *pb, void *ctx) {
  const pd_top_row_t *a = pa, *b = pb;
  pd_order_t o = *(const pd_order_t *)ctx;
  int64_t va = order_value(a, o), vb = order_value(b, o);
  if (va != vb) return va > vb ? -1 : 1;
  if (a->total_ns != b->total_ns) return a->total_ns > b->total_ns ? -1 : 1;
  if (a->type != b->type) return a->type < b->type ? -1 : 1;
  return strcmp(a->name, b->name);
}

void pd_top_destroy(pd_top_t *top) {
  if (top == NULL) return;
  pd_trace_destroy(top->pool);
  free(top->rows);
  free(top->slots);
  free(top);
}

static bool contains(const char *hay, const char *needle) {
  return hay != NULL && strstr(hay, needle) != NULL;
}

int pd_top_build(const pd_trace_t *trace, const pd_top_opts_t *opts, pd_top_t **out) {
  if (out != NULL) *out = NULL;
  if (trace == NULL || out == NULL) return PD_EINVAL;
  pd_trace_index_t ix;
  int rc = pd_trace_index_build(trace, &ix);
  if (rc != 0) return rc;
  rc = an_top_build(trace, &ix, opts, out);
  pd_trace_index_free(&ix);
  return rc;
}

int an_top_build(const pd_trace_t *trace, const pd_trace_index_t *ix, const pd_top_opts_t *opts, pd_top_t **out) {
  if (out != NULL) *out = NULL;
  if (trace == NULL || out == NULL) return PD_EINVAL;
  pd_top_opts_t o = {0};
  if (opts != NULL) o = *opts;
  pd_dev_type_t only_type = PD_DEV_KERNEL;
  bool by_type = o.type != NULL && pd_dev_type_parse(o.type, &only_type) == 0;

  pd_top_t *t = calloc(1, sizeof(*t));
  if (t == NULL) return PD_ENOMEM;
  t->pool = pd_trace_create();
  if (t->pool == NULL) {
    pd_top_destroy(t);
    return PD_ENOMEM;
  }
  t->opts = o;
  t->opts.type = NULL; /* the caller's string need not outlive the table */

  const pd_event_t *ev = pd_trace_events(trace);
  size_t n = pd_trace_count(trace);
  char buf[160];
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    int type = dev_type_of(ev[i].kind);
    if (type < 0) continue;
    int64_t d = an_dur(&ev[i]);
    if (type != PD_DEV_RANGE) t->device_total_ns += d;
    if (d < o.min_time_ns) continue;
    const char *name = an_event_name(&ev[i], buf, sizeof buf);
    const pd_event_t *op = an_is_gpu_activity(ev[i].kind) && ix->op[i] >= 0 ? &ev[ix->op[i]] : NULL;
    /* A GPU range spans kernels already listed: shown only when asked for by type. */
    if (type == PD_DEV_RANGE && !(by_type && only_type == PD_DEV_RANGE)) continue;
    if (o.type != NULL) {
      if (by_type && type != (int)only_type) continue;
      if (!by_type && !contains(name, o.type) && !(op != NULL && contains(op->name, o.type))) continue;
    }
    pd_top_row_t *r = find_row(t, (pd_dev_type_t)type, o.aggregate == PD_AGG_TYPE ? pd_dev_type_name(type) : name);
    if (r == NULL) {
      rc = PD_ENOMEM;
      break;
    }
    r->calls++;
    r->total_ns += d;
    if (d < r->min_ns) r->min_ns = d;
    if (d > r->max_ns) r->max_ns = d;
    if (ev[i].kind == PD_EVENT_MEMCPY) r->bytes += ev[i].u.memcpy.bytes;
    else if (ev[i].kind == PD_EVENT_MEMSET) r->bytes += ev[i].u.memset.bytes;
    if (o.aggregate == PD_AGG_TYPE) continue; /* a type row spans every op */
    const char *opname = op != NULL && op->name != NULL ? pd_trace_intern(t->pool, op->name) : NULL;
    const char *shape = op != NULL && op->u.range.shape != NULL ? pd_trace_intern(t->pool, op->u.range.shape) : NULL;
    if ((op != NULL && op->name != NULL && opname == NULL) || (op != NULL && op->u.range.shape && !shape)) {
      rc = PD_ENOMEM;
      break;
    }
    if (r->calls == 1) {
      r->op = opname;
      r->shape = shape;
    } else {
      if (r->op != opname) r->op_varies = true;
      if (r->shape != shape) r->shape_varies = true;
      if (r->op == NULL) r->op = opname;
      if (r->shape == NULL) r->shape = shape;
    }
  }
  if (rc != 0) {
    pd_top_destroy(t);
    return rc;
  }
  if (t->nrows > 0) qsort_r(t->rows, t->nrows, sizeof(*t->rows), row_cmp, &o.order);
  free(t->slots); /* rows moved; the table is complete, no more lookups */
  t->slots = NULL;
  t->nslots = 0;
  double cum = 0;
  for (size_t r = 0; r < t->nrows; r++) {
    pd_top_row_t *row = &t->rows[r];
    if (row->min_ns == INT64_MAX) row->min_ns = 0;
    if (row->type == PD_DEV_RANGE || t->device_total_ns <= 0) {
      row->pct = row->cum_pct = NAN;
      continue;
    }
    row->pct = (double)row->total_ns * 100.0 / (double)t->device_total_ns;
    cum += row->pct;
    row->cum_pct = cum;
  }
  *out = t;
  return 0;
}

size_t pd_top_count(const pd_top_t *top) {
  return top ? top->nrows : 0;
}

const pd_top_row_t *pd_top_rows(const pd_top_t *top) {
  return top ? top->rows : NULL;
}

int64_t pd_top_device_total_ns(const pd_top_t *top) {
  return top ? top->device_total_ns : 0;
}

const pd_top_opts_t *an_top_opts(const pd_top_t *top) {
  return &top->opts;
}

static void fmt_pct(char *buf, size_t len, double v) {
  if (isnan(v)) snprintf(buf, len, "-");
  else snprintf(buf, len, "%.1f%%", v);
}

#define NAME_WIDTH 60
#define SHAPE_WIDTH 60

void pd_top_print(FILE *out, const pd_top_t *top, int limit) {
  if (out == NULL || top == NULL) return;
  static const char *const order_names[] = {"time", "memory", "calls"};
  size_t shown = limit > 0 && (size_t)limit < top->nrows ? (size_t)limit : top->nrows;
  char total[32];
  an_fmt_time(total, sizeof total, top->device_total_ns);
  fprintf(out, "Device self time: top %zu of %zu rows (by %s, ordered by %s); device total %s\n", shown,
          top->nrows, top->opts.aggregate == PD_AGG_TYPE ? "type" : "name", order_names[top->opts.order], total);
  if (top->nrows == 0) {
    fprintf(out, "  (no GPU activity matches)\n");
    return;
  }
  fprintf(out, "%4s  %12s  %6s  %6s  %7s  %11s  %11s  %11s  %9s  %-6s  %-*s  %s\n", "#", "self time", "%", "cum %",
          "calls", "avg", "max", "bytes", "GB/s", "type", NAME_WIDTH, "name", "op [shapes]");
  for (size_t i = 0; i < shown; i++) {
    const pd_top_row_t *r = &top->rows[i];
    char t[32], avg[32], mx[32], pct[16], cum[16], bytes[32], bw[32], name[NAME_WIDTH + 8];
    an_fmt_time(t, sizeof t, r->total_ns);
    an_fmt_time_d(avg, sizeof avg, r->calls > 0 ? (double)r->total_ns / (double)r->calls : 0);
    an_fmt_time(mx, sizeof mx, r->max_ns);
    fmt_pct(pct, sizeof pct, r->pct);
    fmt_pct(cum, sizeof cum, r->cum_pct);
    if (r->bytes > 0) {
      an_fmt_bytes(bytes, sizeof bytes, (double)r->bytes);
      /* bytes per nanosecond is GB/s */
      if (r->total_ns > 0) snprintf(bw, sizeof bw, "%.2f", (double)r->bytes / (double)r->total_ns);
      else snprintf(bw, sizeof bw, "-");
    } else {
      snprintf(bytes, sizeof bytes, "-");
      snprintf(bw, sizeof bw, "-");
    }
    an_fit(name, sizeof name, r->name, NAME_WIDTH);
    fprintf(out, "%4zu  %12s  %6s  %6s  %7lld  %11s  %11s  %11s  %9s  %-6s  %-*s  ", i + 1, t, pct, cum,
            (long long)r->calls, avg, mx, bytes, bw, pd_dev_type_name(r->type), NAME_WIDTH, name);
    if (r->op != NULL) fprintf(out, "%s%s", r->op, r->op_varies ? " (+others)" : "");
    else fprintf(out, "-");
    if (r->shape != NULL) {
      char shape[SHAPE_WIDTH + 8];
      an_fit(shape, sizeof shape, r->shape, SHAPE_WIDTH);
      fprintf(out, " %s%s", shape, r->shape_varies ? " (+others)" : "");
    }
    fputc('\n', out);
  }
}

/* ---- diff ------------------------------------------------------------------------------------------ */

struct pd_diff {
  pd_trace_t *pool;
  pd_diff_row_t *rows;
  size_t nrows;
  double a_total_ns, b_total_ns; /* device total per step */
};

static int input_cmp(const void *pa, const void *pb) {
  const pd_diff_input_t *a = pa, *b = pb;
  if (a->type != b->type) return a->type < b->type ? -1 : 1;
  return strcmp(a->name, b->name);
}

static int delta_cmp(const void *pa, const void *pb) {
  const pd_diff_row_t *a = pa, *b = pb;
  double x = fabs(a->delta_ns), y = fabs(b->delta_ns);
  if (x != y) return x > y ? -1 : 1;
  if (a->type != b->type) return a->type < b->type ? -1 : 1;
  return strcmp(a->name, b->name);
}

void pd_diff_destroy(pd_diff_t *diff) {
  if (diff == NULL) return;
  pd_trace_destroy(diff->pool);
  free(diff->rows);
  free(diff);
}

/* A sorted copy of one side's inputs, or NULL when out of memory. */
static pd_diff_input_t *sorted_inputs(const pd_diff_input_t *in, size_t n) {
  pd_diff_input_t *v = malloc((n ? n : 1) * sizeof(*v));
  if (v == NULL) return NULL;
  if (n > 0) memcpy(v, in, n * sizeof(*v));
  qsort(v, n, sizeof(*v), input_cmp);
  return v;
}

/* Sums the run of inputs equal to v[*i] (same type and name) and moves *i past it. */
static void take_group(const pd_diff_input_t *v, size_t n, size_t *i, double *calls, double *ns) {
  size_t k = *i;
  *calls = *ns = 0;
  for (; k < n && input_cmp(&v[*i], &v[k]) == 0; k++) {
    *calls += v[k].calls;
    *ns += v[k].total_ns;
  }
  *i = k;
}

int pd_diff_build_rows(const pd_diff_input_t *a, size_t na, double a_steps, const pd_diff_input_t *b,
                       size_t nb, double b_steps, pd_diff_t **out) {
  if (out != NULL) *out = NULL;
  if ((a == NULL && na > 0) || (b == NULL && nb > 0) || out == NULL) return PD_EINVAL;
  for (size_t i = 0; i < na + nb; i++) {
    const pd_diff_input_t *x = i < na ? &a[i] : &b[i - na];
    if (x->name == NULL || !isfinite(x->calls) || !isfinite(x->total_ns)) return PD_EINVAL;
  }
  double sa = a_steps > 0 ? a_steps : 1, sb = b_steps > 0 ? b_steps : 1;
  pd_diff_t *d = calloc(1, sizeof(*d));
  pd_diff_input_t *va = sorted_inputs(a, na), *vb = sorted_inputs(b, nb);
  if (d != NULL) {
    d->pool = pd_trace_create();
    d->rows = malloc((na + nb + 1) * sizeof(*d->rows));
  }
  if (d == NULL || d->pool == NULL || d->rows == NULL || va == NULL || vb == NULL) {
    free(va);
    free(vb);
    pd_diff_destroy(d);
    return PD_ENOMEM;
  }
  size_t i = 0, j = 0;
  int rc = 0;
  while ((i < na || j < nb) && rc == 0) {
    int c = i >= na ? 1 : j >= nb ? -1 : input_cmp(&va[i], &vb[j]);
    const pd_diff_input_t *any = c <= 0 ? &va[i] : &vb[j];
    pd_diff_row_t *r = &d->rows[d->nrows];
    memset(r, 0, sizeof(*r));
    r->name = pd_trace_intern(d->pool, any->name);
    if (r->name == NULL) {
      rc = PD_ENOMEM;
      break;
    }
    r->type = any->type;
    double calls = 0, ns = 0;
    if (c <= 0) {
      take_group(va, na, &i, &calls, &ns);
      r->a_calls = calls / sa;
      r->a_ns = ns / sa;
    }
    if (c >= 0) {
      take_group(vb, nb, &j, &calls, &ns);
      r->b_calls = calls / sb;
      r->b_ns = ns / sb;
    }
    if (r->type != PD_DEV_RANGE) {
      d->a_total_ns += r->a_ns;
      d->b_total_ns += r->b_ns;
    }
    r->delta_ns = r->b_ns - r->a_ns;
    r->delta_pct = r->a_ns > 0 ? r->delta_ns / r->a_ns * 100.0 : NAN;
    d->nrows++;
  }
  free(va);
  free(vb);
  if (rc != 0) {
    pd_diff_destroy(d);
    return rc;
  }
  qsort(d->rows, d->nrows, sizeof(*d->rows), delta_cmp);
  *out = d;
  return 0;
}

/* One table's rows as diff inputs (borrowing its names). */
static pd_diff_input_t *top_inputs(const pd_top_t *t) {
  pd_diff_input_t *v = malloc((t->nrows ? t->nrows : 1) * sizeof(*v));
  if (v == NULL) return NULL;
  for (size_t i = 0; i < t->nrows; i++)
    v[i] = (pd_diff_input_t){.name = t->rows[i].name, .type = t->rows[i].type,
                             .calls = (double)t->rows[i].calls, .total_ns = (double)t->rows[i].total_ns};
  return v;
}

int pd_diff_build(const pd_top_t *a, int a_steps, const pd_top_t *b, int b_steps, pd_diff_t **out) {
  if (out != NULL) *out = NULL;
  if (a == NULL || b == NULL || out == NULL) return PD_EINVAL;
  pd_diff_input_t *ia = top_inputs(a), *ib = top_inputs(b);
  int rc = ia != NULL && ib != NULL
               ? pd_diff_build_rows(ia, a->nrows, a_steps, ib, b->nrows, b_steps, out)
               : PD_ENOMEM;
  free(ia);
  free(ib);
  if (rc != 0) return rc;
  /* The device totals count every activity, also those the table's filters left out. */
  (*out)->a_total_ns = (double)a->device_total_ns / (a_steps > 0 ? a_steps : 1);
  (*out)->b_total_ns = (double)b->device_total_ns / (b_steps > 0 ? b_steps : 1);
  return 0;
}

void an_diff_totals(const pd_diff_t *diff, double *a_ns, double *b_ns) {
  *a_ns = diff->a_total_ns;
  *b_ns = diff->b_total_ns;
}

size_t pd_diff_count(const pd_diff_t *diff) {
  return diff ? diff->nrows : 0;
}

const pd_diff_row_t *pd_diff_rows(const pd_diff_t *diff) {
  return diff ? diff->rows : NULL;
}

void pd_diff_print(FILE *out, const pd_diff_t *diff, int limit) {
  if (out == NULL || diff == NULL) return;
  size_t shown = limit > 0 && (size_t)limit < diff->nrows ? (size_t)limit : diff->nrows;
  char ta[32], tb[32], td[32];
  an_fmt_time_d(ta, sizeof ta, diff->a_total_ns);
  an_fmt_time_d(tb, sizeof tb, diff->b_total_ns);
  an_fmt_time_d(td, sizeof td, diff->b_total_ns - diff->a_total_ns);
  fprintf(out, "Diff of device self time per step (B - A), top %zu of %zu rows by |change|\n", shown, diff->nrows);
  fprintf(out, "  device total per step: A %s, B %s, change %s", ta, tb, td);
  if (diff->a_total_ns > 0)
    fprintf(out, " (%+.1f%%)", (diff->b_total_ns - diff->a_total_ns) / diff->a_total_ns * 100.0);
  fputc('\n', out);
  if (diff->nrows == 0) return;
  fprintf(out, "%4s  %12s  %12s  %12s  %8s  %9s  %9s  %-6s  %s\n", "#", "A per step", "B per step", "change",
          "change %", "A calls", "B calls", "type", "name");
  for (size_t i = 0; i < shown; i++) {
    const pd_diff_row_t *r = &diff->rows[i];
    char a[32], b[32], c[32], p[16], name[NAME_WIDTH + 8];
    an_fmt_time_d(a, sizeof a, r->a_ns);
    an_fmt_time_d(b, sizeof b, r->b_ns);
    an_fmt_time_d(c, sizeof c, r->delta_ns);
    if (isnan(r->delta_pct)) snprintf(p, sizeof p, "new");
    else snprintf(p, sizeof p, "%+.1f%%", r->delta_pct);
    an_fit(name, sizeof name, r->name, NAME_WIDTH);
    fprintf(out, "%4zu  %12s  %12s  %12s  %8s  %9.1f  %9.1f  %-6s  %s\n", i + 1, a, b, c, p, r->a_calls, r->b_calls,
            pd_dev_type_name(r->type), name);
  }
}
