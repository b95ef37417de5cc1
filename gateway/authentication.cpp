#include "gateway/authentication.h"

#include <fmt/format.h>

namespace ds::gateway {

namespace {

// Compares without an early exit, so the time taken does not reveal a matching prefix.
bool same_secret(const std::string& given, const std::string& secret) {
    if (given.size() != secret.size()) return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ secret[i]);
    return diff == 0;
}

// The name of a request's body ("stats", "register", ...).
std::string body_name(const wire::Request& request) {
    const auto* field = wire::Request::GetDescriptor()->FindFieldByNumber(request.body_case());
    return field != nullptr ? field->name() : "unknown";
}

}  // namespace

bool check_authentication(const wire::Request& request, const std::string& secret, wire::Error& error) {
    if (!request.has_auth()) {
        error = make_error(wire::Error::UNAUTHENTICATED, "auth",
                           fmt::format("a {} request before authentication: this server needs an Auth frame with "
                                       "the shared secret first",
                                       body_name(request)));
        return false;
    }
    if (!same_secret(request.auth().secret(), secret)) {
        error = make_error(wire::Error::UNAUTHENTICATED, "auth.secret",
                           "the secret does not match this server's (gateway.secret)");
        return false;
    }
    return true;
}

}  // namespace ds::gateway
