#include "actors/answer_sender.h"

#include <fmt/format.h>

#include <cstring>

#include "actors/answer_frame.h"
#include "actors/log.h"
#include "transport/local_socket.h"

namespace ds {

namespace {

// In one write: a rank descheduled between parts cannot leave the lane waiting on the rest.
status write_lane_greeting(int fd, int32_t rank, uint64_t secret, net::clock::time_point deadline) {
    lane_greeting g;
    g.magic = kLaneGreetingMagic;
    g.rank = rank;
    g.secret = secret;
    return net::write_value(fd, g, deadline);
}

}  // namespace

status answer_sender::connect(const answer_lane_address& lane, int32_t rank, std::chrono::milliseconds timeout,
                              std::unique_ptr<answer_sender>& out, bool local) {
    if (local && !lane.local_name.empty()) {
        const status s = connect_local(lane, rank, timeout, out);
        if (s.is_ok()) return s;
        rank_log().debug("rank {}: answer lane on this host: {}; answers go over TCP", rank, s.message);
    }
    const auto deadline = net::clock::now() + timeout;
    net::unique_fd fd;
    status s = net::connect_tcp(lane.host, lane.port, deadline, fd);
    if (s.is_ok()) s = write_lane_greeting(fd.get(), rank, lane.secret, deadline);
    if (!s.is_ok()) return {s.code, fmt::format("answer lane at {}:{}: {}", lane.host, lane.port, s.message)};
    out.reset(new answer_sender(std::move(fd), nullptr, timeout));
    return status::success();
}

status answer_sender::connect_local(const answer_lane_address& lane, int32_t rank, std::chrono::milliseconds timeout,
                                    std::unique_ptr<answer_sender>& out) {
    const auto deadline = net::clock::now() + timeout;
    net::unique_fd fd;
    DS_TRY(net::connect_local(lane.local_name, fd));
    DS_TRY(write_lane_greeting(fd.get(), rank, lane.secret, deadline));
    uint32_t magic = 0;
    net::unique_fd passed[2];
    DS_TRY(net::receive_with_descriptors(fd.get(), &magic, sizeof magic, passed, 2, deadline));
    if (magic != kLaneOfferMagic)
        return status::invalid(fmt::format("answer {:#x}: expected {:#x}", magic, kLaneOfferMagic));
    std::unique_ptr<answer_ring> ring;
    DS_TRY(answer_ring::attach(std::move(passed[0]), std::move(passed[1]), ring));
    out.reset(new answer_sender(std::move(fd), std::move(ring), timeout));
    return status::success();
}

status answer_sender::send(const rank_result& result) {
    if (ring_) {
        frame_.clear();
        append_answer(result, frame_);
        return ring_->write(frame_);
    }
    frame_.assign(sizeof(uint32_t), '\0');  // the body's length, set below
    append_answer(result, frame_);
    const auto length = static_cast<uint32_t>(frame_.size() - sizeof(uint32_t));
    std::memcpy(frame_.data(), &length, sizeof length);
    return net::write_all(fd_.get(), frame_.data(), frame_.size(), net::clock::now() + timeout_);
}

}  // namespace ds
