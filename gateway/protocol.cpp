#include "gateway/protocol.h"

#include <fmt/format.h>

#include <cstring>

namespace ds::gateway {

void append_frame(const google::protobuf::MessageLite& message, std::string& out) {
    const size_t size = message.ByteSizeLong();
    const size_t at = out.size();
    out.resize(at + kFrameHeaderBytes + size);
    auto* header = reinterpret_cast<uint8_t*>(&out[at]);
    header[0] = static_cast<uint8_t>(size >> 24);
    header[1] = static_cast<uint8_t>(size >> 16);
    header[2] = static_cast<uint8_t>(size >> 8);
    header[3] = static_cast<uint8_t>(size);
    message.SerializeWithCachedSizesToArray(header + kFrameHeaderBytes);
}

wire::Error make_error(wire::Error::Code code, std::string field, std::string message) {
    wire::Error e;
    e.set_code(code);
    e.set_field(std::move(field));
    e.set_message(std::move(message));
    return e;
}

void frame_reader::append(const uint8_t* data, size_t size) {
    if (failed_) return;
    // Drop consumed bytes before growing, so the buffer stays about one frame long.
    if (consumed_ > 0 && consumed_ * 2 >= buffer_.size()) {
        buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(consumed_));
        consumed_ = 0;
    }
    buffer_.insert(buffer_.end(), data, data + size);
}

void frame_reader::limit(uint32_t max_frame_bytes, std::string limit_name) {
    max_frame_bytes_ = max_frame_bytes;
    limit_name_ = std::move(limit_name);
}

frame_reader::result frame_reader::next(const uint8_t*& payload, size_t& size, wire::Error& error) {
    if (failed_) return result::need_more;
    if (buffered() < kFrameHeaderBytes) return result::need_more;
    const uint8_t* header = buffer_.data() + consumed_;
    const uint32_t length =
        (uint32_t{header[0]} << 24) | (uint32_t{header[1]} << 16) | (uint32_t{header[2]} << 8) | header[3];
    if (length == 0) {
        failed_ = true;
        error = make_error(wire::Error::MALFORMED, "", "empty frame: expected a Request message");
        return result::error;
    }
    if (length > max_frame_bytes_) {
        failed_ = true;
        error = make_error(
            wire::Error::FRAME_TOO_LARGE, "",
            fmt::format("frame of {} bytes: expected at most {} ({})", length, max_frame_bytes_, limit_name_));
        return result::error;
    }
    if (buffered() < kFrameHeaderBytes + length) return result::need_more;
    payload = header + kFrameHeaderBytes;
    size = length;
    consumed_ += kFrameHeaderBytes + length;
    return result::frame;
}

wire::Error frame_reader::truncated_error() const {
    return make_error(wire::Error::MALFORMED, "",
                      fmt::format("truncated frame: the stream ended {} bytes into a frame", buffered()));
}

bool decode_request(const uint8_t* payload, size_t size, wire::Request& request, wire::Error& error) {
    if (!request.ParseFromArray(payload, static_cast<int>(size))) {
        error =
            make_error(wire::Error::MALFORMED, "", fmt::format("a frame of {} bytes is not a Request message", size));
        return false;
    }
    if (request.version() != kProtocolVersion) {
        error = make_error(
            wire::Error::VERSION_MISMATCH, "version",
            fmt::format("protocol version {}: this server speaks version {}", request.version(), kProtocolVersion));
        return false;
    }
    if (request.body_case() == wire::Request::BODY_NOT_SET) {
        error = make_error(wire::Error::MALFORMED, "body",
                           "a Request without a body (or with a body this server does not know)");
        return false;
    }
    return true;
}

namespace {

wire::Error bad_field(const char* field, std::string message) {
    return make_error(wire::Error::BAD_FIELD, field, std::move(message));
}

}  // namespace

bool check_step_shape(const wire::Step& step, bool verify, const group_config& config, logits_supplier supplier,
                      wire::Error& error) {
    const int64_t bs = step.slots_size();
    if (bs < 1 || bs > config.limits.max_batch) {
        error =
            bad_field("slots", fmt::format("{} requests: expected 1 to {} (max_batch)", bs, config.limits.max_batch));
        return false;
    }
    const int64_t n = verify ? step.tokens_per_req() : 1;
    if (n < 1 || n > config.limits.max_tokens_per_req) {
        error = bad_field("tokens_per_req", fmt::format("{}: expected 1 to {} (max_tokens_per_req)", n,
                                                        config.limits.max_tokens_per_req));
        return false;
    }
    if (step.positions_size() != bs) {
        error =
            bad_field("positions", fmt::format("{} positions: expected one per slot ({})", step.positions_size(), bs));
        return false;
    }
    const int64_t expected_candidates = verify ? bs * n : 0;
    if (step.candidates_size() != expected_candidates) {
        error = bad_field("candidates", fmt::format("{} candidates: expected {} (bs * N for verify, none for sample)",
                                                    step.candidates_size(), expected_candidates));
        return false;
    }
    const int64_t rows = bs * n;
    const int64_t words = bitmask_words(config.limits.vocab_size);
    if (step.bitmask_size() != 0 && step.bitmask_size() != rows * words) {
        error = bad_field("bitmask", fmt::format("{} words: expected 0 or {} ({} rows of {})", step.bitmask_size(),
                                                 rows * words, rows, words));
        return false;
    }
    const int64_t logits = rows * config.limits.vocab_size;
    if (step.logits_size() != 0 && step.logits_size() != logits) {
        error = bad_field("logits", fmt::format("{} values: expected 0 or {} ({} rows of V = {})", step.logits_size(),
                                                logits, rows, config.limits.vocab_size));
        return false;
    }
    if (step.logits_size() == 0 && supplier == logits_supplier::frame) {
        error = bad_field("logits", "none: this server has no model (gateway.model = none), steps must carry logits");
        return false;
    }
    if (step.logits_size() != 0 && supplier == logits_supplier::ranks) {
        error = bad_field("logits", fmt::format("{} values: expected none, the rank processes make their own logits "
                                                "(topology.logits_source)",
                                                step.logits_size()));
        return false;
    }
    return true;
}

}  // namespace ds::gateway
