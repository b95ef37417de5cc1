// How a request's emitted tokens enter its slot's seen-token list (penalties), for the host and
// the device alike (include/distsample/sampling.h, commit_tokens).
#pragma once

#include <cstdint>

#include <distsample/sampling.h>

#include "kernels/det_math.h"

namespace ds {

// Adds request b's emitted tokens (predict[b*N .. b*N + accept_length[b]), up to the first -1)
// to the list of its slot; slot 0 is skipped. False when a token or the slot is out of range or
// the list is full (what fits is kept).
DS_HD bool commit_request(const commit_call& c, int32_t b) {
    const int32_t slot = c.slots[b];
    if (slot == 0) return true;
    if (slot < 0 || slot >= c.max_slots) return false;
    const int64_t row = int64_t{slot} * c.capacity;
    int32_t* tokens = c.seen_tokens + row;
    int32_t* counts = c.seen_counts + row;
    int32_t size = c.seen_sizes[slot];
    const int32_t* emitted = c.predict + int64_t{b} * c.tokens_per_req;
    const int32_t length = c.accept_length[b] < c.tokens_per_req ? c.accept_length[b] : c.tokens_per_req;
    bool ok = size >= 0 && size <= c.capacity;
    for (int32_t i = 0; ok && i < length && emitted[i] >= 0; ++i) {
        const int32_t token = emitted[i];
        if (token >= c.vocab) {
            ok = false;
            break;
        }
        int32_t k = 0;
        while (k < size && tokens[k] != token) ++k;
        if (k < size) {
            counts[k] += 1;
        } else if (size < c.capacity) {
            tokens[size] = token;
            counts[size] = 1;
            ++size;
        } else {
            ok = false;
        }
    }
    if (size >= 0 && size <= c.capacity) c.seen_sizes[slot] = size;
    return ok;
}

}  // namespace ds
