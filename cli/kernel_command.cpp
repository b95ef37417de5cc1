#include "cli/commands.h"
#include "cli/step_json.h"

#include <iostream>

namespace ds::cli {

int run_kernel_command(bool verify, const kernel_options& options) {
    const step_kind kind = verify ? step_kind::verify : step_kind::sample;
    return run_json_command([&] {
        const nlohmann::json doc = read_json_input(std::cin);
        const result<backend_kind> backend_type = parse_backend_kind(options.backend);
        throw_unless_ok(backend_type.to_status());
        const json_step step = parse_step(doc, kind);
        std::unique_ptr<sampling_backend> backend;
        throw_unless_ok(make_backend(*backend_type, step.fitting_config(options.threads), backend));
        const step_result result = run_step(*backend, step, kind);
        std::cout << result_to_json(result, kind, step.batch_size(), step.request.tokens_per_req).dump() << '\n';
        return 0;
    });
}

}  // namespace ds::cli
