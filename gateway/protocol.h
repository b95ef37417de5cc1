// The gateway's framing (proto/distsample.proto): a 4-byte big-endian length, then one serialized
// message; and the checks of a request that need no server state (version, body, a step's counts
// against the limits). Shared by the server, the C++ client and the fuzz target, so all three
// decode the same way. The reader buffers at most about two maximum-size frames plus one read
// chunk, whatever the bytes say.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config/group_config.h"
#include "distsample.pb.h"
#include "kernels/sampling_types.h"

namespace ds::gateway {

namespace wire = distsample::wire;

constexpr uint32_t kProtocolVersion = 1;
constexpr size_t kFrameHeaderBytes = 4;

// Appends `message` as one frame to `out`.
void append_frame(const google::protobuf::MessageLite& message, std::string& out);

wire::Error make_error(wire::Error::Code code, std::string field, std::string message);

// Splits a byte stream into frame payloads. After an error (oversized or empty frame) it yields
// nothing more: the connection is to be closed.
class frame_reader {
   public:
    // `limit_name` says in the error where the limit comes from.
    explicit frame_reader(uint32_t max_frame_bytes, std::string limit_name = "max_frame_bytes")
        : max_frame_bytes_(max_frame_bytes), limit_name_(std::move(limit_name)) {}

    // Changes the limit from the next frame on (a connection's, once it has authenticated).
    void limit(uint32_t max_frame_bytes, std::string limit_name);

    void append(const uint8_t* data, size_t size);

    enum class result { frame, need_more, error };
    // On `frame`, [payload, payload + size) stays valid until the next call of append or next.
    result next(const uint8_t*& payload, size_t& size, wire::Error& error);

    // Bytes of an unfinished frame (non-zero at end of stream means a truncated frame).
    size_t buffered() const { return buffer_.size() - consumed_; }
    // The error for a stream that ended inside a frame.
    wire::Error truncated_error() const;

   private:
    uint32_t max_frame_bytes_;
    std::string limit_name_;
    std::vector<uint8_t> buffer_;
    size_t consumed_ = 0;
    bool failed_ = false;
};

// Parses a request payload and checks its version and body; false with `error` set otherwise.
bool decode_request(const uint8_t* payload, size_t size, wire::Request& request, wire::Error& error);

// Who supplies a step's logits: only its frame; its frame or, when it carries none, the server's
// model (gateway.model); or the ranks themselves (rank processes with a model of their own,
// topology.logits_source), and then the frame carries none.
enum class logits_supplier { frame, frame_or_model, ranks };

// Checks a step's counts against the group's limits before anything is sized from them: bs,
// N, positions, candidates, bitmask words and logits values (as `supplier` expects them). False
// with a BAD_FIELD error naming the field.
bool check_step_shape(const wire::Step& step, bool verify, const group_config& config, logits_supplier supplier,
                      wire::Error& error);

}  // namespace ds::gateway
