/* model_internal.h: what the model's files share and do not publish.
 */
#ifndef PD_MODEL_INTERNAL_H
#define PD_MODEL_INTERNAL_H

#include <stddef.h>

/* UTF-8: the length (2..4, or 1 for ASCII) of the well-formed sequence starting at s, of
 * which avail bytes may be read; 0 when the bytes are not well-formed, SIZE_MAX when the
 * avail bytes are a valid but cut-short start. *valid_prefix receives how many bytes
 * form the maximal subpart to replace with one U+FFFD (Unicode's "substitution of
 * maximal subparts"). json_text.c. */
size_t pd_utf8_seq(const unsigned char *s, size_t avail, size_t *valid_prefix);

#endif /* PD_MODEL_INTERNAL_H */
