// `distsample step sample|verify`: the JSON of `distsample kernel`, run through the whole
// coordinator path (TP rank actors, a transport, the chosen distributed mode).
#include <distsample/group.h>
#include <fmt/format.h>

#include <iostream>

#include "cli/commands.h"
#include "cli/step_json.h"
#include "config/config_file.h"
#include "kernels/validation.h"

namespace ds::cli {

namespace {

// The configured group, with its sizes fitted to this step.
group_config config_for(const json_step& step, const step_options& options) {
    group_config config;
    throw_unless_ok(load_group_config(options.group.config_file, options.group.overrides, config));
    const kernel_config fitting = step.fitting_config(config.tuning.threads_per_rank);
    group_limits& limits = config.limits;
    limits.vocab_size = step.vocab_size;
    limits.max_batch = fitting.max_batch;
    limits.max_tokens_per_req = fitting.max_tokens_per_req;
    limits.max_slots = fitting.max_slots;
    limits.max_penalty_tokens = fitting.max_penalty_tokens + step.request.tokens_per_req;  // room for the commit
    limits.max_logit_bias = fitting.max_logit_bias;
    return config;
}

step_request request_for(const json_step& step, int32_t tp) {
    step_request r = step.request;
    r.shards = split_vocab(step.as_input().logits, tp);
    return r;
}

}  // namespace

int run_step_command(bool verify, const step_options& options) {
    const step_kind kind = verify ? step_kind::verify : step_kind::sample;
    return run_json_command([&] {
        const nlohmann::json doc = read_json_input(std::cin);
        const json_step step = parse_step(doc, kind);
        const group_config config = config_for(step, options);
        throw_unless_ok(validate_group_config(config));
        throw_unless_ok(check_requests(step, step.fitting_config(config.tuning.threads_per_rank)));
        std::unique_ptr<group> ranks;
        throw_unless_ok(group::create(config, ranks));
        for (int32_t b = 0; b < step.batch_size(); ++b) {
            const json_request& r = step.requests[static_cast<size_t>(b)];
            throw_unless_ok(ranks->register_request(b + 1, r.params, r.history));
        }
        step_reply reply = ranks->step(request_for(step, config.distribution.tp));
        throw_unless_ok(reply.result);
        step_result result(step.batch_size(), step.request.tokens_per_req);
        result.packed = std::move(reply.outputs.packed);
        result.accept_index = std::move(reply.outputs.accept_index);
        result.logprobs = std::move(reply.outputs.logprobs);
        result.row_error = std::move(reply.outputs.row_error);
        std::cout << result_to_json(result, kind, step.batch_size(), step.request.tokens_per_req).dump() << '\n';
        return 0;
    });
}

}  // namespace ds::cli
