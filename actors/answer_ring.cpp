#include "actors/answer_ring.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstring>

namespace ds {

namespace {

constexpr uint32_t kRingMagic = 0x64736172;  // "dsar"
constexpr size_t kHeadOffset = 64;
constexpr size_t kTailOffset = 128;
constexpr size_t kSlotsOffset = 256;
constexpr uint32_t kMaxSlots = 64;
constexpr size_t kSlotAlignment = 64;
constexpr int kDrainReads = 16;  // of 256 rings each

struct ring_geometry {
    uint32_t magic;
    uint32_t slots;
    uint64_t slot_bytes;
};

size_t slot_bytes_for(size_t max_body) {
    return (sizeof(uint32_t) + max_body + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
}

// Shared with another process: the stores and loads that publish a frame are atomic and ordered.
uint64_t load_acquire(const uint64_t* word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }
void store_release(uint64_t* word, uint64_t value) { __atomic_store_n(word, value, __ATOMIC_RELEASE); }

status map_shared(int fd, size_t bytes, char*& base) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return net::io_error("answer ring: mmap");
    base = static_cast<char*>(p);
    return status::success();
}

}  // namespace

answer_ring::answer_ring(net::unique_fd memory, net::unique_fd bell, net::unique_fd rank_bell, char* base,
                         size_t mapped, uint32_t slots, size_t slot_bytes, size_t max_body)
    : memory_(std::move(memory)),
      bell_(std::move(bell)),
      rank_bell_(std::move(rank_bell)),
      base_(base),
      mapped_(mapped),
      slots_(slots),
      slot_bytes_(slot_bytes),
      max_body_(max_body) {}

answer_ring::~answer_ring() { ::munmap(base_, mapped_); }

status answer_ring::create(size_t max_body, uint32_t slots, std::unique_ptr<answer_ring>& out) {
    if (slots < 1 || slots > kMaxSlots)
        return status::invalid(fmt::format("answer ring: slots = {}: expected 1 to {}", slots, kMaxSlots));
    const size_t slot_bytes = slot_bytes_for(max_body);
    const size_t bytes = kSlotsOffset + size_t{slots} * slot_bytes;
    net::unique_fd memory(::memfd_create("distsample-answers", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (memory.get() < 0) return net::io_error("answer ring: memfd_create");
    if (::ftruncate(memory.get(), static_cast<off_t>(bytes)) != 0) return net::io_error("answer ring: ftruncate");
    if (::fcntl(memory.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
        return net::io_error("answer ring: sealing");
    int ends[2] = {-1, -1};
    if (::pipe2(ends, O_CLOEXEC | O_NONBLOCK) != 0) return net::io_error("answer ring: pipe2");
    net::unique_fd bell(ends[0]), rank_bell(ends[1]);
    char* base = nullptr;
    DS_TRY(map_shared(memory.get(), bytes, base));
    const ring_geometry geometry{kRingMagic, slots, slot_bytes};
    std::memcpy(base, &geometry, sizeof geometry);  // the rest of a new memfd reads as zeros
    out.reset(new answer_ring(std::move(memory), std::move(bell), std::move(rank_bell), base, bytes, slots, slot_bytes,
                              max_body));
    return status::success();
}

status answer_ring::attach(net::unique_fd memory, net::unique_fd bell, std::unique_ptr<answer_ring>& out) {
    struct stat bell_info {};
    if (::fstat(bell.get(), &bell_info) != 0 || !S_ISFIFO(bell_info.st_mode))
        return status::invalid("answer ring: the bell is not a pipe");
    // Unsealed memory could shrink under this mapping (a SIGBUS at the next write).
    const int seals = ::fcntl(memory.get(), F_GET_SEALS);
    if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_SEAL)) != (F_SEAL_SHRINK | F_SEAL_SEAL))
        return status::invalid("answer ring: the memory is not sealed against shrinking");
    struct stat info {};
    if (::fstat(memory.get(), &info) != 0) return net::io_error("answer ring: fstat");
    const auto bytes = static_cast<size_t>(info.st_size);
    if (bytes < kSlotsOffset)
        return status::invalid(fmt::format("answer ring of {} bytes: expected at least {}", bytes, kSlotsOffset));
    char* base = nullptr;
    DS_TRY(map_shared(memory.get(), bytes, base));
    ring_geometry geometry{};
    std::memcpy(&geometry, base, sizeof geometry);
    const bool fits = geometry.magic == kRingMagic && geometry.slots >= 1 && geometry.slots <= kMaxSlots &&
                      geometry.slot_bytes > sizeof(uint32_t) && geometry.slot_bytes % kSlotAlignment == 0 &&
                      (bytes - kSlotsOffset) / geometry.slots == geometry.slot_bytes &&
                      (bytes - kSlotsOffset) % geometry.slots == 0;
    if (!fits) {
        ::munmap(base, bytes);
        return status::invalid(fmt::format("answer ring of {} bytes: magic {:#x}, {} slots of {} bytes do not fit it",
                                           bytes, geometry.magic, geometry.slots, geometry.slot_bytes));
    }
    const auto slot_bytes = static_cast<size_t>(geometry.slot_bytes);
    out.reset(new answer_ring(std::move(memory), std::move(bell), net::unique_fd(), base, bytes, geometry.slots,
                              slot_bytes, slot_bytes - sizeof(uint32_t)));
    out->next_ = load_acquire(out->head());
    return status::success();
}

uint64_t* answer_ring::head() const { return reinterpret_cast<uint64_t*>(base_ + kHeadOffset); }
uint64_t* answer_ring::tail() const { return reinterpret_cast<uint64_t*>(base_ + kTailOffset); }
char* answer_ring::slot(uint64_t frame) const { return base_ + kSlotsOffset + (frame % slots_) * slot_bytes_; }

status answer_ring::write(std::string_view body) {
    if (body.size() > max_body())
        return status::invalid(fmt::format("answer of {} bytes: expected at most {}", body.size(), max_body()));
    if (next_ - load_acquire(tail()) >= slots_)
        return {status_code::aborted, fmt::format("answer ring full: {} answers not taken", slots_)};
    char* at = slot(next_);
    const auto length = static_cast<uint32_t>(body.size());
    std::memcpy(at, &length, sizeof length);
    std::memcpy(at + sizeof length, body.data(), body.size());
    store_release(head(), ++next_);
    const char ring = 1;
    // A full pipe (thousands of rings not drained) wakes the reader already.
    [[maybe_unused]] const ssize_t n = ::write(bell_.get(), &ring, sizeof ring);
    return status::success();
}

status answer_ring::read(std::string& body, bool& got) {
    got = false;
    const uint64_t published = load_acquire(head());
    if (published == next_) return status::success();
    if (published - next_ > slots_)
        return status::invalid(
            fmt::format("answer ring: head = {}: expected {} to {}", published, next_, next_ + slots_));
    const char* at = slot(next_);
    uint32_t length = 0;
    std::memcpy(&length, at, sizeof length);
    if (length > max_body())
        return status::invalid(fmt::format("answer of {} bytes: expected at most {}", length, max_body()));
    body.assign(at + sizeof length, length);
    store_release(tail(), ++next_);
    got = true;
    return status::success();
}

void answer_ring::drain_bell() const {
    char rings[256];
    for (int i = 0; i < kDrainReads; ++i) {
        if (::read(bell_.get(), rings, sizeof rings) < static_cast<ssize_t>(sizeof rings)) return;
    }
}

}  // namespace ds
