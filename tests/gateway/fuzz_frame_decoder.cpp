// libFuzzer target: arbitrary bytes as one connection's stream, through the server's frame reader,
// request decoder and step shape check. The first byte picks the read chunk size, so frames also
// arrive split, and who supplies the logits the shape check expects. Built with clang++
// -fsanitize=fuzzer,address,undefined (tests/gateway/CMakeLists.txt).
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "gateway/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace ds::gateway;
    if (size == 0) return 0;
    ds::group_config config;
    config.limits.vocab_size = 64;
    config.limits.max_batch = 8;
    config.limits.max_tokens_per_req = 4;
    const size_t chunk = 1 + data[0] % 64;
    const auto supplier = static_cast<logits_supplier>((data[0] >> 6) % 3);
    frame_reader reader(4096);
    for (size_t at = 1; at < size; at += chunk) {
        reader.append(data + at, std::min(chunk, size - at));
        const uint8_t* payload = nullptr;
        size_t length = 0;
        wire::Error error;
        for (;;) {
            const frame_reader::result r = reader.next(payload, length, error);
            if (r == frame_reader::result::error) return 0;  // the server closes the connection here
            if (r == frame_reader::result::need_more) break;
            wire::Request request;
            if (!decode_request(payload, length, request, error)) return 0;
            if (request.has_sample_step()) check_step_shape(request.sample_step(), false, config, supplier, error);
            if (request.has_verify_step()) check_step_shape(request.verify_step(), true, config, supplier, error);
        }
    }
    return 0;
}
