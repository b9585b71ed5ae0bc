/* inject_nvtx.c: the NVTX tool of libpd_inject.so (NVTX_INJECTION64_PATH).
 *
 * NVTX (header-only NVTX3, one copy in each library of the program that uses it) loads the
 * tool at the program's first NVTX call and calls InitializeInjectionNvtx2 with that copy's
 * export table; we fill the slots we handle in its function tables (each copy calls us
 * once). Handled: push/pop and start/end ranges (A, W and Ex forms), the same in domains,
 * domains and registered strings (their handles are the names, interned). Every other slot
 * stays empty, which NVTX turns into a no-op (marks, thread and category names: CUPTI's own
 * handler of nvtxNameOsThreadA has crashed under torch, NVIDIA/NVTX#125).
 *
 * Ranges of every domain share one push/pop stack per thread (NVTX keeps one per domain);
 * a range's name is its message. The handlers hand ranges to the session
 * (inject_session.c), which records them as host ranges while tracing and finds step ranges;
 * before CUDA is initialized (no session yet) they do nothing.
 */
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "inject.h"

static _Atomic(pd_inject_session_t *) g_session;
static _Thread_local int t_depth; /* push level on this thread, what push/pop return */

void pd_inject_nvtx_set_session(pd_inject_session_t *s) { atomic_store(&g_session, s); }

static pd_inject_session_t *session(void) { return atomic_load_explicit(&g_session, memory_order_acquire); }

/* A wide message as UTF-8 (or the locale's multibyte form) in buf; "" when it cannot be. */
static const char *wide_text(const wchar_t *w, char *buf, size_t len) {
  if (w == NULL) return NULL;
  mbstate_t st;
  memset(&st, 0, sizeof st);
  const wchar_t *src = w;
  size_t n = wcsrtombs(buf, &src, len - 1, &st);
  buf[n == (size_t)-1 ? 0 : n] = '\0';
  return buf;
}

/* The message of an event's attributes: ASCII, wide, or a registered string handle. */
static const char *attr_text(const nvtxEventAttributes_t *a, char *buf, size_t len) {
  if (a == NULL) return NULL;
  switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
      return a->message.ascii;
    case NVTX_MESSAGE_TYPE_UNICODE:
      return wide_text(a->message.unicode, buf, len);
    case NVTX_MESSAGE_TYPE_REGISTERED:
      return (const char *)a->message.registered; /* our copy (register_string_a) */
    default:
      return NULL;
  }
}

/* ---- push/pop ---------------------------------------------------------------------------- */

static int push_text(const char *name) {
  pd_inject_on_range_push(session(), name);
  return t_depth++;
}

static int NVTX_API push_a(const char *m) { return push_text(m); }
static int NVTX_API push_w(const wchar_t *m) {
  char buf[512];
  return push_text(wide_text(m, buf, sizeof buf));
}
static int NVTX_API push_ex(const nvtxEventAttributes_t *a) {
  char buf[512];
  return push_text(attr_text(a, buf, sizeof buf));
}
static int NVTX_API pop(void) {
  pd_inject_on_range_pop(session());
  if (t_depth == 0) return -1; /* NVTX's answer to a pop without a push */
  return --t_depth;
}
static int NVTX_API domain_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) { return push_ex(a); }
static int NVTX_API domain_pop(nvtxDomainHandle_t d) { return pop(); }

/* ---- start/end ----------------------------------------------------------------------------- */

static nvtxRangeId_t NVTX_API start_a(const char *m) { return pd_inject_on_range_start(session(), m); }
static nvtxRangeId_t NVTX_API start_w(const wchar_t *m) {
  char buf[512];
  return pd_inject_on_range_start(session(), wide_text(m, buf, sizeof buf));
}
static nvtxRangeId_t NVTX_API start_ex(const nvtxEventAttributes_t *a) {
  char buf[512];
  return pd_inject_on_range_start(session(), attr_text(a, buf, sizeof buf));
}
static void NVTX_API end(nvtxRangeId_t id) { pd_inject_on_range_end(session(), id); }
static nvtxRangeId_t NVTX_API domain_start_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
  return start_ex(a);
}
static void NVTX_API domain_end(nvtxDomainHandle_t d, nvtxRangeId_t id) { end(id); }

/* ---- domains and registered strings: handles are the names, interned for the process's
 * lifetime (NVTX has no call that frees a registered string; programs register a few, once
 * each, and registering one again returns the same handle) -------------------------------- */

static pthread_mutex_t g_names_lock = PTHREAD_MUTEX_INITIALIZER;
static char **g_names;
static size_t g_nnames, g_names_cap;

static const char *name_intern(const char *s) {
  if (s == NULL) s = "";
  pthread_mutex_lock(&g_names_lock);
  const char *got = NULL;
  for (size_t i = 0; i < g_nnames && got == NULL; i++)
    if (strcmp(g_names[i], s) == 0) got = g_names[i];
  if (got == NULL) {
    if (g_nnames == g_names_cap) {
      size_t cap = g_names_cap > 0 ? 2 * g_names_cap : 16;
      char **grown = realloc(g_names, cap * sizeof *grown);
      if (grown != NULL) {
        g_names = grown;
        g_names_cap = cap;
      }
    }
    char *copy = g_nnames < g_names_cap ? strdup(s) : NULL;
    if (copy != NULL) g_names[g_nnames++] = copy;
    got = copy; /* NULL when out of memory: NVTX then has no handle, and the range no name */
  }
  pthread_mutex_unlock(&g_names_lock);
  return got;
}
static const char *wide_intern(const wchar_t *w) {
  char buf[512];
  return name_intern(wide_text(w, buf, sizeof buf));
}
static nvtxDomainHandle_t NVTX_API domain_create_a(const char *name) { return (nvtxDomainHandle_t)name_intern(name); }
static nvtxDomainHandle_t NVTX_API domain_create_w(const wchar_t *name) { return (nvtxDomainHandle_t)wide_intern(name); }
static void NVTX_API domain_destroy(nvtxDomainHandle_t d) {} /* interned: kept */
static nvtxStringHandle_t NVTX_API register_string_a(nvtxDomainHandle_t d, const char *s) {
  return (nvtxStringHandle_t)name_intern(s);
}
static nvtxStringHandle_t NVTX_API register_string_w(nvtxDomainHandle_t d, const wchar_t *s) {
  return (nvtxStringHandle_t)wide_intern(s);
}

/* ---- the entry point ------------------------------------------------------------------------ */

typedef struct {
  unsigned id;
  NvtxFunctionPointer fn;
} slot_t;

/* Fills the slots of one module's table that exist in this NVTX copy. Returns 0 or -1. */
static int fill(const NvtxExportTableCallbacks *etc, NvtxCallbackModule module, const slot_t *slots, size_t n) {
  NvtxFunctionTable table = NULL;
  unsigned int size = 0;
  if (!etc->GetModuleFunctionTable(module, &table, &size) || table == NULL) return -1;
  for (size_t i = 0; i < n; i++)
    if (slots[i].id < size && table[slots[i].id] != NULL) *table[slots[i].id] = slots[i].fn;
  return 0;
}

#define SLOT(id, fn) {id, (NvtxFunctionPointer)(fn)}

PD_INJECT_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table);

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  if (get_export_table == NULL) return 0;
  const NvtxExportTableCallbacks *etc = get_export_table(NVTX_ETID_CALLBACKS);
  if (etc == NULL || etc->struct_size < sizeof(NvtxExportTableCallbacks)) return 0;
  static const slot_t core[] = {
      SLOT(NVTX_CBID_CORE_RangeStartEx, start_ex), SLOT(NVTX_CBID_CORE_RangeStartA, start_a),
      SLOT(NVTX_CBID_CORE_RangeStartW, start_w),   SLOT(NVTX_CBID_CORE_RangeEnd, end),
      SLOT(NVTX_CBID_CORE_RangePushEx, push_ex),   SLOT(NVTX_CBID_CORE_RangePushA, push_a),
      SLOT(NVTX_CBID_CORE_RangePushW, push_w),     SLOT(NVTX_CBID_CORE_RangePop, pop),
  };
  static const slot_t core2[] = {
      SLOT(NVTX_CBID_CORE2_DomainRangeStartEx, domain_start_ex),
      SLOT(NVTX_CBID_CORE2_DomainRangeEnd, domain_end),
      SLOT(NVTX_CBID_CORE2_DomainRangePushEx, domain_push_ex),
      SLOT(NVTX_CBID_CORE2_DomainRangePop, domain_pop),
      SLOT(NVTX_CBID_CORE2_DomainRegisterStringA, register_string_a),
      SLOT(NVTX_CBID_CORE2_DomainRegisterStringW, register_string_w),
      SLOT(NVTX_CBID_CORE2_DomainCreateA, domain_create_a),
      SLOT(NVTX_CBID_CORE2_DomainCreateW, domain_create_w),
      SLOT(NVTX_CBID_CORE2_DomainDestroy, domain_destroy),
  };
  if (fill(etc, NVTX_CB_MODULE_CORE, core, sizeof(core) / sizeof(core[0])) != 0) return 0;
  (void)fill(etc, NVTX_CB_MODULE_CORE2, core2, sizeof(core2) / sizeof(core2[0])); /* older NVTX: none */
  return 1;
}
