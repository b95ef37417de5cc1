// What the exact sharded sampler asks of one rank's vocab shard, batched over the step's rows
// (sharded/shard_primitives.h): plain requests that the CPU implementation answers with loops and
// a device one with one kernel per batch. Rows are the step's bs * N rows; tokens are local to
// the shard.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/exact_rules.h"

namespace ds {

// A cut row's candidates: every token of `row` whose mass is at least `threshold`, in token
// order, at most `room` of them.
struct candidate_request {
    size_t row = 0;
    uint64_t threshold = 0;
    size_t room = 0;
};

// The tokens of `row` kept by `domain` whose mass is exactly `q` (the ties at a cut's boundary):
// how many, and the index of the `nth` of them (nth < 0: only the count).
struct tie_query {
    size_t row = 0;
    exact::filter_cut domain;
    uint64_t q = 0;
    int64_t nth = -1;
};

// The mass `row` keeps within `cut`, and the kept mass of `draft` (-1: none, or not in the shard).
struct kept_request {
    size_t row = 0;
    exact::filter_cut cut;
    int32_t draft = -1;
};

// The token at mass `target` of `row`'s kept distribution without `excluded` (-1: none).
struct mass_draw {
    size_t row = 0;
    exact::filter_cut cut;
    uint64_t target = 0;
    int32_t excluded = -1;
};

// One token of one row.
struct row_token {
    size_t row = 0;
    int32_t token = 0;
};

}  // namespace ds
