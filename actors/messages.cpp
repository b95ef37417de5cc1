#include "actors/messages.h"

namespace ds {

namespace {

const caf::atom_value kCategory = caf::atom("distsample");

}  // namespace

caf::error make_caf_error(const status& s) {
    return caf::error(static_cast<uint8_t>(s.code), kCategory, caf::make_message(s.message));
}

status to_status(const caf::error& e, const std::string& what) {
    if (!e) return status::success();
    if (e.category() == kCategory) {
        const caf::message& context = e.context();
        std::string message = context.match_elements<std::string>() ? context.get_as<std::string>(0) : what;
        return {static_cast<status_code>(e.code()), std::move(message)};
    }
    if (e == caf::sec::request_timeout) return {status_code::timeout, what};
    return {status_code::aborted, what + ": " + caf::to_string(e)};
}

}  // namespace ds
