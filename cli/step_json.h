// The JSON form of one sampling or verification step, as read by `distsample kernel`,
// `distsample step` and `distsample coordinator`. Input and output layouts are documented in
// docs/protocol.md ("JSON steps").
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <istream>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/dist_step.h"
#include "config/kernel_config.h"
#include "kernels/sampling_backend.h"

namespace ds::cli {

// Bad input: the message names the field and what was expected. Exit code 2.
struct input_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct json_request {
    sampling_params params;
    int64_t position = 0;
    std::vector<int32_t> history;  // tokens already emitted (penalty counts)
};

// A parsed step, owning every array the step_input points into.
struct json_step {
    int32_t vocab_size = 0;
    std::vector<float> logits;  // rows * vocab_size
    std::vector<json_request> requests;
    // Slots (request b in slot b + 1), positions, candidates, bitmask, coins and thresholds, as the
    // coordinator takes them; `request.shards` stays empty until a caller splits the logits.
    step_request request;

    int32_t batch_size() const { return static_cast<int32_t>(requests.size()); }
    // Limits that fit exactly this step (slot b + 1 holds request b).
    kernel_config fitting_config(int threads) const;
    step_input as_input() const;
};

// The shared frame of the JSON commands: runs `body`, turning an input_error into one "error: ..."
// line and exit code 2, and any other exception into one line and exit code 1.
int run_json_command(const std::function<int()>& body);

// Reads one JSON document (config/json_input.h); input_error when it is not JSON.
nlohmann::json read_json_input(std::istream& in);

// invalid_argument -> input_error (exit 2); any other failure -> std::runtime_error (exit 1).
void throw_unless_ok(const status& s);

// Throws input_error on malformed or out-of-range input, and on keys a step of `kind` does not take.
// Without `with_logits`, the step must carry none (the ranks make them).
json_step parse_step(const nlohmann::json& doc, step_kind kind, bool with_logits = true);

// The checks of every request before any is registered, the same for `kernel`, `step` and the
// coordinator's lines: sampling parameters within `limits`, history tokens within the vocabulary.
// Errors name the request ("requests[3].top_p = 2: ...").
status check_requests(const json_step& step, const kernel_config& limits);

// Owns the outputs of one step.
struct step_result {
    std::vector<int32_t> packed;
    std::vector<int32_t> accept_index;
    std::vector<float> logprobs;
    std::vector<uint8_t> row_error;

    step_result(int32_t batch_size, int32_t tokens_per_req);
    step_output view();
};

nlohmann::json result_to_json(const step_result& result, step_kind kind, int32_t batch_size, int32_t tokens_per_req);

// Registers the requests into a fresh backend's pool and runs the step. Throws input_error for
// invalid parameters; other failures throw std::runtime_error.
step_result run_step(sampling_backend& backend, const json_step& step, step_kind kind);

}  // namespace ds::cli
