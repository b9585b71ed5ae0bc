/* fuzz_nvtx_op_name.c: the op name of PyTorch's emit_nvtx op ranges (pd_inject_nvtx_op_name),
 * on any text, as any program may hand its NVTX tool. The input up to its first NUL is the
 * range's text; its first byte also picks a small name buffer. Where a name is cut, it is
 * the text's prefix before a ", " at which emit_nvtx's parts begin, never empty, and fits
 * its buffer with its NUL; a buffer one byte shorter refuses it; a refused text leaves the
 * buffer alone. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "inject.h"

static void check_cut(const char *text, const char *name, size_t n, size_t len) {
  if (n == 0 || n >= len) abort();                            /* fits, with its NUL */
  if (strlen(name) != n || memcmp(name, text, n) != 0) abort(); /* the text's prefix */
  if (text[n] != ',' || text[n + 1] != ' ') abort();           /* cut at a ", " */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (text == NULL) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  char big[256], small[64];
  const size_t small_len = size > 0 ? 1 + data[0] % sizeof small : 1;
  size_t n = pd_inject_nvtx_op_name(text, big, sizeof big);
  if (n > 0) {
    check_cut(text, big, n, sizeof big);
    char exact[256];
    if (pd_inject_nvtx_op_name(text, exact, n + 1) != n || strcmp(exact, big) != 0) abort();
    if (pd_inject_nvtx_op_name(text, exact, n) != 0) abort(); /* one byte short: refused */
  }
  memset(small, 0x5a, sizeof small);
  const size_t m = pd_inject_nvtx_op_name(text, small, small_len);
  if (m > 0) {
    check_cut(text, small, m, small_len);
    if (m != n) abort(); /* the same cut, whatever the buffer */
  } else {
    for (size_t i = 0; i < sizeof small; i++)
      if ((unsigned char)small[i] != 0x5a) abort(); /* refused: nothing written */
  }
  free(text);
  return 0;
}
