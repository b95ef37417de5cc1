// The shared-secret check of a connection's first request (docs/gateway.md, "Authentication").
#pragma once

#include <string>

#include "gateway/protocol.h"

namespace ds::gateway {

// True when `request` is an Auth frame carrying `secret`; else false with an UNAUTHENTICATED
// error that says which was wrong: another request came first (field "auth"), or the secret
// differs (field "auth.secret").
bool check_authentication(const wire::Request& request, const std::string& secret, wire::Error& error);

}  // namespace ds::gateway
