/* Shared between the csrc C files; not part of the cffi ABI. */
#ifndef KQ_INTERNAL_H
#define KQ_INTERNAL_H
#include <stddef.h>
#include <stdint.h>

#include "kqlite_native.h"

/* Kafka stores every fixed-width integer big-endian. */
static inline uint32_t kq_be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t kq_be64(const uint8_t *p) {
    return ((uint64_t)kq_be32(p) << 32) | kq_be32(p + 4);
}
#endif
