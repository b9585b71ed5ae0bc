/* stacks.c: call stack capture (glibc backtrace()) and symbolization (libdw), cached per
 * return address. See stacks.h for the text format and where each half runs.
 *
 * The symbolizer reports the process's mappings to libdwfl once (and again when an
 * address falls outside every module known, e.g. a library dlopen'ed since), then looks
 * each new address up: the module's DWARF scopes at the address give the inlined calls
 * and the function they sit in, the line table gives the innermost line, and each
 * inlined call's DW_AT_call_file/line the line in the next frame out. Modules without
 * DWARF (libc) give the ELF symbol; without a symbol, the module and offset.
 */
#define _GNU_SOURCE /* pthread_getattr_np */
#include "stacks.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <execinfo.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pd/pd_common.h"
#include "pd/pd_event.h"

/* ---- capture -------------------------------------------------------------------------- */

#ifdef PD_FRAME_POINTERS
static atomic_int g_unwinder = PD_UNWIND_FRAME_POINTER;
#else
static atomic_int g_unwinder = PD_UNWIND_BACKTRACE;
#endif

void pd_stack_set_unwinder(pd_unwinder_t u) { atomic_store(&g_unwinder, (int)u); }
pd_unwinder_t pd_stack_unwinder(void) { return (pd_unwinder_t)atomic_load(&g_unwinder); }

/* The calling thread's stack, [lo, hi), read once per thread (pthread_getattr_np). */
static __thread uintptr_t t_stack_lo, t_stack_hi;

static bool stack_bounds(void) {
  if (t_stack_hi != 0) return true;
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return false;
  void *addr = NULL;
  size_t size = 0;
  int rc = pthread_attr_getstack(&attr, &addr, &size);
  pthread_attr_destroy(&attr);
  if (rc != 0 || size == 0) return false;
  t_stack_lo = (uintptr_t)addr;
  t_stack_hi = (uintptr_t)addr + size;
  return true;
}

/* Follows saved frame pointers: [fp] is the caller's fp, [fp + 8] the return address
 * (x86-64 and AArch64 frame records alike). Every read is checked to lie inside this
 * thread's stack, and each frame must sit above the last, so a frame without a frame
 * pointer ends the walk instead of sending it astray. Not instrumented by ASan: a
 * saved slot may sit next to a poisoned local. */
__attribute__((noinline, no_sanitize_address)) static int capture_frame_pointers(void **pcs, int max) {
  if (!stack_bounds()) return 0;
  uintptr_t fp = (uintptr_t)__builtin_frame_address(0);
  int n = 0;
  while (n < max) {
    if (fp < t_stack_lo || fp > t_stack_hi - 2 * sizeof(uintptr_t) || (fp & (sizeof(uintptr_t) - 1)) != 0) break;
    const uintptr_t *rec = (const uintptr_t *)fp;
    uintptr_t next = rec[0], ret = rec[1];
    if (ret < 4096) break;
    pcs[n++] = (void *)ret;
    if (next <= fp) break;
    fp = next;
  }
  return n;
}

__attribute__((noinline)) int pd_stack_capture(void **pcs, int max) {
  if (pcs == NULL || max <= 0) return 0;
  if (atomic_load_explicit(&g_unwinder, memory_order_relaxed) == PD_UNWIND_FRAME_POINTER)
    return capture_frame_pointers(pcs, max);
  int n = backtrace(pcs, max);
  return n > 0 ? n : 0;
}

static pthread_once_t g_capture_once = PTHREAD_ONCE_INIT;
static void capture_warm(void) {
  void *pcs[4];
  (void)backtrace(pcs, 4);
  (void)stack_bounds();
}

void pd_stack_capture_init(void) { pthread_once(&g_capture_once, capture_warm); }

/* ---- symbolizer ------------------------------------------------------------------------- */

typedef struct {
  uintptr_t pc;
  int nframes;
  pd_stack_frame_t *frames; /* malloc'd, never moved once made */
} entry_t;

struct pd_symbolizer {
  pthread_mutex_t lock; /* guards everything below; taken by every public call */
  Dwfl *dwfl;
  pid_t pid;
  entry_t *entries;
  size_t nentries, cap;
  uint32_t *slots; /* open addressing: entry index + 1, 0 empty */
  size_t nslots;   /* power of two, at most half full */
};

static char *g_debuginfo_path; /* NULL: libdwfl's default search (build-id, .debug) */
static const Dwfl_Callbacks g_callbacks = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .debuginfo_path = &g_debuginfo_path,
};

static int report_maps(pd_symbolizer_t *s) {
  dwfl_report_begin(s->dwfl);
  int rc = dwfl_linux_proc_report(s->dwfl, s->pid);
  dwfl_report_end(s->dwfl, NULL, NULL);
  return rc == 0 ? 0 : PD_EIO;
}

pd_symbolizer_t *pd_symbolizer_create(void) {
  pd_symbolizer_t *s = calloc(1, sizeof(*s));
  if (s == NULL) return NULL;
  s->pid = getpid();
  s->dwfl = dwfl_begin(&g_callbacks);
  if (s->dwfl == NULL || pthread_mutex_init(&s->lock, NULL) != 0) {
    if (s->dwfl != NULL) dwfl_end(s->dwfl);
    free(s);
    return NULL;
  }
  if (report_maps(s) != 0) {
    pd_symbolizer_destroy(s);
    return NULL;
  }
  return s;
}

static void frames_free(pd_stack_frame_t *f, int n) {
  for (int i = 0; i < n; i++) {
    free((char *)f[i].function);
    free((char *)f[i].file);
    free((char *)f[i].text);
  }
  free(f);
}

void pd_symbolizer_destroy(pd_symbolizer_t *s) {
  if (s == NULL) return;
  for (size_t i = 0; i < s->nentries; i++) frames_free(s->entries[i].frames, s->entries[i].nframes);
  free(s->entries);
  free(s->slots);
  dwfl_end(s->dwfl);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

/* The name to show for a function DIE: the demangled linkage name of C++ code, else
 * DW_AT_name (following abstract origins of inlined and out-of-line copies). */
static const char *die_function(Dwarf_Die *die, char *buf, size_t len) {
  Dwarf_Attribute a;
  const char *link = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &a));
  if (link != NULL && pd_demangle(link, buf, len)) return buf;
  const char *name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_name, &a));
  return name != NULL ? name : link;
}

/* Appends one frame; the strings are copied. Returns 0 or PD_ENOMEM. */
static int frame_add(pd_stack_frame_t **fr, int *n, const char *function, const char *file, int line,
                     const char *module, uintptr_t offset) {
  pd_stack_frame_t *g = realloc(*fr, (size_t)(*n + 1) * sizeof(**fr));
  if (g == NULL) return PD_ENOMEM;
  *fr = g;
  pd_stack_frame_t *f = &g[*n];
  memset(f, 0, sizeof(*f));
  size_t tl = (file ? strlen(file) : 0) + (function ? strlen(function) : 0) + (module ? strlen(module) : 0) + 48;
  char *text = malloc(tl);
  f->function = function ? strdup(function) : NULL;
  f->file = file && line > 0 ? strdup(file) : NULL;
  f->line = file && line > 0 ? line : 0;
  if (text == NULL || (function && !f->function) || (file && line > 0 && !f->file)) {
    free(text);
    free((char *)f->function);
    free((char *)f->file);
    return PD_ENOMEM;
  }
  if (f->file != NULL) snprintf(text, tl, "%s(%d): %s", f->file, f->line, function ? function : "??");
  else if (function != NULL) snprintf(text, tl, "%s", function);
  else if (module != NULL) snprintf(text, tl, "%s+0x%lx", module, (unsigned long)offset);
  else snprintf(text, tl, "0x%lx", (unsigned long)offset);
  for (char *c = text; *c; c++)
    if (*c == ';' || *c == '\n') *c = ','; /* ';' separates frames in the stack text */
  f->text = text;
  (*n)++;
  return 0;
}

/* Looks addr up in libdw; fills *out with its frames (innermost first). */
static int resolve(pd_symbolizer_t *s, uintptr_t addr, pd_stack_frame_t **out, int *nout) {
  pd_stack_frame_t *fr = NULL;
  int n = 0, rc = 0;
  Dwfl_Module *mod = dwfl_addrmodule(s->dwfl, addr);
  if (mod == NULL && report_maps(s) == 0) mod = dwfl_addrmodule(s->dwfl, addr);
  if (mod == NULL) {
    rc = frame_add(&fr, &n, NULL, NULL, 0, NULL, addr);
    goto done;
  }
  const char *modname = NULL;
  Dwarf_Addr base = 0;
  modname = dwfl_module_info(mod, NULL, &base, NULL, NULL, NULL, NULL, NULL);
  const char *slash = modname ? strrchr(modname, '/') : NULL;
  if (slash != NULL) modname = slash + 1;

  const char *file = NULL;
  int line = 0;
  Dwfl_Line *dl = dwfl_module_getsrc(mod, addr);
  if (dl != NULL) file = dwfl_lineinfo(dl, NULL, &line, NULL, NULL, NULL);

  Dwarf_Addr bias = 0;
  Dwarf_Die *cudie = dwfl_module_addrdie(mod, addr, &bias);
  Dwarf_Die *scopes = NULL;
  int nscopes = cudie != NULL ? dwarf_getscopes(cudie, addr - bias, &scopes) : 0;
  Dwarf_Files *files = NULL;
  size_t nfiles = 0;
  bool have_files = cudie != NULL && dwarf_getsrcfiles(cudie, &files, &nfiles) == 0;
  bool found_subprogram = false;
  char dbuf[512];
  for (int i = 0; i < nscopes && rc == 0; i++) {
    int tag = dwarf_tag(&scopes[i]);
    if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_subprogram) continue;
    rc = frame_add(&fr, &n, die_function(&scopes[i], dbuf, sizeof dbuf), file, line, NULL, 0);
    if (tag == DW_TAG_subprogram) {
      found_subprogram = true;
      break;
    }
    /* an inlined call: the next frame out is at its call site */
    Dwarf_Attribute a;
    Dwarf_Word fidx = 0, cline = 0;
    file = NULL;
    line = 0;
    if (have_files && dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_file, &a), &fidx) == 0 && fidx < nfiles)
      file = dwarf_filesrc(files, fidx, NULL, NULL);
    if (dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_line, &a), &cline) == 0) line = (int)cline;
  }
  free(scopes);
  if (rc == 0 && !found_subprogram) {
    /* no DWARF function here: the ELF symbol (libc, stripped code), with the line of the
     * outermost inlined call when there was one */
    const char *sym = dwfl_module_addrname(mod, addr);
    const char *shown = sym;
    if (sym != NULL && pd_demangle(sym, dbuf, sizeof dbuf)) shown = dbuf;
    rc = frame_add(&fr, &n, shown, file, line, modname, addr - base);
  }
done:
  if (rc != 0) {
    frames_free(fr, n);
    return rc;
  }
  *out = fr;
  *nout = n;
  return 0;
}

static int slots_grow(pd_symbolizer_t *s) {
  size_t n = s->nslots ? s->nslots * 2 : 256;
  uint32_t *slots = calloc(n, sizeof(*slots));
  if (slots == NULL) return PD_ENOMEM;
  for (size_t i = 0; i < s->nentries; i++) {
    size_t j = pd_hash_u64(s->entries[i].pc) & (n - 1);
    while (slots[j] != 0) j = (j + 1) & (n - 1);
    slots[j] = (uint32_t)(i + 1);
  }
  free(s->slots);
  s->slots = slots;
  s->nslots = n;
  return 0;
}

/* Returns the cache entry for pc, resolving it on first sight; NULL on out of memory.
 * Called with s->lock held. */
static const entry_t *lookup_locked(pd_symbolizer_t *s, uintptr_t pc) {
  if ((s->nentries + 1) * 2 > s->nslots && slots_grow(s) != 0) return NULL;
  size_t mask = s->nslots - 1;
  size_t j = pd_hash_u64(pc) & mask;
  while (s->slots[j] != 0) {
    const entry_t *e = &s->entries[s->slots[j] - 1];
    if (e->pc == pc) return e;
    j = (j + 1) & mask;
  }
  if (s->nentries == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 256;
    entry_t *g = realloc(s->entries, cap * sizeof(*g));
    if (g == NULL) return NULL;
    s->entries = g;
    s->cap = cap;
  }
  entry_t *e = &s->entries[s->nentries];
  e->pc = pc;
  /* pc - 1: a return address is the instruction after the call, which may belong to
   * the next line or even the next function */
  if (resolve(s, pc > 0 ? pc - 1 : pc, &e->frames, &e->nframes) != 0) return NULL;
  s->slots[j] = (uint32_t)(++s->nentries);
  return e;
}

int pd_symbolizer_lookup(pd_symbolizer_t *s, const void *pc, const pd_stack_frame_t **frames) {
  if (s == NULL || frames == NULL) return PD_EINVAL;
  pthread_mutex_lock(&s->lock);
  const entry_t *e = lookup_locked(s, (uintptr_t)pc);
  int n = e != NULL ? e->nframes : PD_ENOMEM;
  if (e != NULL) *frames = e->frames;
  pthread_mutex_unlock(&s->lock);
  return n;
}

/* Frames of the range API (ranges.c: pd_range_push* and its helpers, all named so) and
 * of the capture (glibc's backtrace, __backtrace, or a sanitizer's __interceptor_backtrace
 * in front of it): left out at the innermost end. */
static bool is_api_frame(const char *function) {
  return function != NULL &&
         (strncmp(function, "pd_range_push", 13) == 0 || strcmp(function, "capture_frame_pointers") == 0 ||
          strcmp(function, "pd_stack_capture") == 0 || strstr(function, "backtrace") != NULL);
}

int pd_symbolizer_stack_text(pd_symbolizer_t *s, void *const *pcs, int n, char **buf, size_t *cap) {
  if (s == NULL || buf == NULL || cap == NULL || (pcs == NULL && n > 0)) return PD_EINVAL;
  size_t len = 0;
  bool leading = true;
  int rc = 0;
  pthread_mutex_lock(&s->lock);
  for (int i = 0; i < n && rc == 0; i++) {
    const entry_t *e = lookup_locked(s, (uintptr_t)pcs[i]);
    if (e == NULL) {
      rc = PD_ENOMEM;
      break;
    }
    for (int k = 0; k < e->nframes; k++) {
      const pd_stack_frame_t *f = &e->frames[k];
      if (leading && is_api_frame(f->function)) continue;
      leading = false;
      size_t tl = strlen(f->text);
      if (len + tl + 2 > *cap) {
        size_t nc = *cap ? *cap : 1024;
        while (nc < len + tl + 2) nc *= 2;
        char *g = realloc(*buf, nc);
        if (g == NULL) {
          rc = PD_ENOMEM;
          break;
        }
        *buf = g;
        *cap = nc;
      }
      if (len > 0) (*buf)[len++] = ';';
      memcpy(*buf + len, f->text, tl);
      len += tl;
      (*buf)[len] = '\0';
    }
  }
  pthread_mutex_unlock(&s->lock);
  if (rc != 0) return rc;
  if (len == 0 && *buf != NULL) (*buf)[0] = '\0';
  return (int)len;
}
