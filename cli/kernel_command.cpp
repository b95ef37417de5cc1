#include <fmt/format.h>

#include <iostream>

#include "cli/commands.h"
#include "cli/step_json.h"

namespace ds::cli {

int run_kernel_command(bool verify, const kernel_options& options) {
    const step_kind kind = verify ? step_kind::verify : step_kind::sample;
    try {
        nlohmann::json doc;
        try {
            doc = nlohmann::json::parse(std::cin);
        } catch (const nlohmann::json::parse_error& e) {
            throw input_error(fmt::format("input: expected one JSON object ({})", e.what()));
        }
        backend_kind backend_type{};
        if (status s = parse_backend_kind(options.backend, backend_type); !s.is_ok()) throw input_error(s.message);
        const json_step step = parse_step(doc, kind);
        std::unique_ptr<sampling_backend> backend;
        status s = make_backend(backend_type, step.fitting_config(options.threads), backend);
        if (s.code == status_code::invalid_argument) throw input_error(s.message);
        if (!s.is_ok()) {
            std::cerr << "error: " << s.message << '\n';
            return 1;
        }
        const step_result result = run_step(*backend, step, kind);
        std::cout << result_to_json(result, kind, step.batch_size(), step.tokens_per_req).dump() << '\n';
        return 0;
    } catch (const input_error& e) {
        std::cerr << "error: " << e.what() << '\n';
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "error: " << e.what() << '\n';
        return 1;
    }
}

}  // namespace ds::cli
