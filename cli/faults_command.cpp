// `distsample faults report FILE [--json]`: the fault report a run wrote (actors/fault_report.h,
// e.g. the soak's DISTSAMPLE_FAULT_REPORT file) as a table per fault kind, every fault that was
// not masked, and the events no fault explains; or the same report as JSON.
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "actors/fault_report.h"
#include "cli/commands.h"
#include "config/json_input.h"

namespace ds::cli {

int run_faults_report_command(const faults_report_options& options) {
    std::ifstream in(options.file);
    if (!in) {
        std::cerr << "error: fault report '" << options.file << "': cannot be opened\n";
        return 2;
    }
    std::stringstream text;
    text << in.rdbuf();
    fault_report report;
    // The shared reader's limits (depth, duplicate keys) first; then the report's own fields.
    const std::string content = text.str();
    const result<nlohmann::json> checked = parse_json(content);
    const status s = checked.is_ok() ? parse_fault_report_json(content, report) : checked.error();
    if (!s.is_ok()) {
        std::cerr << "error: fault report '" << options.file << "': " << s.message << '\n';
        return 2;
    }
    if (options.json) {
        std::cout << fault_report_json(report, true) << '\n';
        return 0;
    }
    std::cout << fault_table(report.summary);
    if (report.records_left_out > 0) fmt::print("({} older faults not kept in the report)\n", report.records_left_out);
    for (const fault_record& r : report.records) {
        if (r.masked) continue;
        fmt::print("step {} rank {} {}: {}{}\n", r.step, r.rank, fault_kind_name(r.kind), r.action,
                   r.first_row >= 0 ? fmt::format(" (first differing request {})", r.first_row) : std::string{});
    }
    for (const std::string& u : report.unexplained) fmt::print("unexplained: {}\n", u);
    if (report.unexplained_left_out > 0)
        fmt::print("({} older unexplained events not kept)\n", report.unexplained_left_out);
    return 0;
}

}  // namespace ds::cli
