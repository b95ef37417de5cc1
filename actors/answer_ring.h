// The shared memory through which a rank process on the coordinator's host hands its answers over
// (docs/architecture.md, The answer lane): a ring of frame slots in a sealed memfd, which the
// coordinator's process creates and passes to the rank with the write end of a pipe, its bell.
// The rank writes a frame body into the next slot, publishes it by advancing the ring's head and
// rings (one byte); the reader, woken by the bell in its poll, copies the body out before it checks
// it, so a writer changing a slot meanwhile changes nothing that was checked. No socket and no
// network stack on the way: the bell's write and the reader's poll and drain are the only system
// calls. The bell is a pipe, not an eventfd, because a pipe's ends are separate open files: a rank
// can change the flags of its end (make it blocking) but not of the reader's, which therefore
// never blocks.
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
    // the memory's first bytes and checked against its size and seals, the bell must be a pipe.
    static status attach(net::unique_fd memory, net::unique_fd bell, std::unique_ptr<answer_ring>& out);
    ~answer_ring();
    answer_ring(const answer_ring&) = delete;
    answer_ring& operator=(const answer_ring&) = delete;

    int memory_fd() const { return memory_.get(); }
    // The reader's end of the bell on the coordinator's side (what it polls), the write end on the rank's.
    int bell_fd() const { return bell_.get(); }
    // The coordinator's side: the bell's write end, to pass to the rank (kept open here, so the
    // reader's end never reads as closed).
    int rank_bell_fd() const { return rank_bell_.get(); }
    // The reader's: the largest answer the lane takes; the writer's: what a slot holds.
    size_t max_body() const { return max_body_; }

    // The rank's side: `body` into the next slot, published, and the bell rung. Aborted when the ring
    // is full (the reader has not taken `slots` frames); invalid when the body does not fit a slot.
    status write(std::string_view body);
    // The reader's side: the next frame's body copied into `body` (got = true), or nothing
    // published (got = false). Invalid, naming what, when the writer broke the ring's rules.
    status read(std::string& body, bool& got);
    // The reader's side: empties the bell before the ring is read, so that a frame published after
    // this rings again. Reads at most a few kilobytes: a rank that rings without end costs the
    // reader a bounded drain per round, and the rest wakes the next.
    void drain_bell() const;

   private:
    answer_ring(net::unique_fd memory, net::unique_fd bell, net::unique_fd rank_bell, char* base, size_t mapped,
                uint32_t slots, size_t slot_bytes, size_t max_body);
    uint64_t* head() const;
    uint64_t* tail() const;
    char* slot(uint64_t frame) const;

    net::unique_fd memory_;
    net::unique_fd bell_;
    net::unique_fd rank_bell_;  // the coordinator's side only
    char* base_;
    size_t mapped_;
    uint32_t slots_;
    size_t slot_bytes_;
    size_t max_body_;
    uint64_t next_ = 0;  // the writer's next frame to publish, or the reader's next to take
};

}  // namespace ds
