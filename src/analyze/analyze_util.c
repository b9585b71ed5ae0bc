/* analyze_util.c: the analyzer's shared helpers (analyze_internal.h).
 *
 * Launch attribution is the model's trace index (pd_trace_index_build(),
 * src/model/trace_index.c): one definition of which call launched a kernel and which op it
 * ran in, built once per analysis.
 */
#define _GNU_SOURCE
#include "analyze_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- names and numbers ------------------------------------------------------------------------ */

const char *an_event_name(const pd_event_t *ev, char *buf, size_t len) {
  if (ev->kind == PD_EVENT_SYNC && ev->name == NULL) {
    switch (ev->u.sync.sync_kind) {
    case PD_SYNC_EVENT: return "Event Sync";
    case PD_SYNC_STREAM_WAIT_EVENT: return "Stream Wait Event";
    case PD_SYNC_STREAM: return "Stream Sync";
    case PD_SYNC_CONTEXT: return "Context Sync";
    case PD_SYNC_UNKNOWN: return "Unknown Sync";
    }
  }
  const char *s = pd_event_display_name(ev, buf, len);
  return s != NULL ? s : "";
}

void an_fmt_time_d(char *buf, size_t len, double ns) {
  double a = ns < 0 ? -ns : ns;
  if (a >= 1e9) snprintf(buf, len, "%.3f s", ns / 1e9);
  else if (a >= 1e6) snprintf(buf, len, "%.3f ms", ns / 1e6);
  else if (a >= 1e3) snprintf(buf, len, "%.3f us", ns / 1e3);
  else snprintf(buf, len, "%.0f ns", ns);
}

void an_fmt_time(char *buf, size_t len, int64_t ns) {
  an_fmt_time_d(buf, len, (double)ns);
}

void an_fmt_bytes(char *buf, size_t len, double bytes) {
  static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double a = bytes < 0 ? -bytes : bytes;
  int u = 0;
  while (a >= 1024.0 && u < 4) {
    a /= 1024.0;
    bytes /= 1024.0;
    u++;
  }
  if (u == 0) snprintf(buf, len, "%.0f B", bytes);
  else snprintf(buf, len, "%.1f %s", bytes, unit[u]);
}

void an_fit(char *buf, size_t len, const char *s, int width) {
  if (s == NULL) s = "";
  size_t n = strlen(s);
  if (width < 4 || n <= (size_t)width) {
    snprintf(buf, len, "%s", s);
    return;
  }
  snprintf(buf, len, "%.*s...", width - 3, s);
}
