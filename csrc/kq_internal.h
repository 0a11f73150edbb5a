/* Shared between the .c files; not part of the cffi ABI. */
#ifndef KQ_INTERNAL_H
#define KQ_INTERNAL_H
#include <stddef.h>
#include <stdint.h>

#define KQ_ERR_HEADERS_FULL (-1000)
#define KQ_ERR_VARINT (-1)
#define KQ_ERR_LENGTH (-2)
#define KQ_ERR_RECORD_SIZE (-3)
#define KQ_ERR_COUNT (-4)
#define KQ_ERR_TRAILING (-5)
#define KQ_ERR_HEADER_KEY (-6)

#define KQ_RECORD_MAX_OVERHEAD 41
#define KQ_HEADER_MAX_OVERHEAD 10

static inline uint32_t kq_be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t kq_be64(const uint8_t *p) {
    return ((uint64_t)kq_be32(p) << 32) | kq_be32(p + 4);
}
#endif
