// The shared memory through which a rank process on the coordinator's host hands its answers over
// (docs/architecture.md, The answer lane): a ring of frame slots in a sealed memfd, which the
// coordinator's process creates and passes to the rank with an eventfd, its bell. The rank writes
// a frame body into the next slot, publishes it by advancing the ring's head and rings; the reader
// copies the body out before it checks it, so a writer changing a slot meanwhile changes nothing
// that was checked. No system call is made on the way but the bell's write: a spinning reader sees
// an answer a few hundred nanoseconds after it is published, a sleeping one when the bell wakes it.
//
// The memory (host byte order: both ends are processes of one build):
//   [0, 64)     u32 magic "dsar", u32 slots, u64 slot bytes          (written once by the creator)
//   [64, 128)   u64 head: frames published, written by the rank
//   [128, 192)  u64 tail: frames taken, written by the reader
//   [256, ...)  slots of `slot bytes`: u32 body bytes, then the body
// The reader trusts none of it: it keeps its own geometry and tail, and a head more than `slots`
// ahead of its tail, or a length above the largest answer, ends the ring (the rank's answers then
// come over CAF). The seals keep the rank from shrinking the memory under the reader's mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "transport/socket_io.h"

namespace ds {

class answer_ring {
   public:
    // The coordinator's end: `slots` (1 to 64) slots of up to `max_body` bytes each.
    static status create(size_t max_body, uint32_t slots, std::unique_ptr<answer_ring>& out);
    // The rank's end, from the memory and the bell the coordinator passed: the geometry is read from
    // the memory's first bytes and checked against its size.
    static status attach(net::unique_fd memory, net::unique_fd bell, std::unique_ptr<answer_ring>& out);
    ~answer_ring();
    answer_ring(const answer_ring&) = delete;
    answer_ring& operator=(const answer_ring&) = delete;

    int memory_fd() const { return memory_.get(); }
    int bell_fd() const { return bell_.get(); }
    // The reader's: the largest answer the lane takes; the writer's: what a slot holds.
    size_t max_body() const { return max_body_; }

    // The rank's side: `body` into the next slot, published, and the bell rung. Aborted when the ring
    // is full (the reader has not taken `slots` frames); invalid when the body does not fit a slot.
    status write(std::string_view body);
    // The reader's side: the next frame's body copied into `body` (got = true), or nothing
    // published (got = false). Invalid, naming what, when the writer broke the ring's rules.
    status read(std::string& body, bool& got);
    // The reader's side: empties the bell before the ring is read, so that a frame published after
    // this rings again.
    void drain_bell() const;

   private:
    answer_ring(net::unique_fd memory, net::unique_fd bell, char* base, size_t mapped, uint32_t slots,
                size_t slot_bytes, size_t max_body);
    uint64_t* head() const;
    uint64_t* tail() const;
    char* slot(uint64_t frame) const;

    net::unique_fd memory_;
    net::unique_fd bell_;
    char* base_;
    size_t mapped_;
    uint32_t slots_;
    size_t slot_bytes_;
    size_t max_body_;
    uint64_t next_ = 0;  // the writer's next frame to publish, or the reader's next to take
};

}  // namespace ds
