// The shared-memory ring of a rank's answers (actors/answer_ring.h): frames come out as they went
// in and in order, a full ring refuses the next until one is taken, the bell rings for every
// frame, the rank cannot shrink the memory, and a writer that breaks the ring's rules (a head too
// far ahead or behind, a length beyond the largest answer) or memory of another shape is refused,
// naming what.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "actors/answer_ring.h"

namespace ds {
namespace {

constexpr size_t kMaxBody = 1000;
constexpr uint32_t kSlots = 3;
constexpr size_t kHeadOffset = 64;
constexpr size_t kFirstSlotOffset = 256;

struct ring_pair {
    std::unique_ptr<answer_ring> reader;
    std::unique_ptr<answer_ring> writer;
};

// The coordinator's end, and the rank's from descriptors of the same memory and bell (as passed).
void make_pair(ring_pair& p) {
    status s = answer_ring::create(kMaxBody, kSlots, p.reader);
    ASSERT_TRUE(s.is_ok()) << s.message;
    s = answer_ring::attach(net::unique_fd(::dup(p.reader->memory_fd())),
                            net::unique_fd(::dup(p.reader->rank_bell_fd())), p.writer);
    ASSERT_TRUE(s.is_ok()) << s.message;
}

bool rung(const answer_ring& ring) {
    pollfd p{ring.bell_fd(), POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
}

std::string body_of(size_t bytes, char fill) { return std::string(bytes, fill); }

// Writes `value` at `offset` of the ring's memory, as a rank could.
void poke(const answer_ring& ring, size_t offset, const void* value, size_t bytes) {
    void* memory = ::mmap(nullptr, kFirstSlotOffset + 64, PROT_READ | PROT_WRITE, MAP_SHARED, ring.memory_fd(), 0);
    ASSERT_NE(memory, MAP_FAILED);
    std::memcpy(static_cast<char*>(memory) + offset, value, bytes);
    ::munmap(memory, kFirstSlotOffset + 64);
}

TEST(AnswerRing, FramesComeOutAsTheyWentInAndInOrder) {
    ring_pair p;
    ASSERT_NO_FATAL_FAILURE(make_pair(p));
    EXPECT_EQ(p.reader->max_body(), kMaxBody);
    EXPECT_GE(p.writer->max_body(), kMaxBody);
    std::string got;
    bool taken = true;
    ASSERT_TRUE(p.reader->read(got, taken).is_ok());
    EXPECT_FALSE(taken) << "a frame from an empty ring";
    // More frames than slots, in turns, so that the slots wrap around; sizes 0 to the largest.
    for (int i = 0; i < 10; ++i) {
        const std::string body = body_of(static_cast<size_t>(i) * kMaxBody / 9, static_cast<char>('a' + i));
        ASSERT_TRUE(p.writer->write(body).is_ok()) << i;
        ASSERT_TRUE(p.reader->read(got, taken).is_ok());
        ASSERT_TRUE(taken) << i;
        EXPECT_EQ(got, body) << i;
    }
}

TEST(AnswerRing, AWriterAndAReaderOnTwoThreadsPassEveryFrameInOrder) {
    ring_pair p;
    ASSERT_NO_FATAL_FAILURE(make_pair(p));
    constexpr int kFrames = 20000;
    // Frame i: its number, then bytes that depend on it, of a length that varies with it.
    auto frame = [](int i) {
        std::string body(static_cast<size_t>(8 + i % 97), static_cast<char>(i % 251));
        std::memcpy(body.data(), &i, sizeof i);
        return body;
    };
    std::atomic<bool> stop{false};  // the reader gave up: the writer must not wait on a full ring forever
    std::thread writer([&] {
        for (int i = 0; i < kFrames && !stop.load(); ++i) {
            const std::string body = frame(i);
            while (p.writer->write(body).code == status_code::aborted && !stop.load()) std::this_thread::yield();
        }
    });
    std::string got;
    int next = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (next < kFrames && std::chrono::steady_clock::now() < until) {
        bool taken = false;
        const status s = p.reader->read(got, taken);
        if (!s.is_ok() || (taken && got != frame(next))) {
            ADD_FAILURE() << "frame " << next << ": " << (s.is_ok() ? "other bytes" : s.message);
            break;
        }
        if (taken) ++next;
    }
    stop.store(true);
    writer.join();
    EXPECT_EQ(next, kFrames);
}

TEST(AnswerRing, AFullRingRefusesTheNextFrameUntilOneIsTaken) {
    ring_pair p;
    ASSERT_NO_FATAL_FAILURE(make_pair(p));
    for (uint32_t i = 0; i < kSlots; ++i) ASSERT_TRUE(p.writer->write(body_of(10, static_cast<char>('0' + i))).is_ok());
    const status full = p.writer->write("late");
    EXPECT_EQ(full.code, status_code::aborted);
    EXPECT_NE(full.message.find("full"), std::string::npos) << full.message;
    std::string got;
    bool taken = false;
    ASSERT_TRUE(p.reader->read(got, taken).is_ok());
    EXPECT_EQ(got, body_of(10, '0'));
    ASSERT_TRUE(p.writer->write("now").is_ok());
    for (const std::string& expected : {body_of(10, '1'), body_of(10, '2'), std::string("now")}) {
        ASSERT_TRUE(p.reader->read(got, taken).is_ok());
        ASSERT_TRUE(taken);
        EXPECT_EQ(got, expected);
    }
    const status too_long = p.writer->write(body_of(p.writer->max_body() + 1, 'x'));
    EXPECT_EQ(too_long.code, status_code::invalid_argument);
    EXPECT_NE(too_long.message.find("expected at most"), std::string::npos) << too_long.message;
}

TEST(AnswerRing, EveryFrameRingsTheBellAndDrainingSilencesIt) {
    ring_pair p;
    ASSERT_NO_FATAL_FAILURE(make_pair(p));
    EXPECT_FALSE(rung(*p.reader));
    ASSERT_TRUE(p.writer->write("one").is_ok());
    EXPECT_TRUE(rung(*p.reader));
    p.reader->drain_bell();
    EXPECT_FALSE(rung(*p.reader));
    ASSERT_TRUE(p.writer->write("two").is_ok());
    EXPECT_TRUE(rung(*p.reader));
}

TEST(AnswerRing, TheRankCannotResizeTheMemoryUnderTheReader) {
    ring_pair p;
    ASSERT_NO_FATAL_FAILURE(make_pair(p));
    EXPECT_NE(::ftruncate(p.writer->memory_fd(), 0), 0) << "the memory could be shrunk";
    EXPECT_NE(::ftruncate(p.writer->memory_fd(), 1 << 30), 0) << "the memory could be grown";
    EXPECT_NE(::fcntl(p.writer->memory_fd(), F_ADD_SEALS, F_SEAL_WRITE), 0) << "the seals could be changed";
}

TEST(AnswerRing, AWriterThatBreaksTheRulesIsRefusedNamingWhat) {
    std::string got;
    bool taken = false;
    {
        ring_pair p;
        ASSERT_NO_FATAL_FAILURE(make_pair(p));
        const uint64_t head = kSlots + 1;  // more frames than slots, none taken
        poke(*p.reader, kHeadOffset, &head, sizeof head);
        const status s = p.reader->read(got, taken);
        EXPECT_EQ(s.code, status_code::invalid_argument);
        EXPECT_NE(s.message.find("head = 4: expected 0 to 3"), std::string::npos) << s.message;
    }
    {
        ring_pair p;
        ASSERT_NO_FATAL_FAILURE(make_pair(p));
        ASSERT_TRUE(p.writer->write("x").is_ok());
        ASSERT_TRUE(p.reader->read(got, taken).is_ok());
        const uint64_t behind = 0;  // the head moved back behind the frame taken
        poke(*p.reader, kHeadOffset, &behind, sizeof behind);
        EXPECT_EQ(p.reader->read(got, taken).code, status_code::invalid_argument);
    }
    {
        ring_pair p;
        ASSERT_NO_FATAL_FAILURE(make_pair(p));
        ASSERT_TRUE(p.writer->write("x").is_ok());
        const auto length = static_cast<uint32_t>(p.reader->max_body() + 1);
        poke(*p.reader, kFirstSlotOffset, &length, sizeof length);
        const status s = p.reader->read(got, taken);
        EXPECT_EQ(s.code, status_code::invalid_argument);
        EXPECT_NE(s.message.find("expected at most"), std::string::npos) << s.message;
        EXPECT_FALSE(taken);
    }
}

TEST(AnswerRing, MemoryOfAnotherShapeIsNotAttached) {
    std::unique_ptr<answer_ring> reader;
    ASSERT_TRUE(answer_ring::create(kMaxBody, kSlots, reader).is_ok());
    // A copy of the ring's memory, of `bytes` with `magic`, sealed unless `sealed` is false.
    auto attach_copy = [&](size_t bytes, uint32_t magic, bool sealed = true) {
        net::unique_fd memory(::memfd_create("test", MFD_CLOEXEC | MFD_ALLOW_SEALING));
        EXPECT_EQ(::ftruncate(memory.get(), static_cast<off_t>(bytes)), 0);
        std::string header(256, '\0');
        EXPECT_EQ(::pread(reader->memory_fd(), header.data(), header.size(), 0), 256);
        std::memcpy(header.data(), &magic, sizeof magic);
        EXPECT_EQ(::pwrite(memory.get(), header.data(), header.size(), 0), 256);
        if (sealed) {
            EXPECT_EQ(::fcntl(memory.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
        }
        std::unique_ptr<answer_ring> writer;
        return answer_ring::attach(std::move(memory), net::unique_fd(::dup(reader->rank_bell_fd())), writer);
    };
    struct stat info {};
    ASSERT_EQ(::fstat(reader->memory_fd(), &info), 0);
    const auto bytes = static_cast<size_t>(info.st_size);
    EXPECT_TRUE(attach_copy(bytes, 0x64736172).is_ok());
    for (const auto& [size, magic] : {std::pair<size_t, uint32_t>{bytes - 64, 0x64736172},
                                      {bytes + 64, 0x64736172},
                                      {bytes, 0x12345678},
                                      {100, 0x64736172}}) {
        const status s = attach_copy(size, magic);
        EXPECT_EQ(s.code, status_code::invalid_argument) << size << " bytes, magic " << magic;
        EXPECT_NE(s.message.find("answer ring of"), std::string::npos) << s.message;
    }
    const status unsealed = attach_copy(bytes, 0x64736172, false);
    EXPECT_NE(unsealed.message.find("not sealed"), std::string::npos) << unsealed.message;
    std::unique_ptr<answer_ring> writer;
    const status not_a_pipe = answer_ring::attach(net::unique_fd(::dup(reader->memory_fd())),
                                                  net::unique_fd(::dup(reader->memory_fd())), writer);
    EXPECT_NE(not_a_pipe.message.find("not a pipe"), std::string::npos) << not_a_pipe.message;
    std::unique_ptr<answer_ring> none;
    EXPECT_EQ(answer_ring::create(kMaxBody, 0, none).code, status_code::invalid_argument);
}

}  // namespace
}  // namespace ds
