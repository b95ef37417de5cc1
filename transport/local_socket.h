// Unix stream sockets in Linux's abstract namespace, and descriptors passed over them: how a rank
// process finds the coordinator's process on the same host and is handed the shared memory of its
// answers (actors/answer_ring.h). An abstract name needs no file and vanishes with its socket; it
// is visible only inside one network namespace, so a peer on another host (or in another
// namespace) simply finds nothing there and uses TCP.
#pragma once

#include <cstddef>
#include <string>

#include "transport/socket_io.h"

namespace ds::net {

// The most descriptors one message carries.
constexpr int kMaxPassedDescriptors = 4;

// A listening socket at the abstract name `name` (at most 100 bytes, no NUL).
status listen_local(const std::string& name, unique_fd& out);
// A non-blocking connection to the abstract name `name`: aborted at once when nothing listens
// there or its backlog is full (the caller has another way: TCP).
status connect_local(const std::string& name, unique_fd& out);

// Sends `bytes` of `data` with `count` descriptors attached (SCM_RIGHTS), within the deadline.
status send_with_descriptors(int fd, const void* data, size_t bytes, const int* descriptors, int count,
                             clock::time_point deadline);
// Receives exactly `bytes` of `data`, and the `count` descriptors that must come with their first
// byte (more or fewer: invalid, and whatever came is closed), within the deadline.
status receive_with_descriptors(int fd, void* data, size_t bytes, unique_fd* descriptors, int count,
                                clock::time_point deadline);

}  // namespace ds::net
