// How the C ABIs (include/distsample/distsample_c.h, distsample_rank_c.h) report: a status code,
// and its message kept for the calling thread's ds_last_error / ds_rank_last_error. Each library
// is built with hidden symbols, so each keeps its own message.
#pragma once

#include <exception>
#include <string>

#include <distsample/status.h>

namespace ds::capi {

inline std::string& last_error() {
    thread_local std::string message;
    return message;
}

inline int report(const status& s) {
    last_error() = s.is_ok() ? std::string() : s.message;
    return static_cast<int>(s.code);
}

// Exceptions must not cross the C boundary (std::bad_alloc from a message, say).
template <class Body>
int guarded(const Body& body) {
    try {
        return report(body());
    } catch (const std::exception& e) {
        return report({status_code::internal, e.what()});
    }
}

}  // namespace ds::capi
