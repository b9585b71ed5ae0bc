/* stacks.h: host call stacks for ranges (with_stack), internal to pd_prof.
 *
 * A range records its call stack when it opens as raw return addresses; nothing is looked
 * up then. Two unwinders: a frame-pointer walk (tens of ns for a scenario's stack; the
 * default when the project is built with frame pointers, PD_STACK_INFO), and glibc's
 * backtrace() (the unwinder reads .eh_frame, so it needs no frame pointers, but costs
 * about 0.2 us a frame; docs/performance.md has both). When a cycle is collected, the symbolizer turns each distinct address
 * into frames once (libdw: function, source file and line, with the chain of inlined
 * calls expanded, as eu-addr2line -i does) and caches them, so a stack seen a thousand
 * times is looked up once per process.
 *
 * The text is the one torch.profiler writes as a host op's "Call stack" argument and
 * torch-tb-profiler splits on ';': frames innermost first, "file(line): function" where
 * the line is known, else "function", else "module+0xoffset". The frames of the range
 * API itself (pd_range_push*, the capture) are left out, so the first frame is the code
 * that opened the range.
 */
#ifndef PD_STACKS_H
#define PD_STACKS_H

#include <stddef.h>
#include <stdint.h>

/* Return addresses kept per range: deeper frames (the thread's start) are cut. */
#define PD_STACK_MAX_PCS 48

typedef enum {
  PD_UNWIND_FRAME_POINTER = 0, /* walk the rbp chain, bounded by the thread's stack */
  PD_UNWIND_BACKTRACE          /* glibc backtrace() (libgcc's .eh_frame unwinder) */
} pd_unwinder_t;

/* Picks the unwinder for later captures (all threads). The default is
 * PD_UNWIND_FRAME_POINTER when this library was built with frame pointers, else
 * PD_UNWIND_BACKTRACE. A frame-pointer walk stops at the first frame whose saved frame
 * pointer leaves the thread's stack or does not grow, so code built without frame
 * pointers (libc's start routines) ends the stack early; it never reads outside it. */
void pd_stack_set_unwinder(pd_unwinder_t u);
pd_unwinder_t pd_stack_unwinder(void);

/* Writes up to max return addresses of the calling thread, innermost first, into pcs.
 * Returns how many (0 when the unwinder fails). Thread-safe; not async-signal-safe. */
int pd_stack_capture(void **pcs, int max);
/* Loads the unwinder (the first backtrace() call dlopens libgcc_s), so that a range's
 * first capture does not pay for it. Idempotent. */
void pd_stack_capture_init(void);

typedef struct pd_symbolizer pd_symbolizer_t;

/* Returns a symbolizer for the running process, NULL when out of memory or libdw cannot
 * read /proc/self/maps. Free with pd_symbolizer_destroy(). Thread-safe: calls on one
 * symbolizer serialize on its lock. */
pd_symbolizer_t *pd_symbolizer_create(void);
/* Frees the symbolizer and its cache. NULL: no-op. */
void pd_symbolizer_destroy(pd_symbolizer_t *s);

/* One frame of a looked-up address. Strings are owned by the symbolizer and live until
 * it is destroyed. file is NULL and line 0 when the address has no line information. */
typedef struct {
  const char *function; /* demangled where pd_demangle() understands it; NULL unknown */
  const char *file;
  int line;
  const char *text; /* "file(line): function", "function" or "module+0xoff" */
} pd_stack_frame_t;

/* Looks up one return address: *frames points at its frames, innermost (inlined) first;
 * returns their number (>= 1), or PD_ENOMEM / PD_EINVAL. The address is looked up at
 * pc - 1 (inside the call instruction), so a return address names its call's line. */
int pd_symbolizer_lookup(pd_symbolizer_t *s, const void *pc, const pd_stack_frame_t **frames);

/* Writes the "Call stack" text of a captured stack into *buf (grown with realloc as
 * needed; the caller frees it): frames innermost first joined by ';', the range API's
 * own frames left out. Returns the text's length (0: no frame left), or PD_ENOMEM. */
int pd_symbolizer_stack_text(pd_symbolizer_t *s, void *const *pcs, int n, char **buf, size_t *cap);

#endif /* PD_STACKS_H */
