// Reply frames as the connections send them (proto/distsample.proto): the body set by the caller,
// the version and the request id stamped here.
#pragma once

#include <cstdint>
#include <string>

#include "gateway/protocol.h"

namespace ds::gateway {

// A reply frame for `request_id`; `fill` sets its body.
template <class Fill>
std::string reply_frame(uint64_t request_id, Fill&& fill) {
    wire::Reply reply;
    reply.set_version(kProtocolVersion);
    reply.set_request_id(request_id);
    fill(reply);
    std::string out;
    append_frame(reply, out);
    return out;
}

inline std::string error_frame(uint64_t request_id, const wire::Error& error) {
    return reply_frame(request_id, [&](wire::Reply& r) { *r.mutable_error() = error; });
}

inline std::string ok_frame(uint64_t request_id) {
    return reply_frame(request_id, [](wire::Reply& r) { r.set_ok(true); });
}

}  // namespace ds::gateway
